//! The readable report's KVM_GET_CLOCK line (`run --kvmclock`): the flags
//! of kvmclock as KVM reported them on the fresh VM, after the first round
//! and after the last, and whether KVM_CLOCK_TSC_STABLE changed between
//! them.

use crate::tsc::clock_points::{ClockPoint, ClockPoints};

/// One point: where it was taken and its flags (or its error).
fn point_text(p: &ClockPoint) -> String {
    let at = match p.after_round {
        None => "fresh VM".to_string(),
        Some(r) => format!("after round #{r}"),
    };
    match (&p.error, p.flag_names.is_empty()) {
        (Some(e), _) => format!("{at} {e}"),
        (None, true) => format!("{at} no flags"),
        (None, false) => format!("{at} {}", p.flag_names.join("|")),
    }
}

/// The line, without its indentation.
pub fn line(p: &ClockPoints) -> String {
    let points: Vec<String> = p.points().map(point_text).collect();
    let stable = match p.tsc_stable_changed {
        Some(true) => "KVM_CLOCK_TSC_STABLE changed between them",
        Some(false) => "KVM_CLOCK_TSC_STABLE the same at every point",
        None => "fewer than two samples to compare KVM_CLOCK_TSC_STABLE",
    };
    format!("KVM_GET_CLOCK: {}; {stable}", points.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tsc::clock::ClockSample;

    fn point(round: Option<u32>, flags: u32) -> Option<ClockPoint> {
        let s = ClockSample {
            flags,
            ..ClockSample::default()
        };
        Some(ClockPoint::new(round, Ok(s)))
    }

    #[test]
    fn the_line_names_every_points_flags_and_says_whether_the_master_clock_changed() {
        let mut p = ClockPoints {
            fresh: point(None, 2 | 4 | 8),
            after_first: point(Some(0), 2 | 4 | 8),
            after_last: point(Some(2), 4 | 8),
            tsc_stable_changed: None,
        };
        p.settle();
        assert_eq!(
            line(&p),
            "KVM_GET_CLOCK: fresh VM KVM_CLOCK_TSC_STABLE|KVM_CLOCK_REALTIME|KVM_CLOCK_HOST_TSC, \
             after round #0 KVM_CLOCK_TSC_STABLE|KVM_CLOCK_REALTIME|KVM_CLOCK_HOST_TSC, \
             after round #2 KVM_CLOCK_REALTIME|KVM_CLOCK_HOST_TSC; \
             KVM_CLOCK_TSC_STABLE changed between them"
        );
        p.fresh = point(None, 0);
        p.after_first = Some(ClockPoint::new(
            Some(0),
            Err("KVM_GET_CLOCK failed: EIO".into()),
        ));
        p.after_last = point(Some(2), 0);
        p.settle();
        assert_eq!(
            line(&p),
            "KVM_GET_CLOCK: fresh VM no flags, after round #0 KVM_GET_CLOCK failed: EIO, \
             after round #2 no flags; KVM_CLOCK_TSC_STABLE the same at every point"
        );
        p.after_last = None;
        p.settle();
        assert!(line(&p).ends_with("; fewer than two samples to compare KVM_CLOCK_TSC_STABLE"));
    }
}
