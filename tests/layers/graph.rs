//! The module graph of a crate from its sources, as defined in
//! `tests/layers.rs`: the module tree (file modules and inline `mod x {}`
//! blocks, test code left out), every module's names (items, child modules,
//! imports), the resolution of a path to the module that *defines* what it
//! names (through `use` and `pub use` re-exports, globs included), and the
//! edges between file modules with the first place that creates each.

use std::collections::{BTreeMap, BTreeSet};

use proc_macro2::{Ident, Spacing, TokenStream, TokenTree};
use syn::visit::{self, Visit};

/// One source file: where it is (for messages) and what it says.
pub struct Source {
    /// The file, as messages name it (`vmm/src/check/report.rs`).
    pub file: String,
    /// Its text.
    pub text: String,
}

/// The place that creates an edge: file, line and the path as written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct At {
    /// The file of the use.
    pub file: String,
    /// Its line (1-based).
    pub line: usize,
    /// The path used (`crate::check::baseline::BaselineVerdict`).
    pub path: String,
}

impl std::fmt::Display for At {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{} `{}`", self.file, self.line, self.path)
    }
}

/// The graph: nodes are file modules (`crate`, `crate::check::report`).
#[derive(Default)]
pub struct Graph {
    /// Every node's file.
    pub files: BTreeMap<String, String>,
    /// Every node's outgoing edges, each with the first place creating it.
    pub edges: BTreeMap<String, BTreeMap<String, At>>,
    /// Paths into the crate that name nothing this resolver knows (an item
    /// made by a macro, say): their edge goes to the deepest module named.
    pub unresolved: Vec<At>,
}

/// `#[cfg(test)]` or `#[test]`: test code, not part of the graph.
pub fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("test")
            || (a.path().is_ident("cfg")
                && matches!(&a.meta, syn::Meta::List(l) if l.tokens.to_string() == "test"))
    })
}

/// A name brought in by a `use` (`name: None` for a glob).
struct Import {
    name: Option<String>,
    path: Vec<String>,
    public: bool,
    line: usize,
}

/// A module: a file or an inline `mod x {}` (merged into its file's node).
struct Module {
    path: String,
    node: usize,
    parent: Option<usize>,
    file: String,
    children: BTreeMap<String, usize>,
    /// Defined items, and whether each is in the type namespace (a type,
    /// trait or enum: can be followed by `::`), not only values or macros.
    items: BTreeMap<String, bool>,
    variants: BTreeMap<String, BTreeSet<String>>,
    imports: Vec<Import>,
}

/// What a path names: a module, an item (its module and name), or
/// something outside the crate (another crate, a local, `Self`).
#[derive(Clone, Debug, PartialEq)]
enum Res {
    Module(usize),
    Item(usize, String),
    Extern,
}

/// A resolution: what, through which import of the starting module (its
/// index), and whether it stopped short at a module (an unknown name).
struct Resolved {
    res: Res,
    via: Option<usize>,
    partial: bool,
}

/// Nesting bound of re-export chains: beyond it, a name is external.
const DEPTH: usize = 32;

struct Tree {
    modules: Vec<Module>,
}

fn line(ident: &Ident) -> usize {
    ident.span().start().line
}

impl Tree {
    fn add(&mut self, parent: Option<usize>, path: String, file: String, inline: bool) -> usize {
        let id = self.modules.len();
        let node = match (inline, parent) {
            (true, Some(p)) => self.modules[p].node,
            _ => id,
        };
        self.modules.push(Module {
            path,
            node,
            parent,
            file,
            children: BTreeMap::new(),
            items: BTreeMap::new(),
            variants: BTreeMap::new(),
            imports: Vec::new(),
        });
        id
    }

    /// Module `m`'s names from its items; parses the files of `mod x;`.
    fn collect(
        &mut self,
        m: usize,
        items: &[syn::Item],
        sources: &BTreeMap<String, Source>,
        parsed: &mut Vec<(usize, syn::File)>,
    ) -> Result<(), String> {
        for item in items {
            match item {
                syn::Item::Mod(im) if !is_test(&im.attrs) => {
                    let name = im.ident.to_string();
                    let path = format!("{}::{name}", self.modules[m].path);
                    let c = match &im.content {
                        Some((_, inner)) => {
                            let file = self.modules[m].file.clone();
                            let c = self.add(Some(m), path, file, true);
                            self.collect(c, inner, sources, parsed)?;
                            c
                        }
                        None => {
                            let src = sources.get(&path).ok_or_else(|| {
                                format!(
                                    "{}:{}: `mod {name};` but no source for {path}",
                                    self.modules[m].file,
                                    line(&im.ident)
                                )
                            })?;
                            let c = self.add(Some(m), path, src.file.clone(), false);
                            let file = parse(src)?;
                            self.collect(c, &file.items, sources, parsed)?;
                            parsed.push((c, file));
                            c
                        }
                    };
                    self.modules[m].children.insert(name, c);
                }
                _ if is_test(attrs(item)) => {}
                syn::Item::Use(u) => self.add_use(m, u),
                _ => {
                    if let Some((name, is_type, variants)) = defines(item) {
                        let module = &mut self.modules[m];
                        if let Some(v) = variants {
                            module.variants.insert(name.clone(), v);
                        }
                        *module.items.entry(name).or_default() |= is_type;
                    }
                    // `use` inside function bodies: counted as the module's.
                    let mut uses = BlockUses(Vec::new());
                    uses.visit_item(item);
                    for u in uses.0 {
                        self.add_use(m, u);
                    }
                }
            }
        }
        Ok(())
    }

