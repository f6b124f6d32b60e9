//! The arithmetic of carrying TSC offsets across a restore: the documented
//! formula (Documentation/virt/kvm/devices/vcpu.rst, "TSC offset"), the
//! drift of the host's real time against its TSC between two KVM_GET_CLOCK
//! samples, and the bound within which the formula's shift must equal that
//! drift. Pure functions, no KVM.
//!
//! Units: kvmclock and CLOCK_REALTIME in nanoseconds, the TSC frequency in
//! kHz (cycles = ns * kHz / 10^6), offsets and TSCs in cycles, modulo 2^64
//! (offsets are usually "negative": minus the host TSC at vCPU creation).
//!
//! With TSC scaling KVM runs `guest = host * ratio + offset`: offsets are
//! guest (scaled) cycles, and a host TSC difference (KVM_GET_CLOCK's
//! `host_tsc`) enters them multiplied by the destination's ratio (a
//! [`Ratio`], 1:1 where KVM does not scale). vcpu.rst's formula adds
//! `(tsc_src - tsc_dest)` unscaled: taken literally it is right only at
//! 1:1 and misses by `(ratio - 1) * (tsc_dest - tsc_src)` otherwise
//! ([`literal_shift`]). Host time turns into guest cycles at the nominal
//! ratio `freq / host_khz` (KVM_GET_TSC_KHZ against the host's rate) where
//! it is time the guest must see, and at the ratio KVM applies where it is
//! KVM's offset arithmetic; the two differ only where KVM reports a rate it
//! does not scale to ([`rate_gap`]).

use kvm_bindings::{KVM_CLOCK_HOST_TSC, KVM_CLOCK_REALTIME};

pub use crate::tsc::clock::{flag_names, ClockSample};
pub use crate::tsc::frequency::Ratio;

/// The flags the documented method needs in a KVM_GET_CLOCK sample (and in
/// KVM_CAP_ADJUST_CLOCK).
pub const NEEDED_CLOCK_FLAGS: u32 = KVM_CLOCK_REALTIME | KVM_CLOCK_HOST_TSC;

/// The names of the flags of [`NEEDED_CLOCK_FLAGS`] missing from `flags`.
pub fn missing_flags(flags: u32) -> Vec<&'static str> {
    flag_names(NEEDED_CLOCK_FLAGS & !flags)
}

impl ClockSample {
    /// Checks the sample carries real time and the host TSC; `which` names
    /// it ("source", "destination") in the error.
    pub fn complete(&self, which: &'static str) -> Result<(), OffsetError> {
        let missing = missing_flags(self.flags);
        if missing.is_empty() {
            return Ok(());
        }
        Err(OffsetError::MissingFlags {
            which,
            missing: missing.join(", "),
            flags: self.flags,
        })
    }
}

/// Why the documented formula cannot be evaluated.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, displaydoc::Display)]
pub enum OffsetError {
    /// the TSC frequency is 0 kHz: nanoseconds cannot be turned into cycles (KVM_GET_TSC_KHZ gave no usable frequency)
    ZeroFrequency,
    /// KVM_GET_CLOCK on the {which} returned flags {flags:#x}, without {missing}: the documented method needs the host TSC and real time of the sample (they are reported only when the host clocksource is the TSC)
    MissingFlags {
        /// "source" or "destination".
        which: &'static str,
        /// The missing flags, by name.
        missing: String,
        /// The flags returned.
        flags: u32,
    },
}

/// `ns` nanoseconds in cycles at `khz`, rounded to the nearest cycle (ties
/// up). Exact in i128 for any u64 difference of nanoseconds.
pub fn ns_to_cycles(ns: i128, khz: u32) -> Result<i128, OffsetError> {
    if khz == 0 {
        return Err(OffsetError::ZeroFrequency);
    }
    Ok((ns * i128::from(khz) + 500_000).div_euclid(1_000_000))
}

/// What the documented formula adds to every vCPU's offset:
/// `- (guest_src - guest_dst) * freq + (tsc_src - tsc_dst) * ratio`, in
/// guest cycles: `khz` is `freq` (KVM_GET_TSC_KHZ of the saved vCPUs),
/// `ratio` the one KVM runs the destination's TSC at (the host TSC
/// difference is host cycles). The same for every vCPU, so relative
/// offsets survive bit-exact.
pub fn documented_shift(
    src: &ClockSample,
    dst: &ClockSample,
    khz: u32,
    ratio: Ratio,
) -> Result<i128, OffsetError> {
    let clock = i128::from(src.clock_ns) - i128::from(dst.clock_ns);
    let tsc = i128::from(src.host_tsc) - i128::from(dst.host_tsc);
    Ok(-ns_to_cycles(clock, khz)? + ratio.scale(tsc))
}

