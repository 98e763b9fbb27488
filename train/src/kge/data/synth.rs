//! `ordo-train kge synth`: a synthetic knowledge graph with power-law entity degrees, for
//! measuring memory, throughput and (with communities) quality on large graphs without
//! downloading one.
//!
//! Heads and tails are drawn as `⌊N·u³⌋` for uniform `u` (entity `i` is drawn with density
//! ∝ `i^(−2/3)`: a few hubs, a long tail), relations uniformly among `relations`. The first
//! `entities` triples chain the entities (entity `i` heads triple `i`), all in `train.txt`, so
//! every entity is used and known to training; of the triples after them, 1% go to
//! `valid.txt` and 1% to `test.txt` (the first and second of every hundred, so both are
//! non-empty from `entities + 2` triples on: [`MIN_EXTRA`]). Written line by line, seeded, in
//! the `train/valid/test.txt` layout [`super::dataset::Dataset`] reads.
//!
//! Without communities a tail has nothing to do with its head and relation: no model can
//! predict it, and every model scores near MRR 0. With `communities` ([`Communities`]) each
//! entity belongs to a hidden community, the communities stand on a ring, and each relation
//! turns a head's community by its own offset to its tail's (relations compose as rotations,
//! which ComplEx models); a tail is drawn, again by the power law, among the members of that
//! community (one tail in [`NOISE`] from the whole graph). A bilinear model can learn that, and
//! the degrees stay heavy-tailed: each community has its own hubs.

use super::batch::SplitMix64;
use std::io::Write;
use std::path::Path;

/// Triples beyond `entities` a graph needs: one for `valid.txt`, one for `test.txt`.
pub const MIN_EXTRA: u64 = 2;

/// With communities, one tail in `NOISE` is drawn from the whole graph rather than from the
/// community the relation maps its head's to.
pub const NOISE: u32 = 10;

