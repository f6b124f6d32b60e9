//! The `loaded` section: each figure idle and beside one `nice -n 19` CPU
//! hog per host core ([`Hogs`], started and always stopped by the bench), in
//! the same run: KVM rounds/s at N = 1, 2 and 8, the first result (split
//! into the process's start and the tool's part: [`FirstResult`]), `check`'s
//! wall and the bounds its checks 5 and 9 decide with, and the
//! `sched_yield`s per round of the vCPU threads (when strace is installed).
//! A loaded figure's floor is the same figure idle: its ratio says how much
//! the hogs cost. Also printed as a markdown table (the notes).

use std::process::{Child, Command, Stdio};

#[cfg(doc)]
use crate::children::FirstResult;
use crate::children::{cost_and_output, opts, time_to_first_result};
use crate::sections::tool_run;
use crate::syscalls;
use crate::table::{num, Better, Row, Table};

/// What a loaded figure may cost against its idle twin at N <= host cores.
pub const TARGET_RATIO: f64 = 1.5;

/// One CPU-bound `sh` loop per core at nice 19; killed and reaped when
/// dropped (on an error or a panic too), and killed by the kernel if the
/// bench itself dies first (`PR_SET_PDEATHSIG`).
pub struct Hogs {
    children: Vec<Child>,
}