/// vcpu.rst's formula taken literally: the host TSC difference added
/// unscaled. Minus [`documented_shift`] it is `(1 - ratio) * (tsc_src -
/// tsc_dst)`: how far it would put every guest TSC off.
pub fn literal_shift(src: &ClockSample, dst: &ClockSample, khz: u32) -> Result<i128, OffsetError> {
    documented_shift(src, dst, khz, Ratio::ONE)
}

/// `ofs + shift` modulo 2^64 (offsets wrap).
pub fn shifted(ofs: u64, shift: i128) -> u64 {
    (i128::from(ofs) + shift).rem_euclid(1i128 << 64) as u64
}

#[cfg(test)]
/// The documented destination offset of a vCPU whose source offset was
/// `ofs_src`: `ofs_src - (guest_src - guest_dst) * freq + (tsc_src -
/// tsc_dst) * ratio`.
pub fn documented_offset(
    ofs_src: u64,
    src: &ClockSample,
    dst: &ClockSample,
    khz: u32,
    ratio: Ratio,
) -> Result<u64, OffsetError> {
    Ok(shifted(ofs_src, documented_shift(src, dst, khz, ratio)?))
}

/// The nominal ratio: `khz` (KVM_GET_TSC_KHZ) against the host's rate
/// `host_khz` (1:1 when that is unknown, 0).
fn nominal(khz: u32, host_khz: u32) -> Ratio {
    Ratio {
        guest_khz: khz,
        host_khz,
    }
}

/// How far the host's CLOCK_REALTIME ran ahead of its TSC between two
/// samples, in guest cycles at `khz`:
/// `(realtime_dst - realtime_src) * freq - (tsc_dst - tsc_src) * freq /
/// host_khz`. 0 when both run at the same rate (no NTP slew, no step),
/// whatever the ratio.
pub fn realtime_drift(
    src: &ClockSample,
    dst: &ClockSample,
    khz: u32,
    host_khz: u32,
) -> Result<i128, OffsetError> {
    let real = i128::from(dst.realtime_ns) - i128::from(src.realtime_ns);
    let tsc = i128::from(dst.host_tsc) - i128::from(src.host_tsc);
    Ok(ns_to_cycles(real, khz)? - nominal(khz, host_khz).scale(tsc))
}

/// The host TSC difference between two samples at the nominal ratio
/// (`khz / host_khz`) minus at the one KVM applies (`ratio`), guest cycles:
/// non-zero only where KVM reports a rate it does not scale to (catch-up
/// above the host's rate without TSC scaling, or a rate within its
/// tolerance). The documented shift equals the real-time drift plus this.
pub fn rate_gap(
    src: &ClockSample,
    dst: &ClockSample,
    khz: u32,
    host_khz: u32,
    ratio: Ratio,
) -> i128 {
    let tsc = i128::from(dst.host_tsc) - i128::from(src.host_tsc);
    nominal(khz, host_khz).scale(tsc) - ratio.scale(tsc)
}

pub use crate::units::NTP_MAX_PPM;

/// `cycles * NTP_MAX_PPM / 10^6`, rounded up.
pub fn ntp_allowance(cycles: u64) -> u64 {
    cycles.saturating_mul(NTP_MAX_PPM).div_ceil(1_000_000)
}

