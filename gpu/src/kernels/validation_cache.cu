// Validation cache in device memory (paper 000, §3.2-3.3): row id -> (version, values).
//
// Table: `slots` (a power of two) of
//   keys[s]      0 = empty, ~0 = evicted (tombstone), else row + 1
//   versions[s]  ts + 1 of the entry's batch
//   values[s*width .. (s+1)*width]
// Linear probing from hash(row) & mask. A slot never returns to empty except by a rehash into a
// cleared table, so a live key is always reachable from its home slot without crossing an empty
// slot, and concurrent inserts of *distinct* keys (the rows of one batch are distinct) cannot
// create a duplicate: each claims with atomicCAS(empty -> key) and skips every other key.
//
// The host (ordo_gpu::cache::ValidationCache) checks occupancy before every launch: live entries
// plus tombstones stay <= slots / 2, so every probe loop ends at an empty slot.
//
// Determinism: no kernel here does floating-point arithmetic; values are copied bit for bit.
// The layout of a rehashed table can depend on block scheduling, its contents cannot.
//
// Mirrored line by line in Rust by src/cache/host_table.rs (tested on every machine).

typedef unsigned long long u64;
typedef unsigned int u32;

#define VC_EMPTY 0ull
#define VC_TOMB 0xffffffffffffffffull

__device__ __forceinline__ u64 vc_hash(u64 row) {
    u64 z = row + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// The slot holding `row`, or -1. No concurrent writer to `keys` during validate.
__device__ long long vc_find(const u64* keys, u64 mask, u64 row) {
    const u64 key = row + 1;
    u64 s = vc_hash(row) & mask;
    for (u64 n = 0; n <= mask; ++n) {
        const u64 k = keys[s];
        if (k == VC_EMPTY) return -1;
        if (k == key) return (long long)s;
        s = (s + 1) & mask;
    }
    return -1;
}

// The slot for `row`: its live slot, or a newly claimed empty one. Safe against concurrent
// claims of other keys (see the invariant above).
__device__ long long vc_claim(u64* keys, u64 mask, u64 row) {
    const u64 key = row + 1;
    u64 s = vc_hash(row) & mask;
    for (u64 n = 0; n <= mask; ++n) {
        const u64 old = atomicCAS(&keys[s], VC_EMPTY, key);
        if (old == VC_EMPTY || old == key) return (long long)s;
        s = (s + 1) & mask;
    }
    return -1;
}

// One block per batch row (grid-stride). Thread 0 probes; the block copies the row.
// A row is replaced when the cached version is newer than read_versions[i] (or equal, when
// replace_equal != 0: the `validate-ge` mutant of the catalog); replaced[i] = the replacing
// version, or 0 when the row is kept.
extern "C" __global__ void vc_validate(const u64* __restrict__ keys,
                                       const u64* __restrict__ versions,
                                       const float* __restrict__ cache_values, u64 mask, u32 width,
                                       u32 n, const u64* __restrict__ rows,
                                       const u64* __restrict__ read_versions,
                                       float* __restrict__ values, u64* __restrict__ replaced,
                                       u32 replace_equal) {
    __shared__ long long slot;
    for (u32 i = blockIdx.x; i < n; i += gridDim.x) {
        if (threadIdx.x == 0) {
            long long s = vc_find(keys, mask, rows[i]);
            u64 v = 0;
            if (s >= 0) {
                v = versions[s];
                const u64 r = read_versions[i];
                if (!(v > r || (replace_equal && v == r))) s = -1;
            }
            slot = s;
            replaced[i] = s >= 0 ? v : 0ull;
        }
        __syncthreads();
        const long long s = slot;
        if (s >= 0) {
            const float* src = cache_values + (u64)s * width;
            float* dst = values + (u64)i * width;
            for (u32 k = threadIdx.x; k < width; k += blockDim.x) dst[k] = src[k];
        }
        __syncthreads();  // `slot` is rewritten by the next iteration
    }
}

// One block per batch row (grid-stride): claim the row's slot, write version and values.
// `*failed` is set if a probe found no slot (impossible while the host keeps load <= 1/2).
extern "C" __global__ void vc_insert(u64* __restrict__ keys, u64* __restrict__ versions,
                                     float* __restrict__ cache_values, u64 mask, u32 width, u32 n,
                                     const u64* __restrict__ rows, u64 version,
                                     const float* __restrict__ values, u32* __restrict__ failed) {
    __shared__ long long slot;
    for (u32 i = blockIdx.x; i < n; i += gridDim.x) {
        if (threadIdx.x == 0) {
            const long long s = vc_claim(keys, mask, rows[i]);
            if (s >= 0) versions[s] = version; else *failed = 1u;
            slot = s;
        }
        __syncthreads();
        const long long s = slot;
        if (s >= 0) {
            float* dst = cache_values + (u64)s * width;
            const float* src = values + (u64)i * width;
            for (u32 k = threadIdx.x; k < width; k += blockDim.x) dst[k] = src[k];
        }
        __syncthreads();
    }
}

// One thread per slot: evict every live entry with version <= bound (ts < STE).
extern "C" __global__ void vc_evict(u64* __restrict__ keys, const u64* __restrict__ versions,
                                    u64 slots, u64 bound) {
    for (u64 s = (u64)blockIdx.x * blockDim.x + threadIdx.x; s < slots;
         s += (u64)gridDim.x * blockDim.x) {
        const u64 k = keys[s];
        if (k != VC_EMPTY && k != VC_TOMB && versions[s] <= bound) keys[s] = VC_TOMB;
    }
}

// Compaction: one block per old slot (grid-stride) re-inserts live entries into a cleared table
// of the same size (keys zeroed by the host with a memset before the launch).
extern "C" __global__ void vc_rehash(const u64* __restrict__ old_keys,
                                     const u64* __restrict__ old_versions,
                                     const float* __restrict__ old_values, u64 slots, u32 width,
                                     u64* __restrict__ keys, u64* __restrict__ versions,
                                     float* __restrict__ values, u32* __restrict__ failed) {
    __shared__ long long slot;
    const u64 mask = slots - 1;
    for (u64 o = blockIdx.x; o < slots; o += gridDim.x) {
        const u64 k = old_keys[o];
        const bool live = k != VC_EMPTY && k != VC_TOMB;  // uniform across the block
        if (live) {
            if (threadIdx.x == 0) {
                const long long s = vc_claim(keys, mask, k - 1);
                if (s >= 0) versions[s] = old_versions[o]; else *failed = 1u;
                slot = s;
            }
            __syncthreads();
            const long long s = slot;
            if (s >= 0) {
                const float* src = old_values + o * width;
                float* dst = values + (u64)s * width;
                for (u32 j = threadIdx.x; j < width; j += blockDim.x) dst[j] = src[j];
            }
            __syncthreads();
        }
    }
}
