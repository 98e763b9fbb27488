// The KGE step in the CPU step's shape (issue 56, item 2): the kernels around the three chunk
// products that cuBLAS runs (src/blas.rs). Their host port, which fixes every operation and
// every reduction order here, is src/kge/chunked.rs: each kernel below has a function of the
// same name there (gather, row_loss, query_back, entity_update, relation_update).
//
// Shapes: one batch is C chunks (padded to the fixed Cmax) of P positives (the last chunk may
// hold fewer), each with n shared negatives per side. A "side-chunk" sc = 2 c + side (side 0:
// corrupted tails, queries h∘r against tails; side 1: corrupted heads, queries r∘t̄ against
// heads). Row slot = sc * P + i (one positive of a side-chunk), negative slot = sc * n + j.
// Buffers (floats, d = dim): Q, T, EC, RC, dQ: slots x d; N, dN: negative slots x d;
// S (scores, then their gradients G in place): slots x n; g0 (the positive's gradient): slots;
// losses: slots x 2 (the row's loss, then its L2 term). Entity rows are the batch's rows of
// 2d floats (embedding, Adagrad sums); relation rows the same, all relations.
// ids (u32, uploaded per batch, built on the host by ChunkedIds): positives (3 per positive:
// head row, relation, tail row), negatives (per side-chunk n rows), the entity rows' contribution
// lists (CSR: offsets, items = slot << 2 | kind; kind 0 = the query's entity at a row slot,
// 1 = the target at a row slot, 2 = a negative slot), the relations' lists (CSR of row slots).
//
// Arithmetic: every product and sum outside cuBLAS is written with the _rn intrinsics, which
// the compiler never contracts into a fused multiply-add, so each kernel computes exactly the
// host port's f32 expression in the host port's order (the only other differences are expf,
// logf and log1pf, which are not Rust's). Every output has one owner thread; no atomics.

typedef unsigned int u32;

#define KC_DISTMULT 0u
#define KC_KIND_QUERY 0u
#define KC_KIND_TARGET 1u
#define KC_KIND_NEGATIVE 2u

__device__ __forceinline__ float kc_mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float kc_add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ float kc_sub(float a, float b) { return __fsub_rn(a, b); }

// Component k of the side's query: tail side q = x∘y with x = h, y = r; head side x = r,
// y = t, q = x∘conj(y) for ComplEx (real parts [0, m), imaginary parts [m, 2m)).
__device__ __forceinline__ float kc_query(u32 model, u32 side, u32 dim, u32 k, const float* x,
                                          const float* y) {
    if (model == KC_DISTMULT) return kc_mul(x[k], y[k]);
    const u32 m = dim / 2u;
    const u32 i = k < m ? k : k - m;
    const float a = x[i], b = x[m + i], c = y[i], e = y[m + i];
    if (side == 0u) {
        return k < m ? kc_sub(kc_mul(a, c), kc_mul(b, e)) : kc_add(kc_mul(b, c), kc_mul(a, e));
    }
    return k < m ? kc_add(kc_mul(a, c), kc_mul(b, e)) : kc_sub(kc_mul(a, e), kc_mul(b, c));
}

// Q and T at every row slot (zero past the batch's positives), N at every negative slot (zero
// past its side-chunks): one thread per float, grid-stride.
extern "C" __global__ void kc_gather(u32 model, u32 dim, u32 chunk, u32 negatives,
                                     u32 positives, u32 side_chunks, u32 slot_rows,
                                     const u32* __restrict__ pos, const u32* __restrict__ negs,
                                     const float* __restrict__ ent,
                                     const float* __restrict__ rel, float* __restrict__ q,
                                     float* __restrict__ t, float* __restrict__ n) {
    const size_t w = 2u * (size_t)dim;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const size_t start = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (size_t x = start; x < (size_t)slot_rows * dim; x += stride) {
        const u32 row = (u32)(x / dim), k = (u32)(x % dim);
        const u32 sc = row / chunk, i = row % chunk, side = sc % 2u;
        const u32 p = (sc / 2u) * chunk + i;
        float qv = 0.0f, tv = 0.0f;
        if (p < positives && sc < side_chunks) {
            const u32 h = pos[3u * p], r = pos[3u * p + 1u], tt = pos[3u * p + 2u];
            const float* rr = rel + r * w;
            if (side == 0u) {
                qv = kc_query(model, 0u, dim, k, ent + h * w, rr);
                tv = ent[tt * w + k];
            } else {
                qv = kc_query(model, 1u, dim, k, rr, ent + tt * w);
                tv = ent[h * w + k];
            }
        }
        q[x] = qv;
        t[x] = tv;
    }
    const size_t neg_slots = (size_t)slot_rows / chunk * negatives;
    for (size_t x = start; x < neg_slots * dim; x += stride) {
        const u32 slot = (u32)(x / dim), k = (u32)(x % dim);
        n[x] = slot / negatives < side_chunks ? ent[negs[slot] * w + k] : 0.0f;
    }
}

