//! A node's intent signals: pending (signaled, not yet acted on), active (acted on, not yet
//! expired), and per key how many of its intents are active.
//!
//! An intent `[start, end)` on clocks says "this node will access the key while its clock is in
//! `[start, end)`" (paper 002 §3). The node acts on it once the timing rule says so
//! ([`crate::timing`]) and it expires once the clock reaches `end`.

use std::collections::{BTreeMap, HashMap};

use crate::message::Key;
use crate::timing::ActionTiming;

/// One intent signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Intent {
    /// The key.
    pub key: Key,
    /// First clock of the access period.
    pub start: u64,
    /// First clock after it.
    pub end: u64,
}

/// A key's intent on this node turned active (`On`) or inactive (`Off`), with the activation
/// epoch (counts the key's inactive → active transitions on this node).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// First active intent for the key.
    On(Key, u64),
    /// Last active intent for the key expired.
    Off(Key, u64),
}

/// The intents of one node. Pending intents are kept by start clock and active ones by end
/// clock, so a round touches only the intents it acts on or expires (the timing rule acts on an
/// intent iff its start is below a threshold, [`ActionTiming::should_act`]), not every signal.
#[derive(Debug, Default, Clone)]
pub struct IntentBook {
    pending: BTreeMap<u64, Vec<Intent>>,
    active: BTreeMap<u64, Vec<Intent>>,
    count: HashMap<Key, u32>,
    epoch: HashMap<Key, u64>,
}

/// Hashes every field, its maps in key order (the hash of one protocol state, for model
/// checking: `Node::protocol_state`).
impl std::hash::Hash for IntentBook {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.pending.hash(h);
        self.active.hash(h);
        sorted(&self.count).hash(h);
        sorted(&self.epoch).hash(h);
    }
}

/// The entries of `m` in key order.
pub(crate) fn sorted<K: Ord + Copy, V: Copy>(m: &HashMap<K, V>) -> Vec<(K, V)> {
    let mut v: Vec<(K, V)> = m.iter().map(|(&k, &v)| (k, v)).collect();
    v.sort_unstable_by_key(|&(k, _)| k);
    v
}

impl IntentBook {
    /// Record a signal (not acted on until [`IntentBook::round`]).
    pub fn signal(&mut self, intent: Intent) {
        self.pending.entry(intent.start).or_default().push(intent);
    }

    /// A communication round at `clock`: expire active intents with `end ≤ clock`, drop pending
    /// ones that ended unacted, and act on pending ones the timing rule admits (all of them when
    /// `immediate`). Transitions come out in the order the owner must see them: every `Off`
    /// before any `On`, so a key that expires and is re-signaled in one round ends active.
    pub fn round(&mut self, clock: u64, timing: &ActionTiming, immediate: bool) -> Vec<Transition> {
        let mut out = Vec::new();
        let still = self.active.split_off(&clock.saturating_add(1));
        let expired = std::mem::replace(&mut self.active, still);
        for i in expired.into_values().flatten() {
            let c = self.count.get_mut(&i.key).expect("an active intent is counted");
            *c -= 1;
            if *c == 0 {
                self.count.remove(&i.key);
                out.push(Transition::Off(i.key, self.epoch[&i.key]));
            }
        }
        // `should_act` is monotone in the start clock: act on a prefix of `pending`. An intent
        // that ended unacted (end ≤ clock) has start < clock, so it lies in that prefix.
        while let Some(entry) = self.pending.first_entry() {
            if !immediate && !timing.should_act(*entry.key(), clock) {
                break;
            }
            for i in entry.remove() {
                if i.end > clock {
                    out.extend(self.activate(i));
                }
            }
        }
        out
    }

    /// Act on an intent: make it active (until its end) and count it for its key; `Some(On)` if
    /// it is the key's first active intent. [`IntentBook::round`] calls it for the pending
    /// intents the timing rule admits; a caller calls it directly to bypass the rule for an
    /// access at the current clock, which any timing rule admits (the rule acts on every intent
    /// whose start is not past the horizon, and the horizon is never behind the clock).
    pub fn activate(&mut self, intent: Intent) -> Option<Transition> {
        let c = self.count.entry(intent.key).or_insert(0);
        *c += 1;
        let on = *c == 1;
        self.active.entry(intent.end).or_default().push(intent);
        on.then(|| {
            let e = self.epoch.entry(intent.key).or_insert(0);
            *e += 1;
            Transition::On(intent.key, *e)
        })
    }

    /// Whether some intent of this node for `key` is active.
    pub fn is_active(&self, key: Key) -> bool {
        self.count.contains_key(&key)
    }

    /// Whether no intent is pending or active.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty() && self.active.is_empty()
    }

    /// The largest end clock of any pending or active intent.
    pub fn last_end(&self) -> Option<u64> {
        let pending = self.pending.values().flatten().map(|i| i.end).max();
        pending.max(self.active.last_key_value().map(|(&end, _)| end))
    }
}