    fn add_use(&mut self, m: usize, u: &syn::ItemUse) {
        if u.leading_colon.is_some() {
            return; // `use ::x`: another crate
        }
        let public = !matches!(u.vis, syn::Visibility::Inherited);
        let mut out = Vec::new();
        flatten(&u.tree, &mut Vec::new(), &mut out);
        for (name, path, line) in out {
            let imports = &mut self.modules[m].imports;
            imports.push(Import {
                name,
                path,
                public,
                line,
            });
        }
    }

    fn parent(&self, m: usize) -> Res {
        self.modules[m].parent.map_or(Res::Extern, Res::Module)
    }

    /// `name` in module `m`'s namespaces (child, item, import, glob; only
    /// what can be followed by `::` when `more`), and the import of `m` it
    /// came through.
    fn lookup(
        &self,
        m: usize,
        name: &str,
        more: bool,
        depth: usize,
    ) -> Option<(Res, Option<usize>)> {
        let module = &self.modules[m];
        if let Some(&c) = module.children.get(name) {
            return Some((Res::Module(c), None));
        }
        if module
            .items
            .get(name)
            .is_some_and(|&is_type| is_type || !more)
        {
            return Some((Res::Item(m, name.to_string()), None));
        }
        if depth > DEPTH {
            return Some((Res::Extern, None));
        }
        let named = module
            .imports
            .iter()
            .position(|imp| imp.name.as_deref() == Some(name));
        if let Some(i) = named {
            let imp = &module.imports[i];
            return Some((self.resolve(m, &imp.path, depth + 1).res, Some(i)));
        }
        for (i, imp) in module.imports.iter().enumerate() {
            if imp.name.is_some() {
                continue;
            }
            match self.resolve(m, &imp.path, depth + 1).res {
                Res::Module(g) if g != m => {
                    if let Some((res, _)) = self.lookup(g, name, more, depth + 1) {
                        if res != Res::Extern {
                            return Some((res, Some(i)));
                        }
                    }
                }
                Res::Item(g, e) => {
                    let is_variant = self.modules[g].variants.get(&e);
                    if is_variant.is_some_and(|v| v.contains(name)) {
                        return Some((Res::Item(g, e), Some(i)));
                    }
                }
                _ => {}
            }
        }
        None
    }

    /// The path `segs`, written in module `m`.
    fn resolve(&self, m: usize, segs: &[String], depth: usize) -> Resolved {
        let mut via = None;
        let first = segs.first().map_or("", String::as_str);
        let mut cur = match first {
            "crate" | "$crate" => Res::Module(0),
            "self" => Res::Module(m),
            "super" => self.parent(m),
            _ => match self.lookup(m, first, segs.len() > 1, depth) {
                Some((res, v)) => {
                    via = v;
                    res
                }
                None => Res::Extern,
            },
        };
        for (i, seg) in segs.iter().enumerate().skip(1) {
            let Res::Module(x) = cur else { break };
            cur = match seg.as_str() {
                "self" => Res::Module(x),
                "super" => self.parent(x),
                _ => match self.lookup(x, seg, i + 1 < segs.len(), depth) {
                    Some((res, _)) => res,
                    None => {
                        let res = Res::Module(x);
                        return Resolved {
                            res,
                            via,
                            partial: true,
                        };
                    }
                },
            };
        }
        let partial = false;
        Resolved {
            res: cur,
            via,
            partial,
        }
    }

