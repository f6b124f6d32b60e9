//! Check 7, `save-restore`: a snapshot after a rendezvous, restored into a
//! fresh VM by the documented method (Documentation/virt/kvm/devices/
//! vcpu.rst, "TSC offset"), keeps the guest's TSCs in sync: every relative
//! offset bit-exact, TSC_ADJUST exact, every guest TSC moved forward by the
//! host time that passed, and no warp beyond the skew. Measured on VMs of
//! its own ([`crate::restore::measure_method`]); its clock part (kvmclock,
//! the master clock, the chained restore) is [`super::save_restore_clock`].

use std::time::Duration;

use super::evidence::{Check, Context, Evidence};
use super::judge::context;
use super::lock_order;
use super::report::{Finding, Verdict};
use super::save_restore_clock;
use crate::error::RunError;
use crate::host::KvmFlavor;
use crate::restore::{
    self, ChainDelay, Method, MethodOptions, MethodReport, RestoreError, Step, Support,
};
use crate::tsc::frequency::Ratio;
use crate::units::fmt_int as n;

/// Check 7.
pub struct SaveRestore;

/// The delay between destroying the source VM and creating the restored one
/// (the chained restore's grows from it: [`ChainDelay::Scaled`]). What a
/// restore that loses real time loses is at least the delay; kvmclock's
/// continuity allowance across the first restore is 1000 ppm of the host
/// time plus the pages' ages (about 0.1 ms measured on PVM), so 10 ms keeps
/// that failure far outside it.
pub const DELAY: Duration = Duration::from_millis(10);

impl Check for SaveRestore {
    fn number(&self) -> u32 {
        7
    }
    fn id(&self) -> &'static str {
        "save-restore"
    }
    fn title(&self) -> &'static str {
        "snapshot/restore by the documented method keeps relative offsets bit-exact, TSC_ADJUST \
         exact and the guest TSCs moving with host time"
    }
    fn run(&self, ev: &Evidence, ctx: &Context) -> Result<Finding, RunError> {
        let adjust_clock = ev
            .env
            .kvm_capabilities
            .get("KVM_CAP_ADJUST_CLOCK")
            .copied()
            .unwrap_or(0);
        let support = Support::new(ev.env.host.tsc_offset_attr, adjust_clock);
        if let Some(why) = support.why_not(Method::Documented) {
            return Ok(Finding::skip(format!(
                "{why}; `restore` still measures the msr methods here"
            ))
            .with("missing", support.missing(Method::Documented)));
        }
        let opts = MethodOptions {
            vcpus: ev.options.vcpus,
            variant: ev.options.variant,
            delay: DELAY,
            warp_iterations: ev.options.warp_iterations,
            timeout: ctx.time_left(),
            fail_at: None,
            chain: true,
            tsc: ev.options.tsc,
            chain_delay: ChainDelay::Scaled,
        };
        let (run, error) = restore::measure_method(&opts, Method::Documented);
        let report = MethodReport::from_run(&run, &opts);
        let flavor = ev.env.host.kvm_flavor;
        match error {
            None => Ok(judge(&report, opts.vcpus, flavor)),
            Some(e) => failed(e, &report, flavor),
        }
    }
}

