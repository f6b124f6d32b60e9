//! The graph logic on small crates written in place.

use std::collections::BTreeMap;

use crate::dag;
use crate::graph::{analyse, Graph, Source};
use crate::size::long_fns;

/// The graph of a crate given as (module path, source) pairs; the file of
/// `crate::a::b` is `a/b.rs`.
fn graph_of(modules: &[(&str, &str)]) -> Graph {
    let sources: BTreeMap<String, Source> = modules
        .iter()
        .map(|(m, text)| {
            let file = match m.strip_prefix("crate::") {
                Some(rest) => format!("{}.rs", rest.replace("::", "/")),
                None => "lib.rs".to_string(),
            };
            (
                m.to_string(),
                Source {
                    file,
                    text: text.to_string(),
                },
            )
        })
        .collect();
    analyse(&sources).unwrap_or_else(|e| panic!("{e}"))
}

/// Every edge as `from -> to`, `crate::` dropped.
fn edges(g: &Graph) -> Vec<String> {
    let short = |m: &str| m.strip_prefix("crate::").unwrap_or(m).to_string();
    let pairs = g
        .edges
        .iter()
        .flat_map(|(f, out)| out.keys().map(move |t| (f, t)));
    pairs
        .map(|(f, t)| format!("{} -> {}", short(f), short(t)))
        .collect()
}

#[test]
fn a_two_module_cycle_is_found_with_its_lines() {
    let g = graph_of(&[
        ("crate", "mod a;\nmod b;\n"),
        ("crate::a", "use crate::b::B;\npub struct A(B);\n"),
        (
            "crate::b",
            "pub struct B;\nfn f() {\n    let _ = crate::a::A(B);\n}\n",
        ),
    ]);
    assert_eq!(edges(&g), ["a -> b", "b -> a"]);
    let cycles = dag::cycles(&g);
    assert_eq!(cycles, [["crate::a", "crate::b"]]);
    let text = dag::describe_cycles(&g, &cycles);
    assert!(
        text.contains("crate::a -> crate::b: a.rs:1 `crate::b::B`"),
        "{text}"
    );
    assert!(
        text.contains("crate::b -> crate::a: b.rs:3 `crate::a::A`"),
        "{text}"
    );
    assert!(
        text.contains("for example: crate::a -> crate::b -> crate::a"),
        "{text}"
    );
}

#[test]
fn a_facade_re_export_is_not_a_cycle() {
    // `m` re-exports `m::inner`'s item and uses `other`; `other` uses the
    // item through the facade: the edge goes to `m::inner`, not to `m`.
    let g = graph_of(&[
        ("crate", "mod m;\nmod other;\n"),
        (
            "crate::m",
            "mod inner;\npub use inner::*;\nfn g() { crate::other::h(); }\n",
        ),
        ("crate::m::inner", "pub fn f() {}\n"),
        ("crate::other", "use crate::m::f;\npub fn h() { f() }\n"),
    ]);
    assert_eq!(edges(&g), ["m -> other", "other -> m::inner"]);
    assert!(dag::cycles(&g).is_empty());
}

#[test]
fn a_child_using_its_parents_item_is_not_a_cycle() {
    // The parent declares and re-exports the child's item: not an edge.
    let g = graph_of(&[
        ("crate", "mod p;\n"),
        (
            "crate::p",
            "mod child;\npub use child::Thing;\npub struct Helper;\n",
        ),
        (
            "crate::p::child",
            "use super::Helper;\npub struct Thing(Helper);\n",
        ),
    ]);
    assert_eq!(edges(&g), ["p::child -> p"]);
    assert!(dag::cycles(&g).is_empty());
}

#[test]
fn a_module_import_resolves_to_where_the_item_is_defined() {
    let g = graph_of(&[
        ("crate", "mod m;\nmod x;\nmod y;\n"),
        ("crate::m", "mod inner;\npub use inner::f;\n"),
        ("crate::m::inner", "pub fn f() {}\n"),
        // Used for something more specific: no edge to `m` itself.
        ("crate::x", "use crate::m;\nfn g() {\n    m::f();\n}\n"),
        // Used for nothing more specific: an edge to the module.
        ("crate::y", "#[allow(unused_imports)]\nuse crate::m;\n"),
    ]);
    assert_eq!(edges(&g), ["x -> m::inner", "y -> m"]);
    assert_eq!(g.edges["crate::x"]["crate::m::inner"].line, 3);
}

#[test]
fn sibling_items_resolve_through_the_parents_re_exports_and_macros() {
    let g = graph_of(&[
        ("crate", "mod p;\n"),
        ("crate::p", "mod a;\nmod b;\npub use a::A;\npub use b::*;\n"),
        (
            "crate::p::a",
            "pub struct A;\nfn f() { println!(\"{}\", super::format_b()); }\n",
        ),
        (
            "crate::p::b",
            "pub fn format_b() -> String { format!(\"{:?}\", super::A) }\n",
        ),
    ]);
    assert_eq!(edges(&g), ["p::a -> p::b", "p::b -> p::a"]);
}

