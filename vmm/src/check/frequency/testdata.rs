//! Probes as a host would record them, for the family's judges' tests.

use super::{FrequencyEvidence, Probe};
use crate::session::GuestRead;
use crate::tsc::frequency::{Scaling, SetVia};

/// The host the tests' probes ran on: 2 GHz, KVM's default tolerance.
pub const HOST_KHZ: u32 = 2_000_000;

/// A host with (`tsc_control`) or without TSC scaling.
pub fn scaling(tsc_control: bool) -> Scaling {
    Scaling {
        host_khz: HOST_KHZ,
        tsc_control,
        tolerance_ppm: 250,
    }
}

/// One guest read at host TSC `at` (bracket `at - 50_000 .. at + 50_000`,
/// 25 us at 2 GHz) of a TSC that reads `tsc` and a kvmclock that reads `ns`,
/// with a page of `mul`/`shift`.
pub fn read(at: u64, tsc: u64, ns: u64, (mul, shift): (u32, i8)) -> GuestRead {
    GuestRead {
        vcpu: 0,
        tsc,
        kvmclock_ns: ns,
        version: 4,
        flags: 1,
        mul,
        shift,
        host_before: at - 50_000,
        host_after: at + 50_000,
        mono_before_ns: at / 2 - 25_000,
        mono_after_ns: at / 2 + 25_000,
    }
}

/// The page KVM computes for 2 GHz (ns = cycles / 2).
pub const PAGE_2GHZ: (u32, i8) = (u32::MAX, -1);
/// For 1 GHz (ns = cycles).
pub const PAGE_1GHZ: (u32, i8) = (u32::MAX, 0);
/// For 4 GHz (ns = cycles / 4).
pub const PAGE_4GHZ: (u32, i8) = (u32::MAX, -2);

/// Reads 40 ms of host time apart (at 2 GHz) of a TSC at `rate` times the
/// host's and a kvmclock at real time, with `page`.
pub fn reads(rate: f64, page: (u32, i8)) -> Vec<GuestRead> {
    let (t0, t1) = (1_000_000_000u64, 1_080_000_000u64);
    let tsc = |t: u64| (t as f64 * rate) as u64;
    [t0, t0 + 200_000, t1, t1 + 200_000]
        .iter()
        .map(|&t| read(t, tsc(t), t / 2, page))
        .collect()
}

/// A probe of `ppm` millionths of the host's rate on `scope`, taken
/// (`set`), reported as `reported`, the guest's TSC at `rate`.
pub fn probe(
    scope: SetVia,
    ppm: u64,
    set: Result<(), String>,
    rate: f64,
    page: (u32, i8),
) -> Probe {
    let khz = (u64::from(HOST_KHZ) * ppm / 1_000_000) as u32;
    let taken = set.is_ok();
    Probe {
        scope,
        ratio_ppm: ppm,
        khz,
        reported: taken.then_some(khz),
        set,
        before: None,
        after: None,
        pre: Some(read(900_000_000, 900_000_000, 450_000_000, PAGE_2GHZ)),
        reads: if taken { reads(rate, page) } else { Vec::new() },
    }
}

/// A KVM that scales: every probe taken and run at its rate.
pub fn scaling_kvm() -> FrequencyEvidence {
    FrequencyEvidence {
        scaling: scaling(true),
        vm_control: true,
        probes: vec![
            probe(SetVia::Vcpu, 500_000, Ok(()), 0.5, PAGE_1GHZ),
            probe(SetVia::Vcpu, 2_000_000, Ok(()), 2.0, PAGE_4GHZ),
            probe(SetVia::Vcpu, 1_000_125, Ok(()), 1.0, PAGE_2GHZ),
            probe(SetVia::Vm, 500_000, Ok(()), 0.5, PAGE_1GHZ),
            probe(SetVia::Vm, 2_000_000, Ok(()), 2.0, PAGE_4GHZ),
        ],
        ..FrequencyEvidence::default()
    }
}

/// A KVM without scaling: half refused, twice by catch-up, the tolerance
/// unscaled.
pub fn catch_up_kvm() -> FrequencyEvidence {
    FrequencyEvidence {
        scaling: scaling(false),
        vm_control: false,
        probes: vec![
            probe(
                SetVia::Vcpu,
                500_000,
                Err("Invalid argument (os error 22)".into()),
                1.0,
                PAGE_2GHZ,
            ),
            probe(SetVia::Vcpu, 2_000_000, Ok(()), 2.0, PAGE_2GHZ),
            probe(SetVia::Vcpu, 1_000_125, Ok(()), 1.0, PAGE_2GHZ),
        ],
        ..FrequencyEvidence::default()
    }
}
