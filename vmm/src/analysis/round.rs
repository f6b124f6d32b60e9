//! One round's findings: per vCPU its record and readback turned into the
//! relative offsets by the three methods, whether its write took effect,
//! the write's latency and the seed's loop-exit time; for the round the
//! skew, the verdict on the writes and every disagreement between methods.

use std::borrow::Cow;

use serde::Serialize;
use tsc_contract::{RoundRecord, RECORD_HAS_TSC_ADJUST, RECORD_NO_TSC_WRITE, RECORD_SYNC_RESULT};

use super::arith::{signed_delta, spread};
use super::clock_jump::KvmclockRound;
use super::honoured::{combine, guest_saw_jump, write_honoured, DecidedBy, Decision};
use crate::tsc::TscState;
use crate::vstate::sync_area::SyncRound;

/// Everything read for one vCPU around one round.
#[derive(Clone, Copy, Debug)]
pub struct VcpuSample {
    /// The guest's record (already validated against the contract).
    pub record: RoundRecord,
    /// KVM's view before the round (the previous round's readback).
    pub before: TscState,
    /// KVM's view after the round.
    pub after: TscState,
}

/// One vCPU's findings for one round.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct VcpuResult {
    /// vCPU index.
    pub id: u32,
    /// Change of IA32_TSC_ADJUST over the round, as KVM reports it.
    pub tsc_adjust_delta: i64,
    /// Change of IA32_TSC_ADJUST as the guest read it (None without the MSR).
    pub guest_adjust_delta: Option<i64>,
    /// Change of the TSC offset (None without KVM_VCPU_TSC_OFFSET).
    pub offset_delta: Option<i64>,
    /// The value the vCPU wrote to IA32_TSC.
    pub written_value: u64,
    /// The vCPU's first-iteration TSC.
    pub tsc_first: u64,
    /// The TSC just before the write.
    pub tsc_before_write: u64,
    /// The TSC just after the loop (after the write, if honoured).
    pub tsc_after_loop: u64,
    /// Whether the vCPU wrote anything this round: its IA32_TSC (Xen's TSC
    /// rendezvous) or its TSC_ADJUST (Linux's sync, when it compensated).
    pub wrote: bool,
    /// The guest TSC at the moment KVM handled the write, on the pre-write
    /// timeline: `written_value - tsc_adjust_delta` (null: no common write).
    pub tsc_at_write: Option<u64>,
    /// From just before the write until KVM handled it: the write's own cost
    /// (null: no common write).
    pub write_latency_cycles: Option<i64>,
    /// The seed's metric: from the TSC write until after the loop (null: the
    /// variant writes no common value, the metric does not apply).
    pub exit_latency_cycles: Option<i64>,
    /// Did this vCPU's write take effect? None when the evidence is not
    /// decisive (or contradicts itself).
    pub write_honoured: Option<bool>,
    /// Which evidence decided it.
    pub decided_by: Option<DecidedBy>,
    /// KVM's evidence: did the offset move by the write's delta?
    pub host_saw_write: Option<bool>,
    /// The guest's own evidence: did its TSC jump to the written value?
    pub guest_saw_jump: Option<bool>,
    /// Offset relative to vCPU 0 after the round, by method (a).
    pub rel_offset_adjust: i64,
    /// Offset relative to vCPU 0 after the round, by method (b).
    pub rel_offset_attr: Option<i64>,
    /// Offset relative to vCPU 0 after the round, by method (c).
    pub rel_offset_bracket: i64,
    /// Error bar of method (c), cycles.
    pub rel_offset_bracket_error: u64,
    /// Offset relative to vCPU 0 as the guest saw it (`run --guest-view`,
    /// method d): the midpoint of its interval; absent without it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rel_offset_guest: Option<i64>,
    /// Method (d)'s bound: half its interval, cycles.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rel_offset_guest_error: Option<u64>,
    /// TSC frequency of this vCPU, kHz (KVM_GET_TSC_KHZ).
    pub tsc_khz: u32,
    /// The rate its TSC advanced at between guest entries, kHz: `tsc_khz`
    /// where KVM scales, else the host's ([`TscState::running_khz`]); a
    /// kvmclock jump's elapsed time is converted at it.
    #[serde(skip)]
    pub running_khz: u32,
}

