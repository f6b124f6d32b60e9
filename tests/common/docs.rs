//! The documentation as the tests read it: the README and every page under
//! `docs/`, so that a claim is found wherever the documentation keeps it.

/// Every documentation file, by path from the repository root.
pub const PAGES: &[(&str, &str)] = &[
    ("README.md", include_str!("../../README.md")),
    ("docs/measuring.md", include_str!("../../docs/measuring.md")),
    ("docs/compare.md", include_str!("../../docs/compare.md")),
    (
        "docs/host-backend.md",
        include_str!("../../docs/host-backend.md"),
    ),
    ("docs/checks.md", include_str!("../../docs/checks.md")),
    ("docs/kvmclock.md", include_str!("../../docs/kvmclock.md")),
    ("docs/frequency.md", include_str!("../../docs/frequency.md")),
    ("docs/mutants.md", include_str!("../../docs/mutants.md")),
    (
        "docs/harness-tools.md",
        include_str!("../../docs/harness-tools.md"),
    ),
    ("docs/ci.md", include_str!("../../docs/ci.md")),
    ("docs/fleet.md", include_str!("../../docs/fleet.md")),
    ("docs/restore.md", include_str!("../../docs/restore.md")),
    (
        "docs/kernel-matrix.md",
        include_str!("../../docs/kernel-matrix.md"),
    ),
    ("docs/long-runs.md", include_str!("../../docs/long-runs.md")),
    ("docs/speed.md", include_str!("../../docs/speed.md")),
    (
        "docs/troubleshooting.md",
        include_str!("../../docs/troubleshooting.md"),
    ),
];

/// All of the documentation, page after page.
pub fn all() -> String {
    PAGES
        .iter()
        .map(|(_, text)| *text)
        .collect::<Vec<_>>()
        .join("\n")
}

/// All of the documentation with its whitespace collapsed (sentences wrap
/// across lines).
pub fn flat() -> String {
    all().split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Every Markdown page under `docs/` is in [`PAGES`], and every page there
/// exists: a new page cannot escape the tests that read the documentation.
pub fn check_pages_listed() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs");
    let mut on_disk: Vec<String> = std::fs::read_dir(dir)
        .expect("docs/ is readable")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    on_disk.sort();
    let mut listed: Vec<String> = PAGES
        .iter()
        .map(|(p, _)| p.to_string())
        .filter(|p| p.starts_with("docs/"))
        .collect();
    listed.sort();
    assert_eq!(
        on_disk, listed,
        "tests/common/docs.rs must list every page of docs/"
    );
}

/// The checks docs/checks.md's table lists, in its order: the rows
/// "| N | `id` | ...", numbered 1, 2, ... without a gap.
pub fn check_ids() -> Vec<String> {
    let page = include_str!("../../docs/checks.md");
    let mut ids = Vec::new();
    for line in page.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let (Some(num), Some(id)) = (cells.get(1), cells.get(2)) else {
            continue;
        };
        let Ok(num) = num.parse::<usize>() else {
            continue;
        };
        let Some(id) = id.strip_prefix('`').and_then(|i| i.strip_suffix('`')) else {
            continue;
        };
        assert_eq!(
            num,
            ids.len() + 1,
            "docs/checks.md numbers its checks 1, 2, ..."
        );
        ids.push(id.to_string());
    }
    assert!(
        !ids.is_empty(),
        "docs/checks.md lists the checks in a table"
    );
    ids
}

/// Every relative link of the documentation (`[text](path)` or
/// `[text](path#anchor)`) names a file or directory that exists, relative to
/// the page that holds it.
pub fn check_links() {
    let root = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let mut broken = Vec::new();
    for (page, text) in PAGES {
        let dir = root.join(page).parent().map(std::path::Path::to_path_buf);
        let dir = dir.unwrap_or_else(|| root.to_path_buf());
        for (at, _) in text.match_indices("](") {
            let rest = &text[at + 2..];
            let Some(end) = rest.find(')') else { continue };
            let target = rest[..end].split('#').next().unwrap_or("");
            if target.is_empty() || target.contains("://") || target.contains(' ') {
                continue;
            }
            if !dir.join(target).exists() {
                broken.push(format!("{page}: {target}"));
            }
        }
    }
    assert!(broken.is_empty(), "links to nothing: {broken:#?}");
}
