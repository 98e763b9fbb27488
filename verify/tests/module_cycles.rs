//! No import cycle between the modules of a crate.
//!
//! Every `.rs` file under a crate's `src/` is one module (inline `mod tests { … }` blocks count
//! as part of their file). A module *imports* another when its code names a path into it:
//! `crate::a::b::Item`, `super::…`, `self::…`, or (in a `use`) a child module by its bare name.
//! A path is resolved to the longest prefix that is a module file; when the next segment is a
//! name that module only re-exports (`pub use child::Name`), the edge goes to the module that
//! defines it, and a parent's re-export of its own child's item is no import of the parent's,
//! so a facade like `nodes.rs` or `lib.rs` adds no cycle of its own. The crate root
//! (`lib.rs`, `main.rs`) is left out of the graph for the same reason: it names every module.
//! Binaries under `src/bin/` are separate crates and are left out.
//!
//! `cargo test -p ordo-verify --test module_cycles` checks the crates in [`ACYCLIC`];
//! `cargo test -p ordo-verify --test module_cycles -- --ignored` checks every workspace crate and
//! prints each cycle found (for crates whose cycles are still being broken).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Crates (folders relative to the workspace root) kept free of module cycles.
const ACYCLIC: &[&str] = &["core", "gpu", "mp", "pm", "train", "verify"];

/// Every crate of the workspace with a `src/` folder.
const ALL: &[&str] = &["core", "gpu", "verify", "train", "mp", "pm"];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("verify/ has a parent").to_path_buf()
}

/// A module path, e.g. `["nodes", "bcast"]`; the crate root is `[]`.
type ModPath = Vec<String>;

