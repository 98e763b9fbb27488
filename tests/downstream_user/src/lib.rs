//! A downstream crate of `ordo`, written as an outside trainer would write it: only the public
//! API with default features (plus the user feature `serde`), no `testing` scaffolding. Its
//! tests (`tests/*.rs`) each exercise one thing such a user needs from the engine, with the
//! user's own storage ([`TwoTables`]), model ([`Factors`]) and errors ([`Diverged`]).
//!
//! CI runs them alone, `cargo test -p ordo-downstream-user`, so that feature unification with
//! the rest of the workspace cannot lend them anything a user would not have.

use ordo::engine::{Batch, BatchRows, Model};
use ordo::row_store::{StoreError, Version};
use ordo::storage::RowStorage;
use std::io;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Floats per row of both tables.
pub const WIDTH: usize = 3;

/// One table: values row-major and a version per row.
#[derive(Debug, Clone, PartialEq)]
struct Table {
    values: Vec<f32>,
    versions: Vec<Option<u64>>,
}

impl Table {
    fn new(rows: usize, seed: f32) -> Self {
        let values = (0..rows * WIDTH).map(|k| ((k as f32 + seed) * 0.37).sin() * 0.5).collect();
        Table { values, versions: vec![None; rows] }
    }
}

/// The user's storage: a user table and an item table, kept apart (rows `0..users` are users,
/// the rest items), each behind its own lock, with the newest version kept on the side so
/// [`RowStorage::next_version`] is one load. It can be told to fail its `n`-th row write, or
/// its reads, with an I/O error, as a disk would.
#[derive(Debug)]
pub struct TwoTables {
    users: Mutex<Table>,
    items: Mutex<Table>,
    user_rows: usize,
    /// One past the newest version written (guarded by the table locks' writes).
    next: Mutex<u64>,
    /// Row writes so far, and the one that fails (1-based; 0: none).
    writes: AtomicUsize,
    fail_write: usize,
    fail_reads: bool,
}

impl TwoTables {
    /// `users` user rows and `items` item rows, filled deterministically.
    pub fn new(users: usize, items: usize) -> Self {
        TwoTables {
            users: Mutex::new(Table::new(users, 0.0)),
            items: Mutex::new(Table::new(items, 1000.0)),
            user_rows: users,
            next: Mutex::new(0),
            writes: AtomicUsize::new(0),
            fail_write: 0,
            fail_reads: false,
        }
    }

    /// Fail the `n`-th row write (1-based) with an I/O error; every other write lands.
    pub fn failing_write(mut self, n: usize) -> Self {
        self.fail_write = n;
        self
    }

    /// Fail every read with an I/O error.
    pub fn failing_reads(mut self) -> Self {
        self.fail_reads = true;
        self
    }

    /// Both tables' values: users, then items.
    pub fn tables(&self) -> (Vec<f32>, Vec<f32>) {
        (self.users.lock().unwrap().values.clone(), self.items.lock().unwrap().values.clone())
    }

    /// The table holding `row`, and the row's index in it.
    fn locate(&self, row: u64) -> Result<(&Mutex<Table>, usize), StoreError> {
        let rows = self.rows();
        match usize::try_from(row) {
            Ok(r) if r < self.user_rows => Ok((&self.users, r)),
            Ok(r) if r < rows => Ok((&self.items, r - self.user_rows)),
            _ => Err(StoreError::RowOutOfRange { row, rows }),
        }
    }

    fn check_width(len: usize) -> Result<(), StoreError> {
        if len == WIDTH {
            Ok(())
        } else {
            Err(StoreError::DimMismatch { expected: WIDTH, got: len })
        }
    }
}

impl RowStorage for TwoTables {
    fn rows(&self) -> usize {
        self.user_rows + self.items.lock().unwrap().versions.len()
    }

    fn width(&self) -> usize {
        WIDTH
    }

    fn read(&self, row: u64, out: &mut [f32]) -> Result<Version, StoreError> {
        Self::check_width(out.len())?;
        let (table, r) = self.locate(row)?;
        if self.fail_reads {
            Err(io::Error::new(io::ErrorKind::UnexpectedEof, "item file truncated"))?;
        }
        let t = table.lock().unwrap();
        out.copy_from_slice(&t.values[r * WIDTH..(r + 1) * WIDTH]);
        Ok(t.versions[r].map_or(Version::Initial, Version::Written))
    }