impl VcpuResult {
    /// Whether this vCPU's write asked its TSC to move by nothing: KVM's
    /// TSC_ADJUST delta is 0 (the value written was the TSC's own at the
    /// moment KVM handled it), the exact offset did not move, and the guest's
    /// own reads agree that its TSC passed the value written then (its read
    /// just before the write at most the value, its read after the loop at
    /// least). Taken effect or not, the TSC is where it would be, so no
    /// evidence can decide the write and none is missing: such a write is
    /// neither honoured, nor ignored, nor undecided.
    pub fn moved_nothing(&self) -> bool {
        let v = self.written_value;
        // A common write has a moment, the value written less the delta:
        // the value itself exactly when the delta is 0.
        self.tsc_at_write == Some(v)
            && self.offset_delta == Some(0)
            && signed_delta(v, self.tsc_before_write) >= 0
            && signed_delta(self.tsc_after_loop, v) >= 0
    }
}

/// What each vCPU's offset relative to vCPU 0 before a round was known from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SkewBasis {
    /// The exact offsets read before the round.
    Offsets,
    /// No write recorded since the VM was created: equal, as KVM creates them.
    Creation,
    /// Every write so far took effect: the TSC_ADJUST differences.
    TscAdjust,
    /// No write so far took effect: the offsets never moved.
    Unmoved,
    /// Unknown (earlier writes were undecided or mixed): assumed equal.
    Assumed,
}

/// Each vCPU's offset relative to vCPU 0 before a round.
#[derive(Clone, Debug, PartialEq)]
pub struct Base {
    /// Per vCPU; vCPU 0's is 0. `None` when unknown.
    pub rel: Vec<Option<i64>>,
    /// Where it was known from.
    pub basis: SkewBasis,
}

impl Base {
    /// Every vCPU level with vCPU 0, as at creation.
    pub fn creation(vcpus: usize) -> Base {
        Base {
            rel: vec![Some(0); vcpus],
            basis: SkewBasis::Creation,
        }
    }
}

/// One round's findings.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct RoundResult {
    /// Round index.
    pub round: u32,
    /// The variant that ran.
    pub variant: Cow<'static, str>,
    /// Skew the writes left behind (or would have, when ignored): the spread of
    /// the relative offsets by method (a), cycles.
    pub skew_cycles: u64,
    /// The actual skew by method (b), when available.
    pub skew_cycles_attr: Option<u64>,
    /// The actual skew by method (c).
    pub skew_cycles_bracket: u64,
    /// Error bar of method (c).
    pub skew_cycles_bracket_error: u64,
    /// The skew as the guest saw it (method d, `run --guest-view`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skew_cycles_guest: Option<u64>,
    /// Method (d)'s error bar.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skew_cycles_guest_error: Option<u64>,
    /// Whether every decided vCPU's write took effect; None when none was
    /// decided or they differ.
    pub writes_honoured: Option<bool>,
    /// vCPUs whose write neither side's evidence decided (not counting a
    /// write that moved nothing, [`VcpuResult::moved_nothing`]).
    pub undecided_vcpus: u32,
    /// What the relative offsets before the round (the base of method (a))
    /// were known from.
    pub skew_basis: SkewBasis,
    /// CPU 0's loop-exit time, the seed's metric (null: it does not apply
    /// to the variant).
    pub cpu0_exit_latency_cycles: Option<i64>,
    /// Linux's sync: what every AP's pair did (null for the other variants).
    pub sync: Option<SyncRound>,
    /// Disagreements between methods, in words; empty when all agree.
    pub disagreements: Vec<String>,
    /// Per vCPU.
    pub vcpus: Vec<VcpuResult>,
    /// kvmclock across the round's IA32_TSC writes (`run --kvmclock`);
    /// absent without it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kvmclock: Option<KvmclockRound>,
}

/// Which of KVM's evidence decides: the exact offsets when there are any,
/// else the bracketed reads.
fn host_by(offset_delta: Option<i64>) -> DecidedBy {
    if offset_delta.is_some() {
        DecidedBy::Offsets
    } else {
        DecidedBy::BracketedReads
    }
}

