//! A strict checker of KTAP version 1 output (Documentation/dev-tools/ktap.rst),
//! written from the specification, independent of the writer under test:
//! a version line first, one plan line `1..N` before the results, exactly N
//! result lines numbered 1..N in order, each `ok`/`not ok`, a description
//! without `#`, and an optional `# [directive] [diagnostic]`; every other
//! line a `# ` diagnostic (the writer emits no unknown lines, so none are
//! allowed). Nested subtests are not used by the writer and are refused.
//!
//! Then the same text by the rules of the kernel's own KTAP parser, KUnit's
//! `kunit_parser.py` ([`kunit`], rules listed there): it must read every
//! result with the name and status the grammar gives it, so that what
//! kernel CI counts is what the file says.

/// One result line, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KtapResult {
    /// `ok` (true) or `not ok`.
    pub ok: bool,
    /// Its number.
    pub number: usize,
    /// The description (the test's name).
    pub description: String,
    /// The directive (SKIP, TODO, XFAIL, TIMEOUT, ERROR), if any.
    pub directive: Option<String>,
    /// The diagnostic data after the directive.
    pub diagnostic: String,
}

const DIRECTIVES: [&str; 5] = ["SKIP", "TODO", "XFAIL", "TIMEOUT", "ERROR"];

fn parse_result(line: &str) -> Result<KtapResult, String> {
    let (ok, rest) = if let Some(r) = line.strip_prefix("not ok ") {
        (false, r)
    } else if let Some(r) = line.strip_prefix("ok ") {
        (true, r)
    } else {
        return Err(format!("not a result line: {line:?}"));
    };
    let (head, tail) = match rest.split_once(" # ") {
        Some((h, t)) => (h, Some(t)),
        None => match rest.strip_suffix(" #") {
            Some(h) => (h, Some("")),
            None => (rest, None),
        },
    };
    let (num, description) = head.split_once(' ').unwrap_or((head, ""));
    let number: usize = num
        .parse()
        .map_err(|_| format!("result number {num:?} is not a number: {line:?}"))?;
    if description.contains('#') {
        return Err(format!("a description may not contain '#': {line:?}"));
    }
    let (directive, diagnostic) = match tail {
        None => (None, String::new()),
        Some(t) => {
            let (word, after) = t.split_once(' ').unwrap_or((t, ""));
            if DIRECTIVES.contains(&word) {
                (Some(word.to_string()), after.to_string())
            } else {
                (None, t.to_string())
            }
        }
    };
    Ok(KtapResult {
        ok,
        number,
        description: description.to_string(),
        directive,
        diagnostic,
    })
}

/// Checks `text` against the grammar; returns the results in order.
pub fn validate(text: &str) -> Result<Vec<KtapResult>, String> {
    let mut lines = text.lines();
    match lines.next() {
        Some("KTAP version 1") => {}
        other => {
            return Err(format!(
                "the first line must be 'KTAP version 1', not {other:?}"
            ))
        }
    }
    let mut plan: Option<usize> = None;
    let mut results = Vec::new();
    for line in lines {
        if line.starts_with(' ') {
            return Err(format!(
                "indented (nested) lines are not expected: {line:?}"
            ));
        }
        if line == "#" || line.starts_with("# ") {
            continue;
        }
        if let Some(n) = line.strip_prefix("1..") {
            if plan.is_some() {
                return Err("a second plan line".into());
            }
            if !results.is_empty() {
                return Err("the plan line must come before the results".into());
            }
            plan = Some(n.parse().map_err(|_| format!("bad plan line {line:?}"))?);
            continue;
        }
        let r = parse_result(line)?;
        if r.number != results.len() + 1 {
            return Err(format!(
                "result {} where {} was due: {line:?}",
                r.number,
                results.len() + 1
            ));
        }
        if matches!(r.directive.as_deref(), Some("TIMEOUT" | "ERROR")) && r.ok {
            return Err(format!("TIMEOUT/ERROR must be 'not ok': {line:?}"));
        }
        results.push(r);
    }
    match plan {
        Some(n) if n == results.len() => {}
        Some(n) => {
            return Err(format!(
                "the plan says {n} tests, {} results follow",
                results.len()
            ))
        }
        None => return Err("no plan line".into()),
    }
    // The kernel's own parser must read every result as the grammar does.
    let kunit = kunit(text).map_err(|e| format!("KUnit's parser: {e}"))?;
    for (r, k) in results.iter().zip(&kunit) {
        let want = match (r.directive.as_deref(), r.ok) {
            (Some("SKIP"), _) => KunitStatus::Skipped,
            (_, true) => KunitStatus::Success,
            (_, false) => KunitStatus::Failure,
        };
        if k.status != want || k.name != r.description {
            return Err(format!(
                "KUnit's parser reads result {} as {:?} named {:?}, the grammar as {want:?} \
                 named {:?}",
                r.number, k.status, k.name, r.description
            ));
        }
    }
    Ok(results)
}

