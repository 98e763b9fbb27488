//! Which test files can reach which mutant's hooks, read from the sources of every crate of the
//! workspace.
//!
//! A *module* is a top-level module of a crate (`pm/src/node.rs`, or `core/src/engine/` as a
//! whole). A mutant's hooks are the modules whose text names it (`Mutant::<Variant>`, outside
//! the catalogs, the `mutation` modules), and the suite files that name it. A module depends on
//! another of its crate when it names `crate::<m>`, and on a module of another crate when it
//! names that crate (`ordo_pm::`) and either the module as a path (`node::`) or an item the
//! crate's `lib.rs` re-exports from it (`pub use node::{Node, ..}`: the word `Node`). A test file
//! reaches the modules it names that way, closed over the dependencies. This over-approximates:
//! a unit that cannot reach the hook only costs time.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

/// A module: (crate directory, top-level module name).
type Module = (String, String);

/// One crate's sources.
#[derive(Debug)]
struct Crate {
    /// Directory, relative to the workspace root.
    dir: String,
    /// The name its users write (`ordo_pm`).
    lib: String,
    /// Top-level modules and the text of their files.
    modules: BTreeMap<String, String>,
    /// Items `lib.rs` re-exports, with the module each comes from.
    reexports: Vec<(String, String)>,
}

/// The module graph of every crate of the workspace.
#[derive(Debug)]
pub(crate) struct Sources {
    crates: Vec<Crate>,
    deps: BTreeMap<Module, BTreeSet<Module>>,
}

impl Sources {
    /// Read every crate under `root` (each directory with a `Cargo.toml` and a `src/`).
    pub(crate) fn read(root: &Path) -> Sources {
        let mut crates = Vec::new();
        let mut dirs: Vec<_> = fs::read_dir(root).into_iter().flatten().flatten().collect();
        dirs.sort_by_key(|e| e.file_name());
        for e in dirs {
            let (dir, path) = (e.file_name().to_string_lossy().to_string(), e.path());
            let Ok(manifest) = fs::read_to_string(path.join("Cargo.toml")) else { continue };
            if !path.join("src").is_dir() {
                continue;
            }
            let Some(lib) = package_name(&manifest).map(|n| n.replace('-', "_")) else { continue };
            let mut modules = BTreeMap::new();
            for f in fs::read_dir(path.join("src")).into_iter().flatten().flatten() {
                let p = f.path();
                let Some(stem) = p.file_stem().and_then(|s| s.to_str()).map(str::to_string) else {
                    continue;
                };
                if stem == "lib" || stem == "main" || !(p.is_dir() || is_rs(&p)) {
                    continue;
                }
                let text = if p.is_dir() { read_tree(&p) } else { read(&p) };
                modules.entry(stem).or_insert_with(String::new).push_str(&text);
            }
            let lib_rs = read(&path.join("src/lib.rs"));
            let reexports = reexports(&lib_rs, &modules);
            crates.push(Crate { dir, lib, modules, reexports });
        }
        let mut s = Sources { crates, deps: BTreeMap::new() };
        let mut deps = BTreeMap::new();
        for c in &s.crates {
            for (m, text) in &c.modules {
                let mut d = s.names(text, Some(&c.dir));
                d.remove(&(c.dir.clone(), m.clone()));
                deps.insert((c.dir.clone(), m.clone()), d);
            }
        }
        s.deps = deps;
        s
    }

    /// The modules `text` names; `own` is the crate the text belongs to when it is in its
    /// `src/` (then `crate::<m>` names one of its modules).
    fn names(&self, text: &str, own: Option<&str>) -> BTreeSet<Module> {
        let mut out = BTreeSet::new();
        for c in &self.crates {
            if own == Some(c.dir.as_str()) {
                for m in c.modules.keys() {
                    if text.contains(&format!("crate::{m}")) {
                        out.insert((c.dir.clone(), m.clone()));
                    }
                }
            } else if names_path(text, &c.lib) {
                for m in c.modules.keys() {
                    if names_path(text, m) {
                        out.insert((c.dir.clone(), m.clone()));
                    }
                }
                for (item, m) in &c.reexports {
                    if names_word(text, item) {
                        out.insert((c.dir.clone(), m.clone()));
                    }
                }
            }
        }
        out
    }

    /// The modules holding a hook (`needle`, e.g. `Mutant::PmStaleOwnerNoForward`), outside the
    /// catalogs.
    pub(crate) fn hooks(&self, needle: &str) -> BTreeSet<Module> {
        let mut out = BTreeSet::new();
        for c in &self.crates {
            for (m, text) in &c.modules {
                if m != "mutation" && text.contains(needle) {
                    out.insert((c.dir.clone(), m.clone()));
                }
            }
        }
        out
    }

    /// Whether the test file with text `text` names a hooked module, directly or through the
    /// dependencies between modules (a hook in the file itself counts).
    pub(crate) fn reaches(&self, text: &str, needle: &str, hooks: &BTreeSet<Module>) -> bool {
        if text.contains(needle) {
            return true;
        }
        let mut stack: Vec<Module> = self.names(text, None).into_iter().collect();
        let mut seen: BTreeSet<Module> = stack.iter().cloned().collect();
        while let Some(m) = stack.pop() {
            if hooks.contains(&m) {
                return true;
            }
            for d in self.deps.get(&m).into_iter().flatten() {
                if seen.insert(d.clone()) {
                    stack.push(d.clone());
                }
            }
        }
        false
    }
}

