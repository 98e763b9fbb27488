//! `ordo-train kge synth`: a synthetic knowledge graph with power-law entity degrees, for
//! measuring memory and throughput on large graphs without downloading one.
//!
//! Heads and tails are drawn as `⌊N·u³⌋` for uniform `u` (entity `i` is drawn with density
//! ∝ `i^(−2/3)`: a few hubs, a long tail), relations uniformly among `relations`. The first
//! `entities` triples chain the entities (entity `i` heads triple `i`), all in `train.txt`, so
//! every entity is used and known to training; of the triples after them, 1% go to
//! `valid.txt` and 1% to `test.txt` (the first and second of every hundred, so both are
//! non-empty from `entities + 2` triples on: [`MIN_EXTRA`]). Written line by line, seeded, in
//! the `train/valid/test.txt` layout [`super::dataset::Dataset`] reads.

use super::batch::SplitMix64;
use std::io::Write;
use std::path::Path;

/// Triples beyond `entities` a graph needs: one for `valid.txt`, one for `test.txt`.
pub const MIN_EXTRA: u64 = 2;

/// Write a graph of `entities`, `relations` and `triples` (at least `entities + MIN_EXTRA`)
/// under `dir`.
pub fn write(
    dir: &Path,
    entities: u32,
    relations: u32,
    triples: u64,
    seed: u64,
) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let open = |f: &str| std::fs::File::create(dir.join(f)).map(std::io::BufWriter::new);
    let (mut train, mut valid, mut test) =
        (open("train.txt")?, open("valid.txt")?, open("test.txt")?);
    let mut g = SplitMix64::new(seed, 0x5E7);
    let entity = |g: &mut SplitMix64| {
        let u = (g.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        ((entities as f64 * u * u * u) as u32).min(entities - 1)
    };
    for i in 0..triples {
        let (h, t) = (entity(&mut g), entity(&mut g));
        let r = g.below(relations.max(1));
        // Every entity first appears in train: the first `entities` triples chain them; the
        // split counts the triples after them.
        let out = match i.checked_sub(entities as u64).map(|j| j % 100) {
            None => &mut train,
            Some(0) => &mut valid,
            Some(1) => &mut test,
            Some(_) => &mut train,
        };
        if i < entities as u64 {
            writeln!(out, "e{i}\tr{r}\te{t}")?;
        } else {
            writeln!(out, "e{h}\tr{r}\te{t}")?;
        }
    }
    for mut f in [train, valid, test] {
        f.flush()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kge::data::dataset::Dataset;

    #[test]
    fn a_synthetic_graph_loads_and_its_degrees_are_skewed() {
        let dir = std::env::temp_dir().join(format!("ordo-kge-synth-{}", std::process::id()));
        write(&dir, 1000, 5, 20_000, 3).unwrap();
        let d = Dataset::load(dir.to_str().unwrap()).unwrap();
        assert_eq!(d.entities.len(), 1000);
        assert_eq!(d.train.len() + d.valid.len() + d.test.len(), 20_000);
        let mut deg = vec![0usize; 1000];
        for t in &d.train {
            deg[t.h as usize] += 1;
            deg[t.t as usize] += 1;
        }
        deg.sort_unstable();
        // The top 1% of entities carry far more than 1% of the endpoints.
        let top: usize = deg[990..].iter().sum();
        assert!(top * 5 > deg.iter().sum::<usize>(), "top 1% hold {top}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// At the smallest size (`entities + 2` triples) every entity is used and valid and test
    /// hold a triple each (the old split sent every triple below index `entities` to train and
    /// counted the rest by their global index: here valid and test were empty).
    #[test]
    fn every_entity_is_used_and_valid_and_test_are_not_empty_at_any_size() {
        let dir = std::env::temp_dir().join(format!("ordo-kge-synth-min-{}", std::process::id()));
        for (entities, triples) in [(5, 7), (1000, 1002), (1000, 1500)] {
            write(&dir, entities, 3, triples, 3).unwrap();
            let d = Dataset::load(dir.to_str().unwrap()).unwrap();
            assert_eq!(d.entities.len(), entities as usize, "every entity used");
            assert!(!d.valid.is_empty() && !d.test.is_empty(), "{entities} {triples}");
            assert_eq!((d.train.len() + d.valid.len() + d.test.len()) as u64, triples);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