/// The finding of a measurement that ended early: a stop request or a
/// trouble with the source VM is the caller's error (as for every check);
/// the tool's own time limit reached is UNDECIDED naming it (a deadline is
/// no evidence about KVM); a clock without real time is a SKIP naming it;
/// anything the restore itself ran into is a FAIL, with what was measured.
fn failed(e: RestoreError, r: &MethodReport, flavor: KvmFlavor) -> Result<Finding, RunError> {
    let step = r
        .failed_step
        .and_then(Step::from_name)
        .unwrap_or(Step::Source);
    if let RestoreError::Run(run) = &e {
        if let Some(stall) = run.stall() {
            return Ok(values(
                Finding::new(
                    Verdict::Undecided,
                    format!(
                        "the documented restore did not finish within the check's time limit \
                         (step '{}', {}): {stall}; a time limit reached is no evidence of a KVM \
                         failure",
                        step.name(),
                        step.describe()
                    ),
                ),
                r,
            ));
        }
    }
    match e {
        RestoreError::Interrupted(s) => Err(RunError::interrupted(s.0, 0)),
        RestoreError::Run(e) if e.signal().is_some() || step == Step::Source => Err(e),
        RestoreError::Vm(e) => Err(RunError::Vm(e)),
        RestoreError::Offsets(o @ restore::offsets::OffsetError::MissingFlags { .. }) => {
            Ok(values(Finding::skip(o.to_string()), r))
        }
        e => Ok(values(
            Finding::fail(format!(
                "the documented restore failed in step '{}' ({}): {e}{}",
                step.name(),
                step.describe(),
                context(flavor)
            )),
            r,
        )),
    }
}

fn values(f: Finding, r: &MethodReport) -> Finding {
    f.with("skew_before_cycles", r.skew_before_cycles)
        .with("skew_after_cycles", r.skew_after_cycles)
        .with("delay_ms", r.delay_ms)
        .with("host_time_passed", r.host_time_passed)
        .with("rate", &r.rate)
        .with("clock", &r.clock)
        .with("warp", r.warp)
        .with("vcpus", &r.vcpus)
        .with("kvmclock", &r.kvmclock)
        .with("chain", &r.chain)
        .with("keeps", &r.keeps)
}

/// Check 7 from the documented method's report. FAIL needs evidence: an
/// offset that did not carry the rendezvous' write, an offset KVM did not
/// keep as written, a relative offset or TSC_ADJUST that changed, a guest
/// TSC that went back or did not move by the host time that passed (within
/// the brackets of the reads, plus the shift the method applied, which must
/// be the host's real-time drift within its bound), a warp beyond the skew.
/// Without a failure it is UNDECIDED where the evidence could not tell a
/// good restore from a bad one: a host clock stepped during the restore; a
/// bound on the clock shift not below the drift it is checked against (a
/// restore that applied no shift would pass too); a snapshot that held no
/// skew or no TSC_ADJUST (a fresh VM has them 0 as well, so dropping them
/// reads the same).
pub fn judge(r: &MethodReport, vcpus: u32, flavor: KvmFlavor) -> Finding {
    let f = values(Finding::skip("nothing measured"), r);
    let v = &r.vcpus;
    if v.is_empty() || !r.completed {
        return f;
    }
    let exact = v.iter().all(|x| {
        x.offset_before.is_some() && x.offset_after.is_some() && x.offset_after_warp.is_some()
    });
    let (Some(passed), true) = (r.host_time_passed, exact) else {
        let mut f = f;
        f.set(
            Verdict::Undecided,
            "no exact offsets or no guest reads were measured: nothing to compare",
        );
        return f;
    };
    let mut fails: Vec<String> = Vec::new();
    let mut open: Vec<String> = Vec::new();
    offset_findings(v, &mut fails);
    nothing_to_keep(v, &mut open);
    guest_time(r, passed, &mut fails, &mut open);
    let shift = clock_findings(r, &mut fails, &mut open);
    let clock = save_restore_clock::judge(r.kvmclock.as_ref(), r.chain.as_ref(), r.keeps.as_ref());
    fails.extend(clock.fails);
    let skew = r.skew_after_cycles.unwrap_or(0);
    let w = lock_order::judge(
        vcpus,
        r.warp.map_or(0, |w| w.iterations_per_vcpu),
        r.warp_seen.as_deref().unwrap_or(&[]),
        (skew, 0, "KVM_VCPU_TSC_OFFSET"),
    );
    if w.verdict == Verdict::Fail {
        fails.push(format!("warp test: {}", w.reason));
    }
    let mut f = f.with("clock_shift_tested", shift.as_ref().map(|s| s.tested));
    let untestable = shift
        .and_then(|s| s.note)
        .map_or_else(String::new, |s| format!("; {s}"));
    if !fails.is_empty() {
        f.set(
            Verdict::Fail,
            format!("{}{}{}", fails.join("; "), clock.note, context(flavor)),
        );
    } else if !open.is_empty() {
        f.set(
            Verdict::Undecided,
            format!("{}{untestable}{}", open.join("; "), clock.note),
        );
    } else {
        let reason = pass_reason(r, passed, skew, &w);
        f.set(Verdict::Pass, format!("{reason}{untestable}{}", clock.note));
    }
    f
}

