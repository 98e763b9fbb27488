// Just enough CUDA declarations for a host C++ compiler to type-check the kernel sources
// (tests/kernel_sources.rs): catches syntax and type errors on machines without NVRTC. It says
// nothing about device behaviour.
#include <math.h>
#include <stddef.h>
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define __restrict__
struct dim3_ { unsigned x, y, z; };
struct float4 { float x, y, z, w; };
extern dim3_ threadIdx, blockIdx, blockDim, gridDim;
unsigned long long atomicCAS(unsigned long long*, unsigned long long, unsigned long long);
float __shfl_xor_sync(unsigned, float, unsigned);
void __syncthreads();
float __fmul_rn(float, float);
float __fadd_rn(float, float);
float __fsub_rn(float, float);
float __fdiv_rn(float, float);
float __fsqrt_rn(float);
float __int_as_float(int);