#[test]
fn the_longest_chain_counts_modules_and_condenses_cycles() {
    let g = graph_of(&[
        (
            "crate",
            "mod a;\nmod b;\nmod c;\nmod d;\nmod e;\nuse a::A;\n",
        ),
        (
            "crate::a",
            "pub struct A;\nfn f() { crate::b::g(); crate::e::E; }\n",
        ),
        ("crate::b", "pub fn g() { crate::c::h() }\n"),
        ("crate::c", "pub fn h() { crate::d::i() }\npub fn j() {}\n"),
        ("crate::d", "pub fn i() { crate::c::j() }\n"),
        ("crate::e", "pub struct E;\n"),
    ]);
    let chain = dag::longest_chain(&g);
    let steps: Vec<Vec<String>> = chain.iter().map(|s| s.modules.clone()).collect();
    assert_eq!(
        steps,
        [
            vec!["crate"],
            vec!["crate::a"],
            vec!["crate::b"],
            vec!["crate::c", "crate::d"]
        ]
    );
    let text = dag::describe_chain(&chain);
    assert!(
        text.starts_with("longest import chain: 4 modules"),
        "{text}"
    );
    assert!(text.contains("2. crate::a  <- lib.rs:6 `a::A`"), "{text}");
    assert!(
        text.contains("via crate::b -> crate::c: b.rs:1 `crate::c::h`"),
        "{text}"
    );
}

#[test]
fn test_modules_and_test_files_are_left_out() {
    let g = graph_of(&[
        ("crate", "mod a;\nmod b;\n#[cfg(test)]\nmod tests;\n"),
        (
            "crate::a",
            "pub fn f() {}\n#[cfg(test)]\nmod tests {\n    use crate::b::g;\n}\n",
        ),
        (
            "crate::b",
            "pub fn g() {}\n#[cfg(test)]\nfn t() { crate::a::f() }\n",
        ),
        ("crate::tests", "use crate::a::f;\n"),
    ]);
    assert_eq!(edges(&g), Vec::<String>::new());
    assert!(!g.files.contains_key("crate::tests"));
}

#[test]
fn inline_modules_merge_into_their_file() {
    let g = graph_of(&[
        ("crate", "mod a;\nmod b;\n"),
        (
            "crate::a",
            "mod inner {\n    pub fn f() { crate::b::g() }\n}\npub use inner::f;\n",
        ),
        (
            "crate::b",
            "pub fn g() {}\nfn h() { crate::a::inner::f() }\n",
        ),
    ]);
    assert_eq!(edges(&g), ["a -> b", "b -> a"]);
    assert_eq!(g.files.len(), 3);
}

#[test]
fn other_crates_and_locals_are_not_edges() {
    let g = graph_of(&[
        ("crate", "mod a;\nmod fmt;\n"),
        (
            "crate::a",
            "use std::fmt;\nfn f(fmt: &mut fmt::Formatter) { let _ = fmt; }\n",
        ),
        ("crate::fmt", "pub fn g() {}\n"),
    ]);
    assert_eq!(edges(&g), Vec::<String>::new());
}

#[test]
fn long_functions_are_found_and_tests_left_out() {
    let body = "    let _ = 1;\n".repeat(5);
    let text = format!(
        "struct S;\nimpl S {{\n    fn long(&self) {{\n{body}    }}\n}}\nfn short() {{}}\n\
         #[test]\nfn long_test() {{\n{body}}}\n#[cfg(test)]\nmod tests {{\n    fn long() {{\n{body}    }}\n}}\n"
    );
    let found = long_fns("x.rs", &text, 6).unwrap_or_else(|e| panic!("{e}"));
    let expected = crate::size::LongFn {
        name: "S::long".into(),
        file: "x.rs".into(),
        line: 3,
        lines: 7,
    };
    assert_eq!(found, [expected]);
}

#[test]
fn a_function_does_not_hide_a_module_import_of_its_name() {
    // `fn check` (values) and `use crate::check` (types) coexist: `check::f`
    // goes through the import.
    let g = graph_of(&[
        ("crate", "mod check;\nmod cmd;\n"),
        ("crate::check", "mod inner;\npub use inner::f;\n"),
        ("crate::check::inner", "pub fn f() {}\n"),
        (
            "crate::cmd",
            "use crate::check;\nfn check() {\n    check::f();\n}\n",
        ),
    ]);
    assert_eq!(edges(&g), ["cmd -> check::inner"]);
}
