//! Knowledge-graph datasets in the PyKEEN/LibKGE layout: a directory with `train.txt`,
//! `valid.txt` and `test.txt`, one `head<TAB>relation<TAB>tail` triple per line.
//!
//! UMLS, Kinships and Nations (MIT, from the PyKEEN 1.11.1 wheel) and WordNet 3.0 (the WordNet
//! 3.0 license; gzipped, 1.4 MB) are embedded in the binary (see `train/data/`) and can be named
//! instead of given by path.

use super::vocab::Vocab;
use indicatif::{ProgressBar, ProgressStyle};
use std::fs::File;
use std::io::{BufRead, BufReader};
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
    /// A line is not three non-empty tab-separated UTF-8 fields.
    #[error("{file}:{line}: expected `head<TAB>relation<TAB>tail`, found {found:?}")]
    Malformed {
        /// The file (a path, or `<name>/train.txt` for an embedded set).
        file: String,
        /// 1-based line number.
        line: usize,
        /// The offending line (truncated to 80 characters).
        found: String,
    },
    /// A valid/test line names an entity or relation that `train.txt` does not have: a model
    /// cannot rank what it never trained, and dropping the line silently would change the metric.
    #[error("{file}:{line}: {kind} {name:?} does not occur in train.txt")]
    Unseen {
        /// The file.
        file: String,
        /// 1-based line number.
        line: usize,
        /// `entity` or `relation`.
        kind: &'static str,
        /// The unknown name.
        name: String,
    },
    /// `train.txt` has no triple.
    #[error("{file}: the training split has no triples")]
    EmptyTrain {
        /// The file.
        file: String,
    },
    /// The name is neither an embedded dataset nor an existing directory.
    #[error(
        "unknown dataset {0:?}: give a directory with train/valid/test.txt or one of {names}",
        names = EMBEDDED_NAMES.join(", ")
    )]
    Unknown(String),
}

/// A loaded dataset: vocabularies and the three splits.
///
/// Entity and relation ids are assigned from `train.txt` in order of first appearance; a
/// `valid.txt`/`test.txt` line naming anything else is [`DataError::Unseen`]. Files are read as
/// streams, line by line, so memory is the id tables and the triples (12 bytes each), never a
/// file's text.
#[derive(Debug, Clone)]
pub struct Dataset {
    /// Display name (the embedded name or the directory).
    pub name: String,
    /// Entity names by id (its name→id table freed once the splits are read, rebuilt by a
    /// later lookup: [`Vocab::drop_index`]).
    pub entities: Vocab,
    /// Relation names by id.
    pub relations: Vocab,
    /// Training triples (file order).
    pub train: Vec<Triple>,
    /// Validation triples.
    pub valid: Vec<Triple>,
    /// Test triples.
    pub test: Vec<Triple>,
}

/// The datasets compiled into the binary: `(name, train, valid, test)`.
const EMBEDDED: [(&str, &str, &str, &str); 3] = [
    (
        "umls",
        include_str!("../../../data/umls/train.txt"),
        include_str!("../../../data/umls/valid.txt"),
        include_str!("../../../data/umls/test.txt"),
    ),
    (
        "kinships",
        include_str!("../../../data/kinships/train.txt"),
        include_str!("../../../data/kinships/valid.txt"),
        include_str!("../../../data/kinships/test.txt"),
    ),
    (
        "nations",
        include_str!("../../../data/nations/train.txt"),
        include_str!("../../../data/nations/valid.txt"),
        include_str!("../../../data/nations/test.txt"),
    ),
];

/// An embedded dataset stored gzipped: `(name, train, valid, test)`.
type Gzipped = (&'static str, &'static [u8], &'static [u8], &'static [u8]);

/// The embedded datasets stored gzipped.
const EMBEDDED_GZ: [Gzipped; 1] = [(
    "wordnet30",
    include_bytes!("../../../data/wordnet30/train.txt.gz"),
    include_bytes!("../../../data/wordnet30/valid.txt.gz"),
    include_bytes!("../../../data/wordnet30/test.txt.gz"),
)];

