//! The sequencer: the device stage's bookkeeping. It stamps admitted batches in order (that
//! order is the computation order), submits them to the [`DeviceQueue`], collects them oldest
//! first, and records each as a [`Stamp`]: admission → evict below STE
//! ([`DeviceQueue::evict`], for every batch and device) → validate → step → stamp ts → cache
//! insert (on the device, or in [`DeviceQueue::collected`]) → writers.

use crate::engine::block::RowBlock;
use crate::engine::context::{RunCtx, at};
use crate::engine::device_queue::{DeviceQueue, Submission, SubmitError};
use crate::engine::error::{DeviceError, Stage, StageError, StopCause, guarded};
use crate::engine::hook::{HookPoint, StageHook};
use crate::engine::mode::Mode;
use crate::engine::model::{BatchRows, Model};
use crate::engine::reader::ReadBatch;
use crate::engine::record::{Staleness, Stamp};
use crate::engine::stop::StopState;
use crate::mutation::{self, Mutant};
use crate::outstanding::Registration;
use crate::storage::RowStorage;
use std::collections::VecDeque;
use std::sync::Arc;

/// A collected batch for the writers, with a failed cache insert to report once it is written.
pub(crate) type Collected<E> = (Stamped, Option<StopCause<E>>);

/// Stamped batches `(ts, id)` a failed collect left unwritten.
pub(crate) type Lost = Vec<(u64, u64)>;

/// A stepped, stamped batch on its way to the writers.
pub(crate) struct Stamped {
    pub ts: u64,
    pub id: u64,
    pub block: Arc<RowBlock>,
    pub registration: Option<Registration>,
}

/// A stamped batch submitted to the device and not yet collected: its rows as read (the
/// device leaves the stepped values in them when it is collected) and what its record needs.
struct InFlight {
    ts: u64,
    ids: Vec<u64>,
    values: Vec<f32>,
    original: Option<Vec<f32>>,
    registration: Option<Registration>,
    validated: bool,
    insert: bool,
    record: Record,
}

/// What the computation order records of a batch before the device has collected it.
struct Record {
    ts: u64,
    batch_id: u64,
    position: usize,
    read_prefix: u64,
    ste: u64,
}

impl Record {
    fn stamp(self, staleness: Staleness, cache_rows: usize) -> Stamp {
        let Record { ts, batch_id, position, read_prefix, ste } = self;
        Stamp { ts, batch_id, position, read_prefix, staleness, ste, cache_rows }
    }
}

/// The device's bookkeeping: the next stamp, the batches in flight on the device, and the
/// record of the computation order.
#[derive(Default)]
pub(crate) struct Sequencer {
    pub next_ts: u64,
    /// Stamps collected and not yet handed out (by the session's `drain_order` or `finish`):
    /// the only record of the order that grows with the batches, so its owner empties it.
    pub order: Vec<Stamp>,
    pub cache_peak: usize,
    pub rows_validated: u64,
    pub rows_replaced: u64,
    /// Submitted and not collected, oldest first (stamp order).
    in_flight: VecDeque<InFlight>,
}

impl Sequencer {
    /// Whether the next stamp fits the MFT window (admission control).
    pub fn admits<St: RowStorage + ?Sized>(&self, cx: &RunCtx<'_, St>) -> bool {
        !cx.mode.timestamped() || cx.mft.admits(self.next_ts)
    }

    /// Batches submitted to the device and not yet collected.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// The `(ts, id)` of the oldest batch in flight.
    pub fn oldest(&self) -> Option<(u64, u64)> {
        self.in_flight.front().map(|f| (f.ts, f.record.batch_id))
    }

    /// Whether the device must collect before it takes another batch: `depth` are in flight,
    /// or the next stamp does not fit the MFT window (the batches holding it may be the ones in
    /// flight, which no writer can finish before they are collected).
    pub fn must_collect<St: RowStorage + ?Sized>(&self, cx: &RunCtx<'_, St>, depth: usize) -> bool {
        !self.in_flight.is_empty() && (self.in_flight.len() >= depth || !self.admits(cx))
    }