/// The checker itself must refuse what the grammar forbids.
pub fn self_test() {
    kunit_self_test();
    // A regression written with a SKIP directive: the grammar reads it as
    // not ok, KUnit as skipped: refused.
    assert!(
        validate("KTAP version 1\n1..1\nnot ok 1 a # SKIP: not measured; regressed\n").is_err()
    );
    assert!(
        validate("KTAP version 1\n# env\n1..1\nok 1 a\n").is_err(),
        "KUnit looks for the plan right after the version line only"
    );
    assert!(validate("KTAP version 1\n1..1\nok 1 a\n").is_ok());
    assert!(validate("TAP version 13\n1..1\nok 1 a\n").is_err());
    assert!(validate("KTAP version 1\nok 1 a\n").is_err(), "no plan");
    assert!(
        validate("KTAP version 1\n1..2\nok 1 a\n").is_err(),
        "plan mismatch"
    );
    assert!(
        validate("KTAP version 1\n1..2\nok 1 a\nok 3 b\n").is_err(),
        "numbering"
    );
    assert!(
        validate("KTAP version 1\n1..1\nok 1 a#b\n").is_err(),
        "'#' in a description"
    );
    assert!(
        validate("KTAP version 1\n1..1\nmaybe 1 a\n").is_err(),
        "unknown line"
    );
    assert!(validate("KTAP version 1\n1..1\nok 1 a # TIMEOUT 3 s\n").is_err());
    let r = validate("KTAP version 1\n1..2\n# hello\nok 1 a # SKIP why\nnot ok 2 b # reason\n")
        .expect("valid");
    assert_eq!(r[0].directive.as_deref(), Some("SKIP"));
    assert_eq!(r[0].diagnostic, "why");
    assert!(!r[1].ok && r[1].directive.is_none() && r[1].diagnostic == "reason");
}

// ---------------------------------------------------------------------------
// The rules of the kernel's own KTAP parser.
//
// KUnit's tools/testing/kunit/kunit_parser.py is what kernel CI runs over
// KTAP (kunit.py parse, and the systems built on it). Its rules, as read
// from that file and restated here in our own code (none of it copied):
//
// 1. The output starts at the first line holding `KTAP version N` (or `TAP
//    version N`) and ends at a line holding `List of all partitions:`,
//    `Kernel panic - not syncing: VFS:` or `reboot: System halted`; what
//    lies before the version line is cut off every line (a dmesg prefix),
//    leading whitespace is dropped (`extract_tap_lines`).
// 2. The version must be one it accepts: KTAP 1 (`check_version`; it
//    takes TAP 13 and 14 too, which the writer does not write).
// 3. The plan `1..N` is looked for only on the line right after the version
//    line; anywhere else it is a mere diagnostic (`parse_test_plan`).
// 4. A line matching `KTAP version N` or `# Subtest: NAME` opens a nested
//    test (`parse_test_header`); every line that is neither that nor a result
//    line is a diagnostic and goes unchecked (`parse_diagnostic`).
// 5. A result line is `(ok|not ok) NUMBER [- ]NAME[ # REST]` where NAME has
//    no `#` and REST starts after ` # ` (`TEST_RESULT`); a line that starts
//    like a result but does not match is a diagnostic: its result is lost.
// 6. A result line holding ` # SKIP` anywhere after its number is SKIPPED,
//    whether `ok` or `not ok`; otherwise `ok` is SUCCESS and `not ok` is
//    FAILURE (`TEST_RESULT_SKIP`, `parse_test_result`). A skipped test's
//    name is what precedes the last ` # SKIP`.
// 7. Results must be numbered 1, 2, ... in order (`Expected test number`),
//    and there must be as many as the plan says (`missing expected
//    subtest!`); results beyond the plan are never read.

