//! `compare --csv`: the raw data, one row per measured round and vCPU.
//!
//! Columns: `seq` (measured round, in the order run), `vm`, `block`,
//! `round_in_vm` (warm-up rounds included), `variant`, `vcpu`,
//! `exit_latency_cycles` (this vCPU's loop-exit time; empty where it does not
//! apply: variants without a common TSC write), `skew_cycles` (the
//! round's skew, repeated on each of its rows), `tsc_adjust_delta`,
//! `write_latency_cycles`, `write_honoured` (true, false or empty when
//! undetermined), `disagreements` (the round's count), `kvmclock_jump_ns`
//! (`--kvmclock`: this vCPU's kvmclock jump across its write; empty without
//! it). Warm-up rounds are not written. CPU 0's loop-exit time is the `exit_latency_cycles` of `vcpu` 0.
//!
//! `compare` writes the rows as the rounds are measured ([`CsvWriter`]), so
//! nothing is kept for the file and an interrupted run's file has every
//! round measured.

use std::io::{self, Write};

use super::MeasuredRound;
use crate::analysis::VcpuResult;

/// The header line.
pub const HEADER: &str = "seq,vm,block,round_in_vm,variant,vcpu,exit_latency_cycles,skew_cycles,\
tsc_adjust_delta,write_latency_cycles,write_honoured,disagreements,kvmclock_jump_ns";

/// A value, or an empty field where it does not apply.
fn opt(v: Option<i64>) -> String {
    v.map_or_else(String::new, |x| x.to_string())
}

/// `write_honoured`: `true`, `false`, or empty when undetermined.
fn honoured(h: Option<bool>) -> &'static str {
    match h {
        Some(true) => "true",
        Some(false) => "false",
        None => "",
    }
}

/// vCPU `id`'s kvmclock jump in round `r`, ns, or empty.
fn kvmclock_jump(r: &MeasuredRound, id: u32) -> String {
    r.result
        .kvmclock
        .as_ref()
        .and_then(|k| k.vcpus.iter().find(|j| j.vcpu == id))
        .and_then(|j| j.jump_ns)
        .map_or_else(String::new, |j| format!("{j:.1}"))
}

/// The row of vCPU `v` in measured round `r` (no line end), in [`HEADER`]'s
/// column order.
pub fn row(r: &MeasuredRound, v: &VcpuResult) -> String {
    let res = &r.result;
    format!(
        "{},{},{},{},{},{},{},{},{},{},{},{},{}",
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
        honoured(v.write_honoured),
        res.disagreements.len(),
        kvmclock_jump(r, v.id)
    )
}

#[cfg(test)]
/// Writes every measured round, one row per vCPU.
pub fn write_csv(out: &mut impl Write, rounds: &[MeasuredRound]) -> io::Result<()> {
    let mut w = CsvWriter::new(out)?;
    for r in rounds {
        w.round(r)?;
    }
    Ok(())
}

/// The CSV written round by round: the header first, then each measured
/// round's rows as it comes, flushed.
pub struct CsvWriter<W: Write> {
    out: W,
}

impl<W: Write> CsvWriter<W> {
    /// Writes the header.
    pub fn new(mut out: W) -> io::Result<CsvWriter<W>> {
        writeln!(out, "{HEADER}")?;
        out.flush()?;
        Ok(CsvWriter { out })
    }

    /// Writes one measured round, a row per vCPU, and flushes it.
    pub fn round(&mut self, r: &MeasuredRound) -> io::Result<()> {
        for v in &r.result.vcpus {
            writeln!(self.out, "{}", row(r, v))?;
        }
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use super::*;
    use crate::analysis::clock_jump::{ClockJump, KvmclockRound};
    use crate::analysis::{RoundResult, SkewBasis};

    fn vcpu(id: u32, exit: Option<i64>, latency: Option<i64>, h: Option<bool>) -> VcpuResult {
        VcpuResult {
            id,
            tsc_adjust_delta: -1000 - i64::from(id),
            guest_adjust_delta: None,
            offset_delta: None,
            written_value: 5,
            tsc_first: 1,
            tsc_before_write: 2,
            tsc_after_loop: 9,
            wrote: true,
            tsc_at_write: None,
            write_latency_cycles: latency,
            exit_latency_cycles: exit,
            write_honoured: h,
            decided_by: None,
            host_saw_write: None,
            guest_saw_jump: None,
            rel_offset_adjust: 0,
            rel_offset_attr: None,
            rel_offset_bracket: 0,
            rel_offset_bracket_error: 0,
            rel_offset_guest: None,
            rel_offset_guest_error: None,
            tsc_khz: 1,
            running_khz: 1,
        }
    }

    /// Every column, in order, for a round with two vCPUs: one with every
    /// value, one where they do not apply (empty fields); the round's skew
    /// and disagreement count on both rows.
    #[test]
    fn each_column_holds_its_value_and_missing_values_are_empty() {
        let round = MeasuredRound {
            seq: 7,
            vm: 1,
            block: 3,
            round_in_vm: 12,
            result: RoundResult {
                round: 12,
                variant: Cow::Borrowed("xen-head"),
                skew_cycles: 4321,
                skew_cycles_attr: None,
                skew_cycles_bracket: 0,
                skew_cycles_bracket_error: 0,
                skew_cycles_guest: None,
                skew_cycles_guest_error: None,
                writes_honoured: None,
                undecided_vcpus: 0,
                skew_basis: SkewBasis::Creation,
                cpu0_exit_latency_cycles: Some(20_000),
                sync: None,
                disagreements: vec!["a".into(), "b".into()],
                vcpus: vec![
                    vcpu(0, Some(20_000), Some(35), Some(false)),
                    vcpu(1, None, None, None),
                ],
                kvmclock: Some(KvmclockRound {
                    jump_ns: Some(-12.26),
                    vcpus: vec![ClockJump {
                        vcpu: 0,
                        tsc_moved_cycles: Some(8),
                        tsc_moved_ns: Some(4.0),
                        kvmclock_advance_ns: 100,
                        elapsed_ns: Some(112.26),
                        jump_ns: Some(-12.26),
                        version: (2, 2),
                        flags: (1, 1),
                        page_rewritten: false,
                        page_age_ns: 1_000,
                        page_age_after_ns: 1_100,
                        allowance_ns: Some(4.0),
                        follow_allowance_ns: Some(4.0),
                        step_window_ns: None,
                        kvmclock_wrapped: false,
                        reanchor_ppm: 1_000.0,
                    }],
                    wrapped: Vec::new(),
                }),
            },
        };
        let mut out = Vec::new();
        write_csv(&mut out, std::slice::from_ref(&round)).expect("write to memory");
        let text = String::from_utf8(out).expect("utf-8");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                HEADER,
                "7,1,3,12,xen-head,0,20000,4321,-1000,35,false,2,-12.3",
                "7,1,3,12,xen-head,1,,4321,-1001,,,2,",
            ]
        );
        assert_eq!(honoured(Some(true)), "true");
        // Written round by round, the file is the same.
        let mut streamed = Vec::new();
        {
            let mut w = CsvWriter::new(&mut streamed).expect("header");
            w.round(&round).expect("rows");
        }
        assert_eq!(String::from_utf8(streamed).expect("utf-8"), text);
        assert_eq!(HEADER.split(',').count(), lines[1].split(',').count());
    }
}
