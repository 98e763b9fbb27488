//! The process's CPU clock, for the benchmarks' CPU time per positive.

/// This process's CPU time in seconds (every thread's, from `CLOCK_PROCESS_CPUTIME_ID`), where
/// the platform has that clock; `None` elsewhere.
///
/// ```
/// let (a, b) = (ordo_train::cpu_clock::process_cpu_s(), ordo_train::cpu_clock::process_cpu_s());
/// if let (Some(a), Some(b)) = (a, b) {
///     assert!(b >= a, "the clock never goes back");
/// }
/// ```
pub fn process_cpu_s() -> Option<f64> {
    #[cfg(unix)]
    {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
        Some(t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9)
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// `total` plus the process CPU time since `start` (a [`process_cpu_s`] reading); `None` if
/// either is unknown.
pub fn add_cpu_since(total: Option<f64>, start: Option<f64>) -> Option<f64> {
    total.zip(start.zip(process_cpu_s())).map(|(sum, (a, b))| sum + b - a)
}
