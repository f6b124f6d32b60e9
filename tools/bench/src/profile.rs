//! Profiles of the figures that miss their targets, measured in the same
//! run: where `check`'s time goes (its own report's per-check times) and
//! what the first result waits for (each vCPU's KVM_RUN, round 0 against
//! the rounds after it).

use crate::syscalls;
use crate::table::{median_spread, Better, Row, Table};

/// The median of `v` (NaN when empty).
fn median(v: Vec<f64>) -> f64 {
    median_spread(&v).0
}

/// Rounds of the traced runs of [`first_run`].
const TRACED_ROUNDS: usize = 8;

/// What the first result waits for: up to 3 traced runs of
/// [`TRACED_ROUNDS`] rounds on 2 vCPUs (only ioctls traced), the first
/// KVM_RUN (the guest's start and round 0) of the vCPU whose first KVM_RUN
/// was shortest (it waited least for the other to enter) against the
/// later rounds' KVM_RUNs (one round each).
pub fn first_run(t: &mut Table, reps: usize) -> Result<(), String> {
    let rounds = TRACED_ROUNDS.to_string();
    let args = [
        "run",
        "--vcpus",
        "2",
        "--rounds",
        &rounds,
        "--variant",
        "xen-head",
    ];
    let (mut first, mut later) = (Vec::new(), Vec::new());
    for _ in 0..reps.min(3) {
        let threads = syscalls::kvm_run_times(&args)?;
        if threads.len() != 2 || threads.iter().any(|r| r.len() < TRACED_ROUNDS) {
            return Err(format!("the traced run's KVM_RUNs: {threads:?}"));
        }
        first.push(threads.iter().map(|r| r[0]).fold(f64::INFINITY, f64::min));
        let mid = threads
            .iter()
            .flat_map(|r| r[1..TRACED_ROUNDS].iter().copied());
        later.push(median(mid.collect()));
    }
    t.rows.push(
        Row::new(
            "first_kvm_run_ms",
            "    of it: the first KVM_RUN (guest start, round 0), traced".into(),
            "ms",
            Better::Lower,
            &first,
        )
        .with_floor(
            format!(
                "a later round's KVM_RUN (median, rounds 1-{})",
                TRACED_ROUNDS - 1
            ),
            &later,
        ),
    );
    Ok(())
}

/// Where a `check --json` run's time went, from its report: the shared
/// measurement, then each check's own work, in order.
pub fn check_parts(json: &[u8]) -> Result<Vec<(String, f64)>, String> {
    let doc: serde_json::Value =
        serde_json::from_slice(json).map_err(|e| format!("check --json: not JSON: {e}"))?;
    let shared = doc["measure_seconds"]
        .as_f64()
        .ok_or("check --json: no measure_seconds")?;
    let mut parts = vec![("the measurement the checks share".to_string(), shared)];
    for c in doc["checks"].as_array().ok_or("check --json: no checks")? {
        let name = format!(
            "check {} {}",
            c["number"].as_u64().unwrap_or(0),
            c["id"].as_str().unwrap_or("?")
        );
        let secs = c["seconds"]
            .as_f64()
            .ok_or_else(|| format!("check --json: {name} has no seconds"))?;
        parts.push((name, secs));
    }
    Ok(parts)
}

/// The profile of `check`: one row per part that took at least 1 % of the
/// wall in its median, the other checks together in one more.
pub fn check(t: &mut Table, runs: &[Vec<(String, f64)>]) {
    let Some(first) = runs.first() else {
        return;
    };
    let median_of = |k: usize| median(runs.iter().filter_map(|r| r.get(k).map(|p| p.1)).collect());
    let total: f64 = (0..first.len()).map(median_of).sum();
    let mut rest = (0usize, vec![0.0; runs.len()]);
    for (k, (name, _)) in first.iter().enumerate() {
        let values: Vec<f64> = runs.iter().filter_map(|r| r.get(k).map(|p| p.1)).collect();
        if median_of(k) >= total / 100.0 {
            t.rows.push(Row::new(
                &format!("check_part_{k}_s"),
                format!("    of it: {name}"),
                "s",
                Better::Lower,
                &values,
            ));
        } else {
            rest.0 += 1;
            for (sum, v) in rest.1.iter_mut().zip(&values) {
                *sum += v;
            }
        }
    }
    if rest.0 > 0 {
        t.rows.push(Row::new(
            "check_part_rest_s",
            format!("    of it: the other {} checks together", rest.0),
            "s",
            Better::Lower,
            &rest.1,
        ));
    }
}
