//! Several named tables under one engine: users and items, or entities and relations, each a
//! [`RowStorage`] of its own width, run as one [`Tables`] storage.
//!
//! An engine runs over one storage, and a batch names rows of it by one id. [`Tables`] lays its
//! tables end to end in one id space (table `k`'s row `r` is id `offset(k) + r`, the offsets in
//! the order the tables were given), so the engine, its validation, its order and its replay
//! are the ones of a single table and need no change. The rows the engine moves are as wide as
//! the widest table; a narrower table's rows travel padded with zeros and only its own columns
//! are stored (the padding a step writes is dropped, the same in every mode, so oac still
//! equals the replay bit for bit). Nothing is padded at rest.
//!
//! A batch over several tables is built by [`Tables::batch_ids`] (its rows grouped by table, in
//! the tables' order) and seen by the step through [`Tables::split`], one [`TableRows`] per
//! table with the table's own ids and width.
//!
//! ```
//! use ordo::engine::{Batch, BatchRows, Engine, EngineConfig, Mode, Model, StepError};
//! use ordo::row_store::RowStore;
//! use ordo::storage::RowStorage;
//! use ordo::tables::Tables;
//! use std::sync::Arc;
//!
//! // Matrix factorization: users 4 wide, items 2 wide; a rating pulls both toward 1.
//! let tables = Arc::new(
//!     Tables::new(vec![
//!         ("users".to_string(), Arc::new(RowStore::zeros(3, 4)) as _),
//!         ("items".to_string(), Arc::new(RowStore::zeros(5, 2)) as _),
//!     ])
//!     .unwrap(),
//! );
//! struct Rate(Arc<Tables>);
//! impl Model for Rate {
//!     type Data = ();
//!     type Error = StepError;
//!     fn row_width(&self) -> usize {
//!         self.0.width()
//!     }
//!     fn step(&mut self, _: &(), rows: &mut BatchRows<'_>) -> Result<(), StepError> {
//!         for mut t in self.0.split(rows).map_err(StepError::new)? {
//!             for i in 0..t.len() {
//!                 t.row_mut(i).iter_mut().for_each(|x| *x = 0.5 * *x + 0.5);
//!             }
//!         }
//!         Ok(())
//!     }
//! }
//! let ids = tables.batch_ids(&[("items", &[4][..]), ("users", &[0][..])]).unwrap();
//! let batches = vec![Batch { id: 0, rows: ids.clone(), data: () }, Batch { id: 1, rows: ids, data: () }];
//! Engine::new(EngineConfig::new(Mode::Oac)).unwrap()
//!     .run(&mut Rate(tables.clone()), &*tables, batches).unwrap();
//! let mut values = vec![0.0; 4];
//! tables.read(0, &mut values).unwrap(); // users' row 0
//! assert_eq!(values, [0.75; 4]);
//! ```

use crate::engine::BatchRows;
use crate::row_store::{StoreError, Version};
use crate::storage::RowStorage;
use std::sync::Arc;
use thiserror::Error;

/// Why [`Tables`] refused a set of tables or a batch. Checked before any work starts.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TablesError {
    /// No table was given.
    #[error("an engine needs at least one table")]
    Empty,
    /// Two tables share a name.
    #[error("two tables are named {0:?}: names must be distinct")]
    DuplicateName(String),
    /// A table has no rows or no width.
    #[error("table {name:?} is {rows} x {width}: a table needs rows and width >= 1")]
    EmptyTable {
        /// The table's name.
        name: String,
        /// Its rows.
        rows: usize,
        /// Its width.
        width: usize,
    },
    /// The tables' rows together overflow the id space.
    #[error("the tables hold more rows together than a u64 id can name")]
    TooManyRows,
    /// A batch names a table that is not one of these.
    #[error("no table is named {name:?}: the tables are {known:?}")]
    UnknownTable {
        /// The name asked for.
        name: String,
        /// The tables' names, in order.
        known: Vec<String>,
    },
    /// A batch names one table twice.
    #[error("the batch names table {0:?} twice: give each table's ids once")]
    TableTwice(String),
    /// A row id is not below its table's rows.
    #[error("row {row} of table {table:?} is out of range: the table has {rows} rows")]
    RowOutOfRange {
        /// The table's name.
        table: String,
        /// The row id asked for, within the table.
        row: u64,
        /// The table's rows.
        rows: usize,
    },
    /// The rows a step was given are not grouped by table in the tables' order, as
    /// [`Tables::batch_ids`] builds them (or are not as wide as the widest table).
    #[error(
        "the batch's rows are not grouped by table in the tables' order (row {position} goes back to table {table:?}): build batches with Tables::batch_ids"
    )]
    NotGrouped {
        /// The first row out of order, by position in the batch.
        position: usize,
        /// The table it belongs to.
        table: String,
    },
}

