//! The kill-and-resume soak: an `ordo-train kge` run killed with SIGKILL at seeded random
//! moments and resumed each time ends bit-identical to the same run uninterrupted.
//!
//! For each storage (`memory`: the table in memory, checkpointed every epoch with
//! `--checkpoint` and resumed with `--resume`; `disk`: `--storage disk`, whose folder
//! checkpoints itself at every epoch's end and resumes when the run is started again), it runs
//! the uninterrupted run once, then the soak: the same run started, killed after a random delay
//! (uniform in `[--min-kill-s, 2·--mean-kill-s − --min-kill-s]`, drawn from `--seed`), started
//! again, and so on until a start runs to its end. Both `--save` their embeddings; their
//! `entities.npy` and `relations.npy` must be equal byte for byte. It prints the seed, each
//! kill and, per storage, the count of kills and whether the tables are equal; the exit status
//! is 1 if any differ.
//!
//! ```text
//! cargo build --release -p ordo-train --bins
//! target/release/kge_soak --seed 7 --work /tmp/soak -- \
//!     --config train/configs/wordnet30-complex-throughput.toml --mode oac --epochs 30
//! ```
//!
//! Everything after `--` is passed to every run (`kge` and `--quiet` are added, and the
//! outputs: `--save`, `--checkpoint`/`--resume` or `--storage disk --storage-dir`). Each run's
//! output is appended to `WORK/STORAGE/log.txt`.

use clap::Parser;
use rand::Rng;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

#[derive(Debug, Parser)]
#[command(name = "kge_soak")]
struct Args {
    /// Seeds the kill moments.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The storages to soak, in turn.
    #[arg(long, value_delimiter = ',', default_value = "memory,disk")]
    storage: Vec<Storage>,
    /// Mean seconds a start runs before it is killed.
    #[arg(long, default_value_t = 30.0)]
    mean_kill_s: f64,
    /// Fewest seconds a start runs before it is killed (time to load the data and reach a
    /// checkpoint, so the soak progresses).
    #[arg(long, default_value_t = 5.0)]
    min_kill_s: f64,
    /// The folder of the runs' outputs (emptied per storage first).
    #[arg(long)]
    work: PathBuf,
    /// The `ordo-train` binary (default: the one beside this binary).
    #[arg(long)]
    ordo_train: Option<PathBuf>,
    /// The flags of every run (after `--`).
    #[arg(last = true)]
    flags: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Storage {
    Memory,
    Disk,
}

type Error = Box<dyn std::error::Error>;

fn main() -> Result<(), Error> {
    let args = Args::parse();
    if !(args.min_kill_s >= 0.0 && args.mean_kill_s >= args.min_kill_s) {
        return Err("--mean-kill-s must be at least --min-kill-s (and that at least 0)".into());
    }
    let bin = match &args.ordo_train {
        Some(b) => b.clone(),
        None => std::env::current_exe()?.with_file_name("ordo-train"),
    };
    if !bin.is_file() {
        return Err(format!(
            "{}: no ordo-train binary (build it, or give --ordo-train)",
            bin.display()
        )
        .into());
    }
    println!("kge_soak: seed {}, flags {:?}", args.seed, args.flags);
    let mut rng = ordo_pm::rng::seeded(args.seed);
    let mut all_equal = true;
    for &storage in &args.storage {
        let dir = args.work.join(format!("{storage:?}").to_lowercase());
        if dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        }
        std::fs::create_dir_all(&dir)?;
        let log = dir.join("log.txt");
        let run = Run { bin: &bin, flags: &args.flags, storage, dir: &dir, log: &log };
        let t = Instant::now();
        let status = run.start("ref")?.wait()?;
        check(status, "the uninterrupted run", &log)?;
        let whole = t.elapsed().as_secs_f64();
        println!("{storage:?}: uninterrupted run {whole:.1} s");
        let (t, mut kills) = (Instant::now(), 0);
        loop {
            // Uniform in [min, 2·mean − min]: mean `mean_kill_s`.
            let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
            let delay = args.min_kill_s + u * 2.0 * (args.mean_kill_s - args.min_kill_s);
            let mut child = run.start("soak")?;
            let started = Instant::now();
            let deadline = started + Duration::from_secs_f64(delay);
            let ended = loop {
                if let Some(status) = child.try_wait()? {
                    break Some(status);
                }
                if Instant::now() >= deadline {
                    break None;
                }
                std::thread::sleep(Duration::from_millis(20));
            };
            match ended {
                Some(status) => {
                    check(status, "a resumed run", &log)?;
                    break;
                }
                None => {
                    // `Child::kill` is SIGKILL on Unix.
                    child.kill()?;
                    child.wait()?;
                    kills += 1;
                    println!(
                        "{storage:?}: kill {kills} after {:.2} s (soak at {:.1} s)",
                        started.elapsed().as_secs_f64(),
                        t.elapsed().as_secs_f64()
                    );
                }
            }
        }
        let soak = t.elapsed().as_secs_f64();
        let mut equal = true;
        for file in ["entities.npy", "relations.npy"] {
            let (a, b) = (
                std::fs::read(dir.join("ref").join(file))?,
                std::fs::read(dir.join("soak").join(file))?,
            );
            let same = a == b;
            println!(
                "{storage:?}: {file} {} ({} bytes, CRC-32 {:08x} and {:08x})",
                if same { "equal bit for bit" } else { "DIFFERS" },
                a.len(),
                crc32fast::hash(&a),
                crc32fast::hash(&b)
            );
            equal &= same;
        }
        println!(
            "{storage:?}: seed {}, {kills} kills, {} starts, soak {soak:.1} s, uninterrupted {whole:.1} s: {}",
            args.seed,
            kills + 1,
            if equal { "equal to the uninterrupted run bit for bit" } else { "NOT EQUAL" }
        );
        all_equal &= equal;
    }
    if !all_equal {
        std::process::exit(1);
    }
    Ok(())
}

/// One storage's runs: `ref` (uninterrupted) or `soak` (the killed and resumed one).
struct Run<'a> {
    bin: &'a Path,
    flags: &'a [String],
    storage: Storage,
    dir: &'a Path,
    log: &'a Path,
}

impl Run<'_> {
    /// Start run `name`, resuming from its checkpoint if it has one.
    fn start(&self, name: &str) -> Result<std::process::Child, Error> {
        let mut cmd = Command::new(self.bin);
        cmd.arg("kge").args(self.flags).arg("--quiet").arg("--save").arg(self.dir.join(name));
        match self.storage {
            Storage::Memory => {
                let ck = self.dir.join(format!("{name}-checkpoint"));
                cmd.arg("--checkpoint").arg(&ck).args(["--checkpoint-every", "1"]);
                if ck.join("latest").exists() {
                    cmd.arg("--resume").arg(&ck);
                }
            }
            Storage::Disk => {
                cmd.args(["--storage", "disk", "--storage-dir"])
                    .arg(self.dir.join(format!("{name}-parts")));
            }
        }
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.log)?;
        Ok(cmd.stdin(Stdio::null()).stdout(log.try_clone()?).stderr(log).spawn()?)
    }
}

/// `status` of `what` is a success, or an error naming the log.
fn check(status: ExitStatus, what: &str, log: &Path) -> Result<(), Error> {
    if status.success() {
        return Ok(());
    }
    Err(format!("{what} failed ({status}); its output is in {}", log.display()).into())
}
