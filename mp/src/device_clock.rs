//! The emulated device's clock (Appendix C): each worker is a device whose compute nodes cost
//! declared device time ([`Emit::device`](crate::node::Emit)) instead of computing.
//!
//! Why a clock and not a plain sleep per operation: `thread::sleep(d)` returns when the OS gets
//! round to waking the thread, which on a loaded machine is milliseconds late (measured ≈ 3 ms
//! median, 70 ms at worst, for 12–25 ms sleeps on the shared 2-core machine). Those overshoots
//! add up along every instance's chain of operations, and they are the host's, not the emulated
//! device's. So every message carries the emulated time at which it was produced, and a
//! worker's device starts an operation at `max(its own finish time, the message's time)`, runs
//! it for the real time the host took plus the declared device time, and sleeps until that
//! finish time (measured from the run's start): a late wake-up delays the worker by at most one
//! overshoot and is not passed on to the operations after it.

use std::time::{Duration, Instant};

/// One worker's emulated device.
///
/// Invariant: after every [`DeviceClock::run`] the returned finish time is at most the wall
/// time since the run's start, so no message is stamped with a time that has not happened yet:
/// the emulated device never runs ahead of the real run, and wall time bounds emulated time.
///
/// ```
/// use std::time::{Duration, Instant};
/// let start = Instant::now();
/// let mut c = ordo_mp::device_clock::DeviceClock::new(start);
/// let t = c.run(Duration::ZERO, Duration::ZERO, Duration::from_millis(2));
/// assert_eq!(t, Duration::from_millis(2));
/// assert!(start.elapsed() >= t);
/// ```
#[derive(Debug, Clone)]
pub struct DeviceClock {
    origin: Instant,
    finish: Duration,
}

impl DeviceClock {
    /// A device idle since `origin`, the run's start.
    pub fn new(origin: Instant) -> DeviceClock {
        DeviceClock { origin, finish: Duration::ZERO }
    }

    /// Run one operation on a message produced at emulated time `at`: the host computed for
    /// `real`, the device would take `device` more. Sleeps until the operation's emulated
    /// finish time and returns it (the time to stamp the operation's messages with).
    pub fn run(&mut self, at: Duration, real: Duration, device: Duration) -> Duration {
        let start = self.finish.max(at);
        self.finish = start + real + device;
        let now = self.origin.elapsed();
        // Without device time this never sleeps: `start` was at most the wall time when the
        // operation began, so `start + real` is at most the wall time now.
        if self.finish > now {
            std::thread::sleep(self.finish - now);
        }
        self.finish
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A host that wakes late (here: 5 ms of real delay) does not delay the emulated device's
    /// next operation: it starts at the previous finish time, not at the wall time.
    #[test]
    fn a_late_host_is_not_passed_on() {
        let ms = Duration::from_millis;
        let mut c = DeviceClock::new(Instant::now());
        assert_eq!(c.run(Duration::ZERO, Duration::ZERO, ms(1)), ms(1));
        std::thread::sleep(ms(5));
        assert_eq!(c.run(ms(1), Duration::ZERO, ms(1)), ms(2));
        // A message from later than the device's finish starts at its own time.
        assert_eq!(c.run(ms(3), Duration::ZERO, ms(1)), ms(4));
    }
}
