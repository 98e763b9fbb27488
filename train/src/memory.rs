//! The memory a run will need, estimated from its options and data before anything large is
//! allocated, against the memory the process can get.
//!
//! Every size goes through checked arithmetic ([`product`], [`Estimate::total`]): a value that
//! would overflow 64 bits is an [`OptionError`] naming its option, never a `capacity overflow`
//! panic. A run whose estimate exceeds the [`Budget`] is refused naming the option whose term is
//! largest, the estimate and the budget. The estimate counts the large tables and buffers, not
//! every small allocation: the budget is what the process may take, and a run the estimate
//! admits allocates its large tables with `try_reserve` so that an error, not an abort, reports
//! a machine with less memory than it said.

use crate::option_error::OptionError;
use std::fmt::Display;

/// Bytes the process may allocate, and where that figure came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Bytes.
    pub bytes: u64,
    /// Where [`bytes`](Self::bytes) came from (`--memory-limit`, the cgroup, `MemAvailable`).
    pub source: &'static str,
}

/// cgroup v1 reports "no limit" as a page-rounded `i64::MAX`; anything this large is none.
const NO_LIMIT: u64 = 1 << 60;

impl Budget {
    /// `limit` (`--memory-limit`) if given, else the smaller of this process's cgroup limit
    /// (v2 `memory.max`, v1 `memory.limit_in_bytes`) and `MemAvailable` in `/proc/meminfo`;
    /// unlimited where none of these can be read.
    pub fn of_process(limit: Option<u64>) -> Budget {
        let read = |p: &str| std::fs::read_to_string(p).ok();
        // The process's own cgroup v2 directory, then the namespace root.
        let own_v2 = read("/proc/self/cgroup").and_then(|c| {
            let path = c.lines().find_map(|l| l.strip_prefix("0::"))?.trim().to_string();
            read(&format!("/sys/fs/cgroup{path}/memory.max"))
        });
        let v2 = own_v2.or_else(|| read("/sys/fs/cgroup/memory.max"));
        let v1 = read("/sys/fs/cgroup/memory/memory.limit_in_bytes");
        Budget::from_sources(limit, v2.as_deref(), v1.as_deref(), read("/proc/meminfo").as_deref())
    }

    /// [`of_process`](Self::of_process) over the given file contents (`None`: unreadable).
    ///
    /// ```
    /// use ordo_train::memory::Budget;
    /// let meminfo = "MemTotal: 100 kB\nMemAvailable:   2048 kB\n";
    /// assert_eq!(Budget::from_sources(None, Some("max\n"), None, Some(meminfo)).bytes, 2 << 20);
    /// assert_eq!(Budget::from_sources(None, Some("1024\n"), None, Some(meminfo)).bytes, 1024);
    /// assert_eq!(Budget::from_sources(Some(5), Some("1024\n"), None, None).bytes, 5);
    /// ```
    pub fn from_sources(
        limit: Option<u64>,
        cgroup_v2_max: Option<&str>,
        cgroup_v1_limit: Option<&str>,
        meminfo: Option<&str>,
    ) -> Budget {
        if let Some(bytes) = limit {
            return Budget { bytes, source: "--memory-limit" };
        }
        let number = |s: &str| s.trim().parse::<u64>().ok().filter(|&b| b < NO_LIMIT);
        let cgroup = cgroup_v2_max
            .and_then(number)
            .map(|b| (b, "the cgroup's memory.max"))
            .or_else(|| cgroup_v1_limit.and_then(number).map(|b| (b, "the cgroup's memory limit")));
        let available = meminfo.and_then(|m| {
            let kb = m.lines().find_map(|l| l.strip_prefix("MemAvailable:"))?;
            let kb: u64 = kb.trim().trim_end_matches("kB").trim().parse().ok()?;
            Some((kb.saturating_mul(1024), "MemAvailable"))
        });
        match (cgroup, available) {
            (Some(c), Some(a)) => {
                let (bytes, source) = if c.0 <= a.0 { c } else { a };
                Budget { bytes, source }
            }
            (Some((bytes, source)), None) | (None, Some((bytes, source))) => {
                Budget { bytes, source }
            }
            (None, None) => Budget { bytes: u64::MAX, source: "no known limit" },
        }
    }
}