/// Names of the embedded datasets.
pub const EMBEDDED_NAMES: [&str; 4] = ["umls", "kinships", "nations", "wordnet30"];

/// Files at least this large get a progress bar while loading (when progress is asked for).
const PROGRESS_BYTES: u64 = 32 << 20;

impl Dataset {
    /// An embedded dataset by name, else a directory by path.
    ///
    /// ```
    /// let d = ordo_train::kge::data::dataset::Dataset::load("umls").unwrap();
    /// assert_eq!((d.entities.len(), d.relations.len(), d.train.len()), (135, 46, 5216));
    /// ```
    pub fn load(name_or_path: &str) -> Result<Self, DataError> {
        Self::load_with_progress(name_or_path, false)
    }

    /// [`load`](Self::load), drawing a progress bar (indicatif, on stderr) over each file of at
    /// least 32 MiB when `progress` is set.
    pub fn load_with_progress(name_or_path: &str, progress: bool) -> Result<Self, DataError> {
        if let Some(&(name, tr, va, te)) = EMBEDDED.iter().find(|e| e.0 == name_or_path) {
            return Self::from_strs(name, [tr, va, te]);
        }
        if let Some(&(name, tr, va, te)) = EMBEDDED_GZ.iter().find(|e| e.0 == name_or_path) {
            return Self::from_gz(name, [tr, va, te]);
        }
        let dir = Path::new(name_or_path);
        if dir.is_dir() {
            Self::from_dir_with_progress(dir, progress)
        } else {
            Err(DataError::Unknown(name_or_path.to_string()))
        }
    }

    /// Read `train.txt`, `valid.txt` and `test.txt` from `dir`.
    pub fn from_dir(dir: &Path) -> Result<Self, DataError> {
        Self::from_dir_with_progress(dir, false)
    }

    fn from_dir_with_progress(dir: &Path, progress: bool) -> Result<Self, DataError> {
        let open = |f: &str| {
            let path = dir.join(f);
            let file =
                File::open(&path).map_err(|source| DataError::Io { path: path.clone(), source })?;
            let len = file.metadata().map(|m| m.len()).unwrap_or(0);
            let bar = if progress && len >= PROGRESS_BYTES {
                let style = ProgressStyle::with_template(
                    "{msg} [{bar:30}] {binary_bytes}/{binary_total_bytes} ({eta})",
                )
                .expect("a valid template");
                ProgressBar::new(len).with_style(style).with_message(format!("loading {f}"))
            } else {
                ProgressBar::hidden()
            };
            let reader = BufReader::with_capacity(1 << 20, bar.wrap_read(file));
            Ok::<_, DataError>((path, reader, bar))
        };
        let mut d = Self::empty(&dir.display().to_string());
        for (split, f) in [Split::Train, Split::Valid, Split::Test].into_iter().zip(FILES) {
            let (path, reader, bar) = open(f)?;
            d.read_split(split, &d.name.clone(), f, reader).map_err(|e| e.with_path(&path))?;
            bar.finish_and_clear();
            if let Split::Train = split {
                d.check_train()?;
            }
        }
        d.name = dir.file_name().map_or(d.name, |n| n.to_string_lossy().into_owned());
        d.entities.drop_index();
        Ok(d)
    }

    /// Parse the three splits' texts; `name` prefixes file names in errors.
    pub fn from_strs(name: &str, splits: [&str; 3]) -> Result<Self, DataError> {
        Self::from_readers(name, splits.map(str::as_bytes))
    }

    /// [`from_strs`](Self::from_strs) for gzipped texts.
    fn from_gz(name: &str, splits: [&[u8]; 3]) -> Result<Self, DataError> {
        Self::from_readers(
            name,
            splits.map(|gz| BufReader::new(flate2::bufread::GzDecoder::new(gz))),
        )
    }

