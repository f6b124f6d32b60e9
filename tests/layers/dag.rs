//! The graph's strongly connected components (the import cycles), the
//! longest chain of its condensation, and how both are written out.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write;

use crate::graph::{At, Graph};

/// The strongly connected components, each sorted, in the order of their
/// first module (Tarjan's algorithm).
pub fn components(g: &Graph) -> Vec<Vec<String>> {
    struct Tarjan<'a> {
        adj: Vec<Vec<usize>>,
        names: Vec<&'a String>,
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        stack: Vec<usize>,
        on_stack: Vec<bool>,
        next: usize,
        out: Vec<Vec<String>>,
    }
    impl Tarjan<'_> {
        fn visit(&mut self, v: usize) {
            self.index[v] = Some(self.next);
            self.low[v] = self.next;
            self.next += 1;
            self.stack.push(v);
            self.on_stack[v] = true;
            for w in self.adj[v].clone() {
                match self.index[w] {
                    None => {
                        self.visit(w);
                        self.low[v] = self.low[v].min(self.low[w]);
                    }
                    Some(i) if self.on_stack[w] => self.low[v] = self.low[v].min(i),
                    Some(_) => {}
                }
            }
            if Some(self.low[v]) == self.index[v] {
                let mut c = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack[w] = false;
                    c.push(self.names[w].clone());
                    if w == v {
                        break;
                    }
                }
                c.sort();
                self.out.push(c);
            }
        }
    }
    let names: Vec<&String> = g.edges.keys().collect();
    let pos: BTreeMap<&String, usize> = names.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let adj = g
        .edges
        .values()
        .map(|out| out.keys().filter_map(|t| pos.get(t).copied()).collect())
        .collect();
    let n = names.len();
    let mut t = Tarjan {
        adj,
        names,
        index: vec![None; n],
        low: vec![0; n],
        stack: Vec::new(),
        on_stack: vec![false; n],
        next: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if t.index[v].is_none() {
            t.visit(v);
        }
    }
    t.out.sort();
    t.out
}

/// The import cycles: components of more than one module.
pub fn cycles(g: &Graph) -> Vec<Vec<String>> {
    components(g).into_iter().filter(|c| c.len() > 1).collect()
}

/// A shortest cycle through the first module of component `c`.
fn example(g: &Graph, c: &[String]) -> Vec<String> {
    let inside: BTreeSet<&String> = c.iter().collect();
    let start = &c[0];
    let mut prev: BTreeMap<&String, &String> = BTreeMap::new();
    let mut queue = VecDeque::from([start]);
    while let Some(v) = queue.pop_front() {
        for w in g.edges[v].keys().filter(|w| inside.contains(w)) {
            if w == start {
                let mut path = vec![start.clone(), v.clone()];
                let mut at = v;
                while let Some(p) = prev.get(at) {
                    path.push((*p).clone());
                    at = p;
                }
                path.reverse(); // start, ..., v, start
                return path;
            }
            if !prev.contains_key(w) && w != start {
                prev.insert(w, v);
                queue.push_back(w);
            }
        }
    }
    vec![start.clone()]
}

/// The cycles, each with its modules, an example loop and every edge inside
/// it with the place that creates it.
pub fn describe_cycles(g: &Graph, cycles: &[Vec<String>]) -> String {
    let mut s = String::new();
    for c in cycles {
        let _ = writeln!(s, "import cycle of {} modules:", c.len());
        for m in c {
            let _ = writeln!(s, "    {m} ({})", g.files[m]);
        }
        let _ = writeln!(s, "  for example: {}", example(g, c).join(" -> "));
        let _ = writeln!(
            s,
            "  its edges (a use of each; remove enough of them to break the cycle):"
        );
        let inside: BTreeSet<&String> = c.iter().collect();
        for m in c {
            for (to, at) in g.edges[m].iter().filter(|(t, _)| inside.contains(t)) {
                let _ = writeln!(s, "    {m} -> {to}: {at}");
            }
        }
    }
    s
}

