//! Unit tests of the report's units on made-up restores at rates KVM scales
//! to (0.5 and 2 of the 2 GHz host) and one it serves by catch-up: host
//! cycles in ns at the host's rate, the guests' advance against the host
//! time at the ratio, the documented formula's literal miss, the msr
//! methods' writes asked for in scaled cycles.

use super::super::report::OffsetFate;
use super::super::testdata::{honoured, honoured_at, honoured_on, msr, report, KHZ};
use crate::tsc::frequency::{Ratio, Scaling};

const HALF: u32 = KHZ / 2;
const TWICE: u32 = KHZ * 2;

/// The host time between the reads is 199,990,000..200,010,000 host
/// cycles whatever the guest's rate: 100 ms at the host's 2 GHz, not 200 ms
/// at the guest's 1 GHz nor 50 ms at 4 GHz; the guests' advance is that
/// host time at the ratio.
#[test]
fn host_time_is_in_ns_at_the_hosts_rate_and_the_advance_at_the_ratio() {
    for khz in [HALF, KHZ, TWICE] {
        let r = report(&honoured_at(0, khz));
        let p = r.host_time_passed.expect("reads measured");
        assert_eq!((p.min_cycles, p.max_cycles), (199_990_000, 200_010_000));
        assert_eq!(p.max_ns, Some(100_005_000.0), "{khz}");
        for v in &r.vcpus {
            let (lo, hi) = v.advance_minus_host.expect("reads measured");
            assert!(lo <= 0 && 0 <= hi, "{khz}: vCPU {}: {lo}..{hi}", v.id);
            assert!(
                hi - lo < 20_000 * i64::from(khz / HALF),
                "{khz}: {lo}..{hi}"
            );
        }
        let t = r.time_outcome.unwrap_or_default();
        assert!(
            t.starts_with("every guest TSC moved forward by the host time that passed (100.0 ms)"),
            "{khz}: {t}"
        );
    }
}

#[test]
fn the_rate_says_how_kvm_ran_the_restored_tsc() {
    let r = report(&honoured_at(0, HALF));
    let x = r.rate.expect("rate");
    assert_eq!(
        x.ratio,
        Ratio {
            guest_khz: HALF,
            host_khz: KHZ
        }
    );
    assert_eq!((x.ratio_ppm, x.scaled, x.catch_up), (500_000, true, false));
    assert_eq!((x.saved_khz, x.kept), (Some(HALF), Some(true)));
    assert_eq!(x.restored_khz, [HALF, HALF]);
    assert_eq!((x.host_khz, x.running_khz), (KHZ, HALF));
    let mut run = honoured_at(0, HALF);
    if let Some(a) = run.after.as_mut() {
        a[1].tsc_khz = KHZ;
    }
    let x = report(&run).rate.expect("rate");
    assert_eq!(x.kept, Some(false), "vCPU 1 restored at another rate");
    let x = report(&honoured(0)).rate.expect("rate");
    assert!(!x.scaled && x.ratio.is_one() && x.running_khz == KHZ);
}

/// vcpu.rst taken literally adds the host TSC difference (149 M host
/// cycles between the samples) unscaled: (r - 1) x 149 M guest cycles off.
#[test]
fn the_literal_formula_misses_by_the_ratio_less_one_times_the_host_tsc_elapsed() {
    for (khz, miss, ns) in [
        (HALF, -74_500_000, -74_500_000.0),
        (TWICE, 149_000_000, 37_250_000.0),
        (KHZ, 0, 0.0),
    ] {
        let r = report(&honoured_at(4_000, khz));
        let c = r.clock.expect("documented");
        assert_eq!(c.shift_cycles, 4_000, "{khz}");
        assert_eq!(c.literal_miss_cycles, miss, "{khz}");
        assert_eq!(c.literal_shift_cycles, 4_000 + miss, "{khz}");
        assert_eq!(c.literal_miss_ns, Some(ns), "{khz}");
        assert_eq!((c.realtime_drift_cycles, c.rate_gap_cycles), (4_000, 0));
    }
}

/// Without TSC scaling twice the host's rate is served by catch-up: the
/// offsets move 1:1 with the host TSC, kvmclock's ns convert at the rate
/// reported, so the shift is the drift plus the host time at the rate's
/// excess (149 M cycles), and the literal formula is the documented one.
#[test]
fn a_rate_served_by_catch_up_opens_a_gap_the_shift_carries() {
    let host = Scaling {
        host_khz: KHZ,
        tsc_control: false,
        tolerance_ppm: 250,
    };
    let r = report(&honoured_on(4_000, TWICE, &host));
    let x = r.rate.expect("rate");
    assert!(x.catch_up && !x.scaled && x.ratio.is_one(), "{x:?}");
    assert_eq!(x.running_khz, KHZ);
    let c = r.clock.expect("documented");
    assert_eq!(c.rate_gap_cycles, 149_000_000);
    assert_eq!(c.realtime_drift_cycles, 4_000);
    assert_eq!(c.shift_cycles, 149_004_000);
    assert_eq!(c.literal_miss_cycles, 0);
}

/// The msr methods' writes ask for the offset of the scaled host TSC: at
/// 0.5 every restored offset is the one asked for; judged 1:1 it would not
/// be.
#[test]
fn a_scaled_write_is_matched_to_the_offset_it_asked_for() {
    let run = msr(&honoured_at(0, HALF));
    let r = report(&run);
    assert!(
        r.vcpus
            .iter()
            .all(|v| v.offset_fate == OffsetFate::AsWritten),
        "{:?}",
        r.vcpus.iter().map(|v| v.offset_fate).collect::<Vec<_>>()
    );
    let mut unscaled = run.clone();
    if let Some(super::super::methods::Trace::Msr(m)) = unscaled.trace.as_mut() {
        m.ratio = Ratio::ONE;
    }
    let r = report(&unscaled);
    assert!(r
        .vcpus
        .iter()
        .all(|v| v.offset_fate != OffsetFate::AsWritten));
}
