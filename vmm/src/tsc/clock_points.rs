//! KVM_GET_CLOCK at a run's fixed points: on the fresh VM (before any vCPU
//! ran), after its first round and after its last, each a sample or the
//! error that stood in for it; and whether KVM_CLOCK_TSC_STABLE (the master
//! clock) changed between them.

use serde::Serialize;

use super::clock::{flag_names, ClockSample};

/// One KVM_GET_CLOCK of a run: the sample with its flags' names, or why
/// there is none.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ClockPoint {
    /// The round after which it was taken; `None` on the fresh VM.
    pub after_round: Option<u32>,
    /// What KVM_GET_CLOCK returned (absent on an error).
    #[serde(flatten)]
    pub sample: Option<ClockSample>,
    /// The names of the KVM_CLOCK_* bits of the sample's flags (empty on an
    /// error).
    pub flag_names: Vec<&'static str>,
    /// Why KVM_GET_CLOCK gave no sample.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl ClockPoint {
    /// A point from a KVM_GET_CLOCK taken after `after_round` (`None`: on
    /// the fresh VM).
    pub fn new(after_round: Option<u32>, got: Result<ClockSample, String>) -> ClockPoint {
        match got {
            Ok(s) => ClockPoint {
                after_round,
                sample: Some(s),
                flag_names: flag_names(s.flags),
                error: None,
            },
            Err(e) => ClockPoint {
                after_round,
                sample: None,
                flag_names: Vec::new(),
                error: Some(e),
            },
        }
    }

    /// Whether KVM_CLOCK_TSC_STABLE was set; `None` without a sample.
    pub fn tsc_stable(&self) -> Option<bool> {
        self.sample.as_ref().map(ClockSample::tsc_stable)
    }
}

/// KVM_GET_CLOCK at a run's three fixed points (a point not reached, e.g.
/// the last round of a run that failed, is `None`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ClockPoints {
    /// On the fresh VM, before any vCPU ran.
    pub fresh: Option<ClockPoint>,
    /// After the first round.
    pub after_first: Option<ClockPoint>,
    /// After the last round (the same round as `after_first` in a run of one
    /// round, taken again).
    pub after_last: Option<ClockPoint>,
    /// Whether KVM_CLOCK_TSC_STABLE differed between the points that have
    /// a sample; `None` with fewer than two of them.
    pub tsc_stable_changed: Option<bool>,
}

impl ClockPoints {
    /// The points in order, those not reached left out.
    pub fn points(&self) -> impl Iterator<Item = &ClockPoint> {
        [&self.fresh, &self.after_first, &self.after_last]
            .into_iter()
            .flatten()
    }

    /// Works [`ClockPoints::tsc_stable_changed`] out from the points.
    pub fn settle(&mut self) {
        let stable: Vec<bool> = self.points().filter_map(ClockPoint::tsc_stable).collect();
        self.tsc_stable_changed =
            (stable.len() >= 2).then(|| stable.windows(2).any(|w| w[0] != w[1]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(flags: u32, clock_ns: u64) -> ClockSample {
        ClockSample {
            clock_ns,
            flags,
            ..ClockSample::default()
        }
    }

    #[test]
    fn a_point_names_its_flags_or_keeps_its_error() {
        let p = ClockPoint::new(Some(0), Ok(sample(2 | 4, 5)));
        assert_eq!(p.flag_names, ["KVM_CLOCK_TSC_STABLE", "KVM_CLOCK_REALTIME"]);
        assert_eq!(p.tsc_stable(), Some(true));
        let v = serde_json::to_value(&p).unwrap_or_default();
        assert_eq!(v["after_round"], 0);
        assert_eq!(v["clock_ns"], 5);
        assert!(v.get("error").is_none(), "{v}");
        let e = ClockPoint::new(None, Err("KVM_GET_CLOCK failed: EIO".into()));
        assert_eq!(e.tsc_stable(), None);
        let v = serde_json::to_value(&e).unwrap_or_default();
        assert_eq!(v["error"], "KVM_GET_CLOCK failed: EIO");
        assert!(
            v["after_round"].is_null() && v.get("clock_ns").is_none(),
            "{v}"
        );
    }

    #[test]
    fn a_change_of_tsc_stable_is_seen_between_any_two_samples() {
        let point = |round, flags| Some(ClockPoint::new(round, Ok(sample(flags, 1))));
        let mut p = ClockPoints {
            fresh: point(None, 2),
            after_first: point(Some(0), 2),
            after_last: point(Some(4), 2),
            tsc_stable_changed: None,
        };
        p.settle();
        assert_eq!(p.tsc_stable_changed, Some(false));
        p.after_last = point(Some(4), 0);
        p.settle();
        assert_eq!(p.tsc_stable_changed, Some(true));
        // An error in between is skipped; one sample decides nothing.
        p.after_first = Some(ClockPoint::new(Some(0), Err("gone".into())));
        p.settle();
        assert_eq!(p.tsc_stable_changed, Some(true));
        p.after_last = None;
        p.settle();
        assert_eq!(p.tsc_stable_changed, None);
    }
}