    fn version(&self, row: u64) -> Result<Version, StoreError> {
        let (table, r) = self.locate(row)?;
        Ok(table.lock().unwrap().versions[r].map_or(Version::Initial, Version::Written))
    }

    fn write_if_newer(&self, row: u64, ts: u64, values: &[f32]) -> Result<bool, StoreError> {
        Self::check_width(values.len())?;
        let (table, r) = self.locate(row)?;
        // Relaxed: a counter of attempts; nothing is published through it.
        if self.writes.fetch_add(1, Ordering::Relaxed) + 1 == self.fail_write {
            Err(io::Error::other("disk full"))?;
        }
        let mut t = table.lock().unwrap();
        if t.versions[r].is_some_and(|v| v >= ts) {
            return Ok(false);
        }
        t.values[r * WIDTH..(r + 1) * WIDTH].copy_from_slice(values);
        t.versions[r] = Some(ts);
        let mut next = self.next.lock().unwrap();
        *next = (*next).max(ts + 1);
        Ok(true)
    }

    fn snapshot(&self) -> Result<Vec<f32>, StoreError> {
        let (mut all, items) = self.tables();
        all.extend(items);
        Ok(all)
    }

    fn next_version(&self) -> Result<u64, StoreError> {
        Ok(*self.next.lock().unwrap())
    }
}

/// The user's step error.
#[derive(Debug, Clone, PartialEq)]
pub enum Diverged {
    /// A rating's prediction error is not finite.
    NotFinite {
        /// The batch.
        batch: u64,
    },
}

impl std::fmt::Display for Diverged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Diverged::NotFinite { batch } => write!(f, "batch {batch} diverged"),
        }
    }
}

impl std::error::Error for Diverged {}

/// One rating: user, item (0-based in the item table), value.
pub type Rating = (u64, u64, f32);

/// Matrix factorization by SGD over [`TwoTables`]; a global bias is its dense parameter.
#[derive(Debug, Clone, PartialEq)]
pub struct Factors {
    /// User rows in the storage (item `i` is row `users + i`).
    pub users: u64,
    /// The global bias.
    pub bias: f32,
}

impl Model for Factors {
    type Data = (u64, Vec<Rating>);
    type Error = Diverged;

    fn row_width(&self) -> usize {
        WIDTH
    }

    fn step(
        &mut self,
        data: &(u64, Vec<Rating>),
        rows: &mut BatchRows<'_>,
    ) -> Result<(), Diverged> {
        let (batch, ratings) = data;
        for &(u, i, value) in ratings {
            let (ui, vi) = (rows.position(u), rows.position(self.users + i));
            let Some((p, q)) = ui.zip(vi).and_then(|(a, b)| rows.pair_mut(a, b)) else { continue };
            let err = self.bias + p.iter().zip(q.iter()).map(|(a, b)| a * b).sum::<f32>() - value;
            if !err.is_finite() {
                return Err(Diverged::NotFinite { batch: *batch });
            }
            for (a, b) in p.iter_mut().zip(q.iter_mut()) {
                let (x, y) = (*a, *b);
                *a -= 0.05 * err * y;
                *b -= 0.05 * err * x;
            }
            self.bias -= 0.01 * err;
        }
        Ok(())
    }

    fn dense(&self) -> Vec<f32> {
        vec![self.bias]
    }
}

/// Batch `id` of a deterministic rating stream over `users` users and `items` items: two
/// ratings, sorted rows. A `value` of NaN in batch `nan` makes the step diverge.
pub fn batch(id: u64, users: u64, items: u64, nan: Option<u64>) -> Batch<(u64, Vec<Rating>)> {
    let (u1, u2) = (id % users, (id * 7 + 3) % users);
    let (i1, i2) = ((id * 5) % items, (id * 3 + 1) % items);
    let value = if nan == Some(id) { f32::NAN } else { (id % 5) as f32 * 0.25 };
    let mut rows = vec![u1, u2, users + i1, users + i2];
    rows.sort_unstable();
    rows.dedup();
    Batch { id, rows, data: (id, vec![(u1, i1, value), (u2, i2, 1.0 - value)]) }
}