__device__ __forceinline__ float kc_softplus(float x) {
    return x > 0.0f ? kc_add(x, log1pf(expf(-x))) : log1pf(expf(x));
}

__device__ __forceinline__ float kc_sigmoid(float x) {
    return __fdiv_rn(1.0f, kc_add(1.0f, expf(-x)));
}

__device__ __forceinline__ float kc_dot(const float* a, const float* b, u32 dim) {
    float s = 0.0f;
    for (u32 k = 0; k < dim; ++k) s = kc_add(s, kc_mul(a[k], b[k]));
    return s;
}

// Per row slot: the positive's score s0 = q·t, then the row [s0, S] through the loss (softmax
// cross-entropy, loss 0, or logistic, loss 1); S is overwritten by its gradient G, g0 gets the
// positive's, losses the row's loss and its L2 term reg (|e|² + |r|² + |t|²). Rows past the
// batch get zeros (so the products over them add nothing). One thread per row slot.
extern "C" __global__ void kc_row_loss(u32 loss_kind, float reg, u32 dim, u32 chunk,
                                       u32 negatives, u32 positives, u32 side_chunks,
                                       u32 slot_rows, const u32* __restrict__ pos,
                                       const float* __restrict__ ent,
                                       const float* __restrict__ rel,
                                       const float* __restrict__ q,
                                       const float* __restrict__ t, float* __restrict__ s,
                                       float* __restrict__ g0, float* __restrict__ losses) {
    const size_t w = 2u * (size_t)dim;
    for (u32 row = blockIdx.x * blockDim.x + threadIdx.x; row < slot_rows;
         row += gridDim.x * blockDim.x) {
        const u32 sc = row / chunk, i = row % chunk;
        const u32 p = (sc / 2u) * chunk + i;
        float* sr = s + (size_t)row * negatives;
        if (p >= positives || sc >= side_chunks) {
            for (u32 j = 0; j < negatives; ++j) sr[j] = 0.0f;
            g0[row] = 0.0f;
            losses[2u * row] = 0.0f;
            losses[2u * row + 1u] = 0.0f;
            continue;
        }
        const float s0 = kc_dot(q + (size_t)row * dim, t + (size_t)row * dim, dim);
        float loss;
        if (loss_kind == 0u) {
            float mx = fmaxf(__int_as_float((int)0xff800000u), s0);  // max(-inf, s0)
            for (u32 j = 0; j < negatives; ++j) mx = fmaxf(mx, sr[j]);
            const float e0 = expf(kc_sub(s0, mx));
            float z = kc_add(0.0f, e0);
            for (u32 j = 0; j < negatives; ++j) {
                sr[j] = expf(kc_sub(sr[j], mx));
                z = kc_add(z, sr[j]);
            }
            g0[row] = kc_sub(__fdiv_rn(e0, z), 1.0f);
            for (u32 j = 0; j < negatives; ++j) sr[j] = kc_sub(__fdiv_rn(sr[j], z), 0.0f);
            loss = kc_sub(kc_add(mx, logf(z)), s0);
        } else {
            const float nf = (float)(negatives > 1u ? negatives : 1u);
            g0[row] = -kc_sigmoid(-s0);
            loss = kc_softplus(-s0);
            for (u32 j = 0; j < negatives; ++j) {
                loss = kc_add(loss, __fdiv_rn(kc_softplus(sr[j]), nf));
                sr[j] = __fdiv_rn(kc_sigmoid(sr[j]), nf);
            }
        }
        const u32 h = pos[3u * p], r = pos[3u * p + 1u], tt = pos[3u * p + 2u];
        const u32 e = sc % 2u == 0u ? h : tt, target = sc % 2u == 0u ? tt : h;
        const float* ev = ent + e * w;
        const float* rv = rel + r * w;
        const float* tv = ent + target * w;
        const float sq = kc_add(kc_add(kc_dot(ev, ev, dim), kc_dot(rv, rv, dim)),
                                kc_dot(tv, tv, dim));
        losses[2u * row] = loss;
        losses[2u * row + 1u] = kc_mul(reg, sq);
    }
}