/// Each module file of the crate at `src`, by module path (binaries under `src/bin` left out).
fn module_files(src: &Path) -> BTreeMap<ModPath, String> {
    fn walk(dir: &Path, prefix: &ModPath, out: &mut BTreeMap<ModPath, String>) {
        let Ok(entries) = fs::read_dir(dir) else { return };
        let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
        entries.sort();
        for p in entries {
            let name = p.file_stem().and_then(|s| s.to_str()).unwrap_or_default().to_string();
            if p.is_dir() {
                if prefix.is_empty() && name == "bin" {
                    continue;
                }
                let mut sub = prefix.clone();
                sub.push(name);
                walk(&p, &sub, out);
            } else if p.extension().is_some_and(|e| e == "rs") {
                let text = fs::read_to_string(&p).unwrap_or_default();
                let mut path = prefix.clone();
                let is_root = prefix.is_empty() && (name == "lib" || name == "main");
                if !is_root && name != "mod" {
                    path.push(name);
                }
                out.insert(path, strip_comments(&text));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(src, &Vec::new(), &mut out);
    out
}

/// The code without comments (line, block and doc comments) and without string literals.
fn strip_comments(text: &str) -> String {
    let (b, mut out, mut i) = (text.as_bytes(), String::with_capacity(text.len()), 0);
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            let mut depth = 0;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if b[i] == b'"' && (i == 0 || b[i - 1] != b'\'') {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else {
            let ch = text[i..].chars().next().expect("in bounds");
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The paths a `use` tree or an inline path names, expanded: `a::{b, c::d}` → `a::b`, `a::c::d`.
fn expand(tree: &str) -> Vec<Vec<String>> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        let p: Vec<String> = tree
            .split("::")
            .map(|s| s.split_whitespace().next().unwrap_or("").to_string())
            .filter(|s| !s.is_empty())
            .collect();
        return vec![p];
    };
    let head: Vec<String> =
        tree[..open].split("::").map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect();
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let (mut parts, mut depth, mut start) = (Vec::new(), 0, 0);
    for (k, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..k]);
                start = k + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    let mut out = Vec::new();
    for part in parts.into_iter().filter(|p| !p.trim().is_empty()) {
        for tail in expand(part) {
            let mut p = head.clone();
            p.extend(tail.into_iter().filter(|s| s != "self"));
            out.push(p);
        }
    }
    out
}

/// The inline modules of `code` (`mod name { … }`): each one's name and body, and `code`
/// without them.
fn inline_modules(code: &str) -> (Vec<(String, String)>, String) {
    let (mut mods, mut rest, mut i) = (Vec::new(), String::new(), 0);
    while let Some(k) = code[i..].find("mod ") {
        let at = i + k;
        let after = &code[at + 4..];
        let name: String = after.chars().take_while(|&c| is_ident(c)).collect();
        let tail = after[name.len()..].trim_start();
        let standalone = at == 0 || !is_ident(code[..at].chars().next_back().unwrap_or(' '));
        if !standalone || name.is_empty() || !tail.starts_with('{') {
            rest.push_str(&code[i..at + 4]);
            i = at + 4;
            continue;
        }
        let open = code.len() - tail.len();
        let (mut depth, mut end) = (0, code.len());
        for (n, c) in code[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + n;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest.push_str(&code[i..at]);
        mods.push((name, code[open + 1..end].to_string()));
        i = (end + 1).min(code.len());
    }
    rest.push_str(&code[i..]);
    (mods, rest)
}

/// Every path `code` names that starts at `crate`, `super` or `self`, or (in a `use`) at one of
/// `children`; relative paths made absolute from module `me` (inside an inline module, from
/// that module, so its `super` is the file's module).
fn named_paths(code: &str, me: &ModPath, children: &BTreeSet<String>) -> Vec<ModPath> {
    let (inline, code) = inline_modules(code);
    let code = code.as_str();
    let mut out = Vec::new();
    for (name, body) in inline {
        let mut inner = me.clone();
        inner.push(name);
        out.extend(named_paths(&body, &inner, &declared_children(&body)));
    }
    let absolute = |p: &[String]| -> Option<ModPath> {
        let (first, rest) = p.split_first()?;
        let mut base = match first.as_str() {
            "crate" => Vec::new(),
            "self" => me.clone(),
            "super" => me[..me.len().saturating_sub(1)].to_vec(),
            c if children.contains(c) => {
                let mut b = me.clone();
                b.push(c.to_string());
                b
            }
            _ => return None,
        };
        let mut rest = rest;
        while let Some((s, r)) = rest.split_first() {
            if s != "super" {
                break;
            }
            base.pop();
            rest = r;
        }
        base.extend(rest.iter().cloned());
        Some(base)
    };
    // `use` trees (they may span lines and hold groups).
    let mut i = 0;
    while let Some(k) = code[i..].find("use ") {
        let at = i + k;
        i = at + 4;
        if at > 0 && is_ident(code[..at].chars().next_back().unwrap_or(' ')) {
            continue;
        }
        let Some(end) = code[i..].find(';') else { break };
        // A parent's `pub use child::Item` only publishes its own child's item: no import.
        let before = code[..at].trim_end();
        let publishes = before.ends_with("pub") || before.ends_with(')');
        for p in expand(&code[i..i + end]) {
            let own_child = p.first().is_some_and(|f| f == "self" || children.contains(f));
            if !(publishes && own_child) {
                out.extend(absolute(&p));
            }
        }
    }
    // Inline paths: `crate::…`, `super::…`, `self::…`.
    for anchor in ["crate::", "super::", "self::"] {
        let mut i = 0;
        while let Some(k) = code[i..].find(anchor) {
            let at = i + k;
            i = at + anchor.len();
            let prev = code[..at].chars().next_back().unwrap_or(' ');
            if is_ident(prev) || prev == ':' {
                continue;
            }
            let len = code[at..]
                .char_indices()
                .find(|&(_, c)| !(is_ident(c) || c == ':'))
                .map_or(code.len() - at, |(n, _)| n);
            let path: Vec<String> = code[at..at + len]
                .split("::")
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect();
            out.extend(absolute(&path));
        }
    }
    out
}

/// The child modules `code` declares (`mod x;`, `pub mod x;`, `pub(crate) mod x;`).
fn declared_children(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in code.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if let Some(k) = words.iter().position(|w| *w == "mod")
            && k + 1 < words.len()
            && words[k + 1].ends_with(';')
        {
            out.insert(words[k + 1].trim_end_matches(';').to_string());
        }
    }
    out
}

/// Names a module re-exports from a child (`pub use child::…::Name`) → that child's path.
fn reexports(code: &str, me: &ModPath, children: &BTreeSet<String>) -> BTreeMap<String, ModPath> {
    let mut out = BTreeMap::new();
    let mut i = 0;
    while let Some(k) = code[i..].find("pub use ") {
        let at = i + k + "pub use ".len();
        i = at;
        let Some(end) = code[at..].find(';') else { break };
        for p in expand(&code[at..at + end]) {
            let Some(first) = p.first() else { continue };
            let Some(name) = p.last() else { continue };
            let name = name.split(" as ").last().unwrap_or(name).trim().to_string();
            let mut target = match first.as_str() {
                "crate" => Vec::new(),
                c if children.contains(c) => {
                    let mut b = me.clone();
                    b.push(c.to_string());
                    b
                }
                _ => continue,
            };
            target.extend(p[1..p.len() - 1].iter().cloned());
            out.insert(name, target);
        }
    }
    out
}

/// The import graph of the crate at `src`: module → modules it imports.
fn import_graph(src: &Path) -> BTreeMap<ModPath, BTreeSet<ModPath>> {
    let files = module_files(src);
    let children: BTreeMap<&ModPath, BTreeSet<String>> =
        files.iter().map(|(m, code)| (m, declared_children(code))).collect();
    let exports: BTreeMap<&ModPath, BTreeMap<String, ModPath>> =
        files.iter().map(|(m, code)| (m, reexports(code, m, &children[m]))).collect();
    // The module a path lands in: its longest module prefix, then through re-exports.
    let resolve = |path: &ModPath| -> ModPath {
        let mut m: ModPath = (0..=path.len())
            .rev()
            .map(|n| path[..n].to_vec())
            .find(|p| files.contains_key(p))
            .unwrap_or_default();
        for _ in 0..8 {
            let Some(name) = path.get(m.len()) else { break };
            match exports.get(&m).and_then(|e| e.get(name)) {
                Some(t) if files.contains_key(t) && *t != m => m = t.clone(),
                _ => break,
            }
        }
        m
    };
    let mut graph = BTreeMap::new();
    for (me, code) in &files {
        if me.is_empty() {
            continue;
        }
        let edges: BTreeSet<ModPath> = named_paths(code, me, &children[me])
            .iter()
            .map(&resolve)
            .filter(|t| !t.is_empty() && t != me)
            .collect();
        graph.insert(me.clone(), edges);
    }
    graph
}

/// The cycles of `graph`: one per strongly connected component of more than one module
/// (Tarjan), each listed as its modules.
fn cycles(graph: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Vec<Vec<String>> {
    struct Tarjan<'a> {
        graph: &'a BTreeMap<ModPath, BTreeSet<ModPath>>,
        index: BTreeMap<&'a ModPath, usize>,
        low: BTreeMap<&'a ModPath, usize>,
        stack: Vec<&'a ModPath>,
        on_stack: BTreeSet<&'a ModPath>,
        out: Vec<Vec<String>>,
    }
    impl<'a> Tarjan<'a> {
        fn visit(&mut self, v: &'a ModPath) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.graph.get(v).into_iter().flatten() {
                let Some((w, _)) = self.graph.get_key_value(w) else { continue };
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(lw);
                } else if self.on_stack.contains(w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut scc = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    scc.push(w.join("::"));
                    if w == v {
                        break;
                    }
                }
                if scc.len() > 1 {
                    scc.sort();
                    self.out.push(scc);
                }
            }
        }
    }
    let mut t = Tarjan {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !t.index.contains_key(v) {
            t.visit(v);
        }
    }
    t.out
}

/// The longest import chain of an acyclic `graph`: modules each importing the next, as many as
/// any chain holds (the first found in module order among the longest).
fn longest_chain(graph: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Vec<ModPath> {
    fn from<'a>(
        m: &'a ModPath,
        graph: &'a BTreeMap<ModPath, BTreeSet<ModPath>>,
        memo: &mut BTreeMap<&'a ModPath, Vec<ModPath>>,
    ) -> Vec<ModPath> {
        if let Some(c) = memo.get(m) {
            return c.clone();
        }
        let mut best = Vec::new();
        for next in graph.get(m).into_iter().flatten() {
            let tail = from(next, graph, memo);
            if tail.len() > best.len() {
                best = tail;
            }
        }
        best.insert(0, m.clone());
        memo.insert(m, best.clone());
        best
    }
    let mut memo = BTreeMap::new();
    let mut best = Vec::new();
    for m in graph.keys() {
        let c = from(m, graph, &mut memo);
        if c.len() > best.len() {
            best = c;
        }
    }
    best
}

fn cycles_of(krate: &str) -> Vec<Vec<String>> {
    let src = workspace_root().join(krate).join("src");
    assert!(src.is_dir(), "{} is not a crate's src folder", src.display());
    cycles(&import_graph(&src))
}

fn check(crates: &[&str]) {
    let found: Vec<String> = crates
        .iter()
        .flat_map(|k| cycles_of(k).into_iter().map(move |c| format!("{k}: {}", c.join(" ↔ "))))
        .collect();
    assert!(found.is_empty(), "import cycles between modules:\n{}", found.join("\n"));
}

#[test]
fn listed_crates_have_no_module_cycle() {
    check(ACYCLIC);
}

/// Prints each listed crate's longest import chain, the depth of its module stack (run with
/// `-- --nocapture` to read it), and checks that the chain is one: each module imports the next.
#[test]
fn longest_import_chain_of_each_crate() {
    for krate in ACYCLIC {
        let graph = import_graph(&workspace_root().join(krate).join("src"));
        let chain = longest_chain(&graph);
        for pair in chain.windows(2) {
            assert!(graph[&pair[0]].contains(&pair[1]), "{krate}: {pair:?} is no import");
        }
        let names: Vec<String> = chain.iter().map(|m| m.join("::")).collect();
        println!("{krate}: {} modules deep: {}", chain.len(), names.join(" → "));
    }
}

#[test]
#[ignore = "checks every crate, including those whose cycles other work is still breaking"]
fn every_crate_has_no_module_cycle() {
    check(ALL);
}

/// The checker finds a cycle it is shown, through `use` groups, `super::` and inline paths,
/// and none through a facade's re-exports.
#[test]
fn the_checker_sees_cycles_and_not_facades() {
    let dir = std::env::temp_dir().join(format!("module_cycles_{}", std::process::id()));
    let src = dir.join("src");
    fs::create_dir_all(src.join("nodes")).unwrap();
    let write = |p: &str, s: &str| fs::write(src.join(p), s).unwrap();
    write("lib.rs", "pub mod a;\npub mod b;\npub mod c;\npub mod nodes;\npub use a::A;\n");
    write("a.rs", "use crate::{b::B, nodes::Leaf};\npub struct A;\n");
    write("b.rs", "pub struct B(crate::c::C);\n");
    write("c.rs", "// use crate::a::A; (a comment names no module)\npub struct C;\n");
    write("nodes.rs", "pub mod leaf;\npub use leaf::Leaf;\n");
    write(
        "nodes/leaf.rs",
        "use super::super::c::C;\npub struct Leaf;\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\n",
    );
    let g = import_graph(&src);
    assert!(cycles(&g).is_empty(), "no cycle yet (a test module's super is leaf): {g:?}");
    write("c.rs", "pub struct C(crate::A);\n");
    assert_eq!(
        cycles(&import_graph(&src)),
        [["a", "b", "c", "nodes::leaf"]],
        "a → b → c → a and a → leaf → c → a (c names a through lib's re-export)"
    );
    write("c.rs", "pub struct C;\n");
    write("nodes/leaf.rs", "use super::super::{b::B, c::C};\npub struct Leaf;\n");
    let g = import_graph(&src);
    let chain: Vec<String> = longest_chain(&g).iter().map(|m| m.join("::")).collect();
    assert_eq!(chain, ["a", "nodes::leaf", "b", "c"], "a → leaf → b → c, longer than a → b → c");
    write("nodes/leaf.rs", "use super::super::{c::C, a};\npub struct Leaf;\n");
    assert_eq!(cycles(&import_graph(&src)), [["a", "nodes::leaf"]], "a → leaf → a");
    fs::remove_dir_all(&dir).unwrap();
}
