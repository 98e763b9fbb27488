//! The free list of batch row buffers: a batch's `rows × width` floats are allocated once and
//! reused by later batches, instead of allocated, zeroed and page-faulted per batch.
//!
//! A buffer's way round: the reader takes one ([`RowBuffers::take`]) and fills it from the
//! store; the device steps it in place and wraps it in the shared
//! [`RowBlock`](crate::engine::RowBlock); when the writers and the validation cache have both
//! dropped that block, its buffer comes back here ([`RowBuffers::put`]).

use crate::sync::host::Mutex;

/// At most this many idle buffers are kept (more are freed): the pipeline's queues hold a few
/// batches, so a handful of buffers covers the batches in flight.
const KEPT: usize = 16;

/// A buffer that grows is given `1 / HEADROOM` more capacity than asked.
const HEADROOM: usize = 16;

/// Idle row buffers, shared by the stages of one session.
///
/// **Invariant:** a taken buffer's contents are unspecified (floats of an earlier batch, or
/// zeros); only its length is set. The reader overwrites every row before any stage looks at it.
#[derive(Debug, Default)]
pub(crate) struct RowBuffers {
    idle: Mutex<Vec<Vec<f32>>>,
}

impl RowBuffers {
    /// A buffer of `len` floats, reused if one is idle.
    pub fn take(&self, len: usize) -> Vec<f32> {
        let mut buf = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop().unwrap_or_default();
        if buf.capacity() < len {
            // Batches of one run differ in size by a few rows: a buffer that must grow gets
            // 1/16 more than asked, so the next slightly larger batch fits without another
            // reallocation (a copy of megabytes into fresh, page-faulting memory).
            buf.reserve_exact(len + len / HEADROOM - buf.len());
        }
        // Only a grown tail is written (zeros); the rest keeps an earlier batch's floats.
        buf.resize(len, 0.0);
        buf
    }

    /// Give a buffer back for a later [`take`](RowBuffers::take).
    pub fn put(&self, buf: Vec<f32>) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < KEPT && buf.capacity() > 0 {
            idle.push(buf);
        }
    }
}

#[cfg(all(test, not(ordo_loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_returned_buffer_is_reused_with_the_asked_length() {
        let pool = RowBuffers::default();
        let a = pool.take(8);
        assert_eq!(a, vec![0.0; 8]);
        let ptr = a.as_ptr();
        pool.put(a);
        let b = pool.take(4);
        assert_eq!((b.len(), b.as_ptr()), (4, ptr), "the same allocation, shortened");
        assert_eq!(pool.take(3).len(), 3, "none idle: a fresh one");
        let c = pool.take(64);
        assert!(c.capacity() >= 64 + 64 / HEADROOM, "grown with headroom: {}", c.capacity());
        let ptr = c.as_ptr();
        pool.put(c);
        let d = pool.take(64 + 64 / HEADROOM);
        assert_eq!(d.as_ptr(), ptr, "a slightly larger batch fits without a reallocation");
    }
}
