//! The one path from guest records to analysed rounds, used by `run`,
//! `compare` and `check` alike: it remembers each vCPU's TSC state before the
//! round (the previous round's readback) and what the rounds so far said
//! about the host, works out each vCPU's offset relative to vCPU 0 before the
//! next round from them ([`Base`]), and turns a round's records and readback
//! into a [`RoundResult`].
//!
//! The base comes from the exact offsets when the kernel shows them. Without
//! them it follows from the writes' history: KVM starts every vCPU at the same
//! offset and adds each guest write's delta to TSC_ADJUST, and to the offset
//! too when it honours the write, so if every decided write so far took
//! effect the relative offsets are the TSC_ADJUST differences, and if none
//! did they are 0. Undecided rounds do not change what is known; writes that
//! took effect on some rounds and not on others leave the base unknown.

use tsc_contract::{RoundRecord, Variant};

use super::arith::signed_delta;
use super::honoured::Decision;
use super::round::{analyse_round, Base, RoundResult, SkewBasis, VcpuSample};
use crate::tsc::TscState;
use crate::vstate::sync_area::SyncRound;

/// Turns consecutive rounds of one VM into results.
#[derive(Debug, Clone)]
pub struct RoundAccumulator {
    /// Each vCPU's state before the next round.
    before: Vec<TscState>,
    /// Each vCPU's TSC_ADJUST before the first round.
    initial_adjust: Vec<u64>,
    /// What the decided writes so far say.
    history: Decision,
    /// The relative offsets before the next round (reused storage).
    base: Base,
    /// Reused for every round.
    samples: Vec<VcpuSample>,
}

impl RoundAccumulator {
    /// Starts from every vCPU's state before the first round.
    pub fn new(initial: &[TscState]) -> RoundAccumulator {
        let mut acc = RoundAccumulator {
            before: initial.to_vec(),
            initial_adjust: initial.iter().map(|s| s.adjust).collect(),
            history: Decision::Undecided,
            base: Base::creation(initial.len()),
            samples: Vec::with_capacity(initial.len()),
        };
        acc.refresh_base();
        acc
    }

    /// Each vCPU's offset relative to vCPU 0 now (before the next round).
    pub fn base(&self) -> &Base {
        &self.base
    }

    /// Works out [`Self::base`] from the state before the next round, reusing
    /// its storage (the per-round path allocates nothing here).
    fn refresh_base(&mut self) {
        let rel = &mut self.base.rel;
        rel.clear();
        if self.before.iter().all(|s| s.offset.is_some()) {
            let o0 = self.before.first().and_then(|s| s.offset).unwrap_or(0);
            rel.extend(
                self.before
                    .iter()
                    .map(|s| Some(signed_delta(s.offset.unwrap_or(0), o0))),
            );
            self.base.basis = SkewBasis::Offsets;
            return;
        }
        let moved = |i: usize| {
            let now = self.before.get(i).map_or(0, |s| s.adjust);
            signed_delta(now, self.initial_adjust.get(i).copied().unwrap_or(0))
        };
        let n = self.before.len();
        let m0 = moved(0);
        let nothing_yet = (0..n).all(|i| moved(i) == 0);
        self.base.basis = match (nothing_yet, self.history) {
            (true, _) => SkewBasis::Creation,
            (false, Decision::Yes) => SkewBasis::TscAdjust,
            (false, Decision::No) => SkewBasis::Unmoved,
            (false, Decision::Mixed | Decision::Undecided) => SkewBasis::Assumed,
        };
        let basis = self.base.basis;
        rel.extend((0..n).map(|i| match basis {
            SkewBasis::TscAdjust => Some(moved(i).wrapping_sub(m0)),
            SkewBasis::Assumed if i > 0 => None,
            _ => Some(0),
        }));
    }

    /// Analyses round `round` of `variant` from every vCPU's validated
    /// record and KVM's readback after it (both in vCPU order, one per vCPU)
    /// and, for Linux's sync, what every AP's pair did.
    pub fn add(
        &mut self,
        round: u32,
        variant: Variant,
        records: &[RoundRecord],
        after: &[TscState],
        sync: Option<SyncRound>,
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
        let result = analyse_round(round, variant.name(), &self.samples, &self.base, sync);
        self.history = match (
            self.history,
            Decision::of(result.vcpus.iter().map(|v| v.write_honoured)),
        ) {
            (h, Decision::Undecided) => h,
            (Decision::Undecided, d) => d,
            (h, d) if h == d => h,
            _ => Decision::Mixed,
        };
        // Tests wait for this line before they interrupt a command.
        log::debug!("round {round} of {} analysed", variant.name());
        self.before.clear();
        self.before.extend_from_slice(after);
        self.refresh_base();
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
            host_khz: 0,
            scaled: false,
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
        let r0 = acc.add(
            0,
            Variant::XenHead,
            &[record(0, 0), record(1, 0)],
            &after0,
            None,
        );
        assert_eq!(r0.vcpus[1].tsc_adjust_delta, -900);
        assert_eq!(r0.vcpus[1].rel_offset_adjust, -300);
        assert_eq!(r0.writes_honoured, Some(true), "{:?}", r0.disagreements);
        assert_eq!(acc.base().rel, vec![Some(0), Some(-300)]);
        assert_eq!(acc.base().basis, SkewBasis::Offsets);
        // Round 1: -550 and -650 on top: the deltas are per round, the
        // relative offset of vCPU 1 accumulates to -300 - 100.
        let after1 = [state(-1_150, -1_150), state(-1_550, -1_550)];
        let r1 = acc.add(
            1,
            Variant::XenHead,
            &[record(0, 1), record(1, 1)],
            &after1,
            None,
        );
        assert_eq!(r1.vcpus[0].tsc_adjust_delta, -550);
        assert_eq!(r1.vcpus[1].tsc_adjust_delta, -650);
        assert_eq!(r1.vcpus[1].rel_offset_adjust, -400);
        assert_eq!(r1.skew_cycles, 400);
        assert_eq!(acc.base().rel, vec![Some(0), Some(-400)]);
    }