impl Hogs {
    /// Starts `n` hogs.
    pub fn start(n: usize) -> Result<Hogs, String> {
        let mut hogs = Hogs {
            children: Vec::with_capacity(n),
        };
        for _ in 0..n {
            let mut cmd = Command::new("sh");
            cmd.args(["-c", "while :; do :; done"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            // SAFETY: the closure runs in the forked child before exec and
            // calls only setpriority and prctl, both async-signal-safe; it
            // touches no memory of the parent's.
            unsafe {
                std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                    if libc::setpriority(libc::PRIO_PROCESS, 0, 19) != 0
                        || libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0
                    {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
            // On an error the hogs started so far are stopped by the drop.
            let child = cmd
                .spawn()
                .map_err(|e| format!("cannot start a hog: {e}"))?;
            hogs.children.push(child);
        }
        Ok(hogs)
    }

    /// The hogs' process ids.
    #[cfg(test)]
    pub fn pids(&self) -> Vec<u32> {
        self.children.iter().map(Child::id).collect()
    }
}

impl Drop for Hogs {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The largest bound check 5 decides with: over the ordered pairs, the
/// guest's view of their offset with both directions combined, cycles.
pub fn check5_bound(doc: &serde_json::Value) -> Option<f64> {
    let pairs = check_values(doc, 5)?["pairs"].as_array()?;
    pairs
        .iter()
        .filter_map(|p| p["both_directions_bound_cycles"].as_f64())
        .reduce(f64::max)
}

/// The bound check 9 decides with after the rounds: over the pairs, the
/// half-width of what both directions leave of the kvmclocks' difference
/// (the reason's "within ±"), ns.
pub fn check9_bound(doc: &serde_json::Value) -> Option<f64> {
    let pairs = check_values(doc, 9)?["after_rounds"]["pairs"].as_array()?;
    let interval = |a: u64, b: u64| {
        pairs.iter().find_map(|p| {
            let (pa, pb) = (p["a"].as_u64()?, p["b"].as_u64()?);
            ((pa, pb) == (a, b)).then_some((p["lower_ns"].as_f64()?, p["upper_ns"].as_f64()?))
        })
    };
    let mut worst: Option<f64> = None;
    for p in pairs {
        let (Some(a), Some(b)) = (p["a"].as_u64(), p["b"].as_u64()) else {
            continue;
        };
        let Some((lo, hi)) = interval(a, b) else {
            continue;
        };
        // b's clock minus a's, seen from b: the negated interval.
        let (lo, hi) = match interval(b, a) {
            Some((l2, h2)) => (lo.max(-h2), hi.min(-l2)),
            None => (lo, hi),
        };
        let half = (hi - lo) / 2.0;
        worst = Some(worst.map_or(half, |w| w.max(half)));
    }
    worst
}

fn check_values(doc: &serde_json::Value, number: u64) -> Option<&serde_json::Value> {
    doc["checks"]
        .as_array()?
        .iter()
        .find(|c| c["number"].as_u64() == Some(number))
        .map(|c| &c["values"])
}

/// One figure idle and loaded.
struct Pair {
    id: String,
    what: String,
    unit: &'static str,
    better: Better,
    idle: Vec<f64>,
    loaded: Vec<f64>,
    /// Whether the loaded figure must be within [`TARGET_RATIO`] of idle.
    targeted: bool,
}

impl Pair {
    fn new(id: &str, what: String, unit: &'static str, better: Better, targeted: bool) -> Pair {
        Pair {
            id: id.into(),
            what,
            unit,
            better,
            idle: Vec::new(),
            loaded: Vec::new(),
            targeted,
        }
    }

    fn push(&mut self, loaded: bool, v: f64) {
        if loaded {
            self.loaded.push(v);
        } else {
            self.idle.push(v);
        }
    }

    fn rows(&self) -> [Row; 2] {
        let idle = Row::new(
            &format!("{}_idle", self.id),
            format!("{}, idle", self.what),
            self.unit,
            self.better,
            &self.idle,
        );
        let mut loaded = Row::new(
            &format!("{}_loaded", self.id),
            format!("{}, loaded", self.what),
            self.unit,
            self.better,
            &self.loaded,
        )
        .with_floor("the same, idle (this run)".into(), &self.idle);
        if self.targeted {
            let met = within_target(loaded.ratio);
            loaded = loaded.with_target(format!("within {TARGET_RATIO}x of idle"), met);
        }
        [idle, loaded]
    }
}

/// Whether a loaded/idle ratio meets [`TARGET_RATIO`] (no ratio: not met).
pub fn within_target(ratio: Option<f64>) -> bool {
    ratio.is_some_and(|r| r <= TARGET_RATIO)
}

/// The markdown table of the idle/loaded row pairs in `rows` (ids ending in
/// `_idle` followed by their `_loaded` twin).
pub fn markdown(rows: &[Row]) -> Vec<String> {
    let mut out = vec![
        "| figure | idle | loaded | loaded/idle | target |".to_string(),
        "|---|---:|---:|---:|---|".to_string(),
    ];
    for w in rows.windows(2) {
        let (i, l) = (&w[0], &w[1]);
        let Some(stem) = i.id.strip_suffix("_idle") else {
            continue;
        };
        if l.id.strip_suffix("_loaded") != Some(stem) {
            continue;
        }
        let what = i.what.strip_suffix(", idle").unwrap_or(&i.what);
        let target = match (&l.target, l.met) {
            (Some(t), Some(m)) => format!("{t}: {}", if m { "met" } else { "NOT met" }),
            _ => "-".into(),
        };
        out.push(format!(
            "| {what} | {} {u} | {} {u} | {} | {target} |",
            num(i.value),
            num(l.value),
            l.ratio.map_or_else(|| "-".into(), |r| format!("{r:.2}x")),
            u = i.unit,
        ));
    }
    out
}

/// The section: every figure idle, then loaded, `reps` times alternating.
/// First results per repetition, each way: one is a few ms, and whether a
/// woken thread waits a scheduler tick for its core decides it, so a median
/// of three says little.
const FIRST_PER_REP: usize = 5;

pub fn loaded(t: &mut Table, base: usize, reps: usize, cores: usize) -> Result<(), String> {
    let ns = [1u32, 2, 8];
    let mut rates: Vec<Pair> = ns
        .iter()
        .map(|&n| {
            let over = if n as usize > cores {
                " (overcommitted)"
            } else {
                ""
            };
            Pair::new(
                &format!("loaded_kvm_rounds_per_s_{n}"),
                format!("kvm, {n} vCPUs: rounds/s{over}"),
                "rounds/s",
                Better::Higher,
                n as usize <= cores,
            )
        })
        .collect();
    let mut first = Pair::new(
        "loaded_first_result_ms",
        "process start to the first result, kvm, 2 vCPUs".into(),
        "ms",
        Better::Lower,
        true,
    );
    let mut first_start = Pair::new(
        "loaded_first_result_start_ms",
        "of it: spawn to the child's main (the kernel starting a process)".into(),
        "ms",
        Better::Lower,
        false,
    );
    let mut first_tool = Pair::new(
        "loaded_first_result_tool_ms",
        "of it: the child's main to its first result (the tool)".into(),
        "ms",
        Better::Lower,
        true,
    );
    let mut check = Pair::new(
        "loaded_check_wall_s",
        "check, wall".into(),
        "s",
        Better::Lower,
        true,
    );
    let mut c5 = Pair::new(
        "loaded_check5_bound_cycles",
        "check 5's bound (worst pair, both directions)".into(),
        "cycles",
        Better::Lower,
        false,
    );
    let mut c9 = Pair::new(
        "loaded_check9_bound_ns",
        "check 9's bound (worst pair, after the rounds)".into(),
        "ns",
        Better::Lower,
        false,
    );
    for _ in 0..reps {
        for loaded in [false, true] {
            let _hogs = if loaded {
                Some(Hogs::start(cores.max(1))?)
            } else {
                None
            };
            for (p, &n) in rates.iter_mut().zip(&ns) {
                let rounds = if n <= 2 { base } else { base / 3 }.max(20);
                p.push(loaded, tool_run(&opts(n, rounds))?.0.rounds_per_s);
            }
            for _ in 0..FIRST_PER_REP {
                let f = time_to_first_result()?;
                first.push(loaded, f.total.as_secs_f64() * 1e3);
                first_start.push(loaded, f.start.as_secs_f64() * 1e3);
                first_tool.push(loaded, f.tool.as_secs_f64() * 1e3);
            }
            let args = ["check".to_string(), "--json".to_string()];
            let (cost, out) = cost_and_output(&args, &[0, 1], true)?;
            check.push(loaded, cost.wall_s);
            let doc: serde_json::Value =
                serde_json::from_slice(&out).map_err(|e| format!("check --json: {e}"))?;
            c5.push(loaded, check5_bound(&doc).unwrap_or(f64::NAN));
            c9.push(loaded, check9_bound(&doc).unwrap_or(f64::NAN));
        }
    }
    let mut yields = Pair::new(
        "loaded_sched_yield_per_round",
        "kvm, 2 vCPUs: sched_yield per round, vCPU threads".into(),
        "calls",
        Better::Lower,
        false,
    );
    if syscalls::available() {
        for loaded in [false, true] {
            let _hogs = if loaded {
                Some(Hogs::start(cores.max(1))?)
            } else {
                None
            };
            let base = ["run", "--vcpus", "2", "--variant", "xen-head"];
            let per = syscalls::per_round(&base, 100, 300)?;
            let y = per
                .iter()
                .filter(|(main, name, _)| !main && name == "sched_yield")
                .map(|p| p.2)
                .fold(0.0, |a, b| a + b);
            yields.push(loaded, y);
        }
    }
    let mut pairs = rates;
    pairs.extend([first, first_start, first_tool, check, c5, c9]);
    if !yields.idle.is_empty() {
        pairs.push(yields);
    }
    let rows: Vec<Row> = pairs.iter().flat_map(Pair::rows).collect();
    t.notes.push(format!(
        "loaded: one `nice -n 19` CPU hog per host core ({cores}); idle and loaded alternate, {reps} time(s) each \
         (the first result {} times each)",
        reps * FIRST_PER_REP
    ));
    t.notes.extend(markdown(&rows));
    t.rows.extend(rows);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn alive(pid: u32) -> bool {
        std::path::Path::new(&format!("/proc/{pid}")).exists()
    }

    /// The hogs run at nice 19 while the guard lives, and are gone (killed
    /// and reaped) once it is dropped.
    #[test]
    fn hogs_are_nice_and_gone_after_the_guard() {
        let hogs = Hogs::start(2).expect("sh starts");
        let pids = hogs.pids();
        assert_eq!(pids.len(), 2);
        for &p in &pids {
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).expect("a live hog");
            // Field 19 (after the parenthesised name) is the nice value.
            let after = stat.rsplit(')').next().expect("stat has a name");
            let nice = after.split_whitespace().nth(16).expect("nice field");
            assert_eq!(nice, "19", "hog {p}");
        }
        drop(hogs);
        for p in pids {
            assert!(!alive(p), "hog {p} still there");
        }
    }

    /// A panic while the hogs run stops them too.
    #[test]
    fn hogs_are_gone_after_a_panic() {
        let pids = std::panic::catch_unwind(|| {
            let hogs = Hogs::start(1).expect("sh starts");
            let pids = hogs.pids();
            std::panic::panic_any(pids);
        })
        .expect_err("it panicked")
        .downcast::<Vec<u32>>()
        .expect("the pids");
        for p in *pids {
            assert!(!alive(p), "hog {p} still there");
        }
    }

    #[test]
    fn the_target_is_a_ratio_of_at_most_one_and_a_half() {
        assert!(within_target(Some(1.0)));
        assert!(within_target(Some(1.5)));
        assert!(!within_target(Some(1.51)));
        assert!(!within_target(None));
    }

    #[test]
    fn check_5_and_9_bounds_are_their_worst_pairs() {
        let doc = json!({"checks": [
            {"number": 5, "values": {"pairs": [
                {"both_directions_bound_cycles": 5711},
                {"both_directions_bound_cycles": 7000}]}},
            {"number": 9, "values": {"after_rounds": {"pairs": [
                {"a": 0, "b": 1, "lower_ns": -13053, "upper_ns": 11302},
                {"a": 1, "b": 0, "lower_ns": -12944, "upper_ns": 11141}]}}}
        ]});
        assert_eq!(check5_bound(&doc), Some(7000.0));
        // [-13053, 11302] meets -[-12944, 11141] = [-11141, 12944] in
        // [-11141, 11302]: ± 11,221.5 (check 9's reason says ± 11,222).
        assert_eq!(check9_bound(&doc), Some(11221.5));
        assert_eq!(check5_bound(&json!({"checks": []})), None);
    }

    #[test]
    fn markdown_pairs_idle_with_loaded() {
        let mut p = Pair::new("x", "rate".into(), "rounds/s", Better::Higher, true);
        p.push(false, 300.0);
        p.push(true, 100.0);
        let lines = markdown(&p.rows());
        assert_eq!(lines.len(), 3);
        assert_eq!(
            lines[2],
            "| rate | 300 rounds/s | 100 rounds/s | 3.00x | within 1.5x of idle: NOT met |"
        );
    }
}