/// `[package] name = "..."` of a manifest.
fn package_name(manifest: &str) -> Option<String> {
    let package = manifest.split("[package]").nth(1)?;
    package.lines().find_map(|l| {
        let v = l.trim().strip_prefix("name")?.trim_start().strip_prefix('=')?;
        Some(v.trim().trim_matches('"').to_string())
    })
}

/// `pub use <m>::{A, b::C as D};` lines of a `lib.rs`: (item, module) for modules of the crate.
fn reexports(lib: &str, modules: &BTreeMap<String, String>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for stmt in lib.split(';') {
        let Some(path) = stmt.trim().strip_prefix("pub use ") else { continue };
        let Some((m, rest)) = path.split_once("::") else { continue };
        if !modules.contains_key(m.trim()) {
            continue;
        }
        let rest = rest.trim().trim_start_matches('{').trim_end_matches('}');
        for item in rest.split(',') {
            let item = item.rsplit(" as ").next().unwrap_or(item);
            let item = item.rsplit("::").next().unwrap_or(item).trim();
            if !item.is_empty() {
                out.push((item.to_string(), m.trim().to_string()));
            }
        }
    }
    out
}

fn is_ident(ch: char) -> bool {
    ch.is_alphanumeric() || ch == '_'
}

/// Whether `text` names `m` as a path: `m::` after a non-identifier character.
pub(crate) fn names_path(text: &str, m: &str) -> bool {
    let pat = format!("{m}::");
    text.match_indices(&pat)
        .any(|(i, _)| text[..i].chars().next_back().is_none_or(|c| !is_ident(c)))
}

/// Whether `text` holds `word` as a whole identifier.
fn names_word(text: &str, word: &str) -> bool {
    text.match_indices(word).any(|(i, _)| {
        text[..i].chars().next_back().is_none_or(|c| !is_ident(c))
            && text[i + word.len()..].chars().next().is_none_or(|c| !is_ident(c))
    })
}

fn is_rs(p: &Path) -> bool {
    p.extension().is_some_and(|x| x == "rs")
}

fn read(p: &Path) -> String {
    fs::read_to_string(p).unwrap_or_default()
}

/// The concatenated text of every `.rs` file under `dir`.
fn read_tree(dir: &Path) -> String {
    let mut s = String::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if is_rs(&p) {
                s.push_str(&read(&p));
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_paths_and_words_are_told_from_longer_names() {
        assert!(names_path("use ordo::mft::Mft;", "mft"));
        assert!(names_path("use ordo::{engine::Batch, row_store::RowStore};", "row_store"));
        assert!(!names_path("use ordo::row_store::RowStore;", "store"));
        assert!(!names_path("use ordo::rowstore::X;", "store"));
        assert!(!names_path("mft is a word", "mft"));
        assert!(names_word("use ordo_pm::{Node, PmMode};", "Node"));
        assert!(!names_word("NodeId", "Node"));
    }

    #[test]
    fn reexports_are_read_from_lib_rs() {
        let modules: BTreeMap<String, String> =
            ["node", "sim"].iter().map(|m| (m.to_string(), String::new())).collect();
        let lib = "pub mod node;\npub use node::{Node, Outbox as O};\npub use other::X;\npub use sim::deep::Simulation;";
        assert_eq!(
            reexports(lib, &modules),
            vec![
                ("Node".into(), "node".into()),
                ("O".into(), "node".into()),
                ("Simulation".into(), "sim".into())
            ]
        );
    }

    fn text(root: &Path, file: &str) -> String {
        read(&root.join(file))
    }

    /// On this repository: the MFT's hooks reach its own tests and the engine's, never the
    /// dispatcher's; the dispatcher's hook reaches the dispatcher's tests only; each pm and mp
    /// hook reaches its crate's tests through the re-exported types, and no core test.
    #[test]
    fn reachability_follows_the_module_graph_of_every_crate() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let g = Sources::read(&root);
        let reach =
            |file: &str, needle: &str| g.reaches(&text(&root, file), needle, &g.hooks(needle));
        let mft = "Mutant::MftNoFence";
        assert!(g.hooks(mft).contains(&("core".into(), "mft".into())), "{:?}", g.hooks(mft));
        assert!(reach("core/tests/loom_mft.rs", mft));
        assert!(reach("core/tests/loom_engine.rs", mft));
        assert!(!reach("core/tests/loom_dispatcher.rs", mft));
        let interval = "Mutant::AcceptEarlierInterval";
        assert!(reach("core/tests/prop_dispatcher.rs", interval));
        assert!(!reach("core/tests/prop_engine.rs", interval));
        assert!(!reach("fuzz/fuzz_targets/engine_schedule.rs", interval));
        let pm = "Mutant::PmStaleOwnerNoForward";
        // (ordo-verify's own sources name every mutant: its models and these tests.)
        let at: BTreeSet<_> = g.hooks(pm).into_iter().filter(|(d, _)| d != "verify").collect();
        assert_eq!(at, BTreeSet::from([("pm".to_string(), "node".to_string())]));
        assert!(reach("pm/tests/prop_conservation.rs", pm));
        assert!(!reach("core/tests/prop_engine.rs", pm));
        let amp = "Mutant::AmpMakOffByOne";
        assert!(g.hooks(amp).contains(&("mp".into(), "controller".into())), "{:?}", g.hooks(amp));
        assert!(reach("mp/tests/equivalence.rs", amp));
        assert!(!reach("pm/tests/prop_conservation.rs", amp));
        // Core's hooks in another crate (the GPU device's cache) are found too.
        let skipped = g.hooks("Mutant::ValidationSkipped");
        assert!(skipped.contains(&("gpu".into(), "cache".into())), "{skipped:?}");
    }
}