    /// The edges of module `m` (items as in `collect`; inline children
    /// recursively), into `graph`.
    fn edges(&self, m: usize, items: &[syn::Item], graph: &mut Graph) {
        let module = &self.modules[m];
        let mut paths = Paths(Vec::new());
        for item in items {
            match item {
                syn::Item::Mod(im) if is_test(&im.attrs) => {}
                syn::Item::Mod(im) => {
                    if let Some((_, inner)) = &im.content {
                        self.edges(module.children[&im.ident.to_string()], inner, graph);
                    }
                }
                _ if is_test(attrs(item)) => {}
                _ => paths.visit_item(item),
            }
        }
        let mut used = vec![false; module.imports.len()];
        let mut module_imports = Vec::new();
        let add = |graph: &mut Graph, res: &Res, line: usize, segs: &[String]| {
            if let Res::Item(d, _) | Res::Module(d) = res {
                let (from, to) = (
                    &self.modules[module.node],
                    &self.modules[self.modules[*d].node],
                );
                if from.path != to.path {
                    let path = segs.join("::");
                    let at = At {
                        file: module.file.clone(),
                        line,
                        path,
                    };
                    let out = graph.edges.entry(from.path.clone()).or_default();
                    out.entry(to.path.clone()).or_insert(at);
                }
            }
        };
        for (i, imp) in module.imports.iter().enumerate() {
            let r = self.resolve(m, &imp.path, 0);
            if let Some(v) = r.via.filter(|&v| v != i) {
                used[v] = true;
            }
            if imp.public {
                continue;
            }
            match &r.res {
                Res::Item(..) => add(graph, &r.res, imp.line, &imp.path),
                Res::Module(_) => module_imports.push((i, r.res)),
                Res::Extern => {}
            }
        }
        for (segs, line) in paths.0 {
            let r = self.resolve(m, &segs, 0);
            if let Some(v) = r.via {
                let glob = module.imports[v].name.is_none();
                used[v] |= glob || segs.len() > 1;
            }
            if r.partial {
                let (file, path) = (module.file.clone(), segs.join("::"));
                graph.unresolved.push(At { file, line, path });
            }
            // A whole path naming a module is a local of that name.
            if matches!(r.res, Res::Item(..)) || r.partial {
                add(graph, &r.res, line, &segs);
            }
        }
        for (i, res) in module_imports {
            if !used[i] {
                let imp = &module.imports[i];
                add(graph, &res, imp.line, &imp.path);
            }
        }
    }
}

/// The name an item defines, whether it is in the type namespace, and an
/// enum's variants.
fn defines(item: &syn::Item) -> Option<(String, bool, Option<BTreeSet<String>>)> {
    use syn::Item as I;
    let (ident, is_type) = match item {
        I::Const(i) => (&i.ident, false),
        I::Fn(i) => (&i.sig.ident, false),
        I::Static(i) => (&i.ident, false),
        I::Struct(i) => (&i.ident, true),
        I::Trait(i) => (&i.ident, true),
        I::TraitAlias(i) => (&i.ident, true),
        I::Type(i) => (&i.ident, true),
        I::Union(i) => (&i.ident, true),
        I::Macro(syn::ItemMacro { ident: Some(i), .. }) => (i, false),
        I::Enum(e) => {
            let v = e.variants.iter().map(|v| v.ident.to_string()).collect();
            return Some((e.ident.to_string(), true, Some(v)));
        }
        _ => return None,
    };
    Some((ident.to_string(), is_type, None))
}

/// An item's attributes.
fn attrs(item: &syn::Item) -> &[syn::Attribute] {
    use syn::Item as I;
    match item {
        I::Const(i) => &i.attrs,
        I::Enum(i) => &i.attrs,
        I::ExternCrate(i) => &i.attrs,
        I::Fn(i) => &i.attrs,
        I::ForeignMod(i) => &i.attrs,
        I::Impl(i) => &i.attrs,
        I::Macro(i) => &i.attrs,
        I::Mod(i) => &i.attrs,
        I::Static(i) => &i.attrs,
        I::Struct(i) => &i.attrs,
        I::Trait(i) => &i.attrs,
        I::TraitAlias(i) => &i.attrs,
        I::Type(i) => &i.attrs,
        I::Union(i) => &i.attrs,
        I::Use(i) => &i.attrs,
        _ => &[],
    }
}

/// The leaves of a `use` tree: (local name or `None` for a glob, full
/// path, line).
fn flatten(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<Leaf>) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            flatten(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => out.push(leaf(prefix, &n.ident, &n.ident)),
        syn::UseTree::Rename(r) => out.push(leaf(prefix, &r.ident, &r.rename)),
        syn::UseTree::Glob(g) => out.push((None, prefix.clone(), g.star_token.span.start().line)),
        syn::UseTree::Group(g) => g.items.iter().for_each(|t| flatten(t, prefix, out)),
    }
}

type Leaf = (Option<String>, Vec<String>, usize);

fn leaf(prefix: &[String], ident: &Ident, name: &Ident) -> Leaf {
    let mut path = prefix.to_vec();
    let mut name = name.to_string();
    if ident == "self" {
        if name == "self" {
            name = prefix.last().cloned().unwrap_or_default();
        }
    } else {
        path.push(ident.to_string());
    }
    (Some(name), path, line(ident))
}

