//! Function lengths: every `fn` with a body (free functions, methods,
//! trait defaults, functions nested in functions), from the line of its
//! `fn` keyword to the line of its closing brace; `#[test]` functions and
//! `#[cfg(test)]` items and modules left out.

use syn::visit::{self, Visit};

use crate::graph::is_test;

/// A function longer than the limit.
#[derive(Debug, PartialEq)]
pub struct LongFn {
    /// `name`, `Type::name` (methods) or `outer::name` (nested).
    pub name: String,
    /// Its file and first line.
    pub file: String,
    /// The line of its `fn` keyword.
    pub line: usize,
    /// From that line to its closing brace, both included.
    pub lines: usize,
}

struct Fns<'a> {
    file: &'a str,
    limit: usize,
    scope: Vec<String>,
    out: Vec<LongFn>,
}

impl Fns<'_> {
    fn check(&mut self, name: &syn::Ident, sig: &syn::Signature, body: &syn::Block) {
        let line = sig.fn_token.span.start().line;
        let lines = body.brace_token.span.close().start().line + 1 - line;
        let mut path = self.scope.clone();
        path.push(name.to_string());
        if lines > self.limit {
            let (name, file) = (path.join("::"), self.file.to_string());
            self.out.push(LongFn {
                name,
                file,
                line,
                lines,
            });
        }
    }
}

impl<'a> Visit<'a> for Fns<'_> {
    fn visit_item_mod(&mut self, i: &'a syn::ItemMod) {
        if !is_test(&i.attrs) {
            self.scope.push(i.ident.to_string());
            visit::visit_item_mod(self, i);
            self.scope.pop();
        }
    }
    fn visit_item_impl(&mut self, i: &'a syn::ItemImpl) {
        if !is_test(&i.attrs) {
            let ty = match &*i.self_ty {
                syn::Type::Path(p) => p.path.segments.last().map(|s| s.ident.to_string()),
                _ => None,
            };
            self.scope.push(ty.unwrap_or_else(|| "<impl>".to_string()));
            visit::visit_item_impl(self, i);
            self.scope.pop();
        }
    }
    fn visit_item_trait(&mut self, i: &'a syn::ItemTrait) {
        if !is_test(&i.attrs) {
            self.scope.push(i.ident.to_string());
            visit::visit_item_trait(self, i);
            self.scope.pop();
        }
    }
    fn visit_item_fn(&mut self, i: &'a syn::ItemFn) {
        if !is_test(&i.attrs) {
            self.check(&i.sig.ident, &i.sig, &i.block);
            self.scope.push(i.sig.ident.to_string());
            visit::visit_item_fn(self, i);
            self.scope.pop();
        }
    }
    fn visit_impl_item_fn(&mut self, i: &'a syn::ImplItemFn) {
        if !is_test(&i.attrs) {
            self.check(&i.sig.ident, &i.sig, &i.block);
            self.scope.push(i.sig.ident.to_string());
            visit::visit_impl_item_fn(self, i);
            self.scope.pop();
        }
    }
    fn visit_trait_item_fn(&mut self, i: &'a syn::TraitItemFn) {
        if let (false, Some(body)) = (is_test(&i.attrs), &i.default) {
            self.check(&i.sig.ident, &i.sig, body);
            self.scope.push(i.sig.ident.to_string());
            visit::visit_trait_item_fn(self, i);
            self.scope.pop();
        }
    }
}

/// The functions of `text` (from `file`) longer than `limit` lines.
pub fn long_fns(file: &str, text: &str, limit: usize) -> Result<Vec<LongFn>, String> {
    let parsed = syn::parse_file(text).map_err(|e| format!("{file}: {e}"))?;
    let mut fns = Fns {
        file,
        limit,
        scope: Vec::new(),
        out: Vec::new(),
    };
    fns.visit_file(&parsed);
    Ok(fns.out)
}
