//! Knowledge-graph datasets in the PyKEEN/LibKGE layout: a directory with `train.txt`,
//! `valid.txt` and `test.txt`, one `head<TAB>relation<TAB>tail` triple per line.
//!
//! UMLS, Kinships and Nations (MIT, from the PyKEEN 1.11.1 wheel; see `train/data/`) are embedded
//! in the binary and can be named instead of given by path.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// One triple, as ids into [`Dataset::entities`] and [`Dataset::relations`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Triple {
    /// Head entity id.
    pub h: u32,
    /// Relation id.
    pub r: u32,
    /// Tail entity id.
    pub t: u32,
}

/// Why a dataset could not be loaded.
#[derive(Debug, Error)]
pub enum DataError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A line is not three non-empty tab-separated fields.
    #[error("{file}:{line}: expected `head<TAB>relation<TAB>tail`, found {found:?}")]
    Malformed {
        /// The file (a path, or `<name>/train.txt` for an embedded set).
        file: String,
        /// 1-based line number.
        line: usize,
        /// The offending line (truncated to 80 characters).
        found: String,
    },
    /// `train.txt` has no triple.
    #[error("{file}: the training split has no triples")]
    EmptyTrain {
        /// The file.
        file: String,
    },
    /// The name is neither an embedded dataset nor an existing directory.
    #[error(
        "unknown dataset {0:?}: give a directory with train/valid/test.txt or one of umls, kinships, nations"
    )]
    Unknown(String),
}

/// A loaded dataset: vocabularies and the three splits.
///
/// Entity and relation ids are assigned from `train.txt` in order of first appearance. Triples of
/// `valid.txt`/`test.txt` that name an entity or relation absent from training are skipped and
/// counted in [`skipped_valid`](Dataset::skipped_valid) / [`skipped_test`](Dataset::skipped_test)
/// (PyKEEN's behaviour): a model cannot rank what it never trained.
#[derive(Debug, Clone)]
pub struct Dataset {
    /// Display name (the embedded name or the directory).
    pub name: String,
    /// Entity names by id.
    pub entities: Vec<String>,
    /// Relation names by id.
    pub relations: Vec<String>,
    /// Training triples (file order).
    pub train: Vec<Triple>,
    /// Validation triples whose entities and relation occur in training.
    pub valid: Vec<Triple>,
    /// Test triples whose entities and relation occur in training.
    pub test: Vec<Triple>,
    /// Validation lines skipped for an unseen entity or relation.
    pub skipped_valid: usize,
    /// Test lines skipped for an unseen entity or relation.
    pub skipped_test: usize,
}

/// The datasets compiled into the binary: `(name, train, valid, test)`.
const EMBEDDED: [(&str, &str, &str, &str); 3] = [
    (
        "umls",
        include_str!("../../data/umls/train.txt"),
        include_str!("../../data/umls/valid.txt"),
        include_str!("../../data/umls/test.txt"),
    ),
    (
        "kinships",
        include_str!("../../data/kinships/train.txt"),
        include_str!("../../data/kinships/valid.txt"),
        include_str!("../../data/kinships/test.txt"),
    ),
    (
        "nations",
        include_str!("../../data/nations/train.txt"),
        include_str!("../../data/nations/valid.txt"),
        include_str!("../../data/nations/test.txt"),
    ),
];

/// Names of the embedded datasets.
pub const EMBEDDED_NAMES: [&str; 3] = ["umls", "kinships", "nations"];

impl Dataset {
    /// An embedded dataset by name, else a directory by path.
    ///
    /// ```
    /// let d = ordo_train::kge::data::Dataset::load("umls").unwrap();
    /// assert_eq!((d.entities.len(), d.relations.len(), d.train.len()), (135, 46, 5216));
    /// ```
    pub fn load(name_or_path: &str) -> Result<Self, DataError> {
        if let Some(&(name, tr, va, te)) = EMBEDDED.iter().find(|e| e.0 == name_or_path) {
            return Self::from_strs(name, [tr, va, te]);
        }
        let dir = Path::new(name_or_path);
        if dir.is_dir() {
            Self::from_dir(dir)
        } else {
            Err(DataError::Unknown(name_or_path.to_string()))
        }
    }

