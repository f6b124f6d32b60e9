//! What a method did, in words, derived from its report's numbers only.

use super::report::{MethodReport, OffsetFate, VcpuReport};
use crate::units::{cycles_to_ns_at, fmt_int as num};

fn ids(v: &[&VcpuReport]) -> String {
    v.iter()
        .map(|x| x.id.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn ms(ns: Option<f64>) -> String {
    ns.map_or_else(|| "?".into(), |n| format!("{:.1} ms", n / 1e6))
}

/// What the method did to the vCPUs' relative offsets.
pub fn offsets(r: &MethodReport) -> String {
    let m = r.method;
    let v = &r.vcpus;
    let exact = v
        .iter()
        .all(|x| x.relative_offset_before.is_some() && x.relative_offset_after.is_some());
    if !exact {
        return estimated(m, v);
    }
    let mut parts = vec![relative_outcome(r)];
    let carried = v
        .iter()
        .all(|x| x.offset_moved_before == x.adjust_moved_before);
    if !carried {
        let list = |f: fn(&VcpuReport) -> Option<i64>| {
            v.iter()
                .map(|x| f(x).map_or_else(|| "?".into(), num))
                .collect::<Vec<_>>()
                .join(", ")
        };
        parts.push(format!(
            "the saved offsets did not carry the rendezvous' writes: TSC_ADJUST moved by {} but the offsets by {} cycles",
            list(|x| x.adjust_moved_before),
            list(|x| x.offset_moved_before)
        ));
    }
    parts.extend(fates(r));
    parts.join("; ")
}

/// Without exact offsets: the estimates from the bracketed reads against
/// what the writes asked for.
fn estimated(m: &str, v: &[VcpuReport]) -> String {
    let est: Vec<String> = v
        .iter()
        .map(|x| {
            format!(
                "{} ± {}",
                num(x.relative_estimate_after.unwrap_or(0)),
                num(x.estimate_error.unwrap_or(0))
            )
        })
        .collect();
    let asked: Vec<String> = v
        .iter()
        .map(|x| num(x.relative_adjust_before.unwrap_or(0)))
        .collect();
    format!(
        "no exact offsets on this kernel: after {m} the relative offsets, estimated from \
         bracketed IA32_TSC reads, are {} cycles; the rendezvous' writes asked for {} (TSC_ADJUST)",
        est.join(", "),
        asked.join(", ")
    )
}

/// What became of the relative offsets: kept, snapped to one, or changed.
fn relative_outcome(r: &MethodReport) -> String {
    let (m, v) = (r.method, &r.vcpus);
    let before = r.skew_before_cycles.unwrap_or(0);
    let after = r.skew_after_cycles.unwrap_or(0);
    let same = v
        .iter()
        .all(|x| x.relative_offset_after == x.relative_offset_before);
    let all_zero = v.iter().all(|x| x.relative_offset_after == Some(0));
    if same && before > 0 {
        format!(
            "{m} kept every relative offset bit-exact: the skew of {} cycles the rendezvous left survived",
            num(before)
        )
    } else if same {
        format!(
            "{m} kept every relative offset bit-exact (all 0: the offsets held no skew to keep)"
        )
    } else if all_zero {
        format!(
            "{m} snapped all vCPUs to one offset: the skew the rendezvous left ({} cycles) is gone",
            num(before)
        )
    } else {
        let moved = v
            .iter()
            .filter_map(|x| {
                let d =
                    i128::from(x.relative_offset_after?) - i128::from(x.relative_offset_before?);
                Some((x.id, d))
            })
            .max_by_key(|&(_, d)| d.abs())
            .unwrap_or((0, 0));
        format!(
            "{m} changed the relative offsets: skew {} cycles before, {} after (vCPU {} moved by {} cycles against vCPU 0)",
            num(before),
            num(after),
            moved.0,
            num(moved.1)
        )
    }
}

/// Which offset each vCPU ended with, where it is not the one asked for.
fn fates(r: &MethodReport) -> Vec<String> {
    let v = &r.vcpus;
    let by =
        |f: OffsetFate| -> Vec<&VcpuReport> { v.iter().filter(|x| x.offset_fate == f).collect() };
    let what = if r.method == "documented" {
        "the one written"
    } else {
        "the one its IA32_TSC write asked for"
    };
    let mut parts = Vec::new();
    let kept = by(OffsetFate::KeptCreationOffset);
    if !kept.is_empty() {
        parts.push(format!(
            "vCPU(s) {} kept the offset they were created with instead of {what}",
            ids(&kept)
        ));
    }
    let snapped = by(OffsetFate::Vcpu0Offset);
    if !snapped.is_empty() {
        parts.push(format!(
            "vCPU(s) {} got vCPU 0's offset instead of {what}{}",
            ids(&snapped),
            if r.method == "documented" {
                ""
            } else {
                " (KVM matches host TSC writes less than a second of virtual time apart)"
            }
        ));
    }
    let first = by(OffsetFate::Vcpu0FirstWrite);
    if !first.is_empty() {
        parts.push(format!(
            "vCPU(s) {} got the offset vCPU 0's first write asked for instead of {what}",
            ids(&first)
        ));
    }
    let other = by(OffsetFate::Other);
    if !other.is_empty() {
        parts.push(format!(
            "vCPU(s) {} ended with an offset other than {what}",
            ids(&other)
        ));
    }
    parts
}

/// What happened to the guests' TSCs across the restore.
pub fn time(r: &MethodReport) -> String {
    let v = &r.vcpus;
    let passed = r
        .host_time_passed
        .map_or_else(|| "?".into(), |p| ms(p.max_ns));
    let back: Vec<&VcpuReport> = v
        .iter()
        .filter(|x| x.guest_advance_cycles.is_some_and(|a| a < 0))
        .collect();
    if !back.is_empty() {
        let worst = back
            .iter()
            .filter_map(|x| x.guest_advance_cycles)
            .min()
            .unwrap_or(0);
        // Guest cycles, at the rate the TSC runs at.
        let khz = r
            .rate
            .as_ref()
            .map(|x| x.running_khz)
            .or(r.tsc_khz)
            .unwrap_or(0);
        let worst_ns = cycles_to_ns_at(-i128::from(worst), khz);
        return format!(
            "the TSC went backwards on vCPU(s) {} across the restore (by up to {} cycles, {}), \
             although {passed} of host time passed",
            ids(&back),
            num(-i128::from(worst)),
            ms(worst_ns)
        );
    }
    let devs: Vec<(i64, i64)> = v.iter().filter_map(|x| x.advance_minus_host).collect();
    if devs.len() < v.len() || devs.is_empty() {
        return "the guests' TSC reads are incomplete".into();
    }
    if devs.iter().all(|&(lo, hi)| lo <= 0 && 0 <= hi) {
        return format!(
            "every guest TSC moved forward by the host time that passed ({passed}), within the brackets of the reads"
        );
    }
    let low = devs.iter().map(|d| d.0).min().unwrap_or(0);
    let high = devs.iter().map(|d| d.1).max().unwrap_or(0);
    if devs.iter().all(|&(_, hi)| hi < 0) {
        let least = devs.iter().map(|d| -d.1).min().unwrap_or(0);
        format!(
            "every guest TSC moved forward, but by less than the host time that passed ({passed}): \
             they lost between {} and {} cycles",
            num(least),
            num(-i128::from(low))
        )
    } else if devs.iter().all(|&(lo, _)| lo > 0) {
        let least = devs.iter().map(|d| d.0).min().unwrap_or(0);
        format!(
            "every guest TSC moved forward by more than the host time that passed ({passed}): \
             they gained between {} and {} cycles",
            num(least),
            num(high)
        )
    } else {
        format!(
            "the guest TSCs moved forward by {} to {} cycles more than the host time that passed \
             ({passed}), not the same on every vCPU",
            num(low),
            num(high)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::report::OffsetFate;
    use super::super::testdata::{honoured, msr, report, set_after, DST_CREATED};

    #[test]
    fn a_kept_skew_is_said_to_survive() {
        let r = report(&honoured(0));
        assert_eq!(
            r.offsets_outcome.as_deref(),
            Some("documented kept every relative offset bit-exact: the skew of 300 cycles the rendezvous left survived")
        );
        let t = r.time_outcome.unwrap_or_default();
        assert!(
            t.starts_with("every guest TSC moved forward by the host time that passed"),
            "{t}"
        );
    }

    #[test]
    fn a_snapped_offset_is_named_with_whose_offset_it_got() {
        let mut run = msr(&honoured(0));
        let a0 = run.after.as_ref().and_then(|a| a[0].offset).unwrap_or(0);
        set_after(&mut run, 1, a0);
        let r = report(&run);
        assert_eq!(r.vcpus[1].offset_fate, OffsetFate::Vcpu0Offset);
        let w = r.offsets_outcome.unwrap_or_default();
        assert!(
            w.starts_with("msr snapped all vCPUs to one offset: the skew the rendezvous left (300 cycles) is gone"),
            "{w}"
        );
        assert!(
            w.contains(
                "vCPU(s) 1 got vCPU 0's offset instead of the one its IA32_TSC write asked for"
            ),
            "{w}"
        );
    }

    /// msr-twice on Linux >= 6.7: the second write of vCPU 0 is matched to
    /// the first one's offset.
    #[test]
    fn a_second_write_replaced_by_the_first_is_named() {
        let mut run = msr(&honoured(0));
        if let Some(super::super::methods::Trace::Msr(m)) = run.trace.as_mut() {
            let mut second = m.passes[0].clone();
            second[0].value = second[0].value.wrapping_add(1_000);
            m.passes.push(second);
        }
        let r = report(&run);
        assert_eq!(r.vcpus[0].offset_fate, OffsetFate::Vcpu0FirstWrite);
        assert_eq!(r.vcpus[1].offset_fate, OffsetFate::AsWritten);
        let w = r.offsets_outcome.unwrap_or_default();
        assert!(
            w.contains("vCPU(s) 0 got the offset vCPU 0's first write asked for"),
            "{w}"
        );
    }

    #[test]
    fn writes_replaced_by_the_creation_offset_and_a_tsc_that_went_back_are_said() {
        let mut run = msr(&honoured(0));
        set_after(&mut run, 0, DST_CREATED);
        set_after(&mut run, 1, DST_CREATED);
        let r = report(&run);
        let w = r.offsets_outcome.unwrap_or_default();
        assert!(
            w.contains("vCPU(s) 0, 1 kept the offset they were created with"),
            "{w}"
        );
        let t = r.time_outcome.unwrap_or_default();
        assert!(
            t.starts_with("the TSC went backwards on vCPU(s) 0, 1"),
            "{t}"
        );
        let mut run = honoured(0);
        let a1 = run.after.as_ref().and_then(|a| a[1].offset).unwrap_or(0);
        set_after(&mut run, 1, a1.wrapping_add(1_000));
        let w = report(&run).offsets_outcome.unwrap_or_default();
        assert!(
            w.starts_with("documented changed the relative offsets: skew 300 cycles before, 700 after (vCPU 1 moved by 1,000 cycles"),
            "{w}"
        );
        assert!(
            w.contains("vCPU(s) 1 ended with an offset other than the one written"),
            "{w}"
        );
    }
}
