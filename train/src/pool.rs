//! rayon's global pool as the trainers' binaries build it: the calling thread is the pool's
//! thread 0.
//!
//! The engine runs its device stage (validation and the model's step) on the thread that owns
//! the session, here the binary's main thread. When that thread is not one of rayon's, every
//! step that uses two threads is first handed to a pool worker and the caller sleeps until it
//! is done: 142 µs a step on an idle 2-core machine and 0.6–1.3 ms beside one busy-loop
//! process per core (BENCHMARKS.md, "The step chooses its threads"). As thread 0 of the pool,
//! the main thread runs the step itself, and a `rayon::join` inside it only offers the second
//! half to the other worker, which takes it if it is free; otherwise the main thread runs both
//! halves. Evaluation's parallel loops then run on the main thread and one worker: as many
//! threads as before, when the main thread slept while two workers ran them.
//!
//! Only for a process's main thread (or a thread that lives as long as the process): the
//! thread stays a member of the pool for good. The Python package leaves rayon's default pool
//! alone, since the thread that calls it is the interpreter's.

/// Build rayon's global pool (`RAYON_NUM_THREADS`, or one thread per CPU) with the calling
/// thread as its thread 0 and the other threads named `ordo-rayon-N`, so a profiler or
/// `top -H` tells them from the engine's stages. Returns `false` if the global pool already
/// existed (it is then left as it is, and the step still runs correctly, with a hand-off
/// each time it uses two threads).
///
/// (A crate of its own, so that no other example has built the global pool first.)
///
/// ```standalone_crate
/// assert!(ordo_train::pool::init_global());
/// assert_eq!(rayon::current_thread_index(), Some(0), "this thread is the pool's first");
/// assert!(!ordo_train::pool::init_global(), "built once");
/// ```
pub fn init_global() -> bool {
    rayon::ThreadPoolBuilder::new()
        .thread_name(|i| format!("ordo-rayon-{i}"))
        .use_current_thread()
        .build_global()
        .is_ok()
}