/// Several named [`RowStorage`]s as one: table `k`'s row `r` is id `offset(k) + r`, and every
/// row is [`width`](RowStorage::width) floats wide, the widest table's width. See the
/// [module docs](self).
///
/// **Invariant:** `offsets` are the running sums of the tables' rows (`offsets[0] = 0`, one
/// more entry than tables), so every id below `offsets[last]` belongs to exactly one table,
/// and reads, writes and versions of that id are the table's own (the composite keeps no state
/// of its own): the [`RowStorage`] contract holds because each table keeps it.
pub struct Tables {
    names: Vec<String>,
    parts: Vec<Arc<dyn RowStorage>>,
    offsets: Vec<u64>,
    width: usize,
}

impl std::fmt::Debug for Tables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_map();
        for (k, name) in self.names.iter().enumerate() {
            d.entry(name, &(self.parts[k].rows(), self.parts[k].width()));
        }
        d.finish()
    }
}

impl Tables {
    /// The tables, named, in the order their ids are laid out.
    pub fn new(tables: Vec<(String, Arc<dyn RowStorage>)>) -> Result<Self, TablesError> {
        if tables.is_empty() {
            return Err(TablesError::Empty);
        }
        let mut offsets = vec![0u64];
        let (mut names, mut parts) = (Vec::new(), Vec::new());
        for (name, part) in tables {
            if names.contains(&name) {
                return Err(TablesError::DuplicateName(name));
            }
            let (rows, width) = (part.rows(), part.width());
            if rows == 0 || width == 0 {
                return Err(TablesError::EmptyTable { name, rows, width });
            }
            let end = offsets[offsets.len() - 1]
                .checked_add(rows as u64)
                .ok_or(TablesError::TooManyRows)?;
            offsets.push(end);
            names.push(name);
            parts.push(part);
        }
        let width = parts.iter().map(|p| p.width()).max().unwrap_or(0);
        Ok(Tables { names, parts, offsets, width })
    }

    /// The tables' names, in id order.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Table `k` (in id order).
    pub fn table(&self, k: usize) -> &Arc<dyn RowStorage> {
        &self.parts[k]
    }

    /// The index of the table named `name`.
    pub fn index(&self, name: &str) -> Result<usize, TablesError> {
        self.names.iter().position(|n| n == name).ok_or_else(|| TablesError::UnknownTable {
            name: name.to_string(),
            known: self.names.clone(),
        })
    }

    /// The id of table `k`'s first row.
    pub fn offset(&self, k: usize) -> u64 {
        self.offsets[k]
    }

    /// The table of `id` and its row within that table, or `None` past the last table.
    pub fn locate(&self, id: u64) -> Option<(usize, u64)> {
        if id >= self.offsets[self.offsets.len() - 1] {
            return None;
        }
        // The last offset not above `id`: a handful of tables, so a scan.
        let k = self.offsets[1..].iter().position(|&end| id < end)?;
        Some((k, id - self.offsets[k]))
    }

