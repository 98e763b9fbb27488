//! The id table of a knowledge graph's entity or relation names: dense ids in order of first
//! appearance, held compactly for graphs of millions of entities.
//!
//! All names live in one string arena (`text`, with `ends[i]` the end of name `i`), and the hash
//! table holds only the `u32` ids, hashing and comparing through the arena. Per name this costs
//! its bytes, one `usize` end and about five bytes of table, instead of two heap strings (a map
//! key and a name list entry) with their allocator headers. Once a dataset is read, nothing
//! looks names up: [`Vocab::drop_index`] frees the table (a third of the vocabulary's bytes at
//! 38M names, 335 MB), and the next lookup, if any, builds it again.

use hashbrown::HashTable;
use std::hash::{BuildHasher, RandomState};
use std::sync::OnceLock;

/// Names by dense id, and ids by name.
///
/// ```
/// let mut v = ordo_train::kge::data::vocab::Vocab::default();
/// assert_eq!((v.intern("cat"), v.intern("dog"), v.intern("cat")), (0, 1, 0));
/// assert_eq!((v.get("dog"), v.get("eel"), v.name(0), v.len()), (Some(1), None, "cat", 2));
/// ```
#[derive(Clone, Default)]
pub struct Vocab {
    /// Every name, concatenated in id order.
    text: String,
    /// `ends[i]`: the end of name `i` in `text` (its start is `ends[i - 1]`, or 0).
    ends: Vec<usize>,
    /// Ids, keyed by the hash of their name in `text`; empty after
    /// [`drop_index`](Self::drop_index) until a lookup needs it.
    table: OnceLock<HashTable<u32>>,
    hasher: RandomState,
}

impl std::fmt::Debug for Vocab {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Vocab({} names)", self.len())
    }
}

impl Vocab {
    /// The id of `name`, assigning the next one if it is new.
    pub fn intern(&mut self, name: &str) -> u32 {
        let hash = self.hasher.hash_one(name);
        self.index();
        let table = self.table.get_mut().expect("built by index()");
        let (text, ends, hasher) = (&mut self.text, &mut self.ends, &self.hasher);
        if let Some(&id) = table.find(hash, |&id| slice(text, ends, id) == name) {
            return id;
        }
        let id = u32::try_from(ends.len()).expect("fewer than 2^32 names");
        text.push_str(name);
        ends.push(text.len());
        let (text, ends) = (&*text, &*ends);
        table.insert_unique(hash, id, |&i| hasher.hash_one(slice(text, ends, i)));
        id
    }

    /// The id of `name`, if it has one.
    pub fn get(&self, name: &str) -> Option<u32> {
        let hash = self.hasher.hash_one(name);
        self.index().find(hash, |&id| self.name(id as usize) == name).copied()
    }

    /// Free the name→id table, keeping the names: for a vocabulary that is done growing and
    /// whose lookups are done (a dataset once its splits are read). [`get`](Self::get) and
    /// [`intern`](Self::intern) still work; the first one builds the table again.
    ///
    /// ```
    /// let mut v = ordo_train::kge::data::vocab::Vocab::default();
    /// v.intern("cat");
    /// v.intern("dog");
    /// let full = v.heap_bytes();
    /// v.drop_index();
    /// assert!(v.heap_bytes() < full);
    /// assert_eq!((v.get("dog"), v.intern("eel"), v.name(0)), (Some(1), 2, "cat"));
    /// ```
    pub fn drop_index(&mut self) {
        self.table = OnceLock::new();
    }

    /// The name→id table, built from the names if it was dropped.
    fn index(&self) -> &HashTable<u32> {
        self.table.get_or_init(|| {
            let name = |id: u32| slice(&self.text, &self.ends, id);
            let mut table = HashTable::with_capacity(self.len());
            for id in 0..self.len() as u32 {
                let hash = self.hasher.hash_one(name(id));
                table.insert_unique(hash, id, |&i| self.hasher.hash_one(name(i)));
            }
            table
        })
    }

    /// The name with id `id` (panics if `id >= len()`).
    pub fn name(&self, id: usize) -> &str {
        slice(&self.text, &self.ends, id as u32)
    }

    /// How many names.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether there is no name.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The names in id order.
    pub fn iter(&self) -> impl Iterator<Item = &str> + '_ {
        (0..self.len()).map(|i| self.name(i))
    }

    /// Bytes held (arena, ends and table), for memory estimates.
    pub fn heap_bytes(&self) -> usize {
        self.text.capacity()
            + self.ends.capacity() * std::mem::size_of::<usize>()
            + self.table.get().map_or(0, |t| t.capacity() * (std::mem::size_of::<u32>() + 1))
    }
}

fn slice<'a>(text: &'a str, ends: &[usize], id: u32) -> &'a str {
    let id = id as usize;
    let start = if id == 0 { 0 } else { ends[id - 1] };
    &text[start..ends[id]]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_dense_in_first_appearance_order_and_round_trip() {
        let mut v = Vocab::default();
        let names: Vec<String> = (0..5000).map(|i| format!("n{}", (i * 7919) % 3000)).collect();
        let ids: Vec<u32> = names.iter().map(|n| v.intern(n)).collect();
        assert_eq!(v.len(), 3000);
        for (n, &id) in names.iter().zip(&ids) {
            assert_eq!((v.name(id as usize), v.get(n)), (n.as_str(), Some(id)));
        }
        let mut seen = 0;
        for &id in &ids {
            assert!(id <= seen, "id {id} skipped ahead of {seen}");
            seen = seen.max(id + 1);
        }
        assert_eq!(v.get("n3000"), None);
        assert_eq!(v.iter().count(), 3000);
    }

    #[test]
    fn after_drop_index_lookups_and_new_names_give_the_same_ids() {
        let mut v = Vocab::default();
        let names: Vec<String> = (0..2000).map(|i| format!("n{i}")).collect();
        names.iter().for_each(|n| _ = v.intern(n));
        v.drop_index();
        assert_eq!(v.heap_bytes(), v.text.capacity() + v.ends.capacity() * 8);
        for (id, n) in names.iter().enumerate() {
            assert_eq!(v.get(n), Some(id as u32));
        }
        v.drop_index();
        assert_eq!((v.intern("n1999"), v.intern("new"), v.get("new")), (1999, 2000, Some(2000)));
    }

    #[test]
    fn a_prefix_is_not_its_extension() {
        let mut v = Vocab::default();
        assert_eq!((v.intern("ab"), v.intern("a"), v.intern("abc"), v.intern("")), (0, 1, 2, 3));
        assert_eq!((v.get("a"), v.get("abc"), v.get("")), (Some(1), Some(2), Some(3)));
    }
}