/// How KUnit's parser counts a result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KunitStatus {
    Success,
    Failure,
    Skipped,
}

/// One result as KUnit's parser reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KunitResult {
    pub number: usize,
    pub name: String,
    pub status: KunitStatus,
}

/// Rule 5 (and 6): a result line read as KUnit reads it, or `None` when
/// KUnit would not take it for one.
fn kunit_result(line: &str) -> Option<KunitResult> {
    let rest = line
        .strip_prefix("ok ")
        .or_else(|| line.strip_prefix("not ok "))?;
    let ok = line.starts_with("ok ");
    let digits = rest.chars().take_while(char::is_ascii_digit).count();
    let number: usize = rest[..digits].parse().ok()?;
    let rest = rest[digits..].strip_prefix(' ')?;
    let body = rest.strip_prefix("- ").unwrap_or(rest);
    // NAME is free of '#' and ends where ` # ` starts (or at the line's
    // end): the first '#' must be the one of that ` # `.
    let name = match body.find('#') {
        None => body,
        Some(at) if at > 0 && body[at - 1..].starts_with(" # ") => &body[..at - 1],
        Some(_) => return None,
    };
    let status = match rest.rfind(" # SKIP") {
        Some(at) => {
            let skipped = &rest[..at];
            let skipped = skipped.strip_prefix("- ").unwrap_or(skipped);
            return Some(KunitResult {
                number,
                name: skipped.to_string(),
                status: KunitStatus::Skipped,
            });
        }
        None if ok => KunitStatus::Success,
        None => KunitStatus::Failure,
    };
    Some(KunitResult {
        number,
        name: name.to_string(),
        status,
    })
}

/// Reads `text` by rules 1-7; an error names the rule a line breaks (what
/// KUnit would report as an error or silently read otherwise than meant).
pub fn kunit(text: &str) -> Result<Vec<KunitResult>, String> {
    const ENDS: [&str; 3] = [
        "List of all partitions:",
        "Kernel panic - not syncing: VFS:",
        "reboot: System halted",
    ];
    let is_version = |l: &str| {
        ["KTAP version ", "TAP version "].iter().any(|p| {
            l.strip_prefix(p)
                .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
        })
    };
    let mut lines = text.lines().map(str::trim_end);
    // Rule 1: from the version line on.
    let Some(first) = lines.find(|l| l.contains("KTAP version ") || l.contains("TAP version "))
    else {
        return Err("rule 1: no version line: KUnit finds no KTAP output".into());
    };
    let prefix = first
        .find("KTAP version ")
        .or_else(|| first.find("TAP version "))
        .unwrap_or(0);
    let version = &first[prefix..];
    // Rule 2.
    if version != "KTAP version 1" {
        return Err(format!("rule 2: {version:?} is not KTAP version 1"));
    }
    let lines: Vec<String> = lines
        .take_while(|l| !ENDS.iter().any(|e| l.contains(e)))
        .map(|l| l.get(prefix..).unwrap_or("").trim_start().to_string())
        .collect();
    // Rule 3.
    let plan: usize = lines
        .first()
        .and_then(|l| l.strip_prefix("1.."))
        .map(|n| {
            n.chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
        })
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| {
            format!(
                "rule 3: the line after the version line is {:?}, not the plan: KUnit sees no plan",
                lines.first()
            )
        })?;
    let mut results = Vec::new();
    for line in &lines[1..] {
        // Rule 4.
        if is_version(line) || line.starts_with("# Subtest: ") {
            return Err(format!("rule 4: {line:?} opens a nested test"));
        }
        let looks_like_a_result = line.starts_with("ok ") || line.starts_with("not ok ");
        match kunit_result(line) {
            None if looks_like_a_result => {
                return Err(format!(
                    "rule 5: {line:?} is not a result line to KUnit: the result is lost"
                ))
            }
            None => continue,
            Some(r) => {
                // Rule 7.
                if results.len() == plan {
                    return Err(format!("rule 7: {line:?} lies beyond the plan of {plan}"));
                }
                if r.number != results.len() + 1 {
                    return Err(format!(
                        "rule 7: result {} where {} was due: {line:?}",
                        r.number,
                        results.len() + 1
                    ));
                }
                results.push(r);
            }
        }
    }
    if results.len() != plan {
        return Err(format!(
            "rule 7: the plan says {plan}, {} results follow",
            results.len()
        ));
    }
    Ok(results)
}