/// The bound on |shift - (drift + gap)| for the documented method on one
/// host, guest cycles at `khz` (host cycles are turned into them at
/// `khz / host_khz`).
///
/// With the master clock, KVM_SET_CLOCK snapshots the host TSC, then reads
/// CLOCK_REALTIME and adds the real time elapsed since the source sample;
/// KVM_GET_CLOCK on the destination then reads kvmclock forward from that
/// TSC snapshot. So the shift equals the real-time drift between the two
/// samples (plus the [`rate_gap`]) except for: the time between that
/// snapshot and that read (at most the duration of the KVM_SET_CLOCK call,
/// `set_clock_cycles`, host cycles), the rate of CLOCK_REALTIME against the
/// TSC from KVM_SET_CLOCK to the destination sample (`set_to_sample_cycles`,
/// host cycles, at most [`NTP_MAX_PPM`]), and rounding: three clock values
/// in whole ns and two conversions, and where the host TSC is scaled two
/// more roundings of the scaled difference.
pub fn shift_bound(
    set_clock_cycles: u64,
    set_to_sample_cycles: u64,
    khz: u32,
    host_khz: u32,
) -> u64 {
    let r = nominal(khz, host_khz);
    let three_ns = u64::from(khz).saturating_mul(3).div_ceil(1_000_000);
    let scaled_rounding = if r.is_one() { 0 } else { 2 };
    r.scale_up(set_clock_cycles)
        .saturating_add(ntp_allowance(r.scale_up(set_to_sample_cycles)))
        .saturating_add(three_ns)
        .saturating_add(2 + scaled_rounding)
}