    fn bracketed(adjust: i64, tsc: u64, host: u64) -> TscState {
        TscState {
            adjust: adjust as u64,
            tsc,
            host_before: host,
            host_after: host + 1_000,
            offset: None,
            tsc_khz: 1_000_000,
            host_khz: 0,
            scaled: false,
        }
    }

    fn record_at(
        vcpu: u32,
        round: u32,
        written: u64,
        before_write: u64,
        after: u64,
    ) -> RoundRecord {
        RoundRecord {
            written,
            tsc_first: written - 10,
            tsc_before_write: before_write,
            tsc_after_loop: after,
            ..record(vcpu, round)
        }
    }

    /// Without exact offsets: round 0 is decided (honoured), round 1 is
    /// undecided for vCPU 0. The base of round 2 still follows from
    /// TSC_ADJUST (the history says writes take effect), so its relative
    /// offsets and skew are right instead of drifting.
    #[test]
    fn an_undecided_round_does_not_lose_the_base() {
        // Host time H, every vCPU's TSC = H + offset. Both start at offset 0.
        let mut acc = RoundAccumulator::new(&[bracketed(0, 1_000, 500), bracketed(0, 1_000, 500)]);
        assert_eq!(acc.base().basis, SkewBasis::Creation);
        // Round 0: value 100_000 written; vCPU 0 handled at H = 200_000, vCPU 1
        // at H = 260_000: deltas -100_000 and -160_000, offsets now -100_000
        // and -160_000. Readback at H = 1_000_000.
        let r0 = acc.add(
            0,
            Variant::XenHead,
            &[
                record_at(0, 0, 100_000, 199_900, 100_500),
                record_at(1, 0, 100_000, 259_900, 100_500),
            ],
            &[
                bracketed(-100_000, 1_000_500 - 100_000, 1_000_000),
                bracketed(-160_000, 1_000_500 - 160_000, 1_000_000),
            ],
            None,
        );
        assert_eq!(r0.writes_honoured, Some(true), "{:?}", r0.disagreements);
        assert_eq!(r0.skew_cycles, 60_000);
        let b = acc.base();
        assert_eq!(
            (b.basis, b.rel.clone()),
            (SkewBasis::TscAdjust, vec![Some(0), Some(-60_000)])
        );
        // Round 1: a write whose delta (-500) is inside the bracket error and
        // whose exit is longer than the jump: vCPU 0 undecided on both sides.
        // vCPU 0 handled at H = 2_000_000 (its TSC 1_900_500), writes 1_900_000.
        let r1 = acc.add(
            1,
            Variant::XenHead,
            &[
                record_at(0, 1, 1_900_000, 1_900_400, 1_902_000),
                record_at(1, 1, 1_900_000, 1_959_900, 1_900_300),
            ],
            &[
                bracketed(-100_500, 3_000_500 - 100_500, 3_000_000),
                bracketed(-220_000, 3_000_500 - 220_000, 3_000_000),
            ],
            None,
        );
        assert_eq!(r1.vcpus[0].write_honoured, None);
        assert_eq!(r1.undecided_vcpus, 1);
        // The history (honoured) stands: the base is TSC_ADJUST's, not lost.
        let b = acc.base();
        assert_eq!(b.basis, SkewBasis::TscAdjust);
        assert_eq!(b.rel, vec![Some(0), Some(-119_500)]);
    }

    /// Without exact offsets and with no decided write yet, a base after
    /// recorded writes is unknown: the next round says it assumed equal
    /// offsets.
    #[test]
    fn no_decided_write_leaves_the_base_assumed() {
        let mut acc = RoundAccumulator::new(&[bracketed(0, 1_000, 500), bracketed(0, 1_000, 500)]);
        // Tiny deltas inside the error bars, long exits: nothing decided.
        acc.add(
            0,
            Variant::XenHead,
            &[
                record_at(0, 0, 1_000_000, 1_000_400, 1_005_000),
                record_at(1, 0, 1_000_000, 1_000_600, 1_005_000),
            ],
            &[
                bracketed(-500, 2_000_000, 2_000_000),
                bracketed(-700, 2_000_000, 2_000_000),
            ],
            None,
        );
        let b = acc.base();
        assert_eq!(b.basis, SkewBasis::Assumed);
        assert_eq!(b.rel, vec![Some(0), None]);
    }
}