/// What the offsets and TSC_ADJUST say against the documented method:
/// each way the evidence shows a failure, in words.
fn offset_findings(v: &[restore::report::VcpuReport], fails: &mut Vec<String>) {
    if let Some(x) = v
        .iter()
        .find(|x| x.offset_moved_before != x.adjust_moved_before)
    {
        let still = v.iter().all(|x| x.offset_moved_before == Some(0));
        fails.push(format!(
            "{} (vCPU {}: offset moved by {}, TSC_ADJUST by {}): the snapshot holds no skew to carry",
            if still {
                "the offsets did not move although TSC_ADJUST recorded the rendezvous' writes"
            } else {
                "the offsets did not move by the rendezvous' writes TSC_ADJUST recorded"
            },
            x.id,
            n(x.offset_moved_before.unwrap_or(0)),
            n(x.adjust_moved_before.unwrap_or(0))
        ));
    }
    if let Some(x) = v.iter().find(|x| x.offset_written != x.offset_after) {
        fails.push(format!(
            "KVM did not keep the offsets the restore wrote (vCPU {}: wrote {}, reads {})",
            x.id,
            x.offset_written
                .map_or_else(|| "?".into(), |w| w.to_string()),
            x.offset_after.map_or_else(|| "?".into(), |w| w.to_string())
        ));
    }
    if let Some(x) = v.iter().find(|x| {
        x.relative_offset_after != x.relative_offset_before
            || x.relative_offset_after_warp != x.relative_offset_before
    }) {
        fails.push(format!(
            "vCPU {}'s offset relative to vCPU 0 changed: {} saved, {} after the restore, {} after the warp test",
            x.id,
            n(x.relative_offset_before.unwrap_or(0)),
            n(x.relative_offset_after.unwrap_or(0)),
            n(x.relative_offset_after_warp.unwrap_or(0))
        ));
    }
    if let Some(x) = v.iter().find(|x| x.tsc_adjust_after != x.tsc_adjust_before) {
        fails.push(format!(
            "TSC_ADJUST not restored exactly (vCPU {}: saved {}, reads {})",
            x.id,
            n(x.tsc_adjust_before.unwrap_or(0)),
            n(x.tsc_adjust_after.unwrap_or(0))
        ));
    }
}

/// What the snapshot held for the restore to keep. Fresh vCPUs are created
/// with equal offsets and a TSC_ADJUST of 0, so relative offsets that were
/// all 0 (nothing written, e.g. `xen-std`) and a TSC_ADJUST of 0 read back
/// "bit-exact" whether the restore kept them or dropped them: nothing held
/// is nothing judged.
fn nothing_to_keep(v: &[restore::report::VcpuReport], open: &mut Vec<String>) {
    let skew_held = v
        .iter()
        .any(|x| x.relative_offset_before.is_some_and(|r| r != 0));
    let adjust_held = v
        .iter()
        .any(|x| x.tsc_adjust_before.is_some_and(|a| a != 0));
    let unwritten = v.iter().all(|x| x.adjust_moved_before == Some(0));
    let why = if unwritten {
        " (no vCPU wrote its TSC before the snapshot)"
    } else {
        ""
    };
    match (skew_held, adjust_held) {
        (true, true) => {}
        (false, false) => open.push(format!(
            "the snapshot held no skew and no TSC_ADJUST{why}: every relative offset and \
             TSC_ADJUST was 0, as a fresh VM's are, so a restore that dropped them would read \
             the same"
        )),
        (false, true) => open.push(format!(
            "the snapshot held no skew{why}: every offset relative to vCPU 0 was 0, as a fresh \
             VM's are, so a restore that dropped the offsets would read the same"
        )),
        (true, false) => open.push(
            "the snapshot held no TSC_ADJUST: every one was 0, as a fresh VM's is, so a restore \
             that dropped it would read the same"
                .to_string(),
        ),
    }
}