    fn from_readers(name: &str, splits: [impl BufRead; 3]) -> Result<Self, DataError> {
        let mut d = Self::empty(name);
        for ((split, f), text) in
            [Split::Train, Split::Valid, Split::Test].into_iter().zip(FILES).zip(splits)
        {
            d.read_split(split, name, f, text).map_err(|e| e.with_path(Path::new(name)))?;
            if let Split::Train = split {
                d.check_train()?;
            }
        }
        d.entities.drop_index();
        Ok(d)
    }

    fn empty(name: &str) -> Self {
        Dataset {
            name: name.to_string(),
            entities: Vocab::default(),
            relations: Vocab::default(),
            train: Vec::new(),
            valid: Vec::new(),
            test: Vec::new(),
        }
    }

    fn check_train(&self) -> Result<(), DataError> {
        if self.train.is_empty() {
            return Err(DataError::EmptyTrain { file: format!("{}/train.txt", self.name) });
        }
        Ok(())
    }

    /// Stream one split's lines into its triples: `train.txt` interns names, the others look
    /// them up. The one place lines are read, for every file alike (the module's rules: BOM,
    /// CRLF, whitespace around fields, blank lines).
    fn read_split(
        &mut self,
        split: Split,
        prefix: &str,
        f: &str,
        mut reader: impl BufRead,
    ) -> Result<(), ReadError> {
        let file = || format!("{prefix}/{f}");
        let mut buf = Vec::new();
        let mut line_no = 0;
        loop {
            buf.clear();
            if reader.read_until(b'\n', &mut buf).map_err(ReadError::Io)? == 0 {
                return Ok(());
            }
            line_no += 1;
            let malformed = |found: &[u8]| DataError::Malformed {
                file: file(),
                line: line_no,
                found: String::from_utf8_lossy(found).chars().take(80).collect(),
            };
            let raw = buf.strip_suffix(b"\n").unwrap_or(&buf);
            let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
            let raw = if line_no == 1 { raw.strip_prefix(BOM).unwrap_or(raw) } else { raw };
            let line = std::str::from_utf8(raw).map_err(|_| malformed(raw))?.trim();
            if line.is_empty() {
                continue;
            }
            let mut parts = line.split('\t').map(str::trim);
            let [h, r, t] = match (parts.next(), parts.next(), parts.next(), parts.next()) {
                (Some(h), Some(r), Some(t), None)
                    if !h.is_empty() && !r.is_empty() && !t.is_empty() =>
                {
                    [h, r, t]
                }
                _ => return Err(malformed(raw).into()),
            };
            let triple = if let Split::Train = split {
                Triple {
                    h: self.entities.intern(h),
                    r: self.relations.intern(r),
                    t: self.entities.intern(t),
                }
            } else {
                let unseen = |kind, name: &str| DataError::Unseen {
                    file: file(),
                    line: line_no,
                    kind,
                    name: name.to_string(),
                };
                let ent = |n: &str| self.entities.get(n).ok_or_else(|| unseen("entity", n));
                Triple {
                    h: ent(h)?,
                    r: self.relations.get(r).ok_or_else(|| unseen("relation", r))?,
                    t: ent(t)?,
                }
            };
            match split {
                Split::Train => self.train.push(triple),
                Split::Valid => self.valid.push(triple),
                Split::Test => self.test.push(triple),
            }
        }
    }

    /// A one-line description: counts.
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
}

const FILES: [&str; 3] = ["train.txt", "valid.txt", "test.txt"];

/// UTF-8's byte-order mark, which some editors write at the start of a file.
const BOM: &[u8] = "\u{feff}".as_bytes();

#[derive(Clone, Copy)]
enum Split {
    Train,
    Valid,
    Test,
}

/// A split's read failure before the file's path is attached.
enum ReadError {
    Io(std::io::Error),
    Data(DataError),
}

impl From<DataError> for ReadError {
    fn from(e: DataError) -> Self {
        ReadError::Data(e)
    }
}

