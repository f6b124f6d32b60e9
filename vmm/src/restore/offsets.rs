//! The arithmetic of carrying TSC offsets across a restore: the documented
//! formula (Documentation/virt/kvm/devices/vcpu.rst, "TSC offset"), the
//! drift of the host's real time against its TSC between two KVM_GET_CLOCK
//! samples, and the bound within which the formula's shift must equal that
//! drift. Pure functions, no KVM.
//!
//! Units: kvmclock and CLOCK_REALTIME in nanoseconds, the TSC frequency in
//! kHz (cycles = ns * kHz / 10^6), offsets and TSCs in cycles, modulo 2^64
//! (offsets are usually "negative": minus the host TSC at vCPU creation).
//! No TSC scaling: the guest's TSC runs at the host's rate (this tool never
//! sets KVM_SET_TSC_KHZ), so a host TSC difference enters 1:1.

use kvm_bindings::{KVM_CLOCK_HOST_TSC, KVM_CLOCK_REALTIME};

pub use crate::tsc::clock::{flag_names, ClockSample};

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
/// `- (guest_src - guest_dst) * freq + (tsc_src - tsc_dst)`, in cycles.
/// The same for every vCPU, so relative offsets survive bit-exact.
pub fn documented_shift(
    src: &ClockSample,
    dst: &ClockSample,
    khz: u32,
) -> Result<i128, OffsetError> {
    let clock = i128::from(src.clock_ns) - i128::from(dst.clock_ns);
    let tsc = i128::from(src.host_tsc) - i128::from(dst.host_tsc);
    Ok(-ns_to_cycles(clock, khz)? + tsc)
}

/// `ofs + shift` modulo 2^64 (offsets wrap).
pub fn shifted(ofs: u64, shift: i128) -> u64 {
    (i128::from(ofs) + shift).rem_euclid(1i128 << 64) as u64
}

#[cfg(test)]
/// The documented destination offset of a vCPU whose source offset was
/// `ofs_src`: `ofs_src - (guest_src - guest_dst) * freq + (tsc_src - tsc_dst)`.
pub fn documented_offset(
    ofs_src: u64,
    src: &ClockSample,
    dst: &ClockSample,
    khz: u32,
) -> Result<u64, OffsetError> {
    Ok(shifted(ofs_src, documented_shift(src, dst, khz)?))
}

/// How far the host's CLOCK_REALTIME ran ahead of its TSC between two
/// samples, in cycles: `(realtime_dst - realtime_src) * freq - (tsc_dst -
/// tsc_src)`. 0 when both run at the same rate (no NTP slew, no step).
pub fn realtime_drift(src: &ClockSample, dst: &ClockSample, khz: u32) -> Result<i128, OffsetError> {
    let real = i128::from(dst.realtime_ns) - i128::from(src.realtime_ns);
    let tsc = i128::from(dst.host_tsc) - i128::from(src.host_tsc);
    Ok(ns_to_cycles(real, khz)? - tsc)
}

pub use crate::units::NTP_MAX_PPM;

/// `cycles * NTP_MAX_PPM / 10^6`, rounded up.
pub fn ntp_allowance(cycles: u64) -> u64 {
    cycles.saturating_mul(NTP_MAX_PPM).div_ceil(1_000_000)
}

/// The bound on |shift - drift| for the documented method on one host.
///
/// With the master clock, KVM_SET_CLOCK snapshots the host TSC, then reads
/// CLOCK_REALTIME and adds the real time elapsed since the source sample;
/// KVM_GET_CLOCK on the destination then reads kvmclock forward from that
/// TSC snapshot. So the shift equals the real-time drift between the two
/// samples except for: the time between that snapshot and that read (at
/// most the duration of the KVM_SET_CLOCK call, `set_clock_cycles`), the
/// rate of CLOCK_REALTIME against the TSC from KVM_SET_CLOCK to the
/// destination sample (`set_to_sample_cycles`, at most [`NTP_MAX_PPM`]), and
/// rounding: three clock values in whole ns and two conversions.
pub fn shift_bound(set_clock_cycles: u64, set_to_sample_cycles: u64, khz: u32) -> u64 {
    let three_ns = u64::from(khz).saturating_mul(3).div_ceil(1_000_000);
    set_clock_cycles
        .saturating_add(ntp_allowance(set_to_sample_cycles))
        .saturating_add(three_ns)
        .saturating_add(2)
}