/// The bound on |drift| itself: CLOCK_REALTIME slewed by NTP, never stepped,
/// over `interval_cycles` (host cycles, at `khz / host_khz` in guest
/// cycles), plus the rounding of two whole-ns values and of the scaled
/// interval.
pub fn drift_bound(interval_cycles: u64, khz: u32, host_khz: u32) -> u64 {
    let r = nominal(khz, host_khz);
    let two_ns = u64::from(khz).saturating_mul(2).div_ceil(1_000_000);
    ntp_allowance(r.scale_up(interval_cycles))
        .saturating_add(two_ns)
        .saturating_add(if r.is_one() { 1 } else { 2 })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GHZ2: u32 = 2_000_000; // 2 GHz in kHz

    /// 1 GHz on a 2 GHz host.
    const HALF: Ratio = Ratio {
        guest_khz: 1_000_000,
        host_khz: GHZ2,
    };

    fn sample(clock_ns: u64, realtime_ns: u64, host_tsc: u64) -> ClockSample {
        ClockSample {
            clock_ns,
            flags: NEEDED_CLOCK_FLAGS,
            realtime_ns,
            host_tsc,
            host_before: host_tsc,
            host_after: host_tsc,
        }
    }

    #[test]
    fn units_are_ns_and_khz() {
        // 1 s at 2.5 GHz; 1 ms at 2 GHz; 1 ns at 2.445428 GHz rounds to 2.
        assert_eq!(ns_to_cycles(1_000_000_000, 2_500_000), Ok(2_500_000_000));
        assert_eq!(ns_to_cycles(1_000_000, GHZ2), Ok(2_000_000));
        assert_eq!(ns_to_cycles(1, 2_445_428), Ok(2));
        assert_eq!(ns_to_cycles(-1_000_000, GHZ2), Ok(-2_000_000));
        // The largest difference of two u64 ns values does not overflow.
        let big = ns_to_cycles(i128::from(u64::MAX), u32::MAX).expect("i128 holds it");
        assert!(big > i128::from(u64::MAX));
    }

    #[test]
    fn a_frequency_of_0_is_refused() {
        let (s, d) = (sample(0, 0, 0), sample(1, 1, 1));
        assert_eq!(
            documented_offset(5, &s, &d, 0, Ratio::ONE),
            Err(OffsetError::ZeroFrequency)
        );
        assert_eq!(
            realtime_drift(&s, &d, 0, 0),
            Err(OffsetError::ZeroFrequency)
        );
        assert!(OffsetError::ZeroFrequency.to_string().contains("0 kHz"));
    }

    /// Same host, kvmclock advanced by exactly the TSC's elapsed time: the
    /// offset is unchanged (the TSC continues as if the VM had run on).
    #[test]
    fn a_clock_that_kept_pace_with_the_tsc_keeps_the_offset() {
        let src = sample(5_000_000_000, 7_000_000_000, 1_000_000);
        // 100 ms later, at 2 GHz: 200,000,000 cycles.
        let dst = sample(5_100_000_000, 7_100_000_000, 201_000_000);
        let ofs = (-123_456_789i64) as u64;
        assert_eq!(
            documented_offset(ofs, &src, &dst, GHZ2, Ratio::ONE),
            Ok(ofs)
        );
        assert_eq!(realtime_drift(&src, &dst, GHZ2, GHZ2), Ok(0));
    }

    /// Offsets are "negative" (minus the host TSC at creation) and wrap
    /// modulo 2^64, both ways.
    #[test]
    fn offsets_wrap_around() {
        let src = sample(1_000, 0, 10_000);
        // kvmclock advanced by 10 ns (20 cycles), the TSC by 10 cycles.
        let dst = sample(1_010, 0, 10_010);
        // shift = +20 - 10 = +10 cycles.
        assert_eq!(documented_shift(&src, &dst, GHZ2, Ratio::ONE), Ok(10));
        assert_eq!(
            documented_offset(u64::MAX - 5, &src, &dst, GHZ2, Ratio::ONE),
            Ok(4)
        );
        assert_eq!(shifted(3, -10), u64::MAX - 6);
        assert_eq!(shifted(0, -(1i128 << 64)), 0);
    }

    #[test]
    fn negative_offsets_stay_negative_by_the_shift() {
        // A destination host whose TSC is behind the source's (booted later):
        // the offset grows by the difference.
        let src = sample(9_000_000_000, 0, 50_000_000_000);
        let dst = sample(9_000_000_000, 0, 1_000_000_000);
        let ofs = (-50_000_000_000i64) as u64;
        let out = documented_offset(ofs, &src, &dst, GHZ2, Ratio::ONE).expect("formula");
        assert_eq!(out as i64, -1_000_000_000);
        // And the guest TSC (host TSC + offset) is the same at that instant.
        assert_eq!(
            src.host_tsc.wrapping_add(ofs),
            dst.host_tsc.wrapping_add(out)
        );
    }

    /// At 1:1 (KVM does not scale) the host TSC difference enters unscaled
    /// whatever the frequency; the frequency only converts kvmclock's
    /// nanoseconds.
    #[test]
    fn no_scaling_of_the_host_tsc_difference() {
        let src = sample(1_000, 0, 1_000_000);
        let dst = sample(1_000, 0, 1_012_345);
        for khz in [1, 1_000_000, GHZ2, 3_700_000] {
            assert_eq!(
                documented_shift(&src, &dst, khz, Ratio::ONE),
                Ok(-12_345),
                "{khz}"
            );
        }
        let later = sample(2_000, 0, 1_000_000);
        assert_eq!(
            documented_shift(&src, &later, 1_000_000, Ratio::ONE),
            Ok(1_000)
        );
        assert_eq!(documented_shift(&src, &later, GHZ2, Ratio::ONE), Ok(2_000));
    }

    /// A guest TSC as KVM computes it at `r`, exactly (the rational ratio).
    fn guest(r: Ratio, host: u64, ofs: u64) -> i128 {
        r.scale(i128::from(host)) + i128::from(ofs as i64)
    }

    /// Samples 100 ms and 12,345 ns apart on a host of `host_khz`, kvmclock
    /// and real time keeping pace with the host's TSC: (source,
    /// destination, host cycles between them).
    fn pair(host_khz: u32) -> (ClockSample, ClockSample, u64) {
        let ns = 100_012_345u64;
        let cycles = ns * u64::from(host_khz) / 1_000_000;
        let h = 1_000_000_000_007u64;
        let src = sample(5_000_000_000, 7_000_000_000, h);
        let dst = sample(5_000_000_000 + ns, 7_000_000_000 + ns, h + cycles);
        (src, dst, cycles)
    }

    /// The scaled formula: the guest's TSC at the destination's sample is
    /// the source's plus kvmclock's advance at the guest's rate, at half
    /// and twice the host's rate (and this host's 0.5x); the literal one
    /// misses by (ratio - 1) x the host TSC elapsed.
    #[test]
    fn the_scaled_formula_keeps_the_guest_tsc_continuous_the_literal_one_misses() {
        let host = 2_596_126;
        for guest_khz in [host / 2, 2 * host, 1_298_063, 3_000_001] {
            let r = Ratio {
                guest_khz,
                host_khz: host,
            };
            let (src, dst, elapsed) = pair(host);
            let ofs = (-987_654_321_012i64) as u64;
            let out = documented_offset(ofs, &src, &dst, guest_khz, r).expect("formula");
            let before = guest(r, src.host_tsc, ofs);
            let after = guest(r, dst.host_tsc, out);
            let advance = ns_to_cycles(100_012_345, guest_khz).expect("khz");
            // Rounding: the two guest TSCs, the scaled difference, the ns
            // converted both ways, and the host cycles of `pair` truncated.
            assert!(
                (after - before - advance).abs() <= 4,
                "{guest_khz}: {before} -> {after}, not + {advance}"
            );
            let scaled = documented_shift(&src, &dst, guest_khz, r).expect("formula");
            let literal = literal_shift(&src, &dst, guest_khz).expect("formula");
            let miss = r.scale(i128::from(elapsed)) - i128::from(elapsed);
            assert!(
                (literal - scaled - miss).abs() <= 1,
                "{guest_khz}: literal {literal}, scaled {scaled}, (r - 1) x elapsed {miss}"
            );
            assert!(miss.abs() > 10_000_000, "the miss is real: {miss}");
        }
        // Round numbers: 100 ms of a 2 GHz host at 0.5 and 2.
        let src = sample(1_000_000_000, 0, 4_000_000_000);
        let dst = sample(1_100_000_000, 0, 4_200_000_000);
        for (guest_khz, miss) in [(1_000_000, -100_000_000), (4_000_000, 200_000_000)] {
            let r = Ratio {
                guest_khz,
                host_khz: GHZ2,
            };
            assert_eq!(documented_shift(&src, &dst, guest_khz, r), Ok(0));
            assert_eq!(literal_shift(&src, &dst, guest_khz), Ok(miss));
        }
    }

    /// KVM's own arithmetic (32 fractional bits, truncated, on absolute host
    /// TSCs a week into the host's uptime): the scaled formula keeps the
    /// guest's TSC within [`Ratio::scale_error`] of continuous, the literal
    /// one far outside it.
    #[test]
    fn kvms_fixed_point_scaling_stays_within_the_scale_error() {
        let host: u32 = 2_596_126;
        let week = u64::from(host) * 1_000 * 604_800;
        for guest_khz in [1_298_063u32, 5_192_252, 999_999, 2_596_127 * 3] {
            let r = Ratio {
                guest_khz,
                host_khz: host,
            };
            let fixed = (u128::from(guest_khz) << 32) / u128::from(host);
            let kvm = |h: u64, ofs: u64| {
                (((u128::from(h) * fixed) >> 32) as u64).wrapping_add(ofs) as i128
            };
            let (mut src, mut dst, elapsed) = pair(host);
            src.host_tsc += week;
            dst.host_tsc += week;
            let ofs = (-(week as i64) / 3) as u64;
            let before = kvm(src.host_tsc, ofs);
            let advance = -ns_to_cycles(
                i128::from(src.clock_ns) - i128::from(dst.clock_ns),
                guest_khz,
            )
            .expect("khz");
            let miss = |shift: i128| kvm(dst.host_tsc, shifted(ofs, shift)) - before - advance;
            let scaled = documented_shift(&src, &dst, guest_khz, r).expect("formula");
            let bound = i128::from(r.scale_error(elapsed)) + 1;
            assert!(
                miss(scaled).abs() <= bound,
                "{guest_khz}: {} > {bound}",
                miss(scaled)
            );
            let literal = literal_shift(&src, &dst, guest_khz).expect("formula");
            assert!(
                miss(literal).abs() > 1_000 * bound,
                "{guest_khz}: {}",
                miss(literal)
            );
        }
    }

    /// Real time that keeps pace with the host's TSC drifts by nothing at
    /// any ratio (the host TSC interval at the guest's rate); counted 1:1
    /// against the guest's rate it would seem to drift by half the time.
    #[test]
    fn real_time_keeping_pace_with_the_host_tsc_drifts_by_nothing_at_any_ratio() {
        let src = sample(0, 1_000_000_000, 0);
        let dst = sample(0, 1_100_000_000, 200_000_000);
        assert_eq!(realtime_drift(&src, &dst, 1_000_000, GHZ2), Ok(0));
        assert_eq!(realtime_drift(&src, &dst, 4_000_000, GHZ2), Ok(0));
        assert_eq!(
            realtime_drift(&src, &dst, 1_000_000, 0),
            Ok(-100_000_000),
            "the host's rate unknown: 1:1"
        );
    }

    /// A rate KVM reports but does not scale to (catch-up, PVM at 2x): the
    /// offsets move 1:1 with the host TSC, kvmclock's ns convert at the
    /// reported rate, and the shift is the drift plus the gap between the
    /// two; where KVM scales the gap is 0.
    #[test]
    fn an_unscaled_rate_opens_a_gap_the_shift_carries() {
        let (src, dst, elapsed) = pair(GHZ2);
        let twice = 2 * GHZ2;
        let gap = rate_gap(&src, &dst, twice, GHZ2, Ratio::ONE);
        assert_eq!(gap, i128::from(elapsed));
        let drift = realtime_drift(&src, &dst, twice, GHZ2).expect("khz");
        let shift = documented_shift(&src, &dst, twice, Ratio::ONE).expect("formula");
        assert!(
            (shift - drift - gap).abs() <= 1,
            "{shift} vs {drift} + {gap}"
        );
        let scaled = Ratio {
            guest_khz: twice,
            host_khz: GHZ2,
        };
        assert_eq!(rate_gap(&src, &dst, twice, GHZ2, scaled), 0);
        assert_eq!(rate_gap(&src, &dst, GHZ2, GHZ2, Ratio::ONE), 0);
    }

    /// The bounds take host cycles into guest cycles at the guest's rate.
    #[test]
    fn bounds_scale_their_host_intervals() {
        // 1,000 host cycles at 0.5: 500; NTP over 1 M guest cycles: 1,000;
        // 3 ns at 1 GHz: 3; rounding 2 + 2.
        assert_eq!(shift_bound(1_000, 2_000_000, 1_000_000, GHZ2), 1_507);
        assert_eq!(
            shift_bound(1_000, 2_000_000, 4_000_000, GHZ2),
            2_000 + 4_000 + 12 + 4
        );
        assert_eq!(drift_bound(200_000_000, 1_000_000, GHZ2), 100_000 + 2 + 2);
    }

    #[test]
    fn relative_offsets_survive_bit_exact() {
        let src = sample(3_000_000_123, 0, 77_777);
        let dst = sample(3_250_000_977, 0, 500_077_777);
        let offsets = [0u64, u64::MAX, (-3_836i64) as u64, 1 << 63, 12_345];
        let out: Vec<u64> = offsets
            .iter()
            .map(|&o| documented_offset(o, &src, &dst, 2_445_428, HALF).expect("formula"))
            .collect();
        for (o, d) in offsets.iter().zip(&out) {
            assert_eq!(
                o.wrapping_sub(offsets[0]),
                d.wrapping_sub(out[0]),
                "{o} -> {d}"
            );
        }
    }

    #[test]
    fn drift_is_real_time_against_the_tsc() {
        let src = sample(0, 1_000_000_000, 0);
        // Real time advanced 1 ms + 1 us, the TSC 1 ms (2,000,000 cycles).
        let dst = sample(0, 1_001_001_000, 2_000_000);
        assert_eq!(realtime_drift(&src, &dst, GHZ2, GHZ2), Ok(2_000));
        let back = sample(0, 999_000_000, 2_000_000);
        assert_eq!(realtime_drift(&src, &back, GHZ2, GHZ2), Ok(-4_000_000));
    }

    #[test]
    fn bounds_grow_with_their_intervals() {
        // 3 ns at 2 GHz = 6 cycles, + 2.
        assert_eq!(shift_bound(0, 0, GHZ2, GHZ2), 8);
        assert_eq!(shift_bound(1_000, 2_000_000, GHZ2, GHZ2), 1_000 + 2_000 + 8);
        assert_eq!(drift_bound(0, GHZ2, GHZ2), 5);
        assert_eq!(drift_bound(200_000_000, GHZ2, GHZ2), 200_000 + 5);
        assert_eq!(ntp_allowance(1), 1, "rounded up");
    }

    #[test]
    fn flags_are_named_and_missing_ones_reported() {
        assert_eq!(
            flag_names(14),
            [
                "KVM_CLOCK_TSC_STABLE",
                "KVM_CLOCK_REALTIME",
                "KVM_CLOCK_HOST_TSC"
            ]
        );
        assert_eq!(
            missing_flags(2),
            ["KVM_CLOCK_REALTIME", "KVM_CLOCK_HOST_TSC"]
        );
        assert!(missing_flags(12).is_empty());
        let s = ClockSample {
            flags: 2,
            ..ClockSample::default()
        };
        let e = s.complete("source").expect_err("flags missing").to_string();
        assert!(
            e.contains("KVM_CLOCK_REALTIME, KVM_CLOCK_HOST_TSC") && e.contains("source"),
            "{e}"
        );
    }
}
