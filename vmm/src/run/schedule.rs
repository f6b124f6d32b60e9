//! The variants of a run's rounds, drawn one at a time as the rounds start
//! ([`Schedule`]): a list ([`Listed`]), one variant for a number of rounds or
//! a time ([`Repeat`]), or `compare`'s interleaved blocks. Nothing is
//! allocated in proportion to the rounds, so a soak of `u32::MAX` rounds
//! costs what a short run does.

use std::time::Instant;

use tsc_contract::Variant;

/// The variants of a run's rounds, drawn one at a time as the rounds start,
/// so that nothing is allocated in proportion to how many there are (a soak
/// asks for up to `u32::MAX`).
pub trait Schedule {
    /// The most rounds the run may have (a guest is configured for this
    /// many); 0: nothing to run.
    fn max_rounds(&self) -> u32;

    /// The variant of the next round: asked once per round, in order, at
    /// most [`Schedule::max_rounds`] times (and possibly a few rounds ahead
    /// of the one running; see [`Schedule::ends_after`]).
    fn next_variant(&mut self) -> Variant;

    /// Whether the run ends after its first `completed` rounds although
    /// fewer than [`Schedule::max_rounds`] ran (its time is up); asked
    /// before every round and after every round, cheap.
    fn ends_after(&self, completed: u32) -> bool {
        let _ = completed;
        false
    }
}

/// A schedule given as a list: exactly its rounds, in order.
pub struct Listed<'a> {
    variants: &'a [Variant],
    next: usize,
}

impl<'a> Listed<'a> {
    /// The rounds of `variants`, at most `u32::MAX` of them.
    pub fn new(variants: &'a [Variant]) -> Listed<'a> {
        let n = variants.len().min(u32::MAX as usize);
        Listed {
            variants: &variants[..n],
            next: 0,
        }
    }
}

impl Schedule for Listed<'_> {
    fn max_rounds(&self) -> u32 {
        self.variants.len() as u32
    }

    fn next_variant(&mut self) -> Variant {
        let v = self
            .variants
            .get(self.next)
            .or(self.variants.last())
            .copied()
            .unwrap_or(Variant::XenHead);
        self.next += 1;
        v
    }
}

/// One variant for `rounds` rounds, or until `until` (then at most
/// `rounds`): `run`'s schedule.
#[derive(Clone, Copy, Debug)]
pub struct Repeat {
    /// The variant of every round.
    pub variant: Variant,
    /// Rounds at most.
    pub rounds: u32,
    /// The run ends at the first round boundary after this instant.
    pub until: Option<Instant>,
}

impl Schedule for Repeat {
    fn max_rounds(&self) -> u32 {
        self.rounds
    }

    fn next_variant(&mut self) -> Variant {
        self.variant
    }

    fn ends_after(&self, completed: u32) -> bool {
        completed > 0 && self.until.is_some_and(|t| Instant::now() >= t)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_listed_schedule_is_its_list() {
        let list = [Variant::Xen415, Variant::XenHead, Variant::XenStd];
        let mut s = Listed::new(&list);
        assert_eq!(s.max_rounds(), 3);
        let got: Vec<Variant> = (0..3).map(|_| s.next_variant()).collect();
        assert_eq!(got, list);
        assert!(!s.ends_after(1), "a list runs to its end");
        assert_eq!(Listed::new(&[]).max_rounds(), 0);
    }

    #[test]
    fn a_repeat_by_time_ends_only_after_a_round_and_its_time() {
        let past = Instant::now() - Duration::from_secs(1);
        let r = Repeat {
            variant: Variant::XenHead,
            rounds: u32::MAX,
            until: Some(past),
        };
        assert!(!r.ends_after(0), "at least one round runs");
        assert!(r.ends_after(1));
        let r = Repeat {
            until: Some(Instant::now() + Duration::from_secs(3600)),
            ..r
        };
        assert!(!r.ends_after(1_000));
        let r = Repeat { until: None, ..r };
        assert!(!r.ends_after(1_000));
    }
}
