//! `run --kvmclock` per round: every vCPU that wrote IA32_TSC left a
//! [`ClockRecord`] of kvmclock across its write; matched to the round and
//! turned into its jump ([`super::clock_jump`]), kept beside the skew.

use tsc_contract::{ClockRecord, RoundRecord, RECORD_NO_TSC_WRITE};

use super::clock_jump::{across_write, KvmclockRound};
use super::round::RoundResult;
use crate::tsc::MSR_IA32_TSC as IA32_TSC;

/// Adds the kvmclock findings to an analysed round from every vCPU's clock
/// record (`clock`) and round record (`records`), in vCPU order: a vCPU
/// that wrote IA32_TSC this round
/// must have left a record of that write (the round's tag, IA32_TSC, the
/// value of its round record), else the round disagrees. A round in which
/// no vCPU wrote IA32_TSC gets no findings.
pub fn apply(result: &mut RoundResult, clock: &[ClockRecord], records: &[RoundRecord]) {
    let mut vcpus = Vec::new();
    for (v, rec) in result.vcpus.iter().zip(records) {
        if rec.flags & RECORD_NO_TSC_WRITE != 0 {
            continue;
        }
        let Some(r) = clock.get(v.id as usize) else {
            continue;
        };
        if !r.is_for(result.round, IA32_TSC) || r.written != v.written_value {
            result.disagreements.push(format!(
                "vCPU {}: its kvmclock record is not of this round's IA32_TSC write (tag {}, MSR \
                 {:#x}, written {:#x}; the round wrote {:#x})",
                v.id, r.tag, r.msr, r.written, v.written_value
            ));
            continue;
        }
        vcpus.push(across_write(v.id, r, v.offset_delta, v.running_khz));
    }
    if vcpus.is_empty() {
        return;
    }
    result.kvmclock = Some(KvmclockRound::of(vcpus));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::{analyse_round, Base, VcpuSample};
    use crate::tsc::TscState;
    use tsc_contract::{CLOCK_MAGIC, RECORD_MAGIC};

    const KHZ: u32 = 1_000_000; // 1 GHz: a cycle is a ns.

    /// A record of a write that moved the TSC by `moved`, `elapsed` cycles
    /// passing between the readings and kvmclock advancing by `advance`
    /// (negative: it went back), on a page at 1 GHz anchored at TSC 0, a
    /// second before.
    fn record(round: u32, written: u64, advance: i64, elapsed: u64, moved: i64) -> ClockRecord {
        ClockRecord {
            magic: CLOCK_MAGIC,
            tag: round,
            msr: IA32_TSC,
            version_before: 4,
            version_after: 6,
            written,
            mul_before: 1 << 31,
            mul_after: 1 << 31,
            shifts: 1 | (1 << 8),
            tsc_before: 1_000_000_000,
            tsc_after: (1_000_000_000 + elapsed).wrapping_add_signed(moved),
            kvmclock_before: 50_000,
            kvmclock_after: 50_000u64.wrapping_add_signed(advance),
            ..ClockRecord::default()
        }
    }

    /// A two-vCPU round of a write of `written` that moved each offset by
    /// `moved` (its own disagreements cleared: only `apply`'s are asked of).
    fn round_with(moved: Option<i64>, written: u64) -> RoundResult {
        let state = |offset: Option<u64>| TscState {
            offset,
            host_after: 100,
            tsc_khz: KHZ,
            ..TscState::default()
        };
        let sample = |vcpu: u32| VcpuSample {
            record: RoundRecord {
                magic: RECORD_MAGIC,
                vcpu,
                round: 3,
                variant: 3,
                written,
                ..RoundRecord::default()
            },
            before: state(moved.map(|_| 0)),
            after: state(moved.map(|m| m as u64)),
        };
        let mut r = analyse_round(
            3,
            "xen-head",
            &[sample(0), sample(1)],
            &Base::creation(2),
            None,
        );
        r.disagreements.clear();
        r
    }

    /// `n` round records with `flags`.
    fn records(n: usize, flags: u32) -> Vec<RoundRecord> {
        vec![
            RoundRecord {
                flags,
                ..RoundRecord::default()
            };
            n
        ]
    }

    #[test]
    fn the_jump_is_the_advance_minus_the_time_that_passed() {
        let j = across_write(
            1,
            &record(0, 9, 2_300, 2_000, 4_000_000),
            Some(4_000_000),
            KHZ,
        );
        assert_eq!(j.elapsed_ns, Some(2_000.0));
        assert_eq!(j.jump_ns, Some(300.0));
        assert_eq!(j.tsc_moved_ns, Some(4_000_000.0));
        assert_eq!(j.version, (4, 6));
        // Without the move the time that passed is unknown.
        let j = across_write(1, &record(0, 9, 2_300, 2_000, 4_000_000), None, KHZ);
        assert_eq!((j.elapsed_ns, j.jump_ns), (None, None));
        // A backwards write: the TSC moved by -4,000 ns while 2,000 ns
        // passed, and kvmclock followed it: it went back by 2,000 ns, so
        // the jump is the move. (The old case had kvmclock stand still,
        // advance 0, a jump of -2,000: not a follow.)
        let j = across_write(0, &record(0, 9, -2_000, 2_000, -4_000), Some(-4_000), KHZ);
        assert_eq!(j.kvmclock_advance_ns, -2_000);
        assert_eq!(j.jump_ns, Some(-4_000.0));
        assert_eq!(j.jump_ns, j.tsc_moved_ns, "kvmclock followed the TSC back");
        assert!(!j.kvmclock_wrapped);
        // A kvmclock that stood still across it is neither continuous nor
        // a follow: its jump is half the move.
        let j = across_write(0, &record(0, 9, 0, 2_000, -4_000), Some(-4_000), KHZ);
        assert_eq!(j.jump_ns, Some(-2_000.0));
    }

    /// A backwards write larger than the page's age: the TSC after it lies
    /// below the page's tsc_timestamp, the guest's unsigned arithmetic
    /// wraps and kvmclock leaps by about 10^18 ns. The jump is flagged and
    /// kept out of the round's largest jump (what the run's statistics
    /// summarise), and the round names the vCPU.
    #[test]
    fn a_reading_that_wrapped_is_flagged_and_kept_out_of_the_largest_jump() {
        use tsc_sync::pvclock::kvmclock_at as pvclock_at;
        let page = |ts: u64| (ts, 50_000u64, 1u32 << 31, 1i8);
        // The page was anchored at TSC 1,000,000 (kvmclock 50,000 ns); the
        // TSC was 1,002,000 before the write, which moved it back by
        // 10,000,000 cycles: 2,000 cycles of age, a move far larger.
        let (ts, st, mul, shift) = page(1_000_000);
        let (t1, t2) = (
            1_002_000u64,
            (1_002_000u64 + 1_000).wrapping_sub(10_000_000),
        );
        let mut wrapped = record(3, 77, 0, 1_000, -10_000_000);
        wrapped.tsc_before = t1;
        wrapped.tsc_after = t2;
        wrapped.tsc_timestamp_before = ts;
        wrapped.tsc_timestamp_after = ts;
        wrapped.system_time_before = st;
        wrapped.system_time_after = st;
        wrapped.version_after = wrapped.version_before;
        wrapped.kvmclock_before = pvclock_at(t1, ts, st, mul, shift);
        wrapped.kvmclock_after = pvclock_at(t2, ts, st, mul, shift);
        let j = across_write(1, &wrapped, Some(-10_000_000), KHZ);
        assert!(j.kvmclock_wrapped, "{j:?}");
        let leap = j.jump_ns.expect("a jump").abs();
        assert!(leap > 1e17, "the guest's kvmclock leapt by {leap} ns");
        let mut r = round_with(Some(-10_000_000), 77);
        let n = r.vcpus.len();
        let mut clock = vec![record(3, 77, 2_000, 2_000, -10_000_000); n];
        clock[1] = wrapped;
        apply(&mut r, &clock, &records(n, 0));
        let k = r.kvmclock.as_ref().expect("findings");
        assert_eq!(k.wrapped, [1]);
        // The largest jump kept is vCPU 0's own (its kvmclock ran on);
        // the wrapped one is not in it.
        assert_eq!(k.jump_ns, k.vcpus[0].jump_ns);
        assert!(k.jump_ns.is_some_and(|x| x.abs() < 1e9), "{k:?}");
    }

    #[test]
    fn a_round_keeps_every_writers_jump_and_the_largest() {
        let mut r = round_with(Some(4_000_000), 77);
        let n = r.vcpus.len();
        assert!(n >= 2, "the synthetic round has vCPUs");
        let mut clock = vec![record(3, 77, 2_000, 2_000, 4_000_000); n];
        // vCPU 1's page was not updated: kvmclock followed the TSC.
        clock[1] = record(3, 77, 4_002_000, 2_000, 4_000_000);
        apply(&mut r, &clock, &records(n, 0));
        let k = r.kvmclock.as_ref().expect("findings");
        assert_eq!(k.vcpus.len(), n);
        assert_eq!(k.jump_ns, Some(4_000_000.0));
        assert_eq!(k.vcpus[0].jump_ns, Some(0.0));
        assert!(r.disagreements.is_empty(), "{:?}", r.disagreements);
    }

    #[test]
    fn a_record_of_another_write_disagrees_and_no_write_needs_none() {
        let mut r = round_with(Some(10), 77);
        let n = r.vcpus.len();
        // A stale record (round 2) and one of another value.
        let mut clock = vec![record(2, 77, 10, 10, 10); n];
        clock[0] = record(3, 78, 10, 10, 10);
        apply(&mut r, &clock, &records(n, 0));
        assert_eq!(r.disagreements.len(), n, "{:?}", r.disagreements);
        assert!(
            r.disagreements[0].contains("written 0x4e"),
            "{:?}",
            r.disagreements
        );
        assert!(r.kvmclock.is_none());
        // A round in which nobody wrote IA32_TSC has no findings, and no
        // record is asked for.
        let mut r = round_with(Some(10), 77);
        apply(&mut r, &clock, &records(n, RECORD_NO_TSC_WRITE));
        assert!(r.disagreements.is_empty() && r.kvmclock.is_none());
    }
}