    /// A batch's ids from each named table's row ids: grouped by table in the tables' order
    /// (whatever order `parts` names them in), each group in the order given. Every name and
    /// row is checked; a table may be left out. Duplicates within a table are left to the
    /// engine, which refuses them with the rest of its batch checks.
    pub fn batch_ids(&self, parts: &[(&str, &[u64])]) -> Result<Vec<u64>, TablesError> {
        let mut by_table: Vec<Option<&[u64]>> = vec![None; self.parts.len()];
        for &(name, ids) in parts {
            let k = self.index(name)?;
            if by_table[k].replace(ids).is_some() {
                return Err(TablesError::TableTwice(name.to_string()));
            }
            let rows = self.parts[k].rows();
            if let Some(&row) = ids.iter().find(|&&r| r >= rows as u64) {
                return Err(TablesError::RowOutOfRange { table: name.to_string(), row, rows });
            }
        }
        let mut out = Vec::with_capacity(parts.iter().map(|p| p.1.len()).sum());
        for (k, ids) in by_table.iter().enumerate() {
            out.extend(ids.unwrap_or(&[]).iter().map(|&r| self.offsets[k] + r));
        }
        Ok(out)
    }

    /// A step's rows split by table: one [`TableRows`] per table, in the tables' order (empty
    /// for a table the batch does not touch), with the table's own row ids and width. The rows
    /// must be grouped as [`batch_ids`](Tables::batch_ids) builds them.
    pub fn split<'b>(
        &'b self,
        rows: &'b mut BatchRows<'_>,
    ) -> Result<Vec<TableRows<'b>>, TablesError> {
        let ranges = self.groups(rows.ids())?;
        let stride = rows.width();
        if stride != self.width {
            return Err(TablesError::NotGrouped { position: 0, table: self.names[0].clone() });
        }
        // Each table's ids within it, taken before the values are borrowed for writing.
        let local: Vec<Vec<u64>> = ranges
            .iter()
            .enumerate()
            .map(|(k, range)| {
                rows.ids()[range.clone()].iter().map(|&id| id - self.offsets[k]).collect()
            })
            .collect();
        let mut rest: &'b mut [f32] = rows.values_mut();
        let mut out = Vec::with_capacity(local.len());
        for (k, ids) in local.into_iter().enumerate() {
            let (mine, after) = std::mem::take(&mut rest).split_at_mut(ids.len() * stride);
            rest = after;
            out.push(TableRows {
                name: &self.names[k],
                ids,
                width: self.parts[k].width(),
                stride,
                values: mine,
            });
        }
        Ok(out)
    }

    /// The positions of each table's rows in `ids`, grouped in the tables' order.
    pub fn groups(&self, ids: &[u64]) -> Result<Vec<std::ops::Range<usize>>, TablesError> {
        let mut ranges = Vec::with_capacity(self.parts.len());
        let mut start = 0;
        for k in 0..self.parts.len() {
            let end_id = self.offsets[k + 1];
            let len = ids[start..].iter().take_while(|&&id| id < end_id).count();
            if let Some(&bad) = ids[start..start + len].iter().find(|&&id| id < self.offsets[k]) {
                let table = self.locate(bad).map_or(0, |(t, _)| t);
                let position = ids.iter().position(|&id| id == bad).unwrap_or(start);
                return Err(TablesError::NotGrouped { position, table: self.names[table].clone() });
            }
            ranges.push(start..start + len);
            start += len;
        }
        if start < ids.len() {
            // Past the last table: the engine refuses such an id before any step.
            let table = self.names[self.names.len() - 1].clone();
            return Err(TablesError::NotGrouped { position: start, table });
        }
        Ok(ranges)
    }

    fn part(&self, id: u64) -> Result<(&dyn RowStorage, u64), StoreError> {
        let rows = self.offsets[self.offsets.len() - 1];
        let (k, row) =
            self.locate(id).ok_or(StoreError::RowOutOfRange { row: id, rows: rows as usize })?;
        Ok((&*self.parts[k], row))
    }

    fn check_width(&self, len: usize) -> Result<(), StoreError> {
        if len == self.width {
            Ok(())
        } else {
            Err(StoreError::DimMismatch { expected: self.width, got: len })
        }
    }
}

