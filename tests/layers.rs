//! The module structure of the `tsc_vmm` library crate (`vmm/src`), checked
//! from its sources with `syn`. Fails when:
//! 1. two or more modules import each other in a cycle;
//! 2. the longest import chain is more than [`MAX_CHAIN`] modules;
//! 3. a source file under `vmm/src` is more than [`MAX_FILE`] lines (every
//!    `.rs` file there, `main.rs` and test files included);
//! 4. a function is more than [`MAX_FN`] lines (from its `fn` keyword to its
//!    closing brace; free functions, methods, trait defaults and nested
//!    functions; `#[test]` functions and `#[cfg(test)]` code left out).
//!
//! Each failure says exactly what is wrong: the cycle with the file:line of
//! a use creating each of its edges, the chain with the same, the file and
//! its length, the function, where it starts and its length.
//!
//! The graph, precisely:
//! - Nodes: the crate's modules, one per file (`lib.rs` is `crate`, `foo.rs`
//!   or `foo/mod.rs` is `crate::foo`, and so on), inline `mod x { ... }`
//!   blocks merged into their file's node. Test code is not part of it:
//!   `#[cfg(test)]` items and modules are skipped, and so are the files only
//!   a `#[cfg(test)] mod tests;` includes (and their descendants).
//! - An edge A -> B when code in A names an item *defined* in B: through a
//!   `use` (a private one; a `pub use` re-export is not a use by itself),
//!   including one in a function body, or through a path in code
//!   (`crate::x::f()`, `super::T`, `self::m::T`, or a path whose first
//!   segment a `use` brought in: `use crate::tsc; ... tsc::read()`). Names
//!   resolve to the module that defines the item, through `pub use`
//!   re-exports (globs included) recursively, so a facade `mod.rs` that only
//!   re-exports creates no edge. A `use` naming a module (`use
//!   crate::tsc;`) is an edge to that module only when nothing more specific
//!   is reached through it; when `tsc::read` is used, the edge goes to where
//!   `read` is defined. `mod child;` is not an edge, nor is a module to
//!   itself. Paths into other crates are ignored; macro arguments are
//!   scanned for `a::b` paths; attributes, visibilities and doc comments are
//!   not code. A path into the crate naming something the resolver does not
//!   know (made by a macro, say) is an edge to the deepest module it names.
//! - A cycle is a strongly connected component of more than one module. The
//!   longest chain is the longest path, in nodes, of the graph with each
//!   cycle condensed into one node.
//!
//! `LAYERS_PRINT=1 cargo test --test layers -- --nocapture` prints the whole
//! graph (every module with its outgoing edges and their evidence), the
//! cycles and the longest chain.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

#[path = "layers/dag.rs"]
mod dag;
#[path = "layers/graph.rs"]
mod graph;
#[path = "layers/size.rs"]
mod size;
#[path = "layers/unit.rs"]
mod unit;

use graph::{Graph, Source};

/// The most modules an import chain may span.
const MAX_CHAIN: usize = 10;
/// The most lines a source file may have.
const MAX_FILE: usize = 600;
/// The most lines a function may have.
const MAX_FN: usize = 120;

/// Every `.rs` file under `dir`, recursively, sorted.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries =
        std::fs::read_dir(dir).unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()));
    for entry in entries {
        let path = entry
            .unwrap_or_else(|e| panic!("cannot read an entry of {}: {e}", dir.display()))
            .path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
    out.sort();
}

