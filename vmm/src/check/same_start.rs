//! Check 1, `same-start`: every vCPU starts with the same TSC offset and the
//! same TSC frequency (KVM gives every new vCPU the same offset on a stable
//! host clocksource).

use super::evidence::{Check, Context, Evidence};
use super::report::Finding;
use crate::error::RunError;
use crate::tsc::{OffsetSource, TscState};

/// Check 1.
pub struct SameStart;

impl Check for SameStart {
    fn number(&self) -> u32 {
        1
    }
    fn id(&self) -> &'static str {
        "same-start"
    }
    fn title(&self) -> &'static str {
        "every vCPU starts with the same TSC offset and frequency"
    }
    fn run(&self, ev: &Evidence, _: &Context) -> Result<Finding, RunError> {
        Ok(judge(&ev.initial, ev.env.host.offset_source))
    }
}

/// Judges every vCPU's state before the first round; `source` says where
/// exact offsets came from, if from anywhere.
pub fn judge(initial: &[TscState], source: OffsetSource) -> Finding {
    let khz: Vec<u32> = initial.iter().map(|t| t.tsc_khz).collect();
    let same_khz = khz.windows(2).all(|w| w[0] == w[1]);
    let mut f = Finding::skip("no vCPU").with("tsc_khz", &khz);
    if initial.is_empty() {
        return f;
    }
    let offsets: Vec<Option<u64>> = initial.iter().map(|t| t.offset).collect();
    let unread: Vec<String> = offsets
        .iter()
        .enumerate()
        .filter(|(_, o)| o.is_none())
        .map(|(i, _)| i.to_string())
        .collect();
    if source.exact() && unread.is_empty() {
        f.value("offsets", &offsets);
        let same = offsets.windows(2).all(|w| w[0] == w[1]);
        match (same, same_khz) {
            (true, true) => f.set(
                super::report::Verdict::Pass,
                format!("equal offsets ({}) and frequencies", source.short()),
            ),
            (false, _) => f.set(
                super::report::Verdict::Fail,
                "the vCPUs were created with different TSC offsets",
            ),
            (true, false) => f.set(
                super::report::Verdict::Fail,
                "the vCPUs run their TSCs at different frequencies",
            ),
        }
        return f;
    }
    // Bracketed estimates: equal within their error bars. Where the exact
    // source gave no offset for some vCPU, the offsets it did give are
    // evidence too (two that differ fail), and the brackets judge the rest:
    // an offset not read is no offset equal to the others.
    let missing = if source.exact() {
        f.value("offsets", &offsets);
        let read: Vec<u64> = offsets.iter().flatten().copied().collect();
        if read.windows(2).any(|w| w[0] != w[1]) {
            f.set(
                super::report::Verdict::Fail,
                "the vCPUs were created with different TSC offsets",
            );
            return f;
        }
        format!(
            "{} gave no offset for vCPU(s) {}; ",
            source.short(),
            unread.join(", ")
        )
    } else {
        String::new()
    };
    let worst = initial
        .iter()
        .map(|t| {
            let (d, err) = t.offset_minus(&initial[0]);
            (d.unsigned_abs(), err)
        })
        .max_by_key(|(d, _)| *d)
        .unwrap_or((0, 0));
    f.value("largest_offset_difference_cycles", worst.0);
    f.value("error_cycles", worst.1);
    let adj_zero = initial.iter().all(|t| t.adjust == 0);
    if !same_khz {
        f.set(
            super::report::Verdict::Fail,
            "the vCPUs run their TSCs at different frequencies",
        );
    } else if worst.0 <= worst.1 && adj_zero {
        f.set(
            super::report::Verdict::Pass,
            format!("{missing}offsets equal within the bracketed reads' error (no exact offsets)"),
        );
    } else {
        f.set(
            super::report::Verdict::Fail,
            format!("{missing}offsets differ by more than the bracketed reads' error"),
        );
    }
    f
}

#[cfg(test)]
mod tests {
    use super::super::report::Verdict;
    use super::*;

    fn state(offset: Option<u64>, tsc: u64, host: u64, khz: u32) -> TscState {
        TscState {
            adjust: 0,
            tsc,
            host_before: host,
            host_after: host + 100,
            offset,
            tsc_khz: khz,
            host_khz: 0,
            scaled: false,
        }
    }

