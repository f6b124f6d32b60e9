//! What checks 3, 4 and 6 need from the rendezvous rounds, gathered as each
//! round completes, so that the evidence of a check run does not grow with
//! its rounds (beyond one number per vCPU).

use crate::analysis::{DecidedBy, RoundResult};
use crate::stats::distribution::Distribution;

/// The first vCPU-round whose offset did not move by its TSC_ADJUST delta.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// The round.
    pub round: u32,
    /// The vCPU.
    pub vcpu: u32,
    /// TSC_ADJUST's change.
    pub tsc_adjust_delta: i64,
    /// The exact offset's change (None without exact offsets).
    pub offset_delta: Option<i64>,
}

/// Counts over every round.
#[derive(Clone, Debug, Default)]
pub struct RoundTally {
    /// Rounds counted.
    pub rounds: u64,
    /// vCPU-rounds (check 3's comparisons).
    pub vcpu_rounds: u64,
    /// vCPU-rounds whose offset delta (read) differs from the TSC_ADJUST
    /// delta.
    pub mismatches: u64,
    /// vCPU-rounds whose offset delta is unknown (an offset read failed):
    /// no evidence either way, so neither a mismatch nor a comparison.
    pub offsets_unread: u64,
    /// Of those, the ones whose offset did not move while TSC_ADJUST did.
    pub offsets_unmoved: u64,
    /// The first mismatch.
    pub first_mismatch: Option<Mismatch>,
    /// The first vCPU-round whose offset was not read: (round, vCPU).
    pub first_unread: Option<(u32, u32)>,
    /// vCPU-rounds with a write (check 4 counts only these).
    pub wrote: u64,
    /// Of those, decided as taken effect.
    pub honoured: u64,
    /// Of those, decided as not taken effect, by which evidence (exact
    /// offsets, bracketed reads, the guest, the write's moment).
    pub not_honoured_by: [u64; 4],
    /// Of those, undecided.
    pub undecided: u64,
    /// Of those, writes that moved nothing ([`VcpuResult::moved_nothing`]):
    /// counted neither honoured, ignored nor undecided.
    ///
    /// [`VcpuResult::moved_nothing`]: crate::analysis::VcpuResult::moved_nothing
    pub moved_nothing: u64,
    /// Decided by the guest's evidence (KVM's was inconclusive).
    pub decided_by_guest: u64,
    /// Where KVM's and the guest's evidence contradicted each other.
    pub contradictory: u64,
    /// vCPU-rounds with a write whose guest saw no jump.
    pub no_jump: u64,
    /// The value written in the last round with a common write.
    pub last_written: Option<u64>,
    /// Rounds decided as honoured / as ignored (round-level verdicts).
    pub rounds_honoured: u64,
    /// See `rounds_honoured`.
    pub rounds_ignored: u64,
    /// Every round's skew (cycles).
    pub skew: Distribution,
    /// Per vCPU, the sum of its TSC_ADJUST deltas over every round (modulo
    /// 2^64, as the MSR): how far its writes asked its TSC to move in all.
    pub net_adjust: Vec<i64>,
}

fn index(by: Option<DecidedBy>) -> usize {
    match by {
        Some(DecidedBy::Offsets) | None => 0,
        Some(DecidedBy::BracketedReads) => 1,
        Some(DecidedBy::Guest) => 2,
        Some(DecidedBy::WriteMoment) => 3,
    }
}

impl RoundTally {
    #[cfg(test)]
    /// The tally of `rounds`.
    pub fn of<'a>(rounds: impl IntoIterator<Item = &'a RoundResult>) -> RoundTally {
        let mut t = RoundTally::default();
        for r in rounds {
            t.add(r);
        }
        t
    }

    /// Counts one round.
    pub fn add(&mut self, r: &RoundResult) {
        self.rounds += 1;
        self.skew.record(r.skew_cycles as f64);
        match r.writes_honoured {
            Some(true) => self.rounds_honoured += 1,
            Some(false) => self.rounds_ignored += 1,
            None => {}
        }
        for v in &r.vcpus {
            self.vcpu_rounds += 1;
            let i = v.id as usize;
            if self.net_adjust.len() <= i {
                self.net_adjust.resize(i + 1, 0);
            }
            self.net_adjust[i] = self.net_adjust[i].wrapping_add(v.tsc_adjust_delta);
            if v.offset_delta.is_none() {
                self.offsets_unread += 1;
                self.first_unread.get_or_insert((r.round, v.id));
            } else if v.offset_delta != Some(v.tsc_adjust_delta) {
                self.mismatches += 1;
                if v.offset_delta == Some(0) && v.tsc_adjust_delta != 0 {
                    self.offsets_unmoved += 1;
                }
                self.first_mismatch.get_or_insert(Mismatch {
                    round: r.round,
                    vcpu: v.id,
                    tsc_adjust_delta: v.tsc_adjust_delta,
                    offset_delta: v.offset_delta,
                });
            }
            if !v.wrote {
                continue;
            }
            self.wrote += 1;
            match v.write_honoured {
                Some(true) => self.honoured += 1,
                Some(false) => self.not_honoured_by[index(v.decided_by)] += 1,
                None if v.moved_nothing() => self.moved_nothing += 1,
                None => self.undecided += 1,
            }
            if v.decided_by == Some(DecidedBy::Guest) {
                self.decided_by_guest += 1;
            }
            if v.host_saw_write.is_some()
                && v.guest_saw_jump.is_some()
                && v.host_saw_write != v.guest_saw_jump
            {
                self.contradictory += 1;
            }
            if v.guest_saw_jump == Some(false) {
                self.no_jump += 1;
            }
        }
        if let Some(v) = r.vcpus.first().filter(|v| v.tsc_at_write.is_some()) {
            self.last_written = Some(v.written_value);
        }
    }

    /// vCPU-rounds decided as not taken effect.
    pub fn not_honoured(&self) -> u64 {
        self.not_honoured_by.iter().sum()
    }
}