/// Analyses one round from every vCPU's record and readback, the relative
/// offsets before it (`base`) and, for Linux's sync, what every AP's pair
/// did (`sync`).
pub fn analyse_round(
    round: u32,
    variant: &'static str,
    samples: &[VcpuSample],
    base: &Base,
    sync: Option<SyncRound>,
) -> RoundResult {
    let mut disagreements = Vec::new();
    let mut vcpus: Vec<VcpuResult> = samples
        .iter()
        .enumerate()
        .map(|(i, s)| analyse_vcpu(i as u32, s, sync.as_ref(), &mut disagreements))
        .collect();

    let decision = Decision::of(vcpus.iter().map(|v| v.write_honoured));
    if decision == Decision::Mixed {
        disagreements.push("some vCPUs' writes took effect and others' did not".into());
    }
    let undecided_vcpus = vcpus
        .iter()
        .filter(|v| v.wrote && v.write_honoured.is_none() && !v.moved_nothing())
        .count() as u32;
    compare_vcpus(&vcpus, &mut disagreements);
    relative_offsets(&mut vcpus, samples, base, &mut disagreements);

    let attr_all = vcpus.iter().all(|v| v.rel_offset_attr.is_some());
    let bracket_error = vcpus
        .iter()
        .map(|v| v.rel_offset_bracket_error)
        .max()
        .unwrap_or(0);
    RoundResult {
        round,
        variant: Cow::Borrowed(variant),
        skew_cycles: spread(vcpus.iter().map(|v| v.rel_offset_adjust)),
        skew_cycles_attr: attr_all.then(|| spread(vcpus.iter().filter_map(|v| v.rel_offset_attr))),
        skew_cycles_bracket: spread(vcpus.iter().map(|v| v.rel_offset_bracket)),
        skew_cycles_bracket_error: bracket_error.saturating_mul(2),
        skew_cycles_guest: None,
        skew_cycles_guest_error: None,
        writes_honoured: decision.verdict(),
        undecided_vcpus,
        skew_basis: base.basis,
        cpu0_exit_latency_cycles: vcpus.first().and_then(|v| v.exit_latency_cycles),
        sync,
        disagreements,
        vcpus,
        kvmclock: None,
    }
}

/// What one vCPU's write did, as far as the evidence tells.
struct WriteFindings {
    honoured: Option<bool>,
    decided_by: Option<DecidedBy>,
    saw_jump: Option<bool>,
    tsc_at_write: Option<u64>,
    write_latency: Option<i64>,
    exit_latency: Option<i64>,
}

/// One vCPU's findings of a round, its relative offsets still to be set
/// ([`relative_offsets`]); what disagrees goes into `disagreements`.
fn analyse_vcpu(
    id: u32,
    s: &VcpuSample,
    sync: Option<&SyncRound>,
    disagreements: &mut Vec<String>,
) -> VcpuResult {
    let rec = &s.record;
    let adjust_delta = signed_delta(s.after.adjust, s.before.adjust);
    let offset_delta = match (s.after.offset, s.before.offset) {
        (Some(a), Some(b)) => Some(signed_delta(a, b)),
        _ => None,
    };
    let guest_adjust_delta = (rec.flags & RECORD_HAS_TSC_ADJUST != 0)
        .then(|| signed_delta(rec.adjust_after, rec.adjust_before));
    if let Some(g) = guest_adjust_delta {
        if g != adjust_delta {
            disagreements.push(format!(
                "vCPU {id}: the guest saw TSC_ADJUST move by {g}, KVM reports {adjust_delta}"
            ));
        }
    }
    let (estimate_delta, estimate_error) = s.after.offset_minus(&s.before);
    let (host, why) = write_honoured(adjust_delta, offset_delta, estimate_delta, estimate_error);
    if let Some(why) = why {
        disagreements.push(format!("vCPU {id}: {why}"));
    }
    // Xen's TSC rendezvous writes one common value; the std rendezvous
    // writes nothing; Linux's sync moves TSC_ADJUST on the APs.
    let common = rec.flags & RECORD_NO_TSC_WRITE == 0;
    let wrote = common || adjust_delta != 0;
    let w = if common {
        common_write(id, rec, adjust_delta, host, offset_delta, disagreements)
    } else {
        no_common_write(
            id,
            rec,
            adjust_delta,
            host,
            offset_delta,
            wrote,
            sync,
            disagreements,
        )
    };
    VcpuResult {
        id,
        tsc_adjust_delta: adjust_delta,
        guest_adjust_delta,
        offset_delta,
        written_value: rec.written,
        tsc_first: rec.tsc_first,
        tsc_before_write: rec.tsc_before_write,
        tsc_after_loop: rec.tsc_after_loop,
        wrote,
        tsc_at_write: w.tsc_at_write,
        write_latency_cycles: w.write_latency,
        exit_latency_cycles: w.exit_latency,
        write_honoured: w.honoured,
        decided_by: w.decided_by,
        host_saw_write: host,
        guest_saw_jump: w.saw_jump,
        rel_offset_adjust: 0,
        rel_offset_attr: None,
        rel_offset_bracket: 0,
        rel_offset_bracket_error: 0,
        rel_offset_guest: None,
        rel_offset_guest_error: None,
        tsc_khz: s.after.tsc_khz,
        running_khz: s.after.running_khz(),
    }
}