    /// Read `train.txt`, `valid.txt` and `test.txt` from `dir`.
    pub fn from_dir(dir: &Path) -> Result<Self, DataError> {
        let read = |f: &str| {
            let path = dir.join(f);
            std::fs::read_to_string(&path).map_err(|source| DataError::Io { path, source })
        };
        let [tr, va, te] = [read("train.txt")?, read("valid.txt")?, read("test.txt")?];
        let mut d = Self::parse(&dir.display().to_string(), [&tr, &va, &te])?;
        d.name = dir.file_name().map_or(d.name, |n| n.to_string_lossy().into_owned());
        Ok(d)
    }

    /// Parse the three splits' texts; `name` prefixes file names in errors.
    pub fn from_strs(name: &str, splits: [&str; 3]) -> Result<Self, DataError> {
        Self::parse(name, splits)
    }

    fn parse(prefix: &str, [tr, va, te]: [&str; 3]) -> Result<Self, DataError> {
        let file = |f: &str| format!("{prefix}/{f}");
        let train_raw = split_lines(&file("train.txt"), tr)?;
        if train_raw.is_empty() {
            return Err(DataError::EmptyTrain { file: file("train.txt") });
        }
        let mut ents = Vocab::default();
        let mut rels = Vocab::default();
        let train = train_raw
            .iter()
            .map(|&[h, r, t]| Triple { h: ents.intern(h), r: rels.intern(r), t: ents.intern(t) })
            .collect();
        let known = |raw: Vec<[&str; 3]>| {
            let mut skipped = 0;
            let kept = raw
                .iter()
                .filter_map(|&[h, r, t]| {
                    let triple =
                        (|| Some(Triple { h: ents.get(h)?, r: rels.get(r)?, t: ents.get(t)? }))();
                    skipped += usize::from(triple.is_none());
                    triple
                })
                .collect::<Vec<_>>();
            (kept, skipped)
        };
        let (valid, skipped_valid) = known(split_lines(&file("valid.txt"), va)?);
        let (test, skipped_test) = known(split_lines(&file("test.txt"), te)?);
        Ok(Dataset {
            name: prefix.to_string(),
            entities: ents.names,
            relations: rels.names,
            train,
            valid,
            test,
            skipped_valid,
            skipped_test,
        })
    }

    /// A one-line description: counts and skipped lines.
    pub fn summary(&self) -> String {
        format!(
            "{}: {} entities, {} relations, {}/{}/{} train/valid/test triples",
            self.name,
            self.entities.len(),
            self.relations.len(),
            self.train.len(),
            self.valid.len(),
            self.test.len()
        )
    }

    /// A warning about skipped valid/test lines, if any.
    pub fn skip_warning(&self) -> Option<String> {
        (self.skipped_valid + self.skipped_test > 0).then(|| {
            format!(
                "warning: {}: skipped {} valid and {} test triples with an entity or relation \
                 not in train.txt",
                self.name, self.skipped_valid, self.skipped_test
            )
        })
    }
}

#[derive(Default)]
struct Vocab {
    ids: HashMap<String, u32>,
    names: Vec<String>,
}

impl Vocab {
    fn intern(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        let id = self.names.len() as u32;
        self.ids.insert(name.to_string(), id);
        self.names.push(name.to_string());
        id
    }

    fn get(&self, name: &str) -> Option<u32> {
        self.ids.get(name).copied()
    }
}

