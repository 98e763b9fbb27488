//! The KGE step's matrix products, on the `gemm` crate's kernels.
//!
//! ndarray's products run on `matrixmultiply`, whose widest kernel is AVX2 (8 lanes). The step
//! multiplies small matrices (a chunk of 50 queries by 100 negatives by 100 floats, three times
//! per side), and on a CPU with AVX-512 `gemm`'s 16-lane kernels do the same shapes in about
//! 0.6× the time (BENCHMARKS.md, "The step's products on AVX-512, and what item 1 could still buy"). `gemm` picks its
//! kernel at run time from the CPU's instruction set, as `matrixmultiply` does: on one machine
//! the same shapes always run the same kernel with the same blocking, so the same operands give
//! the same bits; another instruction set may give other bits (the README says which recorded
//! results that touches).
//!
//! [`mat_mul_into`] is the one safe door to `gemm`'s raw-pointer interface: every pointer and
//! stride it passes comes from an ndarray view whose shape it checks first.

use ndarray::{ArrayView2, ArrayViewMut2};

/// `c = a · b`, or `c += a · b` with `accumulate`, for views of any strides (transposed views
/// included). Single-threaded: the step runs its chunks on rayon's threads itself.
///
/// # Panics
///
/// If the shapes disagree (`a` is `m × k`, `b` is `k × n`, `c` is `m × n`): a caller's bug,
/// never an input's.
///
/// ```
/// use ndarray::array;
/// use ordo_train::kge::model::matmul::mat_mul_into;
/// let a = array![[1.0f32, 2.0], [3.0, 4.0], [5.0, 6.0]];
/// let b = array![[1.0f32, 0.0, 2.0], [0.0, 1.0, 3.0]];
/// let mut c = ndarray::Array2::<f32>::zeros((3, 3));
/// mat_mul_into(a.view(), b.view(), false, c.view_mut());
/// assert_eq!(c, array![[1.0, 2.0, 8.0], [3.0, 4.0, 18.0], [5.0, 6.0, 28.0]]);
/// // Accumulate, with a transposed operand: c += (aᵀ)ᵀ · b.
/// let at = a.t().to_owned();
/// mat_mul_into(at.t(), b.view(), true, c.view_mut());
/// assert_eq!(c[[2, 2]], 56.0);
/// ```
pub fn mat_mul_into(
    a: ArrayView2<'_, f32>,
    b: ArrayView2<'_, f32>,
    accumulate: bool,
    mut c: ArrayViewMut2<'_, f32>,
) {
    let ((m, k), (kb, n)) = (a.dim(), b.dim());
    assert!(k == kb && c.dim() == (m, n), "mat_mul_into: {m}×{k} · {kb}×{n} into {:?}", c.dim());
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            c.fill(0.0);
        }
        return;
    }
    let strides = |s: &[isize]| (s[0], s[1]);
    let ((a_rs, a_cs), (b_rs, b_cs), (c_rs, c_cs)) =
        (strides(a.strides()), strides(b.strides()), strides(c.strides()));
    // SAFETY: each pointer is a view's first element and each stride that view's own, so every
    // element `gemm` reads (`a[i, l]`, `b[l, j]` for i < m, l < k, j < n) or writes (`c[i, j]`)
    // lies in its view, whose shapes were checked above. `c` is borrowed mutably while `a` and
    // `b` are borrowed shared, so it overlaps neither. `f32` is one of `gemm`'s types (it panics
    // on no other path). `read_dst` with `alpha = 1` adds to `c`; without, `c` is only written.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            c_cs,
            c_rs,
            accumulate,
            a.as_ptr(),
            a_cs,
            a_rs,
            b.as_ptr(),
            b_cs,
            b_rs,
            1.0f32,
            1.0f32,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::linalg::general_mat_mul;
    use ndarray::{Array2, s};

    fn filled(rows: usize, cols: usize, seed: usize) -> Array2<f32> {
        Array2::from_shape_fn((rows, cols), |(i, j)| ((i * 31 + j * 17 + seed) % 23) as f32 - 11.0)
    }

    /// Integer-valued operands keep every sum exact, so any correct kernel gives the same
    /// result as ndarray's.
    fn agrees(a: ArrayView2<'_, f32>, b: ArrayView2<'_, f32>, accumulate: bool) {
        let start = filled(a.nrows(), b.ncols(), 5);
        let (mut got, mut want) = (start.clone(), start);
        mat_mul_into(a, b, accumulate, got.view_mut());
        general_mat_mul(1.0, &a, &b, if accumulate { 1.0 } else { 0.0 }, &mut want);
        assert_eq!(got, want, "{:?} · {:?}, accumulate {accumulate}", a.dim(), b.dim());
    }

    #[test]
    fn matches_ndarray_on_the_steps_shapes_strides_and_edge_sizes() {
        for (m, k, n) in
            [(50, 100, 100), (50, 100, 101), (1, 1, 1), (3, 0, 4), (0, 5, 2), (17, 33, 9)]
        {
            let (a, b) = (filled(m, k, 1), filled(k, n, 2));
            for accumulate in [false, true] {
                agrees(a.view(), b.view(), accumulate);
                // Transposed operands, as the step's `Gᵀ · Q` and `Q · Nᵀ` pass them.
                let (at, bt) = (a.t().to_owned(), b.t().to_owned());
                agrees(at.t(), bt.t(), accumulate);
            }
        }
        // Rows of a wider table (a row stride beyond the columns), and a reversed view.
        let wide = filled(40, 120, 3);
        let b = filled(100, 30, 4);
        agrees(wide.slice(s![..35, ..100]), b.view(), false);
        agrees(wide.slice(s![..;-1, ..100]), b.view(), true);
    }

    #[test]
    #[should_panic(expected = "mat_mul_into")]
    fn refuses_shapes_that_disagree() {
        let (a, b) = (filled(2, 3, 0), filled(4, 2, 0));
        mat_mul_into(a.view(), b.view(), false, Array2::zeros((2, 2)).view_mut());
    }
}