/// A write of the common value (Xen's TSC rendezvous): KVM's evidence and
/// the guest's combined, the write's moment, latency and the exit time.
fn common_write(
    id: u32,
    rec: &RoundRecord,
    adjust_delta: i64,
    host: Option<bool>,
    offset_delta: Option<i64>,
    disagreements: &mut Vec<String>,
) -> WriteFindings {
    let at = rec.written.wrapping_sub(adjust_delta as u64);
    let latency = signed_delta(at, rec.tsc_before_write);
    // An honoured write moves the TSC by the value written minus the TSC at the
    // moment KVM handled it, which is no earlier than the guest's read just
    // before the write: a move that puts that moment earlier is one no handling
    // moment gives, so KVM's own record says the value written was not set.
    let (host, by_host) = if latency < 0 {
        (Some(false), DecidedBy::WriteMoment)
    } else {
        (host, host_by(offset_delta))
    };
    let jump = guest_saw_jump(rec.written, at, rec.tsc_after_loop);
    let (h, by, why) = combine(host, by_host, jump);
    if let Some(why) = why {
        disagreements.push(format!("vCPU {id}: {why}"));
    }
    // Which timeline `tsc_after_loop` is on decides where the write was.
    let write_point = if h == Some(true) { rec.written } else { at };
    if latency < 0 {
        disagreements.push(format!(
            "vCPU {id}: KVM handled the write {} cycles before the guest issued it \
             (TSC_ADJUST delta does not match the value written)",
            -latency
        ));
    }
    WriteFindings {
        honoured: h,
        decided_by: by,
        saw_jump: jump,
        tsc_at_write: Some(at),
        write_latency: Some(latency),
        exit_latency: Some(signed_delta(rec.tsc_after_loop, write_point)),
    }
}

/// No common value, so no guest evidence of a jump; a TSC_ADJUST write (a
/// compensation of Linux's sync) is judged by KVM's evidence alone, and
/// must be what the guest says it wrote.
#[allow(clippy::too_many_arguments)]
fn no_common_write(
    id: u32,
    rec: &RoundRecord,
    adjust_delta: i64,
    host: Option<bool>,
    offset_delta: Option<i64>,
    wrote: bool,
    sync: Option<&SyncRound>,
    disagreements: &mut Vec<String>,
) -> WriteFindings {
    let honoured = if wrote { host } else { None };
    let compensated: Option<i64> = sync.map(|r| {
        r.aps.iter().find(|a| a.ap == id).map_or(0, |a| {
            a.compensations.iter().fold(0i64, |x, c| x.wrapping_add(*c))
        })
    });
    let expected = if rec.flags & RECORD_SYNC_RESULT != 0 {
        compensated
    } else {
        Some(0)
    };
    if let Some(e) = expected.filter(|&e| e != adjust_delta) {
        disagreements.push(format!(
            "vCPU {id}: TSC_ADJUST moved by {adjust_delta} cycles, the guest wrote changes of {e}"
        ));
    }
    WriteFindings {
        honoured,
        decided_by: honoured.map(|_| host_by(offset_delta)),
        saw_jump: None,
        tsc_at_write: None,
        write_latency: None,
        exit_latency: None,
    }
}

