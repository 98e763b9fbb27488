//! [`admit`]: what a queue of staging slots checks before it takes a batch.

use crate::cache::{TableBackend, ValidationCache, check_len, check_rows};
use crate::error::GpuError;
use ordo::engine::{BatchRows, Submission};

/// Check batch `job` with its `rows` whole before a queue of `slots` slots takes it, so that a
/// refused batch changes nothing: a free slot (`in_flight` lists the slots taken), one read
/// stamp per row, sorted distinct rows, a validation cache if the batch validates or inserts
/// and room in it for the insert, and the batch's slot (`ts mod slots`) free, as it is while
/// the session's stamps are consecutive. Returns that slot's index.
pub(crate) fn admit<B: TableBackend>(
    job: &Submission<'_, impl Sized>,
    rows: &BatchRows<'_>,
    cache: Option<&ValidationCache<B>>,
    slots: usize,
    mut in_flight: impl ExactSizeIterator<Item = usize>,
) -> Result<usize, GpuError> {
    if in_flight.len() == slots {
        return Err(GpuError::Pipeline("all slots are in flight: collect first"));
    }
    check_len("read timestamps", rows.len(), job.read.len())?;
    check_rows(rows.ids())?;
    match cache {
        None if job.validate || job.insert => {
            return Err(GpuError::Pipeline("Oac needs a validation cache"));
        }
        Some(cache) if job.insert => cache.check_insert(rows.ids(), job.ts)?,
        _ => {}
    }
    let index = (job.ts % slots as u64) as usize;
    if in_flight.any(|s| s == index) {
        return Err(GpuError::Pipeline("the session's stamps are not consecutive"));
    }
    Ok(index)
}
