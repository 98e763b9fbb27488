// Device-to-device bandwidth ceiling for gpu_bench: a grid-stride float4 copy (reads n*16 bytes,
// writes n*16 bytes). cuMemcpyDtoD is measured too; the bench reports the larger.
extern "C" __global__ void copy_f32(const float4* __restrict__ src, float4* __restrict__ dst,
                                    unsigned long long n) {
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x)
        dst[i] = src[i];
}

// A minimal device step for the pipeline bench: add `delta` to every float of the batch's rows
// (reads and writes each value once, so its time is the batch's memory traffic).
extern "C" __global__ void add_f32(float* __restrict__ values, unsigned long long n, float delta) {
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x)
        values[i] += delta;
}
