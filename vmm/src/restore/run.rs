//! A whole `restore` run: a probe VM for the host's facts and what the
//! methods can use, then every method asked for, one after another, each
//! measured ([`super::measure`]) and reported ([`super::derive`]).

use super::error::RestoreError;
use super::measure::{measure_method, probe};
use super::options::{Method, MethodOptions};
use super::report::{MethodReport, RestoreReport};
use crate::stop::{self, Signal};

/// How a whole `restore` run ended.
pub struct Outcome {
    /// The report (absent when not even the probe VM could run).
    pub report: Option<RestoreReport>,
    /// The error that ended it early, with the method it happened in
    /// (`None`: before any method).
    pub error: Option<(Option<Method>, RestoreError)>,
    /// Whether any method was measured (in part or in full).
    pub measured: bool,
}

/// Runs every method of `methods` the kernel supports (the others are
/// reported as not run, with why), one after another, stopping at the first
/// failure or stop request; `on_method` sees each method's report as it
/// completes.
pub fn run(
    opts: &MethodOptions,
    methods: &[Method],
    mut on_method: impl FnMut(&MethodReport),
) -> Outcome {
    let probe = match probe(opts.timeout, opts.tsc) {
        Ok(p) => p,
        Err(e) => {
            return Outcome {
                report: None,
                error: Some((None, e)),
                measured: false,
            }
        }
    };
    let mut report = RestoreReport::new(&probe, opts, methods);
    let mut error = None;
    let mut measured = false;
    for &m in methods {
        if let Some(signal) = stop::requested() {
            let e = RestoreError::Interrupted(Signal(signal));
            report.incomplete = Some(format!("{e}; {} and later not measured", m.name()));
            error = Some((Some(m), e));
            break;
        }
        if let Some(why) = probe.support.why_not(m) {
            let r = MethodReport::not_run(m, why);
            on_method(&r);
            report.methods.push(r);
            continue;
        }
        let (run, e) = measure_method(opts, m);
        measured = true;
        let r = MethodReport::from_run(&run, opts);
        on_method(&r);
        report.methods.push(r);
        if let Some(e) = e {
            let (step, what) = run
                .failed
                .as_ref()
                .map_or(("?", "?"), |f| (f.step.name(), f.step.describe()));
            report.incomplete = Some(match e.signal() {
                Some(_) => format!("{e} (in {}'s step '{step}', {what})", m.name()),
                None => format!("{} failed in step '{step}' ({what}): {e}", m.name()),
            });
            error = Some((Some(m), e));
            break;
        }
    }
    Outcome {
        report: Some(report),
        error,
        measured,
    }
}