/// Parse `--memory-limit`: bytes, or a number with a `K`, `M`, `G` or `T` suffix (powers of
/// 1024, an optional trailing `B` or `iB`).
///
/// ```
/// use ordo_train::memory::parse_bytes;
/// assert_eq!(parse_bytes("4096"), Ok(4096));
/// assert_eq!(parse_bytes("2G"), Ok(2 << 30));
/// assert_eq!(parse_bytes("1.5MiB"), Ok(3 << 19));
/// assert!(parse_bytes("0").is_err() && parse_bytes("20000000T").is_err());
/// ```
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let t = t.strip_suffix("iB").or_else(|| t.strip_suffix('B')).unwrap_or(t);
    let (digits, shift) = match t.char_indices().last() {
        Some((i, c)) if "KMGTkmgt".contains(c) => {
            (&t[..i], 10 * (1 + "KMGT".find(c.to_ascii_uppercase()).unwrap_or(0) as u32))
        }
        _ => (t, 0),
    };
    let bad = || format!("{s:?} is not a positive number of bytes (e.g. 8G)");
    let x: f64 = digits.trim().parse().map_err(|_| bad())?;
    let bytes = x * f64::from(1u32 << (shift / 2)) * f64::from(1u32 << (shift - shift / 2));
    // 2^64 as f64 and above do not fit.
    if !(1.0..18_446_744_073_709_551_616.0).contains(&bytes) {
        return Err(bad());
    }
    Ok(bytes as u64)
}

/// `x` bytes as `12.3 GiB`.
pub fn human(x: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut v = x as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 { format!("{x} B") } else { format!("{v:.1} {}", units[u]) }
}

/// The product of `factors`, or `None` if it overflows 64 bits.
pub fn product(factors: &[u64]) -> Option<u64> {
    factors.iter().try_fold(1u64, |acc, &f| acc.checked_mul(f))
}

/// A `usize` as a size factor (lossless on every platform Rust supports).
pub fn n(x: usize) -> u64 {
    x as u64
}

/// One part of an estimate: the option that sizes it and its bytes (`None`: overflowed).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Term {
    option: &'static str,
    value: String,
    what: &'static str,
    bytes: Option<u64>,
}

/// The large allocations of a run, each tied to the option that sizes it.
///
/// ```
/// use ordo_train::memory::{Budget, Estimate, product};
/// let mut e = Estimate::default();
/// e.add("--dim", 100, "entity table", product(&[1_000_000, 100, 4]));
/// e.add("--eval-sample", 10, "eval sample", Some(40));
/// let small = Budget { bytes: 1 << 20, source: "--memory-limit" };
/// let err = e.check(small).unwrap_err();
/// assert_eq!(err.option, "--dim");
/// assert!(e.check(Budget { bytes: 1 << 30, source: "--memory-limit" }).is_ok());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Estimate {
    terms: Vec<Term>,
}

impl Estimate {
    /// Count `bytes` for `what`, sized by `option` set to `value`.
    pub fn add(
        &mut self,
        option: &'static str,
        value: impl Display,
        what: &'static str,
        bytes: Option<u64>,
    ) -> &mut Self {
        self.terms.push(Term { option, value: value.to_string(), what, bytes });
        self
    }

    /// The sum of every term, or `None` if one overflowed or the sum does.
    pub fn total(&self) -> Option<u64> {
        self.terms.iter().try_fold(0u64, |acc, t| acc.checked_add(t.bytes?))
    }