    #[test]
    fn exact_offsets_must_be_equal() {
        let same = [state(Some(7), 0, 0, 1), state(Some(7), 0, 0, 1)];
        let f = judge(&same, OffsetSource::KvmVcpuTscOffset);
        assert_eq!(f.verdict, Verdict::Pass);
        assert_eq!(
            f.reason,
            "equal offsets (KVM_VCPU_TSC_OFFSET) and frequencies"
        );
        let f = judge(&same, OffsetSource::Debugfs);
        assert_eq!(f.reason, "equal offsets (KVM debugfs) and frequencies");
        let differ = [state(Some(7), 0, 0, 1), state(Some(8), 0, 0, 1)];
        let f = judge(&differ, OffsetSource::Debugfs);
        assert_eq!(f.verdict, Verdict::Fail);
        assert!(f.reason.contains("different TSC offsets"), "{}", f.reason);
        let khz = [state(Some(7), 0, 0, 1), state(Some(7), 0, 0, 2)];
        assert!(judge(&khz, OffsetSource::KvmVcpuTscOffset)
            .reason
            .contains("frequencies"));
    }

    #[test]
    fn bracketed_offsets_must_agree_within_their_error() {
        // Offsets (tsc - bracket midpoint) 1000 and 1090; each bracket is 100
        // wide, so the error of the difference is 50 + 50 = 100.
        let near = [state(None, 1_050, 0, 1), state(None, 1_140, 0, 1)];
        let f = judge(&near, OffsetSource::None);
        assert_eq!(f.verdict, Verdict::Pass, "{}", f.reason);
        assert_eq!(f.values["largest_offset_difference_cycles"], 90);
        assert_eq!(f.values["error_cycles"], 100);
        let far = [state(None, 1_050, 0, 1), state(None, 1_151, 0, 1)];
        assert_eq!(judge(&far, OffsetSource::None).verdict, Verdict::Fail);
        let adjusted = [
            TscState {
                adjust: 5,
                ..near[0]
            },
            near[1],
        ];
        assert_eq!(judge(&adjusted, OffsetSource::None).verdict, Verdict::Fail);
    }

    /// An exact source that gave no offset (a debugfs file unreadable, an
    /// attribute read that failed) is no evidence of equal offsets: the
    /// brackets judge instead, and say why; offsets read that differ fail.
    #[test]
    fn offsets_not_read_are_not_equal_offsets() {
        // Bracketed offsets 1,000 and 5,000 apart, far beyond their error
        // of 100: None == None must not make them equal.
        let far = [state(None, 1_050, 0, 1), state(None, 6_050, 0, 1)];
        for source in [OffsetSource::KvmVcpuTscOffset, OffsetSource::Debugfs] {
            let f = judge(&far, source);
            assert_eq!(f.verdict, Verdict::Fail, "{}", f.reason);
            assert!(
                f.reason.contains("gave no offset for vCPU(s) 0, 1"),
                "{}",
                f.reason
            );
        }
        let near = [state(None, 1_050, 0, 1), state(None, 1_140, 0, 1)];
        let f = judge(&near, OffsetSource::KvmVcpuTscOffset);
        assert_eq!(f.verdict, Verdict::Pass, "{}", f.reason);
        assert!(
            f.reason.starts_with("KVM_VCPU_TSC_OFFSET gave no offset"),
            "{}",
            f.reason
        );
        // One read, one not: the brackets still judge the pair.
        let one = [state(Some(7), 1_050, 0, 1), state(None, 6_050, 0, 1)];
        let f = judge(&one, OffsetSource::KvmVcpuTscOffset);
        assert_eq!(f.verdict, Verdict::Fail, "{}", f.reason);
        assert!(f.reason.contains("vCPU(s) 1;"), "{}", f.reason);
        // Offsets read that differ are evidence enough.
        let three = [
            state(Some(7), 0, 0, 1),
            state(Some(8), 0, 0, 1),
            state(None, 0, 0, 1),
        ];
        let f = judge(&three, OffsetSource::Debugfs);
        assert_eq!(f.verdict, Verdict::Fail, "{}", f.reason);
        assert!(f.reason.contains("different TSC offsets"), "{}", f.reason);
    }

    #[test]
    fn no_vcpu_is_nothing_to_judge() {
        assert_eq!(
            judge(&[], OffsetSource::KvmVcpuTscOffset).verdict,
            Verdict::Skip
        );
    }
}