impl ReadError {
    fn with_path(self, path: &Path) -> DataError {
        match self {
            ReadError::Io(source) => DataError::Io { path: path.to_path_buf(), source },
            ReadError::Data(e) => e,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_names_are_the_embedded_tables_and_the_unknown_error_lists_them() {
        let tables = EMBEDDED.iter().map(|e| e.0).chain(EMBEDDED_GZ.iter().map(|e| e.0));
        assert_eq!(tables.collect::<Vec<_>>(), EMBEDDED_NAMES);
        let err = Dataset::load("no-such-set").unwrap_err().to_string();
        assert!(err.ends_with("one of umls, kinships, nations, wordnet30"), "{err}");
    }

    #[test]
    fn embedded_sets_load_with_published_counts() {
        for (name, e, r, n) in [
            ("umls", 135, 46, [5216, 652, 661]),
            ("kinships", 104, 25, [8544, 1068, 1074]),
            ("wordnet30", 112_199, 11, [200_652, 8_853, 8_862]),
        ] {
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
    fn unseen_entities_and_relations_are_errors_naming_file_and_line() {
        let train = "a\tr\tb\r\nb\tr\tc\n";
        let d = Dataset::from_strs("x", [train, "a\tr\tc\n", "\nc\tr\ta\n"]).unwrap();
        assert_eq!((d.entities.len(), d.relations.len()), (3, 1));
        assert_eq!(d.valid, vec![Triple { h: 0, r: 0, t: 2 }]);
        assert_eq!(d.test, vec![Triple { h: 2, r: 0, t: 0 }]);
        let e = Dataset::from_strs("x", [train, "a\tr\tc\na\tnew\tb\n", ""]).unwrap_err();
        assert_eq!(e.to_string(), "x/valid.txt:2: relation \"new\" does not occur in train.txt");
        let e = Dataset::from_strs("x", [train, "", "c\tr\ta\n\nb\tr\tz\n"]).unwrap_err();
        assert!(matches!(&e, DataError::Unseen { line: 3, kind: "entity", .. }), "{e}");
        assert!(e.to_string().starts_with("x/test.txt:3: entity \"z\""), "{e}");
    }

    #[test]
    fn a_line_that_is_not_utf8_is_malformed() {
        let dir = std::env::temp_dir().join(format!("ordo-kge-utf8-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("train.txt"), b"a\tr\tb\n\xff\tr\tb\n").unwrap();
        std::fs::write(dir.join("valid.txt"), "").unwrap();
        std::fs::write(dir.join("test.txt"), "").unwrap();
        let e = Dataset::load(dir.to_str().unwrap()).unwrap_err();
        assert!(matches!(&e, DataError::Malformed { line: 2, .. }), "{e}");
        assert!(e.to_string().contains("train.txt:2:"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bom_crlf_and_whitespace_around_fields_give_one_vocabulary_in_every_file() {
        let clean =
            Dataset::from_strs("x", ["a\tr\tb\nb\tr\tc d\n", "a\tr\tc d\n", "b\tr\ta\n"]).unwrap();
        let variants = [
            ["\u{feff}a\tr\tb\r\nb\tr\tc d\r\n", "\u{feff}a\tr\tc d\r\n", "\u{feff}b\tr\ta"],
            ["a \tr\tb \n b\t r\tc d\t\n", "a\tr \tc d  \n", " b\tr\ta\n\n"],
            ["a\tr\tb\n\u{feff}\n\nb\tr\tc d\n", "a\tr\tc d\n", "b\tr\ta\n"],
        ];
        for v in variants {
            let d = Dataset::from_strs("x", v);
            let d = match d {
                Ok(d) => d,
                // A BOM that is not at the start of a file is not whitespace: a malformed line.
                Err(e) => {
                    assert!(v[0].contains("\n\u{feff}"), "{v:?}: {e}");
                    assert!(matches!(e, DataError::Malformed { line: 2, .. }), "{e}");
                    continue;
                }
            };
            assert_eq!(d.entities.iter().collect::<Vec<_>>(), ["a", "b", "c d"], "{v:?}");
            assert_eq!(d.relations.len(), 1, "{v:?}");
            assert_eq!((&d.train, &d.valid, &d.test), (&clean.train, &clean.valid, &clean.test));
        }
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