    /// Stamp one admitted batch and submit it to the device. On `Err` the batch is not stamped
    /// (a panic in the device stage included: it is a [`StopCause::StageFailed`] of
    /// [`Stage::Device`]).
    ///
    /// `alone`: the batch was read with no other batch anywhere in the pipeline, and is written
    /// before any later batch is read (`Session::submit_inline`). Then it read every row's
    /// newest version, so validation would replace nothing, and no later batch can read a row
    /// before its write lands, so its rows need no cache entry: both are skipped, and the batch
    /// costs what a `Sync` batch does.
    pub fn submit<M: Model, Q: DeviceQueue<M> + ?Sized, St: RowStorage + ?Sized>(
        &mut self,
        cx: &RunCtx<'_, St>,
        queue: &mut Q,
        model: &mut M,
        job: ReadBatch<M::Data>,
        hook: Option<&StageHook>,
        alone: bool,
    ) -> Result<(), StopCause<M::Error>> {
        guarded(Stage::Device, job.id, || {
            at(hook, HookPoint::Device, job.id)?;
            let ReadBatch {
                position,
                id,
                data,
                ids,
                mut values,
                read,
                registration,
                read_prefix,
                original,
            } = job;
            let oac = cx.mode == Mode::Oac;
            // Eviction below the STE computed now: every batch that is registered, or registers
            // later, has read the store after its writes below the STE were visible.
            let ste = if oac { cx.outstanding.ste(&cx.mft) } else { 0 };
            let validate = oac && !alone && !mutation::active(Mutant::ValidationSkipped);
            let insert = oac && !alone && !mutation::active(Mutant::CacheInsertSkipped);
            let ts = self.next_ts;
            let mut rows =
                BatchRows::new(&ids, cx.width, &mut values).expect("reader sized the rows");
            // The rule, for every device: evict below the STE, then validate, step and insert. A
            // batch stamped alone evicts too, so the cache stays bounded through a run of them.
            queue.evict(ste).map_err(|e| device_failed(id, e))?;
            let sub = Submission { ts, batch_id: id, validate, insert, read: &read, data: &data };
            queue.submit(model, sub, &mut rows).map_err(|e| match e {
                SubmitError::Device(e) => device_failed(id, e),
                SubmitError::Step(source) => StopCause::StepFailed { batch_id: id, source },
                SubmitError::StepPanicked(message) => {
                    StopCause::StepPanicked { batch_id: id, message }
                }
            })?;
            self.next_ts += 1;
            self.in_flight.push_back(InFlight {
                ts,
                ids,
                values,
                original,
                registration,
                validated: validate,
                insert,
                record: Record { ts, batch_id: id, position, read_prefix, ste },
            });
            Ok(())
        })
    }

    /// Collect the oldest batch in flight: the stamped batch for the writers, and a failed
    /// cache insert to report once it is written. If the device fails (or panics), that batch
    /// and every later one in flight are stamped and will never be written: they are
    /// [abandoned](Sequencer::abandon), held back from the MFT and recorded as unwritten in
    /// `stop`, the run stops, and their `(ts, id)` are returned so the caller can account for
    /// them. Call only with a batch in flight.
    pub fn collect<M: Model, Q: DeviceQueue<M> + ?Sized, St: RowStorage + ?Sized>(
        &mut self,
        cx: &RunCtx<'_, St>,
        queue: &mut Q,
        stop: &StopState<M::Error>,
    ) -> Result<Collected<M::Error>, Lost> {
        let oldest = self.oldest().expect("a batch in flight");
        guarded(Stage::Device, oldest.1, || self.take_oldest(cx, queue)).map_err(|cause| {
            let mut lost = self.abandon();
            if !lost.contains(&oldest) {
                lost.insert(0, oldest);
            }
            for &(ts, id) in &lost {
                cx.hold_back(ts);
                stop.unwritten(ts, id);
            }
            stop.fail(cause);
            lost
        })
    }

    /// [`collect`](Sequencer::collect) without the panic guard and the failure accounting: on
    /// `Err` the oldest batch is stamped and will not be written.
    fn take_oldest<M: Model, Q: DeviceQueue<M> + ?Sized, St: RowStorage + ?Sized>(
        &mut self,
        cx: &RunCtx<'_, St>,
        queue: &mut Q,
    ) -> Result<Collected<M::Error>, StopCause<M::Error>> {
        let InFlight { ts, ids, mut values, original, registration, validated, insert, record } =
            self.in_flight.pop_front().expect("a batch in flight");
        let id = record.batch_id;
        let mut rows = BatchRows::new(&ids, cx.width, &mut values).expect("sized");
        let collected = queue.collect(&mut rows);
        let cache_rows = queue.cache_len();
        let staleness = collected.as_ref().copied().unwrap_or_default();
        self.cache_peak = self.cache_peak.max(cache_rows);
        self.order.push(record.stamp(staleness, cache_rows));
        collected.map_err(|e| device_failed(id, e))?;
        if validated {
            self.rows_validated += ids.len() as u64;
            self.rows_replaced += u64::from(staleness.replaced);
        }
        let block = RowBlock::new(ids, cx.width, values).expect("sized");
        let block = Arc::new(block.with_original(original).recycled_into(&cx.buffers));
        let inserted = if insert {
            queue.collected(ts, &block).map_err(|e| device_failed(id, e)).err()
        } else {
            None
        };
        Ok((Stamped { ts, id, block, registration }, inserted))
    }

    /// Give up on every batch still in flight (after a failed collect): they are stamped and
    /// will not be written. Returns their `(ts, id)`.
    fn abandon(&mut self) -> Lost {
        let gone: Vec<InFlight> = self.in_flight.drain(..).collect();
        gone.into_iter()
            .map(|f| {
                let (ts, id) = (f.ts, f.record.batch_id);
                self.order.push(f.record.stamp(Staleness::default(), 0));
                (ts, id)
            })
            .collect()
    }
}

/// A device-stage failure on batch `batch_id`.
fn device_failed<E>(batch_id: u64, source: DeviceError) -> StopCause<E> {
    StopCause::StageFailed { stage: Stage::Device, batch_id, source: StageError::Device(source) }
}
