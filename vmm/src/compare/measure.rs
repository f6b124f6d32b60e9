//! Running the plan: one VM per [`super::VmPlan`], its rounds handed on as
//! they complete, warm-up rounds counted and dropped, measured rounds kept
//! with where they ran. A run that ends early keeps what it measured.

use std::time::Instant;

use tsc_contract::Variant;

use super::{plan, CompareData, CompareOptions, MeasuredRound};
use crate::error::RunError;
use crate::options::RunOptions;
use crate::rounds;

/// A measurement that ended early: what it measured (`None` when it failed
/// before the first VM said anything about the host) and why it ended.
#[derive(Debug)]
pub struct Partial {
    /// What was measured before the error (boxed: keeps the error small).
    pub data: Option<Box<CompareData>>,
    /// Why the measurement ended early.
    pub error: RunError,
}

/// Runs the plan. `progress(done, total)` is called after every round
/// (warm-up included). A stop request or an error ends it with what was
/// measured so far.
pub fn measure(
    opts: &CompareOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<CompareData, Partial> {
    let plans = plan(
        &opts.variants,
        opts.rounds,
        opts.warmup,
        opts.fresh_vm_every,
        opts.seed,
    );
    if plans.is_empty() {
        return Err(Partial {
            data: None,
            error: RunError::NothingToRun,
        });
    }
    let total: u64 = plans
        .iter()
        .map(|p| (p.warmup.len() + p.measured.len()) as u64)
        .sum();
    let started = Instant::now();
    let mut done = 0u64;
    let mut host = None;
    let mut rounds: Vec<MeasuredRound> =
        Vec::with_capacity(opts.rounds as usize * opts.variants.len());
    let mut warmup_rounds_run = 0;
    let mut notes = Vec::new();
    let mut vms = 0;
    let mut error = None;
    let block_len = opts.variants.len().max(1) as u32;
    for (vm, p) in plans.iter().enumerate() {
        let schedule: Vec<Variant> = p.warmup.iter().chain(&p.measured).copied().collect();
        let run_opts = RunOptions {
            backend: opts.backend,
            sync_windows_ms: opts.sync_windows_ms,
            vcpus: opts.vcpus,
            schedule,
            timeout: opts.timeout,
            image: opts.image.clone(),
            inject: None,
        };
        let warm = p.warmup.len() as u32;
        let mut round_in_vm = 0u32;
        vms += 1;
        let result = rounds::run_streaming(&run_opts, &mut |result| {
            done += 1;
            progress(done, total);
            let i = round_in_vm;
            round_in_vm += 1;
            if i < warm {
                warmup_rounds_run += 1;
                return Ok(());
            }
            let k = i - warm;
            rounds.push(MeasuredRound {
                seq: rounds.len() as u32,
                vm: vm as u32,
                block: p.first_block + k / block_len,
                round_in_vm: i,
                result,
            });
            Ok(())
        });
        match result {
            Ok(facts) => {
                host.get_or_insert(facts.host);
                if facts.spin_breaker && vm == 0 {
                    notes.push(crate::report::SPIN_BREAKER_NOTE.to_string());
                }
                notes.extend(facts.notes.into_iter().map(|n| format!("VM {vm}: {n}")));
            }
            Err(f) => {
                if host.is_none() {
                    host = f.host.map(|h| *h);
                }
                error = Some(f.error);
                break;
            }
        }
    }
    let data = host.map(|host| CompareData {
        host,
        rounds,
        warmup_rounds_run,
        vms,
        elapsed: started.elapsed(),
        notes,
    });
    match (data, error) {
        (Some(d), None) => Ok(d),
        (data, Some(error)) => Err(Partial {
            data: data.map(Box::new),
            error,
        }),
        (None, None) => Err(Partial {
            data: None,
            error: RunError::NothingToRun,
        }),
    }
}