/// Non-blank lines as `[head, relation, tail]`. A line with other than three fields, or an empty
/// field, is an error naming the file and line. A trailing `\r` is ignored.
fn split_lines<'a>(file: &str, text: &'a str) -> Result<Vec<[&'a str; 3]>, DataError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.trim().is_empty() {
            continue;
        }
        let mut parts = line.split('\t');
        match (parts.next(), parts.next(), parts.next(), parts.next()) {
            (Some(h), Some(r), Some(t), None)
                if !h.is_empty() && !r.is_empty() && !t.is_empty() =>
            {
                out.push([h, r, t])
            }
            _ => {
                return Err(DataError::Malformed {
                    file: file.to_string(),
                    line: i + 1,
                    found: line.chars().take(80).collect(),
                });
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_sets_load_with_published_counts() {
        for (name, e, r, n) in
            [("umls", 135, 46, [5216, 652, 661]), ("kinships", 104, 25, [8544, 1068, 1074])]
        {
            let d = Dataset::load(name).unwrap();
            assert_eq!((d.entities.len(), d.relations.len()), (e, r), "{name}");
            assert_eq!([d.train.len(), d.valid.len(), d.test.len()], n, "{name}");
        }
        let n = Dataset::load("nations").unwrap();
        assert_eq!(n.entities.len(), 14);
    }

    #[test]
    fn malformed_line_names_file_and_line() {
        let err = Dataset::from_strs("x", ["a\tr\tb\n", "a\tr\tb\na r b\n", ""]).unwrap_err();
        match err {
            DataError::Malformed { file, line, found } => {
                assert_eq!((file.as_str(), line, found.as_str()), ("x/valid.txt", 2, "a r b"));
            }
            e => panic!("wrong error {e}"),
        }
        let four = Dataset::from_strs("x", ["a\tr\tb\tc\n", "", ""]).unwrap_err();
        assert!(matches!(four, DataError::Malformed { line: 1, .. }), "{four}");
        let empty_field = Dataset::from_strs("x", ["a\tr\tb\n\nq\t\tb\n", "", ""]).unwrap_err();
        assert!(matches!(empty_field, DataError::Malformed { line: 3, .. }), "{empty_field}");
        assert!(empty_field.to_string().starts_with("x/train.txt:3:"));
    }

    #[test]
    fn unseen_entities_and_relations_are_counted_and_skipped() {
        let d = Dataset::from_strs(
            "x",
            ["a\tr\tb\r\nb\tr\tc\n", "a\tr\tc\na\tnew\tb\n", "z\tr\ta\nc\tr\ta\nb\tr\tz\n"],
        )
        .unwrap();
        assert_eq!((d.entities.len(), d.relations.len()), (3, 1));
        assert_eq!(d.valid, vec![Triple { h: 0, r: 0, t: 2 }]);
        assert_eq!(d.test, vec![Triple { h: 2, r: 0, t: 0 }]);
        assert_eq!((d.skipped_valid, d.skipped_test), (1, 2));
        assert!(d.skip_warning().unwrap().contains("skipped 1 valid and 2 test"));
    }

    #[test]
    fn empty_train_and_bad_paths_are_errors() {
        let e = Dataset::from_strs("x", ["\n  \n", "a\tr\tb\n", ""]).unwrap_err();
        assert!(matches!(e, DataError::EmptyTrain { .. }), "{e}");
        assert!(matches!(Dataset::load("/nonexistent/kg"), Err(DataError::Unknown(_))));
        let dir = std::env::temp_dir().join(format!("ordo-kge-missing-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("train.txt"), "a\tr\tb\n").unwrap();
        let e = Dataset::load(dir.to_str().unwrap()).unwrap_err();
        assert!(matches!(&e, DataError::Io { path, .. } if path.ends_with("valid.txt")), "{e}");
        std::fs::write(dir.join("valid.txt"), "").unwrap();
        std::fs::write(dir.join("test.txt"), "b\tr\ta\n").unwrap();
        let d = Dataset::load(dir.to_str().unwrap()).unwrap();
        assert_eq!(d.test.len(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
