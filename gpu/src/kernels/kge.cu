// KGE step kernels: DistMult (model 0) and ComplEx (model 1) scores, softmax cross-entropy
// coefficients, gradients, Adagrad. The math is specified by src/kge/reference.rs (f64).
//
// Layout: entity rows and relation rows are 2*dim floats: parameters, then Adagrad sums.
// ComplEx: dim = 2m, real parts at [0, m), imaginary parts at [m, 2m).
// triples: 3 u32 per scored triple (head row, relation, tail row), in groups of `group`, the
// positive first.
//
// Determinism: every output element is written by exactly one thread (or one warp, for a score),
// and every sum runs in a fixed order: a score sums its components lane-strided then through a
// fixed xor-shuffle tree; a gradient sums its contributions in the order of the host-built CSR
// lists (sorted by score index, then role). No floating-point atomics anywhere, so the results
// are bit-identical from run to run on the same device and build.

typedef unsigned int u32;

#define KGE_DISTMULT 0u
#define KGE_COMPLEX 1u

// Score of triple j: one warp per triple (grid-stride over warps).
extern "C" __global__ void kge_scores(u32 model, u32 dim, u32 n, const u32* __restrict__ triples,
                                      const float* __restrict__ ent,
                                      const float* __restrict__ rel, float* __restrict__ scores) {
    const u32 lane = threadIdx.x & 31u;
    const u32 warps_per_block = blockDim.x >> 5;
    const u32 w = 2u * dim;
    for (u32 j = blockIdx.x * warps_per_block + (threadIdx.x >> 5); j < n;
         j += gridDim.x * warps_per_block) {
        const float* h = ent + (size_t)triples[3 * j] * w;
        const float* r = rel + (size_t)triples[3 * j + 1] * w;
        const float* t = ent + (size_t)triples[3 * j + 2] * w;
        float acc = 0.0f;
        if (model == KGE_DISTMULT) {
            for (u32 k = lane; k < dim; k += 32u) acc += h[k] * r[k] * t[k];
        } else {
            const u32 m = dim / 2u;
            for (u32 k = lane; k < m; k += 32u) {
                const float a = h[k], b = h[m + k], c = r[k], d = r[m + k], e = t[k], f = t[m + k];
                acc += a * c * e + b * c * f + a * d * f - b * d * e;
            }
        }
        for (u32 off = 16u; off > 0u; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
        if (lane == 0u) scores[j] = acc;
    }
}

// Softmax cross-entropy per group: one thread per group. coef[j] = (softmax_j - [j == 0]) * inv_b;
// losses[g] = logsumexp(group) - score of the positive.
extern "C" __global__ void kge_softmax(u32 groups, u32 group, const float* __restrict__ scores,
                                       float inv_b, float* __restrict__ coef,
                                       float* __restrict__ losses) {
    for (u32 g = blockIdx.x * blockDim.x + threadIdx.x; g < groups; g += gridDim.x * blockDim.x) {
        const float* s = scores + (size_t)g * group;
        float mx = s[0];
        for (u32 j = 1; j < group; ++j) mx = fmaxf(mx, s[j]);
        float z = 0.0f;
        for (u32 j = 0; j < group; ++j) z += expf(s[j] - mx);
        losses[g] = mx + logf(z) - s[0];
        for (u32 j = 0; j < group; ++j) {
            const float p = expf(s[j] - mx) / z;
            coef[(size_t)g * group + j] = (p - (j == 0 ? 1.0f : 0.0f)) * inv_b;
        }
    }
}

// d score / d (head or tail) at component k, role 0 = head, 1 = tail.
__device__ __forceinline__ float kge_entity_partial(u32 model, u32 dim, u32 k, u32 role,
                                                    const float* h, const float* r,
                                                    const float* t) {
    if (model == KGE_DISTMULT) return role == 0u ? r[k] * t[k] : h[k] * r[k];
    const u32 m = dim / 2u;
    const u32 i = k < m ? k : k - m;
    const float a = h[i], b = h[m + i], c = r[i], d = r[m + i], e = t[i], f = t[m + i];
    if (role == 0u) return k < m ? c * e + d * f : c * f - d * e;
    return k < m ? a * c - b * d : b * c + a * d;
}

// d score / d relation at component k.
__device__ __forceinline__ float kge_relation_partial(u32 model, u32 dim, u32 k, const float* h,
                                                      const float* t) {
    if (model == KGE_DISTMULT) return h[k] * t[k];
    const u32 m = dim / 2u;
    const u32 i = k < m ? k : k - m;
    const float a = h[i], b = h[m + i], e = t[i], f = t[m + i];
    return k < m ? a * e + b * f : a * f - b * e;
}

// Gradient of each entity row of the batch: one block per row (grid-stride), one thread per
// component; contributions summed in CSR order (items: score << 1 | role).
extern "C" __global__ void kge_entity_grad(u32 model, u32 dim, u32 rows,
                                           const u32* __restrict__ offsets,
                                           const u32* __restrict__ items,
                                           const u32* __restrict__ triples,
                                           const float* __restrict__ coef,
                                           const float* __restrict__ ent,
                                           const float* __restrict__ rel,
                                           float* __restrict__ grad) {
    const u32 w = 2u * dim;
    for (u32 row = blockIdx.x; row < rows; row += gridDim.x) {
        for (u32 k = threadIdx.x; k < dim; k += blockDim.x) {
            float g = 0.0f;
            for (u32 q = offsets[row]; q < offsets[row + 1]; ++q) {
                const u32 j = items[q] >> 1, role = items[q] & 1u;
                const float* h = ent + (size_t)triples[3 * j] * w;
                const float* r = rel + (size_t)triples[3 * j + 1] * w;
                const float* t = ent + (size_t)triples[3 * j + 2] * w;
                g += coef[j] * kge_entity_partial(model, dim, k, role, h, r, t);
            }
            grad[(size_t)row * dim + k] = g;
        }
    }
}

// Gradient of each relation: one block per relation (grid-stride), one thread per component;
// contributions (score indices) summed in CSR order.
extern "C" __global__ void kge_relation_grad(u32 model, u32 dim, u32 relations,
                                             const u32* __restrict__ offsets,
                                             const u32* __restrict__ items,
                                             const u32* __restrict__ triples,
                                             const float* __restrict__ coef,
                                             const float* __restrict__ ent,
                                             float* __restrict__ grad) {
    const u32 w = 2u * dim;
    for (u32 rr = blockIdx.x; rr < relations; rr += gridDim.x) {
        for (u32 k = threadIdx.x; k < dim; k += blockDim.x) {
            float g = 0.0f;
            for (u32 q = offsets[rr]; q < offsets[rr + 1]; ++q) {
                const u32 j = items[q];
                const float* h = ent + (size_t)triples[3 * j] * w;
                const float* t = ent + (size_t)triples[3 * j + 2] * w;
                g += coef[j] * kge_relation_partial(model, dim, k, h, t);
            }
            grad[(size_t)rr * dim + k] = g;
        }
    }
}

// Adagrad on `rows` rows of 2*dim floats: one thread per (row, component).
// G += g^2; theta -= lr * g / (sqrt(G) + eps). Runs after both gradient kernels, so every
// gradient was computed from the parameters before the step.
extern "C" __global__ void kge_adagrad(u32 rows, u32 dim, float* __restrict__ params,
                                       const float* __restrict__ grad, float lr, float eps) {
    const size_t total = (size_t)rows * dim;
    for (size_t x = (size_t)blockIdx.x * blockDim.x + threadIdx.x; x < total;
         x += (size_t)gridDim.x * blockDim.x) {
        const size_t row = x / dim, k = x % dim;
        float* p = params + row * 2u * dim;
        const float g = grad[x];
        const float sum = p[dim + k] + g * g;
        p[dim + k] = sum;
        p[k] -= lr * g / (sqrtf(sum) + eps);
    }
}
