//! A strict checker of KTAP version 1 output (Documentation/dev-tools/ktap.rst),
//! written from the specification, independent of the writer under test:
//! a version line first, one plan line `1..N` before the results, exactly N
//! result lines numbered 1..N in order, each `ok`/`not ok`, a description
//! without `#`, and an optional `# [directive] [diagnostic]`; every other
//! line a `# ` diagnostic (the writer emits no unknown lines, so none are
//! allowed). Nested subtests are not used by the writer and are refused.

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
        Some(n) if n == results.len() => Ok(results),
        Some(n) => Err(format!(
            "the plan says {n} tests, {} results follow",
            results.len()
        )),
        None => Err("no plan line".into()),
    }
}

/// The checker itself must refuse what the grammar forbids.
pub fn self_test() {
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
    let r = validate("KTAP version 1\n# hello\n1..2\nok 1 a # SKIP why\nnot ok 2 b # reason\n")
        .expect("valid");
    assert_eq!(r[0].directive.as_deref(), Some("SKIP"));
    assert_eq!(r[0].diagnostic, "why");
    assert!(!r[1].ok && r[1].directive.is_none() && r[1].diagnostic == "reason");
}