/// One table's rows of a step's batch (from [`Tables::split`]): its row ids within the table,
/// and each row's `width` floats.
#[derive(Debug)]
pub struct TableRows<'b> {
    name: &'b str,
    ids: Vec<u64>,
    width: usize,
    stride: usize,
    values: &'b mut [f32],
}

impl TableRows<'_> {
    /// The table's name.
    pub fn name(&self) -> &str {
        self.name
    }

    /// The rows' ids within the table.
    pub fn ids(&self) -> &[u64] {
        &self.ids
    }

    /// The table's width.
    pub fn width(&self) -> usize {
        self.width
    }

    /// The number of rows.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether the batch has no row of this table.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Row `i`'s values.
    pub fn row(&self, i: usize) -> &[f32] {
        &self.values[i * self.stride..i * self.stride + self.width]
    }

    /// Row `i`'s values, to update in place.
    pub fn row_mut(&mut self, i: usize) -> &mut [f32] {
        &mut self.values[i * self.stride..i * self.stride + self.width]
    }
}

impl RowStorage for Tables {
    fn rows(&self) -> usize {
        self.offsets[self.offsets.len() - 1] as usize
    }

    fn width(&self) -> usize {
        self.width
    }

    fn read(&self, row: u64, out: &mut [f32]) -> Result<Version, StoreError> {
        self.check_width(out.len())?;
        let (part, r) = self.part(row)?;
        let (mine, pad) = out.split_at_mut(part.width());
        pad.fill(0.0);
        part.read(r, mine)
    }

    fn version(&self, row: u64) -> Result<Version, StoreError> {
        let (part, r) = self.part(row)?;
        part.version(r)
    }

    fn write_if_newer(&self, row: u64, ts: u64, values: &[f32]) -> Result<bool, StoreError> {
        self.check_width(values.len())?;
        let (part, r) = self.part(row)?;
        part.write_if_newer(r, ts, &values[..part.width()])
    }

    fn prefetch(&self, row: u64) {
        if let Ok((part, r)) = self.part(row) {
            part.prefetch(r);
        }
    }

    fn write_fails_only_on_bad_arguments(&self) -> bool {
        self.parts.iter().all(|p| p.write_fails_only_on_bad_arguments())
    }

    /// Every table's rows in id order, each padded with zeros to the widest table's width.
    fn snapshot(&self) -> Result<Vec<f32>, StoreError> {
        let mut out = Vec::with_capacity(self.rows() * self.width);
        for part in &self.parts {
            let w = part.width();
            for row in part.snapshot()?.chunks(w) {
                out.extend_from_slice(row);
                out.resize(out.len() + self.width - w, 0.0);
            }
        }
        Ok(out)
    }

    fn next_version(&self) -> Result<u64, StoreError> {
        let mut next = 0;
        for part in &self.parts {
            next = next.max(part.next_version()?);
        }
        Ok(next)
    }

    fn read_unordered(&self, row: u64, out: &mut [f32]) -> Result<(), StoreError> {
        self.check_width(out.len())?;
        let (part, r) = self.part(row)?;
        let (mine, pad) = out.split_at_mut(part.width());
        pad.fill(0.0);
        part.read_unordered(r, mine)
    }

    fn overwrite_unordered(&self, row: u64, values: &[f32]) -> Result<(), StoreError> {
        self.check_width(values.len())?;
        let (part, r) = self.part(row)?;
        part.overwrite_unordered(r, &values[..part.width()])
    }

