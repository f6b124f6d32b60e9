//! `--initial-skew CYCLES`: a state worth syncing. vCPU k starts
//! `k * CYCLES / (N - 1)` cycles ahead of vCPU 0 (rounded down), set exactly
//! before the guest runs and verified by the readback before the first round,
//! so every algorithm has something to remove.
//!
//! On KVM the offsets are set through the vCPU attribute KVM_VCPU_TSC_OFFSET
//! (Linux >= 5.16): exact, without TSC_ADJUST and without KVM's one-second
//! matching of host TSC writes (which would snap a skew written through
//! IA32_TSC back to one offset). A KVM without the attribute, or one that
//! does not keep what was written, cannot apply it: the run stops before its
//! first round and says why. On the host backend each thread's offset is set
//! directly.

use crate::tsc::{TscError, TscState};

/// Why the initial skew could not be applied.
#[derive(Debug, thiserror::Error, displaydoc::Display)]
pub enum SkewError {
    /// --initial-skew cannot be applied here: this KVM lacks the vCPU attribute KVM_VCPU_TSC_OFFSET (Linux >= 5.16), the only exact way to offset a vCPU's TSC before it runs; run without --initial-skew
    NoOffsetAttr,
    /// --initial-skew: setting vCPU {vcpu}'s TSC offset failed: {error}
    Set {
        /// The vCPU.
        vcpu: u32,
        /// What KVM said.
        error: TscError,
    },
    /// --initial-skew cannot be verified here: the readback has no exact TSC offsets; run without --initial-skew
    Unverifiable,
    /// --initial-skew was not applied by this hypervisor: vCPU {vcpu} should start {asked} cycles ahead of vCPU 0 but starts {got} cycles ahead; run without --initial-skew
    NotApplied {
        /// The first vCPU that is not where it should be.
        vcpu: u32,
        /// Cycles ahead of vCPU 0 asked for.
        asked: u64,
        /// Cycles ahead of vCPU 0 read back (wrapping).
        got: u64,
    },
}

/// How far ahead of vCPU 0 each of `vcpus` vCPUs starts: `k * cycles /
/// (vcpus - 1)`, rounded down (exact in 128 bits; one vCPU: none).
pub fn targets(vcpus: u32, cycles: u64) -> Vec<u64> {
    let last = u128::from(vcpus.saturating_sub(1)).max(1);
    (0..vcpus)
        .map(|k| {
            let t = u128::from(k) * u128::from(cycles) / last;
            // k <= last, so t <= cycles: it fits.
            u64::try_from(t).unwrap_or(cycles)
        })
        .collect()
}

/// The run's note on its initial skew, once [`verify`] passed: what was
/// set, how, and that the readback confirmed it.
pub fn note(vcpus: usize, cycles: u64, set_by: &str) -> String {
    let last = vcpus.saturating_sub(1);
    if last == 0 {
        return format!("--initial-skew {cycles}: one vCPU, nothing to skew");
    }
    format!(
        "--initial-skew {cycles}: vCPU k started k * {cycles} / {last} cycles ahead of vCPU 0 \
         (set through {set_by}, verified by the readback before the first round)"
    )
}

/// Checks the readback before the first round: every vCPU's exact offset
/// minus vCPU 0's must be its target.
pub fn verify(initial: &[TscState], cycles: u64) -> Result<(), SkewError> {
    let Some(first) = initial.first() else {
        return Ok(());
    };
    let Some(base) = first.offset else {
        return Err(SkewError::Unverifiable);
    };
    let n = u32::try_from(initial.len()).unwrap_or(u32::MAX);
    for (k, (s, asked)) in initial.iter().zip(targets(n, cycles)).enumerate() {
        let got = s.offset.ok_or(SkewError::Unverifiable)?.wrapping_sub(base);
        if got != asked {
            return Err(SkewError::NotApplied {
                vcpu: k as u32,
                asked,
                got,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(offset: Option<u64>) -> TscState {
        TscState {
            offset,
            ..TscState::default()
        }
    }

    #[test]
    fn targets_spread_the_skew_evenly_from_vcpu_0_to_the_last() {
        assert_eq!(targets(1, 1000), vec![0]);
        assert_eq!(targets(2, 1000), vec![0, 1000]);
        assert_eq!(targets(4, 1000), vec![0, 333, 666, 1000]);
        assert_eq!(targets(3, 0), vec![0, 0, 0]);
        // No overflow at the extremes: the last vCPU is exactly `cycles` ahead.
        let t = targets(512, u64::MAX);
        assert_eq!(t.last(), Some(&u64::MAX));
        assert!(t.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn verification_accepts_exactly_the_targets_even_across_the_wrap() {
        let base = u64::MAX - 10;
        let ok: Vec<TscState> = targets(3, 100)
            .into_iter()
            .map(|t| state(Some(base.wrapping_add(t))))
            .collect();
        assert!(verify(&ok, 100).is_ok());
        // One cycle off is refused, naming the vCPU and both values.
        let mut off = ok.clone();
        off[2].offset = off[2].offset.map(|o| o.wrapping_add(1));
        match verify(&off, 100) {
            Err(SkewError::NotApplied { vcpu, asked, got }) => {
                assert_eq!((vcpu, asked, got), (2, 100, 101));
            }
            other => panic!("{other:?}"),
        }
        // A hypervisor that ignores offsets (every vCPU at 0) is caught.
        let ignored = vec![state(Some(0)); 3];
        assert!(matches!(
            verify(&ignored, 100),
            Err(SkewError::NotApplied {
                vcpu: 1,
                asked: 50,
                got: 0
            })
        ));
        // Without exact offsets nothing can be verified.
        assert!(matches!(
            verify(&[state(None), state(None)], 100),
            Err(SkewError::Unverifiable)
        ));
        let msg = SkewError::NoOffsetAttr.to_string();
        assert!(msg.contains("KVM_VCPU_TSC_OFFSET") && msg.contains("run without"));
    }
}