// Per row slot and component: the query's gradient dq = (G·N)[k] + g0 t[k] (dQ holds G·N),
// then the chain rule to the query's entity (EC, with its L2 term) and relation (RC, with its
// L2 term). Tail side x = h, y = r; head side x = r, y = t. One thread per float.
extern "C" __global__ void kc_query_back(u32 model, u32 dim, u32 chunk, u32 positives,
                                         u32 side_chunks, u32 slot_rows, float reg,
                                         const u32* __restrict__ pos,
                                         const float* __restrict__ ent,
                                         const float* __restrict__ rel,
                                         const float* __restrict__ t,
                                         const float* __restrict__ dq,
                                         const float* __restrict__ g0,
                                         float* __restrict__ ec, float* __restrict__ rc) {
    const size_t w = 2u * (size_t)dim;
    const float two_reg = kc_mul(2.0f, reg);
    for (size_t x = (size_t)blockIdx.x * blockDim.x + threadIdx.x; x < (size_t)slot_rows * dim;
         x += (size_t)gridDim.x * blockDim.x) {
        const u32 row = (u32)(x / dim), k = (u32)(x % dim);
        const u32 sc = row / chunk, i = row % chunk, side = sc % 2u;
        const u32 p = (sc / 2u) * chunk + i;
        if (p >= positives || sc >= side_chunks) {
            ec[x] = 0.0f;
            rc[x] = 0.0f;
            continue;
        }
        const u32 h = pos[3u * p], r = pos[3u * p + 1u], tt = pos[3u * p + 2u];
        const float* ev = ent + (side == 0u ? h : tt) * w;
        const float* rv = rel + r * w;
        const float* xv = side == 0u ? ev : rv;
        const float* yv = side == 0u ? rv : ev;
        const float* dqr = dq + (size_t)row * dim;
        const float* tr = t + (size_t)row * dim;
        const float gp = g0[row];
        float dx, dy;
        if (model == KC_DISTMULT) {
            const float u = kc_add(dqr[k], kc_mul(gp, tr[k]));
            dx = kc_mul(u, yv[k]);
            dy = kc_mul(u, xv[k]);
        } else {
            const u32 m = dim / 2u;
            const u32 j = k < m ? k : k - m;
            const float u = kc_add(dqr[j], kc_mul(gp, tr[j]));
            const float v = kc_add(dqr[m + j], kc_mul(gp, tr[m + j]));
            const float a = xv[j], b = xv[m + j], c = yv[j], e = yv[m + j];
            if (side == 0u) {
                dx = k < m ? kc_add(kc_mul(u, c), kc_mul(v, e)) : kc_sub(kc_mul(v, c), kc_mul(u, e));
                dy = k < m ? kc_add(kc_mul(u, a), kc_mul(v, b)) : kc_sub(kc_mul(v, a), kc_mul(u, b));
            } else {
                dx = k < m ? kc_add(kc_mul(u, c), kc_mul(v, e)) : kc_sub(kc_mul(u, e), kc_mul(v, c));
                dy = k < m ? kc_sub(kc_mul(u, a), kc_mul(v, b)) : kc_add(kc_mul(u, b), kc_mul(v, a));
            }
        }
        const float de = side == 0u ? dx : dy, dr = side == 0u ? dy : dx;
        ec[x] = kc_add(de, kc_mul(two_reg, ev[k]));
        rc[x] = kc_add(dr, kc_mul(two_reg, rv[k]));
    }
}

