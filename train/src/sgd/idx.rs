//! Fashion-MNIST (and MNIST) from IDX files, gzipped or plain.
//!
//! Format (big-endian): magic `0x00000803` (u8 images, 3 dimensions) or `0x00000801` (u8
//! labels, 1 dimension), the dimension sizes as u32, then the bytes.

use flate2::read::GzDecoder;
use std::io::Read;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Why an IDX file could not be read. Every variant names the file.
#[derive(Debug, Error)]
pub enum IdxError {
    /// Neither `<name>` nor `<name>.gz` could be opened or decompressed.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The file does not start with the expected magic number.
    #[error("{path}: bad IDX magic {found:#010x}, expected {expected:#010x}")]
    BadMagic {
        /// The file.
        path: PathBuf,
        /// The magic found.
        found: u32,
        /// The magic expected.
        expected: u32,
    },
    /// Fewer bytes than the header announces (or a header cut short).
    #[error("{path}: truncated: expected {expected} bytes, found {found}")]
    Truncated {
        /// The file.
        path: PathBuf,
        /// Bytes the header announces (header included).
        expected: usize,
        /// Bytes present.
        found: usize,
    },
    /// The images and labels files disagree on the number of examples.
    #[error("{images} holds {n_images} images but {labels} holds {n_labels} labels")]
    CountMismatch {
        /// The images file.
        images: PathBuf,
        /// Its count.
        n_images: usize,
        /// The labels file.
        labels: PathBuf,
        /// Its count.
        n_labels: usize,
    },
    /// A label outside `0..10`.
    #[error("{path}: label {label} at index {index} is not in 0..10")]
    BadLabel {
        /// The labels file.
        path: PathBuf,
        /// The example.
        index: usize,
        /// The label.
        label: u8,
    },
}

const IMAGES_MAGIC: u32 = 0x0803;
const LABELS_MAGIC: u32 = 0x0801;

/// One split: `n` images of `rows × cols` bytes, and their labels in `0..10`.
#[derive(Debug, Clone)]
pub struct Split {
    /// Number of examples.
    pub n: usize,
    /// Pixels per image (`rows · cols`).
    pub dim: usize,
    /// `n · dim` pixels, row-major, 0..=255.
    pub pixels: Vec<u8>,
    /// `n` labels.
    pub labels: Vec<u8>,
}

impl Split {
    /// The pixels of example `i`.
    pub fn image(&self, i: usize) -> &[u8] {
        &self.pixels[i * self.dim..(i + 1) * self.dim]
    }

    /// Load images and labels (each `path` or `path.gz`) and check that they agree.
    pub fn load(images: &Path, labels: &Path) -> Result<Split, IdxError> {
        let (images, img) = read_maybe_gz(images)?;
        let (dims, pixels) = parse(&images, &img, IMAGES_MAGIC, 3)?;
        let (labels, lab) = read_maybe_gz(labels)?;
        let (ldims, labs) = parse(&labels, &lab, LABELS_MAGIC, 1)?;
        if dims[0] != ldims[0] {
            return Err(IdxError::CountMismatch {
                images,
                n_images: dims[0],
                labels,
                n_labels: ldims[0],
            });
        }
        if let Some((index, &label)) = labs.iter().enumerate().find(|(_, l)| **l >= 10) {
            return Err(IdxError::BadLabel { path: labels, index, label });
        }
        Ok(Split {
            n: dims[0],
            dim: dims[1] * dims[2],
            pixels: pixels.to_vec(),
            labels: labs.to_vec(),
        })
    }
}

/// Fashion-MNIST's two splits.
#[derive(Debug, Clone)]
pub struct FashionMnist {
    /// 60,000 training examples.
    pub train: Split,
    /// 10,000 test examples.
    pub test: Split,
}

impl FashionMnist {
    /// Load `train-{images-idx3,labels-idx1}-ubyte` and `t10k-…` from `dir` (each plain or
    /// `.gz`).
    pub fn load(dir: &Path) -> Result<Self, IdxError> {
        let split = |prefix: &str| {
            Split::load(
                &dir.join(format!("{prefix}-images-idx3-ubyte")),
                &dir.join(format!("{prefix}-labels-idx1-ubyte")),
            )
        };
        Ok(Self { train: split("train")?, test: split("t10k")? })
    }
}

/// Read `path`, or `path.gz` decompressed; returns the path actually read.
fn read_maybe_gz(path: &Path) -> Result<(PathBuf, Vec<u8>), IdxError> {
    let gz = {
        let mut s = path.as_os_str().to_owned();
        s.push(".gz");
        PathBuf::from(s)
    };
    let (path, zipped) = if path.is_file() || !gz.is_file() {
        (path.to_path_buf(), path.extension().is_some_and(|e| e == "gz"))
    } else {
        (gz, true)
    };
    let io = |source| IdxError::Io { path: path.clone(), source };
    let raw = std::fs::read(&path).map_err(io)?;
    if !zipped {
        return Ok((path, raw));
    }
    let mut out = Vec::new();
    GzDecoder::new(&raw[..]).read_to_end(&mut out).map_err(io)?;
    Ok((path, out))
}