/// The bound on |drift| itself: CLOCK_REALTIME slewed by NTP, never stepped,
/// over `interval_cycles`, plus the rounding of two whole-ns values.
pub fn drift_bound(interval_cycles: u64, khz: u32) -> u64 {
    let two_ns = u64::from(khz).saturating_mul(2).div_ceil(1_000_000);
    ntp_allowance(interval_cycles)
        .saturating_add(two_ns)
        .saturating_add(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GHZ2: u32 = 2_000_000; // 2 GHz in kHz

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
            documented_offset(5, &s, &d, 0),
            Err(OffsetError::ZeroFrequency)
        );
        assert_eq!(realtime_drift(&s, &d, 0), Err(OffsetError::ZeroFrequency));
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
        assert_eq!(documented_offset(ofs, &src, &dst, GHZ2), Ok(ofs));
        assert_eq!(realtime_drift(&src, &dst, GHZ2), Ok(0));
    }

    /// Offsets are "negative" (minus the host TSC at creation) and wrap
    /// modulo 2^64, both ways.
    #[test]
    fn offsets_wrap_around() {
        let src = sample(1_000, 0, 10_000);
        // kvmclock advanced by 10 ns (20 cycles), the TSC by 10 cycles.
        let dst = sample(1_010, 0, 10_010);
        // shift = +20 - 10 = +10 cycles.
        assert_eq!(documented_shift(&src, &dst, GHZ2), Ok(10));
        assert_eq!(documented_offset(u64::MAX - 5, &src, &dst, GHZ2), Ok(4));
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
        let out = documented_offset(ofs, &src, &dst, GHZ2).expect("formula");
        assert_eq!(out as i64, -1_000_000_000);
        // And the guest TSC (host TSC + offset) is the same at that instant.
        assert_eq!(
            src.host_tsc.wrapping_add(ofs),
            dst.host_tsc.wrapping_add(out)
        );
    }

    /// No TSC scaling: the host TSC difference enters 1:1 whatever the
    /// frequency; the frequency only converts kvmclock's nanoseconds.
    #[test]
    fn no_scaling_of_the_host_tsc_difference() {
        let src = sample(1_000, 0, 1_000_000);
        let dst = sample(1_000, 0, 1_012_345);
        for khz in [1, 1_000_000, GHZ2, 3_700_000] {
            assert_eq!(documented_shift(&src, &dst, khz), Ok(-12_345), "{khz}");
        }
        let later = sample(2_000, 0, 1_000_000);
        assert_eq!(documented_shift(&src, &later, 1_000_000), Ok(1_000));
        assert_eq!(documented_shift(&src, &later, GHZ2), Ok(2_000));
    }

    #[test]
    fn relative_offsets_survive_bit_exact() {
        let src = sample(3_000_000_123, 0, 77_777);
        let dst = sample(3_250_000_977, 0, 500_077_777);
        let offsets = [0u64, u64::MAX, (-3_836i64) as u64, 1 << 63, 12_345];
        let out: Vec<u64> = offsets
            .iter()
            .map(|&o| documented_offset(o, &src, &dst, 2_445_428).expect("formula"))
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
        assert_eq!(realtime_drift(&src, &dst, GHZ2), Ok(2_000));
        let back = sample(0, 999_000_000, 2_000_000);
        assert_eq!(realtime_drift(&src, &back, GHZ2), Ok(-4_000_000));
    }

    #[test]
    fn bounds_grow_with_their_intervals() {
        // 3 ns at 2 GHz = 6 cycles, + 2.
        assert_eq!(shift_bound(0, 0, GHZ2), 8);
        assert_eq!(shift_bound(1_000, 2_000_000, GHZ2), 1_000 + 2_000 + 8);
        assert_eq!(drift_bound(0, GHZ2), 5);
        assert_eq!(drift_bound(200_000_000, GHZ2), 200_000 + 5);
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
