//! The one error every subcommand's option validation returns, so that every refused option
//! reads the same: `error: --opt VALUE: reason`, exit status 2.
//!
//! Each subcommand validates all its options in one place before it reads or writes anything
//! (`KgeOpts::validate`, [`crate::sgd::cli::SgdArgs::validate`],
//! [`crate::amp::cli::AmpArgs::validate`]); the checks that need the data (a batch larger than
//! the training set, the memory a run will need) follow in the same functions' data-dependent
//! halves, after the data is read and before anything large is allocated.

use std::fmt::Display;

/// An option whose value cannot be used: its flag, the value as given, and why.
///
/// ```
/// use ordo_train::option_error::OptionError;
/// let e = OptionError::new("--lr", f32::NAN, "must be a positive number");
/// assert_eq!(e.to_string(), "--lr NaN: must be a positive number");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{option} {value}: {reason}")]
pub struct OptionError {
    /// The flag, with its dashes (`--batch-size`).
    pub option: &'static str,
    /// The value as the run sees it.
    pub value: String,
    /// Why it is refused.
    pub reason: String,
}

impl OptionError {
    /// `option` with `value` is refused because of `reason`.
    pub fn new(option: &'static str, value: impl Display, reason: impl Into<String>) -> Self {
        OptionError { option, value: value.to_string(), reason: reason.into() }
    }
}

/// The most threads (or AdaPM nodes) any subcommand starts: more is never faster on a machine
/// of this century, and each thread reserves its own stack.
pub const MAX_THREADS: usize = 1024;

/// `value` as a count of at least 1 and at most `max`.
pub fn count(option: &'static str, value: usize, max: usize) -> Result<(), OptionError> {
    if value == 0 {
        return Err(OptionError::new(option, value, "must be at least 1"));
    }
    if value > max {
        return Err(OptionError::new(option, value, format!("must be at most {max}")));
    }
    Ok(())
}

/// `value` as a positive finite number.
pub fn positive(option: &'static str, value: f64) -> Result<(), OptionError> {
    if value > 0.0 && value.is_finite() {
        Ok(())
    } else {
        Err(OptionError::new(option, value, "must be a positive finite number"))
    }
}

/// `value` as a finite number of at least 0.
pub fn non_negative(option: &'static str, value: f64) -> Result<(), OptionError> {
    if value >= 0.0 && value.is_finite() {
        Ok(())
    } else {
        Err(OptionError::new(option, value, "must be a finite number of at least 0"))
    }
}

/// `value` in `[lo, hi)` (`hi_open`) or `[lo, hi]`.
pub fn within(
    option: &'static str,
    value: f64,
    (lo, hi): (f64, f64),
    hi_open: bool,
) -> Result<(), OptionError> {
    let below_hi = if hi_open { value < hi } else { value <= hi };
    if value >= lo && below_hi {
        Ok(())
    } else {
        let close = if hi_open { ')' } else { ']' };
        Err(OptionError::new(option, value, format!("must be in [{lo}, {hi}{close}")))
    }
}

/// An accuracy target: in `(0, 1]`.
pub fn fraction(option: &'static str, value: f64) -> Result<(), OptionError> {
    if value > 0.0 && value <= 1.0 {
        Ok(())
    } else {
        Err(OptionError::new(option, value, "must be an accuracy in (0, 1]"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_check_refuses_its_edge_and_names_the_option() {
        assert!(count("--threads", 1, 2).is_ok() && count("--threads", 2, 2).is_ok());
        assert_eq!(
            count("--threads", 0, 2).unwrap_err().to_string(),
            "--threads 0: must be at least 1"
        );
        assert_eq!(count("--threads", 3, 2).unwrap_err().reason, "must be at most 2");
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(positive("--lr", bad).is_err(), "{bad}");
        }
        assert!(positive("--lr", 1e-30).is_ok());
        assert!(non_negative("--reg", 0.0).is_ok() && non_negative("--reg", -0.5).is_err());
        assert!(non_negative("--reg", f64::NAN).is_err());
        assert!(within("--momentum", 0.0, (0.0, 1.0), true).is_ok());
        assert!(within("--momentum", 1.0, (0.0, 1.0), true).is_err());
        assert!(within("--momentum", f64::NAN, (0.0, 1.0), true).is_err());
        assert!(within("--x", 1.0, (0.0, 1.0), false).is_ok());
        assert!(fraction("--target-acc", 1.0).is_ok() && fraction("--target-acc", 2.0).is_err());
        assert!(
            fraction("--target-acc", 0.0).is_err() && fraction("--target-acc", f64::NAN).is_err()
        );
    }
}