/// The `use` declarations nested in an item (function bodies), test code
/// and inline modules left out.
struct BlockUses<'a>(Vec<&'a syn::ItemUse>);

impl<'a> Visit<'a> for BlockUses<'a> {
    fn visit_item(&mut self, i: &'a syn::Item) {
        if !is_test(attrs(i)) {
            visit::visit_item(self, i);
        }
    }
    fn visit_item_use(&mut self, i: &'a syn::ItemUse) {
        self.0.push(i);
    }
    fn visit_item_mod(&mut self, _: &'a syn::ItemMod) {}
}

/// Every path in code (with its line), `use` and attributes left out,
/// macro arguments scanned for `a::b` sequences.
struct Paths(Vec<(Vec<String>, usize)>);

impl<'a> Visit<'a> for Paths {
    fn visit_item(&mut self, i: &'a syn::Item) {
        if !is_test(attrs(i)) {
            visit::visit_item(self, i);
        }
    }
    fn visit_impl_item_fn(&mut self, i: &'a syn::ImplItemFn) {
        if !is_test(&i.attrs) {
            visit::visit_impl_item_fn(self, i);
        }
    }
    fn visit_path(&mut self, p: &'a syn::Path) {
        if p.leading_colon.is_none() {
            let segs = p.segments.iter().map(|s| s.ident.to_string()).collect();
            let line = p.segments.first().map_or(0, |s| line(&s.ident));
            self.0.push((segs, line));
        }
        visit::visit_path(self, p);
    }
    fn visit_item_use(&mut self, _: &'a syn::ItemUse) {}
    fn visit_item_mod(&mut self, _: &'a syn::ItemMod) {}
    fn visit_attribute(&mut self, _: &'a syn::Attribute) {}
    fn visit_visibility(&mut self, _: &'a syn::Visibility) {}
    fn visit_item_macro(&mut self, i: &'a syn::ItemMacro) {
        if i.ident.is_none() {
            self.visit_macro(&i.mac); // `macro_rules!` bodies are not code
        }
    }
    fn visit_macro(&mut self, m: &'a syn::Macro) {
        scan(m.tokens.clone(), &mut self.0);
    }
}

/// The `a::b::c` sequences (two segments or more) in macro tokens.
fn scan(tokens: TokenStream, out: &mut Vec<(Vec<String>, usize)>) {
    let tokens: Vec<TokenTree> = tokens.into_iter().collect();
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i] {
            TokenTree::Group(g) => scan(g.stream(), out),
            TokenTree::Ident(id) => {
                let dollar =
                    i > 0 && matches!(&tokens[i - 1], TokenTree::Punct(p) if p.as_char() == '$');
                let mut segs = vec![if dollar {
                    format!("${id}")
                } else {
                    id.to_string()
                }];
                while let (
                    Some(TokenTree::Punct(a)),
                    Some(TokenTree::Punct(b)),
                    Some(TokenTree::Ident(n)),
                ) = (tokens.get(i + 1), tokens.get(i + 2), tokens.get(i + 3))
                {
                    if a.as_char() != ':' || a.spacing() != Spacing::Joint || b.as_char() != ':' {
                        break;
                    }
                    segs.push(n.to_string());
                    i += 3;
                }
                if segs.len() > 1 {
                    out.push((segs, line(id)));
                }
            }
            _ => {}
        }
        i += 1;
    }
}

fn parse(src: &Source) -> Result<syn::File, String> {
    syn::parse_file(&src.text).map_err(|e| {
        let at = e.span().start();
        format!("{}:{}:{}: {e}", src.file, at.line, at.column + 1)
    })
}

/// The graph of the crate whose modules' sources are `sources`, keyed by
/// module path (`crate`, `crate::a`, `crate::a::b`). Sources no non-test
/// `mod` reaches from `crate` are not part of it.
pub fn analyse(sources: &BTreeMap<String, Source>) -> Result<Graph, String> {
    let root = sources.get("crate").ok_or("no source for the crate root")?;
    let mut tree = Tree {
        modules: Vec::new(),
    };
    tree.add(None, "crate".to_string(), root.file.clone(), false);
    let file = parse(root)?;
    let mut parsed = Vec::new();
    tree.collect(0, &file.items, sources, &mut parsed)?;
    parsed.push((0, file));
    let mut graph = Graph::default();
    let nodes = tree
        .modules
        .iter()
        .enumerate()
        .filter(|(id, m)| m.node == *id);
    for (_, m) in nodes {
        graph.files.insert(m.path.clone(), m.file.clone());
        graph.edges.entry(m.path.clone()).or_default();
    }
    for (m, file) in &parsed {
        tree.edges(*m, &file.items, &mut graph);
    }
    Ok(graph)
}