/// An edge: from, to, and the place that creates it.
pub type Edge = (String, String, At);

/// One step of a chain: a module (or the modules of a cycle) and the edge
/// from the step before (`None` for the first).
pub struct Step {
    /// Its modules, sorted.
    pub modules: Vec<String>,
    /// The edge into it.
    pub via: Option<Edge>,
}

/// The longest path of the condensed graph, one component per step.
pub fn longest_chain(g: &Graph) -> Vec<Step> {
    let comps = components(g);
    let comp_of: BTreeMap<&String, usize> = comps
        .iter()
        .enumerate()
        .flat_map(|(i, c)| c.iter().map(move |m| (m, i)))
        .collect();
    // For each step, the first edge between the two components.
    let mut succ: Vec<BTreeMap<usize, Edge>> = vec![BTreeMap::new(); comps.len()];
    for (from, out) in &g.edges {
        for (to, at) in out {
            let (a, b) = (comp_of[from], comp_of[to]);
            if a != b {
                succ[a]
                    .entry(b)
                    .or_insert_with(|| (from.clone(), to.clone(), at.clone()));
            }
        }
    }
    fn len(
        c: usize,
        succ: &[BTreeMap<usize, Edge>],
        memo: &mut [Option<(usize, Option<usize>)>],
    ) -> usize {
        if let Some((l, _)) = memo[c] {
            return l;
        }
        let mut best = (1, None);
        for &n in succ[c].keys() {
            let l = 1 + len(n, succ, memo);
            if l > best.0 {
                best = (l, Some(n));
            }
        }
        memo[c] = Some(best);
        best.0
    }
    let mut memo = vec![None; comps.len()];
    let start = (0..comps.len()).fold(None, |best: Option<(usize, usize)>, c| {
        let l = len(c, &succ, &mut memo);
        match best {
            Some((bl, _)) if bl >= l => best,
            _ => Some((l, c)),
        }
    });
    let mut chain = Vec::new();
    let mut at = start.map(|(_, c)| (c, None));
    while let Some((c, edge)) = at {
        chain.push(Step {
            modules: comps[c].clone(),
            via: edge,
        });
        at = memo[c]
            .and_then(|(_, n)| n)
            .map(|n| (n, Some(succ[c][&n].clone())));
    }
    chain
}

/// The chain, one module (or `{cycle}`) a line, with each edge's evidence.
pub fn describe_chain(chain: &[Step]) -> String {
    let mut s = format!(
        "longest import chain: {} modules (a cycle counts as one)\n",
        chain.len()
    );
    let single = |step: &Step, m: &String| step.modules.len() == 1 && &step.modules[0] == m;
    for (i, step) in chain.iter().enumerate() {
        let name = match step.modules.as_slice() {
            [one] => one.clone(),
            many => format!("{{{}}} (a cycle)", many.join(", ")),
        };
        let _ = write!(s, "  {:>2}. {name}", i + 1);
        let _ = match &step.via {
            None => writeln!(s),
            Some((from, to, at)) if i > 0 && single(&chain[i - 1], from) && single(step, to) => {
                writeln!(s, "  <- {at}")
            }
            Some((from, to, at)) => writeln!(s, "\n        via {from} -> {to}: {at}"),
        };
    }
    s
}

/// Every module with its outgoing edges, and the paths left unresolved.
pub fn describe_graph(g: &Graph) -> String {
    let mut s = format!("module graph: {} modules\n", g.files.len());
    for (m, out) in &g.edges {
        let _ = writeln!(s, "{m} ({}): {} edges", g.files[m], out.len());
        for (to, at) in out {
            let _ = writeln!(s, "    -> {to}: {at}");
        }
    }
    for at in &g.unresolved {
        let _ = writeln!(s, "unresolved (edge to the deepest module named): {at}");
    }
    s
}
