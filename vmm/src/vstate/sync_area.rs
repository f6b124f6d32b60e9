//! Linux's tsc_sync's results in guest memory: every vCPU's result slot read
//! back after a round (untrusted: decoded field by field and checked). The
//! windows it runs with are in the config ([`super::vm`]); its shared state
//! and result slots are zeroed by [`super::memory`].

use serde::Serialize;
use tsc_contract::layout;
use tsc_sync::linux::{MAX_COMPENSATIONS, MAX_RUNS};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

/// One warp-check run of a source/target pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct SyncRun {
    /// The largest warp the source (vCPU 0) saw, cycles.
    pub source_max_warp: u64,
    /// The largest warp the target (the AP) saw, cycles.
    pub target_max_warp: u64,
    /// Warps seen by either.
    pub warps: u32,
    /// Warps seen after the other side had seen one (any: unstable).
    pub random_warps: u32,
}

/// What one AP's pair with vCPU 0 did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ApSync {
    /// The AP.
    pub ap: u32,
    /// Whether the last run saw no warp.
    pub synchronised: bool,
    /// Every run, in order (1..=3).
    pub runs: Vec<SyncRun>,
    /// Every TSC_ADJUST change written between runs (Linux's `cur`).
    pub compensations: Vec<i64>,
    /// Every run's window, TSC cycles.
    pub window_cycles: u64,
}

/// Linux's sync of one round: every AP's pair.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SyncRound {
    /// APs synchronised.
    pub synchronised: u32,
    /// APs unstable.
    pub unstable: u32,
    /// The largest warp of any run, cycles.
    pub max_warp: u64,
    /// Per AP, in order.
    pub aps: Vec<ApSync>,
}

/// Why a sync result in guest memory is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, displaydoc::Display)]
pub enum SyncError {
    /// vCPU {0}'s sync result cannot be read from guest memory
    Unreadable(u32),
    /// vCPU {vcpu}'s sync result is invalid: {what}
    Invalid {
        /// The vCPU.
        vcpu: u32,
        /// What is wrong.
        what: &'static str,
    },
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[o..o + 4]);
    u32::from_le_bytes(a)
}

fn u64_at(b: &[u8], o: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[o..o + 8]);
    u64::from_le_bytes(a)
}

/// Decodes AP `vcpu`'s result slot (the layout of `LinuxApResult`, whose
/// offsets tsc-sync checks at compile time).
pub fn decode_ap(
    vcpu: u32,
    b: &[u8; layout::SYNC_RESULT_SIZE as usize],
) -> Result<ApSync, SyncError> {
    let bad = |what| SyncError::Invalid { vcpu, what };
    if u32_at(b, 0) != vcpu {
        return Err(bad("it names another AP"));
    }
    let synchronised = match u32_at(b, 4) {
        1 => true,
        2 => false,
        _ => return Err(bad("its state is neither synchronised nor unstable")),
    };
    let runs = u32_at(b, 8) as usize;
    let comps = u32_at(b, 12) as usize;
    if !(1..=MAX_RUNS).contains(&runs) {
        return Err(bad("it ran no or too many warp checks"));
    }
    if comps > MAX_COMPENSATIONS || comps >= runs.max(1) {
        return Err(bad("more compensations than runs allow"));
    }
    let run = |k: usize| {
        let o = 32 + 40 * k;
        SyncRun {
            source_max_warp: u64_at(b, o),
            target_max_warp: u64_at(b, o + 8),
            warps: u32_at(b, o + 32),
            random_warps: u32_at(b, o + 36),
        }
    };
    Ok(ApSync {
        ap: vcpu,
        synchronised,
        runs: (0..runs).map(run).collect(),
        compensations: (0..comps).map(|k| u64_at(b, 152 + 8 * k) as i64).collect(),
        window_cycles: u64_at(b, 16),
    })
}

/// Reads and checks every vCPU's result of the round just run.
pub fn read(mem: &GuestMemoryMmap, vcpus: u32) -> Result<SyncRound, SyncError> {
    let mut aps = Vec::with_capacity(vcpus.saturating_sub(1) as usize);
    let slot = |i: u32| {
        let mut b = [0u8; layout::SYNC_RESULT_SIZE as usize];
        mem.read_slice(&mut b, GuestAddress(layout::sync_result(i)))
            .map(|()| b)
            .map_err(|_| SyncError::Unreadable(i))
    };
    let summary = slot(0)?;
    for ap in 1..vcpus {
        aps.push(decode_ap(ap, &slot(ap)?)?);
    }
    let (n, synchronised, unstable) = (
        u32_at(&summary, 0),
        u32_at(&summary, 4),
        u32_at(&summary, 8),
    );
    let bad = |what| SyncError::Invalid { vcpu: 0, what };
    if n != vcpus.saturating_sub(1) || synchronised + unstable != n {
        return Err(bad("its summary does not count every AP"));
    }
    if aps.iter().filter(|a| a.synchronised).count() as u32 != synchronised {
        return Err(bad("its summary disagrees with the APs' results"));
    }
    Ok(SyncRound {
        synchronised,
        unstable,
        max_warp: u64_at(&summary, 32),
        aps,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tsc_sync::linux::{LinuxApResult, LinuxRun};

    /// The decoder reads the bytes the guest's struct has (checked against
    /// the real type's memory).
    #[test]
    fn an_ap_result_decodes_from_the_structs_bytes() {
        let mut r = LinuxApResult {
            ap: 3,
            state: 1,
            runs: 2,
            compensations: 1,
            window_cycles: 4_000_000,
            ..Default::default()
        };
        r.run[0] = LinuxRun {
            source_max_warp: 0,
            target_max_warp: 7_000,
            max_warp: 7_000,
            target_read_max_warp: 7_000,
            warps: 12,
            random_warps: 0,
        };
        r.compensation[0] = 7_000;
        let mut b = [0u8; layout::SYNC_RESULT_SIZE as usize];
        // SAFETY: LinuxApResult is repr(C), plain integers, no padding
        // (checked at compile time in tsc-sync) and smaller than the slot.
        let raw: [u8; std::mem::size_of::<LinuxApResult>()] =
            unsafe { std::mem::transmute_copy(&r) };
        b[..raw.len()].copy_from_slice(&raw);
        let a = decode_ap(3, &b).expect("valid");
        assert!(a.synchronised);
        assert_eq!(a.runs.len(), 2);
        assert_eq!(a.runs[0].target_max_warp, 7_000);
        assert_eq!(a.runs[0].warps, 12);
        assert_eq!(a.compensations, vec![7_000]);
        assert_eq!(a.window_cycles, 4_000_000);
        // Garbage is refused, naming what is wrong.
        assert!(decode_ap(4, &b).is_err(), "another AP's slot");
        let mut z = b;
        z[4] = 0;
        assert!(decode_ap(3, &z).is_err(), "state not run");
        let mut z = b;
        z[8] = 9;
        assert!(decode_ap(3, &z).is_err(), "nine runs");
        let mut z = b;
        z[12] = 2;
        assert!(decode_ap(3, &z).is_err(), "two compensations in two runs");
    }
}
