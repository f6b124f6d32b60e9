//! The one path from guest records to analysed rounds, used by `run`,
//! `compare` and `check` alike: it remembers each vCPU's TSC state before the
//! round (the previous round's readback) and the actual offsets relative to
//! vCPU 0 so far, and turns a round's records and readback into a
//! [`RoundResult`].

use tsc_contract::{RoundRecord, Variant};

use super::{analyse_round, RoundResult, VcpuSample};
use crate::tsc::TscState;

/// Turns consecutive rounds of one VM into results.
#[derive(Debug, Clone)]
pub struct RoundAccumulator {
    /// Each vCPU's state before the next round.
    before: Vec<TscState>,
    /// Each vCPU's actual offset relative to vCPU 0 (0 at creation: KVM gives
    /// every vCPU the same offset).
    base_rel: Vec<i64>,
    /// Reused for every round.
    samples: Vec<VcpuSample>,
}

impl RoundAccumulator {
    /// Starts from every vCPU's state before the first round.
    pub fn new(initial: &[TscState]) -> RoundAccumulator {
        RoundAccumulator {
            before: initial.to_vec(),
            base_rel: vec![0; initial.len()],
            samples: Vec::with_capacity(initial.len()),
        }
    }

    /// The actual offsets relative to vCPU 0 after the rounds so far, as far
    /// as the honoured writes tell.
    pub fn relative_offsets(&self) -> &[i64] {
        &self.base_rel
    }

    /// Analyses round `round` of `variant` from every vCPU's validated
    /// record and KVM's readback after it (both in vCPU order, one per vCPU).
    pub fn add(
        &mut self,
        round: u32,
        variant: Variant,
        records: &[RoundRecord],
        after: &[TscState],
    ) -> RoundResult {
        self.samples.clear();
        self.samples
            .extend(records.iter().zip(self.before.iter().zip(after)).map(
                |(record, (before, after))| VcpuSample {
                    record: *record,
                    before: *before,
                    after: *after,
                },
            ));
        let result = analyse_round(round, variant.name(), &self.samples, &mut self.base_rel);
        // Tests wait for this line before they interrupt a command.
        log::debug!("round {round} of {} analysed", variant.name());
        self.before.clear();
        self.before.extend_from_slice(after);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tsc_contract::RECORD_MAGIC;

    fn state(adjust: i64, offset: i64) -> TscState {
        TscState {
            adjust: adjust as u64,
            tsc: 0,
            host_before: 0,
            host_after: 0,
            offset: Some(offset as u64),
            tsc_khz: 1_000_000,
        }
    }

    fn record(vcpu: u32, round: u32) -> RoundRecord {
        RoundRecord {
            magic: RECORD_MAGIC,
            vcpu,
            round,
            variant: Variant::XenHead as u32,
            flags: 0,
            reserved: 0,
            tsc_first: 100,
            written: 1_000,
            tsc_before_write: 1_500,
            tsc_after_loop: 1_200,
            adjust_before: 0,
            adjust_after: 0,
        }
    }

    /// Two honoured rounds: each round's deltas are taken against the state
    /// the previous round left, and the relative offsets add up.
    #[test]
    fn deltas_are_taken_against_the_previous_round() {
        let mut acc = RoundAccumulator::new(&[state(0, 0), state(0, 0)]);
        // Round 0: vCPU 0 moved by -600, vCPU 1 by -900 (its write came later).
        let after0 = [state(-600, -600), state(-900, -900)];
        let r0 = acc.add(0, Variant::XenHead, &[record(0, 0), record(1, 0)], &after0);
        assert_eq!(r0.vcpus[1].tsc_adjust_delta, -900);
        assert_eq!(r0.vcpus[1].rel_offset_adjust, -300);
        assert_eq!(r0.writes_honoured, Some(true), "{:?}", r0.disagreements);
        assert_eq!(acc.relative_offsets(), &[0, -300]);
        // Round 1: -550 and -650 on top: the deltas are per round, the
        // relative offset of vCPU 1 accumulates to -300 - 100.
        let after1 = [state(-1_150, -1_150), state(-1_550, -1_550)];
        let r1 = acc.add(1, Variant::XenHead, &[record(0, 1), record(1, 1)], &after1);
        assert_eq!(r1.vcpus[0].tsc_adjust_delta, -550);
        assert_eq!(r1.vcpus[1].tsc_adjust_delta, -650);
        assert_eq!(r1.vcpus[1].rel_offset_adjust, -400);
        assert_eq!(r1.skew_cycles, 400);
        assert_eq!(acc.relative_offsets(), &[0, -400]);
    }
}
