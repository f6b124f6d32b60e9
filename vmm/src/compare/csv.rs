//! `compare --csv`: the raw data, one row per measured round and vCPU.
//!
//! Columns: `seq` (measured round, in the order run), `vm`, `block`,
//! `round_in_vm` (warm-up rounds included), `variant`, `vcpu`,
//! `exit_latency_cycles` (this vCPU's loop-exit time; empty where it does not
//! apply: variants without a common TSC write), `skew_cycles` (the
//! round's skew, repeated on each of its rows), `tsc_adjust_delta`,
//! `write_latency_cycles`, `write_honoured` (true, false or empty when
//! undetermined), `disagreements` (the round's count). Warm-up rounds are not
//! written. CPU 0's loop-exit time is the `exit_latency_cycles` of `vcpu` 0.

use std::io::{self, Write};

use super::MeasuredRound;

/// The header line.
pub const HEADER: &str = "seq,vm,block,round_in_vm,variant,vcpu,exit_latency_cycles,skew_cycles,\
tsc_adjust_delta,write_latency_cycles,write_honoured,disagreements";

/// Writes the rows of `rounds` to `out`.
/// A value, or an empty field where it does not apply.
fn opt(v: Option<i64>) -> String {
    v.map_or_else(String::new, |x| x.to_string())
}

/// Writes every measured round, one row per vCPU.
pub fn write_csv(out: &mut impl Write, rounds: &[MeasuredRound]) -> io::Result<()> {
    writeln!(out, "{HEADER}")?;
    for r in rounds {
        let res = &r.result;
        for v in &res.vcpus {
            let honoured = match v.write_honoured {
                Some(true) => "true",
                Some(false) => "false",
                None => "",
            };
            writeln!(
                out,
                "{},{},{},{},{},{},{},{},{},{},{},{}",
                r.seq,
                r.vm,
                r.block,
                r.round_in_vm,
                res.variant,
                v.id,
                opt(v.exit_latency_cycles),
                res.skew_cycles,
                v.tsc_adjust_delta,
                opt(v.write_latency_cycles),
                honoured,
                res.disagreements.len()
            )?;
        }
    }
    out.flush()
}