/// What the clock says: the shift the method applied against the host's
/// real-time drift (plus the rate gap where KVM reports a rate it does not
/// scale to: what the shift must equal). A stepped host clock leaves it
/// open. A bound that is not below the expected shift cannot tell the
/// method's shift from none (|0 - expected| <= bound): on one host, whose
/// real-time drift across a restore is near 0, that is the rule, so the
/// shift is reported as not testable here (the note) while the rest of the
/// restore is judged. `None` without a clock part.
fn clock_findings(
    r: &MethodReport,
    fails: &mut Vec<String>,
    open: &mut Vec<String>,
) -> Option<ShiftTest> {
    let c = r.clock.as_ref()?;
    let expected = i128::from(c.realtime_drift_cycles) + i128::from(c.rate_gap_cycles);
    let off = (i128::from(c.shift_cycles) - expected).unsigned_abs();
    let drift = c.realtime_drift_cycles.unsigned_abs();
    let gap = if c.rate_gap_cycles == 0 {
        String::new()
    } else {
        format!(
            " plus the rate gap {} (KVM reports a rate it does not scale to)",
            n(c.rate_gap_cycles)
        )
    };
    let untested = |note: Option<String>| ShiftTest {
        tested: false,
        note,
    };
    if drift > c.drift_bound_cycles {
        open.push(format!(
            "CLOCK_REALTIME moved {} cycles against the host TSC during the restore, more than \
             NTP can slew ({}): the host clock was stepped, and the method moved the guest TSCs with it",
            n(c.realtime_drift_cycles),
            n(c.drift_bound_cycles)
        ));
        return Some(untested(None));
    }
    if off > u128::from(c.shift_bound_cycles) {
        fails.push(format!(
            "the offsets shifted by {} cycles, but real time drifted {} against the TSC{gap} \
             (|difference| {} > bound {}): the restore did not carry the time that passed",
            n(c.shift_cycles),
            n(c.realtime_drift_cycles),
            n(off as i128),
            n(c.shift_bound_cycles)
        ));
    } else if expected.unsigned_abs() <= u128::from(c.shift_bound_cycles) {
        return Some(untested(Some(format!(
            "the clock shift is not testable on one host: real time drifted {} cycles against \
             the TSC{gap}, within the bound ± {} on |shift - drift|, so a restore that applied \
             no shift would read the same as this one's {} (a restore onto a host whose clock \
             has drifted tests it)",
            n(c.realtime_drift_cycles),
            n(c.shift_bound_cycles),
            n(c.shift_cycles)
        ))));
    }
    Some(ShiftTest {
        tested: true,
        note: None,
    })
}

/// Whether the clock shift was tested, and the note that says why not.
struct ShiftTest {
    /// The bound could tell the method's shift from none, the host clock
    /// not stepped.
    tested: bool,
    /// The reason's note when it could not (on one host).
    note: Option<String>,
}

