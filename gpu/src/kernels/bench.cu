// Device-to-device bandwidth ceiling for gpu_bench: a grid-stride float4 copy (reads n*16 bytes,
// writes n*16 bytes). cuMemcpyDtoD is measured too; the bench reports the larger.
extern "C" __global__ void copy_f32(const float4* __restrict__ src, float4* __restrict__ dst,
                                    unsigned long long n) {
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x)
        dst[i] = src[i];
}