    /// `Ok(total)` if it fits `budget`, else the error naming the largest term's option.
    pub fn check(&self, budget: Budget) -> Result<u64, OptionError> {
        if let Some(t) = self.terms.iter().find(|t| t.bytes.is_none()) {
            return Err(OptionError::new(
                t.option,
                &t.value,
                format!("the {} it sizes overflows 64 bits of bytes", t.what),
            ));
        }
        let largest = self.terms.iter().max_by_key(|t| t.bytes);
        match (self.total(), largest) {
            (Some(total), _) if total <= budget.bytes => Ok(total),
            (total, Some(t)) => Err(OptionError::new(
                t.option,
                &t.value,
                format!(
                    "the run needs about {} ({} of it for the {}) but {} can be had ({}); \
                     lower it, or set --memory-limit BYTES if that figure is wrong",
                    total.map_or_else(|| "more than 16 EiB".to_string(), human),
                    human(t.bytes.unwrap_or(u64::MAX)),
                    t.what,
                    human(budget.bytes),
                    budget.source
                ),
            )),
            (_, None) => Ok(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_is_the_smallest_known_limit_and_the_option_wins() {
        let meminfo = "MemTotal:  1000 kB\nMemFree: 5 kB\nMemAvailable:  4 kB\n";
        let b = Budget::from_sources(None, Some("max"), Some("9223372036854771712"), Some(meminfo));
        assert_eq!((b.bytes, b.source), (4096, "MemAvailable"));
        let b = Budget::from_sources(None, None, Some("2048\n"), Some(meminfo));
        assert_eq!((b.bytes, b.source), (2048, "the cgroup's memory limit"));
        let b = Budget::from_sources(None, Some("100000"), None, Some(meminfo));
        assert_eq!(b.bytes, 4096, "MemAvailable below the cgroup's limit");
        assert_eq!(Budget::from_sources(None, None, None, None).bytes, u64::MAX);
        assert_eq!(Budget::from_sources(Some(7), None, None, Some(meminfo)).bytes, 7);
    }

    #[test]
    fn an_overflowing_or_oversized_term_is_an_error_naming_its_option() {
        let mut e = Estimate::default();
        e.add("--dim", 8, "table", Some(100)).add(
            "--epochs",
            u64::MAX,
            "orders",
            product(&[u64::MAX, 8]),
        );
        let err = e.check(Budget { bytes: u64::MAX, source: "x" }).unwrap_err();
        assert_eq!(err.option, "--epochs");
        assert!(err.reason.contains("overflows"), "{err}");
        let mut e = Estimate::default();
        e.add("--dim", 8, "table", Some(u64::MAX)).add("--epochs", 1, "orders", Some(2));
        assert_eq!(e.total(), None);
        let err = e.check(Budget { bytes: 10, source: "x" }).unwrap_err();
        assert_eq!(err.option, "--dim");
        let mut e = Estimate::default();
        e.add("--dim", 8, "table", Some(600)).add("--epochs", 1, "orders", Some(500));
        assert_eq!(e.check(Budget { bytes: 1100, source: "x" }), Ok(1100));
        let err = e.check(Budget { bytes: 1099, source: "x" }).unwrap_err();
        assert_eq!((err.option, err.value.as_str()), ("--dim", "8"));
        assert!(err.reason.contains("1.1 KiB") && err.reason.contains("table"), "{err}");
    }

    #[test]
    fn byte_counts_parse_with_suffixes_and_refuse_nonsense() {
        assert_eq!(parse_bytes("1K"), Ok(1024));
        assert_eq!(parse_bytes("3 GiB"), Ok(3 << 30));
        assert_eq!(parse_bytes("16383P").ok(), None, "P is not a suffix");
        for bad in ["", "-1", "nan", "inf", "1e30", "0.1", "G"] {
            assert!(parse_bytes(bad).is_err(), "{bad}");
        }
        assert_eq!(human(1536), "1.5 KiB");
        assert_eq!(human(3), "3 B");
    }
}
