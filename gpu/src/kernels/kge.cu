// KGE step kernels: DistMult (model 0) and ComplEx (model 1) scores, softmax cross-entropy or
// logistic loss coefficients (summed over groups, with L2 on each group's positive), gradients,
// Adagrad. The math is specified by src/kge/reference.rs (f64).
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

__device__ __forceinline__ float kge_softplus(float x) {
    return x > 0.0f ? x + log1pf(expf(-x)) : log1pf(expf(x));
}

__device__ __forceinline__ float kge_sigmoid(float x) {
    if (x >= 0.0f) return 1.0f / (1.0f + expf(-x));
    const float e = expf(x);
    return e / (1.0f + e);
}

// Loss per group (summed over groups on the host, not averaged): one thread per group.
// loss 0 = softmax cross-entropy: coef[j] = softmax_j - [j == 0], loss = logsumexp - s[0];
// loss 1 = logistic (n = max(group - 1, 1)): coef[0] = -sigmoid(-s[0]), coef[j] = sigmoid(s[j]) / n,
// loss = softplus(-s[0]) + sum_j softplus(s[j]) / n.
// Plus the L2 term of the group's positive: reg * (|h|^2 + |r|^2 + |t|^2).
extern "C" __global__ void kge_loss(u32 groups, u32 group, u32 loss_kind, float reg, u32 dim,
                                    const u32* __restrict__ triples,
                                    const float* __restrict__ ent,
                                    const float* __restrict__ rel,
                                    const float* __restrict__ scores, float* __restrict__ coef,
                                    float* __restrict__ losses) {
    const u32 w = 2u * dim;
    for (u32 g = blockIdx.x * blockDim.x + threadIdx.x; g < groups; g += gridDim.x * blockDim.x) {
        const float* s = scores + (size_t)g * group;
        float* c = coef + (size_t)g * group;
        float loss;
        if (loss_kind == 0u) {
            float mx = s[0];
            for (u32 j = 1; j < group; ++j) mx = fmaxf(mx, s[j]);
            float z = 0.0f;
            for (u32 j = 0; j < group; ++j) z += expf(s[j] - mx);
            loss = mx + logf(z) - s[0];
            for (u32 j = 0; j < group; ++j) c[j] = expf(s[j] - mx) / z - (j == 0 ? 1.0f : 0.0f);
        } else {
            const float n = (float)(group > 1u ? group - 1u : 1u);
            loss = kge_softplus(-s[0]);
            c[0] = -kge_sigmoid(-s[0]);
            for (u32 j = 1; j < group; ++j) {
                loss += kge_softplus(s[j]) / n;
                c[j] = kge_sigmoid(s[j]) / n;
            }
        }
        if (reg != 0.0f) {
            const u32 j = g * group;
            const float* h = ent + (size_t)triples[3 * j] * w;
            const float* r = rel + (size_t)triples[3 * j + 1] * w;
            const float* t = ent + (size_t)triples[3 * j + 2] * w;
            float sq = 0.0f;
            for (u32 k = 0; k < dim; ++k) sq += h[k] * h[k] + r[k] * r[k] + t[k] * t[k];
            loss += reg * sq;
        }
        losses[g] = loss;
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
// component; contributions summed in CSR order (items: score << 1 | role). A group's positive
// (score index a multiple of `group`) adds the L2 gradient 2 * reg * (the row's own value).
extern "C" __global__ void kge_entity_grad(u32 model, u32 dim, u32 rows, u32 group, float reg,
                                           const u32* __restrict__ offsets,
                                           const u32* __restrict__ items,
                                           const u32* __restrict__ triples,
                                           const float* __restrict__ coef,
                                           const float* __restrict__ ent,
                                           const float* __restrict__ rel,
                                           float* __restrict__ grad) {
    const u32 w = 2u * dim;
    const float two_reg = 2.0f * reg;
    for (u32 row = blockIdx.x; row < rows; row += gridDim.x) {
        for (u32 k = threadIdx.x; k < dim; k += blockDim.x) {
            float g = 0.0f;
            for (u32 q = offsets[row]; q < offsets[row + 1]; ++q) {
                const u32 j = items[q] >> 1, role = items[q] & 1u;
                const float* h = ent + (size_t)triples[3 * j] * w;
                const float* r = rel + (size_t)triples[3 * j + 1] * w;
                const float* t = ent + (size_t)triples[3 * j + 2] * w;
                g += coef[j] * kge_entity_partial(model, dim, k, role, h, r, t);
                if (j % group == 0u) g += two_reg * ent[(size_t)row * w + k];
            }
            grad[(size_t)row * dim + k] = g;
        }
    }
}

// Gradient of each relation: one block per relation (grid-stride), one thread per component;
// contributions (score indices) summed in CSR order; a group's positive adds 2 * reg * r.
extern "C" __global__ void kge_relation_grad(u32 model, u32 dim, u32 relations, u32 group,
                                             float reg,
                                             const u32* __restrict__ offsets,
                                             const u32* __restrict__ items,
                                             const u32* __restrict__ triples,
                                             const float* __restrict__ coef,
                                             const float* __restrict__ ent,
                                             const float* __restrict__ rel,
                                             float* __restrict__ grad) {
    const u32 w = 2u * dim;
    const float two_reg = 2.0f * reg;
    for (u32 rr = blockIdx.x; rr < relations; rr += gridDim.x) {
        for (u32 k = threadIdx.x; k < dim; k += blockDim.x) {
            float g = 0.0f;
            for (u32 q = offsets[rr]; q < offsets[rr + 1]; ++q) {
                const u32 j = items[q];
                const float* h = ent + (size_t)triples[3 * j] * w;
                const float* t = ent + (size_t)triples[3 * j + 2] * w;
                g += coef[j] * kge_relation_partial(model, dim, k, h, t);
                if (j % group == 0u) g += two_reg * rel[(size_t)rr * w + k];
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
