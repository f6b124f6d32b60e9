//! Linux's results of a round on host threads, laid out in a staging area
//! exactly like the guest's sync result slots, so that the KVM path's own
//! decoder ([`sync_area::read`]) checks and decodes them.

use tsc_contract::layout;
use tsc_sync::linux::{LinuxApResult, LinuxSummary};
use tsc_sync::LinuxSyncResult;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use crate::error::RunError;
use crate::vstate::sync_area::{self, SyncRound};
use crate::vstate::MemError;

/// Words of one sync result slot.
const SLOT_WORDS: usize = layout::SYNC_RESULT_SIZE as usize / 8;
const _: () = assert!(std::mem::size_of::<LinuxApResult>() <= layout::SYNC_RESULT_SIZE as usize);
const _: () = assert!(std::mem::size_of::<LinuxSummary>() <= layout::SYNC_RESULT_SIZE as usize);

/// One slot's worth of words, aligned as the guest's slots are.
#[repr(C, align(64))]
struct SlotWords([u64; SLOT_WORDS]);

/// The bytes a guest would leave in its slot for `result` (zero for `None`).
fn slot_bytes(result: Option<&LinuxSyncResult>) -> [u8; layout::SYNC_RESULT_SIZE as usize] {
    let mut w = SlotWords([0; SLOT_WORDS]);
    let dst = w.0.as_mut_ptr();
    match result {
        // SAFETY: `dst` points at 192 writable, 64-byte aligned bytes, more
        // than either result type needs (checked at compile time above).
        Some(LinuxSyncResult::Source(s)) => unsafe { s.write_volatile_to(dst.cast()) },
        // SAFETY: as above.
        Some(LinuxSyncResult::Target(t)) => unsafe { t.write_volatile_to(dst.cast()) },
        None => {}
    }
    let mut b = [0u8; layout::SYNC_RESULT_SIZE as usize];
    for (chunk, word) in b.chunks_exact_mut(8).zip(w.0) {
        chunk.copy_from_slice(&word.to_le_bytes());
    }
    b
}

/// A staging area laid out like the guest's sync result slots
/// ([`layout::sync_result`]), for `vcpus` threads.
#[derive(Debug)]
pub struct SyncStaging {
    mem: GuestMemoryMmap,
    vcpus: u32,
}

impl SyncStaging {
    /// Maps the staging area.
    pub fn new(vcpus: u32) -> Result<SyncStaging, RunError> {
        let len = (layout::sync_result(vcpus) - layout::SYNC_RESULTS).next_multiple_of(4096);
        let mem = GuestMemoryMmap::<()>::from_ranges(&[(
            GuestAddress(layout::SYNC_RESULTS),
            len as usize,
        )])
        .map_err(|e| RunError::Memory(MemError(e.to_string())))?;
        Ok(SyncStaging { mem, vcpus })
    }

    /// Every thread's result of round `round` (in thread order) as the KVM
    /// path decodes and checks a guest's.
    pub fn read(
        &self,
        round: u32,
        results: &[Option<LinuxSyncResult>],
    ) -> Result<SyncRound, RunError> {
        for i in 0..self.vcpus {
            let bytes = slot_bytes(results.get(i as usize).and_then(Option::as_ref));
            self.mem
                .write_slice(&bytes, GuestAddress(layout::sync_result(i)))
                .map_err(|e| RunError::Memory(MemError(e.to_string())))?;
        }
        sync_area::read(&self.mem, self.vcpus).map_err(|error| RunError::Sync { round, error })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tsc_sync::linux::{LinuxRun, LinuxState};

    /// A target's result goes through the KVM path's decoder with every
    /// field where the guest's layout has it; a missing one is refused.
    #[test]
    fn results_decode_as_a_guests_would() {
        let mut ap = LinuxApResult {
            ap: 1,
            state: LinuxState::Synchronised as u32,
            runs: 2,
            compensations: 1,
            window_cycles: 4_000,
            ..Default::default()
        };
        ap.run[0] = LinuxRun {
            source_max_warp: 9,
            target_max_warp: 0,
            max_warp: 9,
            target_read_max_warp: 9,
            warps: 3,
            random_warps: 0,
        };
        ap.compensation[0] = -9;
        let summary = LinuxSummary {
            aps: 1,
            synchronised: 1,
            runs: 2,
            compensations: 1,
            max_warp: 9,
            ..Default::default()
        };
        let staging = SyncStaging::new(2).expect("mapped");
        let s = staging
            .read(
                0,
                &[
                    Some(LinuxSyncResult::Source(summary)),
                    Some(LinuxSyncResult::Target(ap)),
                ],
            )
            .expect("valid");
        assert_eq!((s.synchronised, s.unstable, s.max_warp), (1, 0, 9));
        assert_eq!(s.aps.len(), 1);
        assert_eq!(s.aps[0].compensations, vec![-9]);
        assert_eq!(s.aps[0].runs[0].warps, 3);
        assert_eq!(s.aps[0].window_cycles, 4_000);
        let e = staging
            .read(1, &[Some(LinuxSyncResult::Source(summary)), None])
            .expect_err("AP 1 gave no result");
        assert!(matches!(e, RunError::Sync { round: 1, .. }), "{e}");
    }
}