/// The KUnit reader must read what the kernel's parser reads, and refuse
/// what it would misread.
pub fn kunit_self_test() {
    let r = kunit(
        "KTAP version 1\n1..3\nok 1 a # fine\nnot ok 2 b # bad # really\nok 3 c # SKIP why\n",
    )
    .expect("valid");
    let got: Vec<(&str, KunitStatus)> = r.iter().map(|r| (r.name.as_str(), r.status)).collect();
    assert_eq!(
        got,
        [
            ("a", KunitStatus::Success),
            ("b", KunitStatus::Failure),
            ("c", KunitStatus::Skipped)
        ]
    );
    // Rule 6: ` # SKIP` anywhere makes it skipped, `not ok` or not: the
    // line the old writer gave a regressed SKIP.
    let r = kunit("KTAP version 1\n1..1\nnot ok 1 same-start # SKIP: not measured; regressed\n")
        .expect("parses");
    assert_eq!(r[0].status, KunitStatus::Skipped);
    assert_eq!(r[0].name, "same-start");
    let r = kunit("KTAP version 1\n1..1\nnot ok 1 a # stage 2 # SKIP later\n").expect("parses");
    assert_eq!(r[0].status, KunitStatus::Skipped);
    // Rule 1: a dmesg prefix is cut off every line.
    let r = kunit("[    1.0] KTAP version 1\n[    1.0] 1..1\n[    1.1] ok 1 a\n").expect("prefix");
    assert_eq!(r[0].name, "a");
    // Rules 2, 3, 4, 5, 7.
    assert!(kunit("KTAP version 2\n1..1\nok 1 a\n").is_err(), "version");
    assert!(
        kunit("KTAP version 1\n# hello\n1..1\nok 1 a\n").is_err(),
        "plan not next"
    );
    assert!(
        kunit("KTAP version 1\n1..1\n# Subtest: x\nok 1 a\n").is_err(),
        "nested"
    );
    assert!(
        kunit("KTAP version 1\n1..1\nok 1 a#b\n").is_err(),
        "lost result"
    );
    assert!(
        kunit("KTAP version 1\n1..1\nok 1 a #b\n").is_err(),
        "lost result"
    );
    assert!(
        kunit("KTAP version 1\n1..2\nok 1 a\nok 3 b\n").is_err(),
        "numbering"
    );
    assert!(kunit("KTAP version 1\n1..2\nok 1 a\n").is_err(), "missing");
    assert!(
        kunit("KTAP version 1\n1..1\nok 1 a\nok 2 b\n").is_err(),
        "beyond"
    );
    assert!(kunit("KTAP version 1\n1..2\nok 1 a\nreboot: System halted\nok 2 b\n").is_err());
}