/// The reason of a PASS: what was exact and what moved by how much.
fn pass_reason(
    r: &MethodReport,
    passed: restore::report::HostInterval,
    skew: u64,
    w: &Finding,
) -> String {
    let ms = passed
        .max_ns
        .map_or_else(|| "?".into(), |ns| format!("{:.1} ms", ns / 1e6));
    let clock = r.clock.as_ref().map_or_else(String::new, |c| {
        let literal = if c.literal_miss_cycles == 0 {
            String::new()
        } else {
            format!(
                "; vcpu.rst's formula taken literally (the host TSC difference unscaled) would \
                 have put every guest TSC off by {} cycles ({})",
                n(c.literal_miss_cycles),
                c.literal_miss_ns
                    .map_or_else(|| "?".into(), |ns| format!("{:.3} ms", ns / 1e6))
            )
        };
        format!(
            " plus the method's shift of {} cycles (real-time drift {}{} ± {}){literal}",
            n(c.shift_cycles),
            n(c.realtime_drift_cycles),
            if c.rate_gap_cycles == 0 {
                String::new()
            } else {
                format!(" + rate gap {}", n(c.rate_gap_cycles))
            },
            n(c.shift_bound_cycles)
        )
    });
    let scaled = r
        .rate
        .as_ref()
        .filter(|x| x.scaled)
        .map_or_else(String::new, |x| {
            format!(
                " at {}x the host's rate",
                crate::tsc::frequency::fmt_ppm(x.ratio_ppm)
            )
        });
    let warp = match w.verdict {
        Verdict::Pass => format!("warp test: {}", w.reason),
        Verdict::Skip => "warp test: one vCPU".into(),
        _ => format!("warp test inconclusive ({})", w.reason),
    };
    format!(
        "every relative offset bit-exact after the restore (skew {} cycles), TSC_ADJUST exact, \
         every guest TSC moved forward by the host time that passed ({ms}{scaled}){clock}; {warp}",
        n(skew)
    )
}

/// Every guest TSC moved forward, by the host time that passed between the
/// reads (a bracket, in guest cycles at the ratio KVM runs the restored TSC
/// at, widened by its fixed-point error) plus the vCPU's offset change: the
/// guest's TSC is the host's times the ratio plus its offset, so the sum is
/// exact. Where KVM serves the rate by catch-up it also moves the TSC
/// forward at guest entries, by at most the rest of the host time at the
/// rate it reports: the upper end is widened by that.
fn guest_time(
    r: &MethodReport,
    passed: restore::report::HostInterval,
    fails: &mut Vec<String>,
    open: &mut Vec<String>,
) {
    let ratio = r.rate.as_ref().map_or(Ratio::ONE, |x| x.ratio);
    let e = i128::from(ratio.scale_error(passed.max_cycles));
    let scaled = |c: u64| ratio.scale(i128::from(c));
    let catch_up = match (&r.rate, r.tsc_khz) {
        (Some(x), Some(khz)) if x.catch_up => {
            let nominal = Ratio {
                guest_khz: khz,
                host_khz: x.host_khz,
            };
            (nominal.scale(i128::from(passed.max_cycles)) - scaled(passed.max_cycles)).max(0) + 1
        }
        _ => 0,
    };
    for x in &r.vcpus {
        let (Some(adv), Some(b), Some(a)) =
            (x.guest_advance_cycles, x.offset_before, x.offset_after)
        else {
            // A read that is missing is no evidence of a TSC that moved
            // wrongly.
            open.push(format!(
                "vCPU {}'s guest TSC reads around the restore are missing: its advance is not \
                 judged",
                x.id
            ));
            return;
        };
        let moved = i128::from(a.wrapping_sub(b) as i64);
        let lo = scaled(passed.min_cycles) - e + moved;
        let hi = scaled(passed.max_cycles) + e + moved + catch_up;
        if adv < 0 {
            fails.push(format!(
                "vCPU {}'s TSC went backwards across the restore by {} cycles",
                x.id,
                n(-i128::from(adv))
            ));
            return;
        }
        if !(lo..=hi).contains(&i128::from(adv)) {
            fails.push(format!(
                "vCPU {}'s TSC moved by {} cycles, not by the host time that passed{} plus its offset's change ({}..{})",
                x.id,
                n(adv),
                if ratio.is_one() {
                    String::new()
                } else {
                    format!(" scaled by {}", crate::tsc::frequency::fmt_ppm(ratio.ppm()))
                },
                n(lo),
                n(hi)
            ));
            return;
        }
    }
}

#[cfg(test)]
mod tests;