/// Check the header of an IDX byte buffer; returns its dimensions and payload.
fn parse<'a>(
    path: &Path,
    bytes: &'a [u8],
    magic: u32,
    ndims: usize,
) -> Result<(Vec<usize>, &'a [u8]), IdxError> {
    let header = 4 + 4 * ndims;
    let truncated =
        |expected| IdxError::Truncated { path: path.to_path_buf(), expected, found: bytes.len() };
    let word = |k: usize| {
        u32::from_be_bytes([bytes[4 * k], bytes[4 * k + 1], bytes[4 * k + 2], bytes[4 * k + 3]])
    };
    if bytes.len() < 4 {
        return Err(truncated(header));
    }
    if word(0) != magic {
        return Err(IdxError::BadMagic {
            path: path.to_path_buf(),
            found: word(0),
            expected: magic,
        });
    }
    if bytes.len() < header {
        return Err(truncated(header));
    }
    let dims: Vec<usize> = (1..=ndims).map(|k| word(k) as usize).collect();
    // A header announcing more than usize bytes is truncated by definition.
    let total = dims
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .and_then(|p| p.checked_add(header))
        .unwrap_or(usize::MAX);
    if bytes.len() < total {
        return Err(truncated(total));
    }
    Ok((dims, &bytes[header..total]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn idx(magic: u32, dims: &[u32], payload: &[u8]) -> Vec<u8> {
        let mut v = magic.to_be_bytes().to_vec();
        dims.iter().for_each(|d| v.extend(d.to_be_bytes()));
        v.extend(payload);
        v
    }

    fn write(dir: &Path, name: &str, bytes: &[u8], gz: bool) -> PathBuf {
        let path = dir.join(name);
        if gz {
            let f = std::fs::File::create(dir.join(format!("{name}.gz"))).unwrap();
            let mut e = flate2::write::GzEncoder::new(f, flate2::Compression::fast());
            e.write_all(bytes).unwrap();
            e.finish().unwrap();
        } else {
            std::fs::write(&path, bytes).unwrap();
        }
        path
    }

    fn tmp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("ordo-idx-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn reads_plain_and_gzipped() {
        for gz in [false, true] {
            let d = tmp(&format!("ok{gz}"));
            let i = write(
                &d,
                "i",
                &idx(IMAGES_MAGIC, &[2, 2, 3], &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]),
                gz,
            );
            let l = write(&d, "l", &idx(LABELS_MAGIC, &[2], &[3, 9]), gz);
            let s = Split::load(&i, &l).unwrap();
            assert_eq!((s.n, s.dim), (2, 6));
            assert_eq!(s.image(1), &[7, 8, 9, 10, 11, 12]);
            assert_eq!(s.labels, vec![3, 9]);
        }
    }

    #[test]
    fn bad_files_are_named_errors() {
        let d = tmp("bad");
        let good_l = write(&d, "l", &idx(LABELS_MAGIC, &[2], &[3, 9]), false);
        let bad_magic = write(&d, "m", &idx(0x0802, &[2, 1, 1], &[0, 0]), false);
        let e = Split::load(&bad_magic, &good_l).unwrap_err();
        assert!(matches!(e, IdxError::BadMagic { found: 0x0802, .. }), "{e}");
        assert!(e.to_string().contains("/m"), "{e}");

        let short = write(&d, "s", &idx(IMAGES_MAGIC, &[2, 2, 2], &[0; 7]), false);
        let e = Split::load(&short, &good_l).unwrap_err();
        assert!(matches!(e, IdxError::Truncated { expected: 24, found: 23, .. }), "{e}");

        let cut_header = write(&d, "h", &IMAGES_MAGIC.to_be_bytes()[..3], false);
        assert!(matches!(Split::load(&cut_header, &good_l), Err(IdxError::Truncated { .. })));

        let three = write(&d, "t", &idx(IMAGES_MAGIC, &[3, 1, 1], &[0; 3]), false);
        let e = Split::load(&three, &good_l).unwrap_err();
        assert!(matches!(e, IdxError::CountMismatch { n_images: 3, n_labels: 2, .. }), "{e}");

        let bad_label = write(&d, "b", &idx(LABELS_MAGIC, &[3], &[1, 10, 2]), false);
        let e = Split::load(&three, &bad_label).unwrap_err();
        assert!(matches!(e, IdxError::BadLabel { index: 1, label: 10, .. }), "{e}");

        let e = Split::load(&d.join("missing"), &good_l).unwrap_err();
        assert!(matches!(e, IdxError::Io { .. }) && e.to_string().contains("missing"), "{e}");

        std::fs::write(d.join("g.gz"), b"not gzip at all").unwrap();
        let e = Split::load(&d.join("g"), &good_l).unwrap_err();
        assert!(matches!(e, IdxError::Io { .. }) && e.to_string().contains("g.gz"), "{e}");
    }
}
