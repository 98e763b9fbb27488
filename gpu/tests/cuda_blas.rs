//! The chunk products on cuBLAS ([`ChunkBlas`]): equal to the host's products within f32
//! rounding, and the same bits when repeated on the same inputs (what OAC's replay check needs).
//! Needs a CUDA device and cuBLAS; `#[ignore]`d: run with `--ignored` on a GPU machine.

#![cfg(not(ordo_loom))]

#[path = "support/require_gpu.rs"]
mod require_gpu;

use ordo_gpu::blas::{ChunkBlas, ChunkShape};
use ordo_gpu::workload::Rng;

/// Row-major `a (m × k) · b`, `b` given as `k × n` or, with `bt`, as its transpose `n × k`.
fn host(a: &[f32], b: &[f32], (m, k, n): (usize, usize, usize), at: bool, bt: bool) -> Vec<f32> {
    let a_at = |i: usize, l: usize| if at { a[l * m + i] } else { a[i * k + l] };
    let b_at = |l: usize, j: usize| if bt { b[j * k + l] } else { b[l * n + j] };
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..k).fold(0.0f32, |s, l| s + a_at(i, l) * b_at(l, j));
        }
    }
    c
}

fn close(what: &str, got: &[f32], want: &[f32]) {
    let scale = want.iter().fold(1e-12f32, |m, x| m.max(x.abs()));
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= 1e-5 * scale, "{what}[{i}]: {g} vs {w}");
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn chunk_products_equal_the_host_and_repeat_bit_for_bit() {
    let gpu = require_gpu::gpu();
    let stream = gpu.new_stream().unwrap();
    let blas = ChunkBlas::new(&gpu, stream.clone()).unwrap();
    let shape = ChunkShape { chunks: 3, positives: 4, negatives: 5, dim: 8 };
    let [lq, ln, ls] = shape.lens();
    let mut rng = Rng::new(17);
    let (q, n, g) = (rng.params(lq, 1), rng.params(ln, 1), rng.params(ls, 1));
    let (q, n, g): (Vec<f32>, Vec<f32>, Vec<f32>) = (
        q.into_iter().step_by(2).collect(),
        n.into_iter().step_by(2).collect(),
        g.into_iter().step_by(2).collect(),
    );
    let (dq_, dn_, dg_) = (
        stream.clone_htod(&q).unwrap(),
        stream.clone_htod(&n).unwrap(),
        stream.clone_htod(&g).unwrap(),
    );
    let run = || {
        let mut s = stream.alloc_zeros::<f32>(ls).unwrap();
        let mut dq = stream.alloc_zeros::<f32>(lq).unwrap();
        let mut dn = stream.alloc_zeros::<f32>(ln).unwrap();
        blas.scores(&shape, &dq_, &dn_, &mut s).unwrap();
        blas.query_grads(&shape, &dg_, &dn_, &mut dq).unwrap();
        blas.negative_grads(&shape, &dg_, &dq_, &mut dn).unwrap();
        [
            stream.clone_dtoh(&s).unwrap(),
            stream.clone_dtoh(&dq).unwrap(),
            stream.clone_dtoh(&dn).unwrap(),
        ]
    };
    let first = run();
    let (p, k, d) = (shape.positives, shape.negatives, shape.dim);
    for c in 0..shape.chunks {
        let (qc, nc, gc) =
            (&q[c * p * d..][..p * d], &n[c * k * d..][..k * d], &g[c * p * k..][..p * k]);
        close("S = Q Nᵀ", &first[0][c * p * k..][..p * k], &host(qc, nc, (p, d, k), false, true));
        close("dQ = G N", &first[1][c * p * d..][..p * d], &host(gc, nc, (p, k, d), false, false));
        close("dN = Gᵀ Q", &first[2][c * k * d..][..k * d], &host(gc, qc, (k, p, d), true, false));
    }
    let bits = |v: &[Vec<f32>; 3]| {
        v.iter().map(|x| x.iter().map(|f| f.to_bits()).collect::<Vec<_>>()).collect::<Vec<_>>()
    };
    assert_eq!(bits(&run()), bits(&first), "the same inputs give the same bits");
}