/// `⌊n·u³⌋` for the next uniform `u`: index `i` of `0..n` with density ∝ `i^(−2/3)`.
fn power_law(g: &mut SplitMix64, n: u32) -> u32 {
    let u = (g.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    ((n as f64 * u * u * u) as u32).min(n - 1)
}

/// The hidden model of a graph with communities: each entity's community (uniform among
/// `communities`) and each relation's offset on their ring, drawn from their own
/// stream of the graph's seed (the triples' stream is the one a graph without communities
/// draws from).
#[derive(Debug, Clone)]
pub struct Communities {
    /// The community of each entity.
    pub of: Vec<u32>,
    /// `offset[r]`: relation `r` draws the tails of heads in community `c` from community
    /// `(c + offset[r]) mod communities`.
    pub offset: Vec<u32>,
    /// The members of each community, ascending (the lowest ids are its hubs).
    pub members: Vec<Vec<u32>>,
}

impl Communities {
    /// The communities of a graph of `entities` and `relations` (at least 1 each) seeded
    /// `seed`, with `communities` (at least 1) of them.
    pub fn new(entities: u32, relations: u32, communities: u32, seed: u64) -> Self {
        let mut g = SplitMix64::new(seed, 0xC0_0417);
        let of: Vec<u32> = (0..entities).map(|_| g.below(communities)).collect();
        let offset = (0..relations.max(1)).map(|_| g.below(communities)).collect();
        let mut members = vec![Vec::new(); communities as usize];
        for (e, &c) in of.iter().enumerate() {
            members[c as usize].push(e as u32);
        }
        Communities { of, offset, members }
    }

    /// The community the tails of `(h, r, ·)` are drawn from (noise aside).
    pub fn tail_community(&self, h: u32, r: u32) -> u32 {
        let k = self.members.len() as u64;
        ((self.of[h as usize] as u64 + self.offset[r as usize] as u64) % k) as u32
    }

    /// A tail for `(h, r, ·)`: one time in [`NOISE`] any entity, else a member of
    /// [`tail_community`](Self::tail_community) (any entity if that community is empty), each
    /// by the power law.
    fn tail(&self, g: &mut SplitMix64, h: u32, r: u32) -> u32 {
        let members = &self.members[self.tail_community(h, r) as usize];
        if g.below(NOISE) == 0 || members.is_empty() {
            power_law(g, self.of.len() as u32)
        } else {
            members[power_law(g, members.len() as u32) as usize]
        }
    }
}

/// Write a graph of `entities`, `relations` and `triples` (at least `entities + MIN_EXTRA`)
/// under `dir`, with `communities` hidden communities (0: none, heads and tails unrelated).
pub fn write(
    dir: &Path,
    entities: u32,
    relations: u32,
    triples: u64,
    communities: u32,
    seed: u64,
) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let open = |f: &str| std::fs::File::create(dir.join(f)).map(std::io::BufWriter::new);
    let (mut train, mut valid, mut test) =
        (open("train.txt")?, open("valid.txt")?, open("test.txt")?);
    let model = (communities > 0).then(|| Communities::new(entities, relations, communities, seed));
    let mut g = SplitMix64::new(seed, 0x5E7);
    for i in 0..triples {
        // The chain's head is entity `i`, not the one drawn (drawn all the same, so the stream
        // of a graph without communities is that of earlier versions).
        let chain = (i < entities as u64).then_some(i as u32);
        let (h, r, t) = match &model {
            None => {
                let (h, t) = (power_law(&mut g, entities), power_law(&mut g, entities));
                (chain.unwrap_or(h), g.below(relations.max(1)), t)
            }
            Some(m) => {
                let h = chain.unwrap_or(power_law(&mut g, entities));
                let r = g.below(relations.max(1));
                (h, r, m.tail(&mut g, h, r))
            }
        };
        // Every entity first appears in train: the first `entities` triples chain them; the
        // split counts the triples after them.
        let out = match i.checked_sub(entities as u64).map(|j| j % 100) {
            None => &mut train,
            Some(0) => &mut valid,
            Some(1) => &mut test,
            Some(_) => &mut train,
        };
        writeln!(out, "e{h}\tr{r}\te{t}")?;
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

    /// A graph written to a fresh directory, loaded, and the directory removed.
    fn graph(name: &str, entities: u32, relations: u32, triples: u64, k: u32) -> Dataset {
        let dir = std::env::temp_dir().join(format!("ordo-kge-{name}-{}", std::process::id()));
        write(&dir, entities, relations, triples, k, 3).unwrap();
        let d = Dataset::load(dir.to_str().unwrap()).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        d
    }

    #[test]
    fn a_synthetic_graph_loads_and_its_degrees_are_skewed() {
        // With communities each has its own hubs: the top 1% hold less, still ten times their
        // share.
        for (communities, over) in [(0, 5), (20, 10)] {
            let d = graph("synth", 1000, 5, 20_000, communities);
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
            let all = deg.iter().sum::<usize>();
            assert!(top * over > all, "{communities}: top 1% hold {top} of {all}");
        }
    }

    /// At the smallest size (`entities + 2` triples) every entity is used and valid and test
    /// hold a triple each (the old split sent every triple below index `entities` to train and
    /// counted the rest by their global index: here valid and test were empty).
    #[test]
    fn every_entity_is_used_and_valid_and_test_are_not_empty_at_any_size() {
        for communities in [0, 3] {
            for (entities, triples) in [(5, 7), (1000, 1002), (1000, 1500)] {
                let d = graph("synth-min", entities, 3, triples, communities);
                assert_eq!(d.entities.len(), entities as usize, "every entity used");
                assert!(!d.valid.is_empty() && !d.test.is_empty(), "{entities} {triples}");
                assert_eq!((d.train.len() + d.valid.len() + d.test.len()) as u64, triples);
            }
        }
    }

    /// The generator's stream is fixed: the files' CRC-32s at a small size, without
    /// communities (the values of every earlier version: recorded runs use these graphs) and
    /// with them.
    #[test]
    fn the_files_of_a_small_graph_are_pinned() {
        let dir = std::env::temp_dir().join(format!("ordo-kge-synth-fix-{}", std::process::id()));
        let crc = |f: &str| crate::kge::io::manifest::crc32_of(&dir.join(f)).unwrap();
        for (communities, want) in [
            (0, [0x5de3_04c3, 0xd93e_6e82, 0x7cc8_cb13]),
            (20, [0xeb27_5a4c, 0x79b3_2753, 0x84a1_b3bb]),
        ] {
            write(&dir, 300, 4, 3000, communities, 7).unwrap();
            let got = [crc("train.txt"), crc("valid.txt"), crc("test.txt")];
            assert_eq!(got, want, "{communities}: {got:#010x?}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The test triples follow the hidden model: ranking every entity by (in the community the
    /// relation turns the head's to, then train degree) gives a filtered test MRR far above
    /// ranking by train degree alone (the best a model that cannot see the structure does)
    /// and than a random ranking (≈ ln N / N).
    #[test]
    fn with_communities_the_tails_are_predictable() {
        let (n, relations, k) = (1000u32, 5u32, 20u32);
        let d = graph("synth-oracle", n, relations, 20_000, k);
        let m = Communities::new(n, relations, k, 3);
        // Dataset ids are in first-seen order: the generator's entity of each.
        let gen_id: Vec<u32> = d.entities.iter().map(|e| e[1..].parse().unwrap()).collect();
        let rel_id: Vec<u32> = d.relations.iter().map(|r| r[1..].parse().unwrap()).collect();
        let mut deg = vec![0u64; n as usize];
        for t in &d.train {
            deg[t.t as usize] += 1;
        }
        let known: std::collections::HashSet<(u32, u32, u32)> =
            d.train.iter().chain(&d.valid).chain(&d.test).map(|t| (t.h, t.r, t.t)).collect();
        let mrr = |oracle: bool| {
            let score = |h: u32, r: u32, e: u32| {
                let c = m.tail_community(gen_id[h as usize], rel_id[r as usize]);
                let inside = oracle && m.of[gen_id[e as usize] as usize] == c;
                ((inside as u64) << 32) | deg[e as usize]
            };
            let mut sum = 0.0;
            for t in &d.test {
                let s = score(t.h, t.r, t.t);
                let (mut above, mut ties) = (0usize, 0usize);
                for e in (0..n).filter(|&e| e != t.t && !known.contains(&(t.h, t.r, e))) {
                    match score(t.h, t.r, e).cmp(&s) {
                        std::cmp::Ordering::Greater => above += 1,
                        std::cmp::Ordering::Equal => ties += 1,
                        std::cmp::Ordering::Less => {}
                    }
                }
                sum += 1.0 / (1.0 + above as f64 + ties as f64 / 2.0);
            }
            sum / d.test.len() as f64
        };
        let (oracle, popularity) = (mrr(true), mrr(false));
        assert!(oracle > 0.3 && oracle > 3.0 * popularity, "{oracle} vs {popularity}");
    }
}