// Adagrad on one float: G += g²; θ −= lr g / (√G + eps).
__device__ __forceinline__ void kc_adagrad(float* theta, float* sum, float g, float lr,
                                           float eps) {
    const float s = kc_add(*sum, kc_mul(g, g));
    *sum = s;
    *theta = kc_sub(*theta, __fdiv_rn(kc_mul(lr, g), kc_add(__fsqrt_rn(s), eps)));
}

// Per entity row of the batch and component: its contributions summed in its list's order
// (the canonical order: chunk, side, per positive its query's entity then its target, then the
// side's negatives), fused with Adagrad. Every value it reads was written before this kernel
// (EC, Q, g0, dN) or is this thread's own float, so rows update in place without a race.
extern "C" __global__ void kc_entity_update(u32 dim, u32 rows, float reg, float lr, float eps,
                                            const u32* __restrict__ offsets,
                                            const u32* __restrict__ items,
                                            const float* __restrict__ ec,
                                            const float* __restrict__ q,
                                            const float* __restrict__ g0,
                                            const float* __restrict__ dn,
                                            float* __restrict__ ent) {
    const size_t w = 2u * (size_t)dim;
    const float two_reg = kc_mul(2.0f, reg);
    for (size_t x = (size_t)blockIdx.x * blockDim.x + threadIdx.x; x < (size_t)rows * dim;
         x += (size_t)gridDim.x * blockDim.x) {
        const u32 row = (u32)(x / dim), k = (u32)(x % dim);
        const u32 begin = offsets[row], end = offsets[row + 1u];
        if (begin == end) continue;
        float* theta = ent + row * w + k;
        const float own = *theta;
        float g = 0.0f;
        for (u32 it = begin; it < end; ++it) {
            const u32 slot = items[it] >> 2, kind = items[it] & 3u;
            const size_t at = (size_t)slot * dim + k;
            float c;
            if (kind == KC_KIND_QUERY) {
                c = ec[at];
            } else if (kind == KC_KIND_TARGET) {
                c = kc_add(kc_mul(g0[slot], q[at]), kc_mul(two_reg, own));
            } else {
                c = dn[at];
            }
            g = kc_add(g, c);
        }
        kc_adagrad(theta, theta + dim, g, lr, eps);
    }
}

// Per relation and component: its contributions (RC at its row slots, in list order) summed by
// the pairwise tree whose shape depends only on their number (level by level, neighbours added,
// an odd last one carried up), then Adagrad. The tree is walked with a stack of subtree sums:
// two of the same height merge (left + right); at the end the stack folds from its top.
extern "C" __global__ void kc_relation_update(u32 dim, u32 relations, float lr, float eps,
                                              const u32* __restrict__ offsets,
                                              const u32* __restrict__ items,
                                              const float* __restrict__ rc,
                                              float* __restrict__ rel) {
    const size_t w = 2u * (size_t)dim;
    for (size_t x = (size_t)blockIdx.x * blockDim.x + threadIdx.x; x < (size_t)relations * dim;
         x += (size_t)gridDim.x * blockDim.x) {
        const u32 r = (u32)(x / dim), k = (u32)(x % dim);
        const u32 begin = offsets[r], end = offsets[r + 1u];
        if (begin == end) continue;
        float sums[33];
        u32 heights[33];
        u32 top = 0;
        for (u32 it = begin; it < end; ++it) {
            float v = rc[(size_t)items[it] * dim + k];
            u32 height = 0;
            while (top > 0u && heights[top - 1u] == height) {
                v = kc_add(sums[top - 1u], v);
                --top;
                ++height;
            }
            sums[top] = v;
            heights[top] = height;
            ++top;
        }
        float g = sums[top - 1u];
        for (u32 lvl = top - 1u; lvl > 0u; --lvl) g = kc_add(sums[lvl - 1u], g);
        float* theta = rel + r * w + k;
        kc_adagrad(theta, theta + dim, g, lr, eps);
    }
}