/// What every vCPU must share with vCPU 0: the value written and the TSC
/// frequency.
fn compare_vcpus(vcpus: &[VcpuResult], disagreements: &mut Vec<String>) {
    let Some(first) = vcpus.first() else { return };
    if let Some(v) = vcpus
        .iter()
        .find(|v| v.written_value != first.written_value)
    {
        disagreements.push(format!(
            "vCPU {} wrote {} but vCPU 0 wrote {}",
            v.id, v.written_value, first.written_value
        ));
    }
    if let Some(v) = vcpus.iter().find(|v| v.tsc_khz != first.tsc_khz) {
        disagreements.push(format!(
            "vCPU {} runs its TSC at {} kHz, vCPU 0 at {} kHz: skews are not comparable",
            v.id, v.tsc_khz, first.tsc_khz
        ));
    }
}

/// Every vCPU's offset relative to vCPU 0 after the round by the three
/// methods, cross-checked where the base and both verdicts are known.
fn relative_offsets(
    vcpus: &mut [VcpuResult],
    samples: &[VcpuSample],
    base: &Base,
    disagreements: &mut Vec<String>,
) {
    let d0 = vcpus.first().map_or(0, |v| v.tsc_adjust_delta);
    // How far the write moved the vCPU's offset: by its delta if it took
    // effect, by nothing if it did not or it moved nothing either way.
    let jump = |v: &VcpuResult| match v.write_honoured {
        Some(true) => Some(v.tsc_adjust_delta),
        Some(false) => Some(0),
        None if v.moved_nothing() => Some(0),
        None => None,
    };
    let jump0 = vcpus.first().and_then(jump);
    let state0 = samples.first().map(|s| s.after);
    let off0 = samples.first().and_then(|s| s.after.offset);
    for (i, (v, s)) in vcpus.iter_mut().zip(samples).enumerate() {
        let b = base.rel.get(i).copied().flatten();
        v.rel_offset_adjust = b
            .unwrap_or(0)
            .wrapping_add(v.tsc_adjust_delta.wrapping_sub(d0));
        v.rel_offset_attr = match (s.after.offset, off0) {
            (Some(o), Some(o0)) => Some(signed_delta(o, o0)),
            _ => None,
        };
        if let Some(s0) = state0 {
            let (rel, err) = s.after.offset_minus(&s0);
            v.rel_offset_bracket = rel;
            v.rel_offset_bracket_error = if i == 0 { 0 } else { err };
        }
        // What the offsets should be now, when the base and both vCPUs'
        // verdicts are known: moved by the writes that took effect.
        let expected_actual = match (b, jump(v), jump0) {
            (Some(b), Some(j), Some(j0)) => Some(b.wrapping_add(j.wrapping_sub(j0))),
            _ => None,
        };
        if let (Some(exp), Some(attr)) = (expected_actual, v.rel_offset_attr) {
            if exp != attr {
                disagreements.push(format!(
                    "vCPU {}: relative offset is {attr} cycles by the exact offsets, \
                     {exp} by TSC_ADJUST",
                    v.id
                ));
            }
        }
        if let Some(exp) = expected_actual {
            let diff = (i128::from(v.rel_offset_bracket) - i128::from(exp)).unsigned_abs();
            if diff > u128::from(v.rel_offset_bracket_error) {
                disagreements.push(format!(
                    "vCPU {}: relative offset is {} ± {} cycles by bracketed reads, {exp} expected",
                    v.id, v.rel_offset_bracket, v.rel_offset_bracket_error
                ));
            }
        }
    }
}

/// A xen-head round with only what summaries read set (its number, skew and
/// verdict), for unit tests: no vCPUs, no disagreements, no exit time.
#[cfg(test)]
pub(crate) fn synthetic_round(round: u32, skew: u64, honoured: Option<bool>) -> RoundResult {
    RoundResult {
        round,
        variant: "xen-head".into(),
        skew_cycles: skew,
        skew_cycles_attr: None,
        skew_cycles_bracket: 0,
        skew_cycles_bracket_error: 0,
        skew_cycles_guest: None,
        skew_cycles_guest_error: None,
        writes_honoured: honoured,
        undecided_vcpus: 0,
        skew_basis: SkewBasis::Offsets,
        cpu0_exit_latency_cycles: None,
        sync: None,
        disagreements: Vec::new(),
        vcpus: Vec::new(),
        kvmclock: None,
    }
}