    fn add_unordered(&self, row: u64, delta: &[f32]) -> Result<(), StoreError> {
        self.check_width(delta.len())?;
        let (part, r) = self.part(row)?;
        part.add_unordered(r, &delta[..part.width()])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::row_store::RowStore;

    fn two() -> Tables {
        Tables::new(vec![
            ("users".into(), Arc::new(RowStore::from_fn(3, 4, |r, c| (10 * r + c) as f32)) as _),
            (
                "items".into(),
                Arc::new(RowStore::from_fn(5, 2, |r, c| (100 + 10 * r + c) as f32)) as _,
            ),
        ])
        .unwrap()
    }

    #[test]
    fn ids_are_laid_end_to_end_and_rows_padded_to_the_widest() {
        let t = two();
        assert_eq!((t.rows(), t.width()), (8, 4));
        assert_eq!(t.locate(2), Some((0, 2)));
        assert_eq!(t.locate(3), Some((1, 0)));
        assert_eq!(t.locate(8), None);
        let mut out = [9.0; 4];
        assert_eq!(t.read(4, &mut out), Ok(Version::Initial));
        assert_eq!(out, [110.0, 111.0, 0.0, 0.0]);
        assert_eq!(t.write_if_newer(4, 7, &[1.0, 2.0, 3.0, 4.0]), Ok(true));
        assert_eq!(t.table(1).version(1), Ok(Version::Written(7)));
        assert_eq!(t.next_version(), Ok(8));
        let snap = t.snapshot().unwrap();
        assert_eq!(snap.len(), 32);
        assert_eq!(&snap[16..20], &[1.0, 2.0, 0.0, 0.0]);
        assert_eq!(t.read(8, &mut out), Err(StoreError::RowOutOfRange { row: 8, rows: 8 }));
        assert_eq!(t.read(0, &mut [0.0; 2]), Err(StoreError::DimMismatch { expected: 4, got: 2 }));
    }

    #[test]
    fn batches_are_grouped_by_table_and_split_back() {
        let t = two();
        let ids = t.batch_ids(&[("items", &[4, 0]), ("users", &[1])]).unwrap();
        assert_eq!(ids, [1, 7, 3]);
        let mut values: Vec<f32> = (0..12).map(|x| x as f32).collect();
        let mut rows = BatchRows::new(&ids, 4, &mut values).unwrap();
        let mut split = t.split(&mut rows).unwrap();
        assert_eq!(split[0].ids(), &[1]);
        assert_eq!((split[1].name(), split[1].ids(), split[1].width()), ("items", &[4, 0][..], 2));
        assert_eq!(split[1].row(1), &[8.0, 9.0]);
        split[1].row_mut(0).copy_from_slice(&[-1.0, -2.0]);
        drop(split);
        assert_eq!(&values[4..8], &[-1.0, -2.0, 6.0, 7.0]);
    }

    #[test]
    fn bad_tables_and_batches_are_refused_by_name() {
        let store = || Arc::new(RowStore::zeros(2, 2)) as Arc<dyn RowStorage>;
        assert_eq!(Tables::new(vec![]).unwrap_err(), TablesError::Empty);
        assert_eq!(
            Tables::new(vec![("a".into(), store()), ("a".into(), store())]).unwrap_err(),
            TablesError::DuplicateName("a".into())
        );
        let t = two();
        assert!(matches!(t.batch_ids(&[("nope", &[0])]), Err(TablesError::UnknownTable { .. })));
        assert_eq!(
            t.batch_ids(&[("items", &[5])]),
            Err(TablesError::RowOutOfRange { table: "items".into(), row: 5, rows: 5 })
        );
        assert_eq!(
            t.batch_ids(&[("items", &[0]), ("items", &[1])]),
            Err(TablesError::TableTwice("items".into()))
        );
        // Items before users: not the layout batch_ids builds.
        let mut values = vec![0.0; 8];
        let mut rows = BatchRows::new(&[3, 0], 4, &mut values).unwrap();
        assert_eq!(
            t.split(&mut rows).unwrap_err(),
            TablesError::NotGrouped { position: 1, table: "users".into() }
        );
    }
}