/// The crate's files: (file as messages name it, module path or `None` for
/// `main.rs`, text).
fn files() -> &'static [(String, Option<String>, String)] {
    static FILES: OnceLock<Vec<(String, Option<String>, String)>> = OnceLock::new();
    FILES.get_or_init(|| {
        let vmm = Path::new(env!("CARGO_MANIFEST_DIR"));
        let src = vmm.join("src");
        let mut paths = Vec::new();
        rust_files(&src, &mut paths);
        assert!(!paths.is_empty(), "no .rs file under {}", src.display());
        let mut out = Vec::new();
        for path in paths {
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
            let rel = path
                .strip_prefix(&src)
                .expect("a file found under src/ is under src/");
            let name = format!("vmm/src/{}", rel.display());
            let mut segs: Vec<String> = rel
                .iter()
                .map(|s| s.to_string_lossy().into_owned())
                .collect();
            let last = segs.pop().unwrap_or_default();
            let module = match last.as_str() {
                "main.rs" if segs.is_empty() => None,
                "lib.rs" if segs.is_empty() => Some("crate".to_string()),
                "mod.rs" => Some(format!("crate::{}", segs.join("::"))),
                _ => {
                    segs.push(last.trim_end_matches(".rs").to_string());
                    Some(format!("crate::{}", segs.join("::")))
                }
            };
            out.push((name, module, text));
        }
        out
    })
}

/// The graph of `vmm/src`.
fn vmm_graph() -> &'static Graph {
    static GRAPH: OnceLock<Graph> = OnceLock::new();
    GRAPH.get_or_init(|| {
        let mut sources = BTreeMap::new();
        for (file, module, text) in files() {
            let Some(module) = module else { continue };
            let source = Source {
                file: file.clone(),
                text: text.clone(),
            };
            if let Some(other) = sources.insert(module.clone(), source) {
                panic!("{file} and {} are both module {module}", other.file);
            }
        }
        graph::analyse(&sources).unwrap_or_else(|e| panic!("cannot analyse vmm/src: {e}"))
    })
}

#[test]
fn no_import_cycles() {
    let g = vmm_graph();
    let cycles = dag::cycles(g);
    assert!(
        cycles.is_empty(),
        "{} import cycle(s) in vmm/src (a module must not depend on itself through others):\n{}",
        cycles.len(),
        dag::describe_cycles(g, &cycles)
    );
}

#[test]
fn import_chains_are_short() {
    let chain = dag::longest_chain(vmm_graph());
    assert!(
        chain.len() <= MAX_CHAIN,
        "an import chain of {} modules in vmm/src, more than {MAX_CHAIN}:\n{}",
        chain.len(),
        dag::describe_chain(&chain)
    );
}

#[test]
fn files_are_short() {
    let long: Vec<String> = files()
        .iter()
        .map(|(file, _, text)| (file, text.lines().count()))
        .filter(|&(_, n)| n > MAX_FILE)
        .map(|(file, n)| format!("    {file}: {n} lines"))
        .collect();
    assert!(
        long.is_empty(),
        "{} file(s) in vmm/src over {MAX_FILE} lines:\n{}",
        long.len(),
        long.join("\n")
    );
}

#[test]
fn functions_are_short() {
    let g = vmm_graph();
    let mut long = Vec::new();
    for (file, module, text) in files() {
        // main.rs, and the library's files that are not test code.
        if module.as_ref().is_none_or(|m| g.files.contains_key(m)) {
            let found =
                size::long_fns(file, text, MAX_FN).unwrap_or_else(|e| panic!("cannot parse {e}"));
            long.extend(found);
        }
    }
    let lines: Vec<String> = long
        .iter()
        .map(|f| {
            format!(
                "    {}:{}: fn {}: {} lines",
                f.file, f.line, f.name, f.lines
            )
        })
        .collect();
    assert!(
        long.is_empty(),
        "{} function(s) in vmm/src over {MAX_FN} lines (`fn` to closing brace):\n{}",
        long.len(),
        lines.join("\n")
    );
}

/// With `LAYERS_PRINT=1`: the whole graph, the cycles and the longest
/// chain, on stdout (`-- --nocapture` to see it).
#[test]
fn print_with_layers_print() {
    if std::env::var_os("LAYERS_PRINT").is_some_and(|v| v == "1") {
        let g = vmm_graph();
        let cycles = dag::cycles(g);
        let chain = dag::longest_chain(g);
        println!(
            "{}\n{}\n{}",
            dag::describe_graph(g),
            dag::describe_cycles(g, &cycles),
            dag::describe_chain(&chain)
        );
    }
}
