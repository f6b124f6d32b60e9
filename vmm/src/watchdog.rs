//! What the watchdog found when a deadline passed: which vCPUs (or host
//! threads) had not reported, where each said it was, and the rendezvous
//! semaphore. Both backends report a stall with it.

use std::fmt;
use std::time::Duration;

use tsc_contract::Progress;

/// What the watchdog found when the deadline passed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stall {
    /// The round running.
    pub round: u32,
    /// vCPUs that had not reported, with where each said it was (from its
    /// progress slot in guest memory; `None` when unreadable).
    pub missing: Vec<(u32, Option<Progress>)>,
    /// The rendezvous semaphore, read from guest memory.
    pub semaphore: Option<u32>,
    /// The deadline.
    pub timeout: Duration,
}

impl fmt::Display for Stall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ids: Vec<String> = self.missing.iter().map(|(v, _)| v.to_string()).collect();
        write!(
            f,
            "timed out after {:.1} s in round {}: vCPU(s) {} had not arrived",
            self.timeout.as_secs_f64(),
            self.round,
            ids.join(", ")
        )?;
        for (i, (v, p)) in self.missing.iter().enumerate() {
            let sep = if i == 0 { "; " } else { ", " };
            match p {
                Some(p) => write!(f, "{sep}vCPU {v} {p}")?,
                None => write!(f, "{sep}vCPU {v}'s progress is unreadable")?,
            }
        }
        match self.semaphore {
            Some(s) => write!(f, "; rendezvous semaphore = {s} (read from guest memory)")?,
            None => write!(f, "; rendezvous semaphore unreadable")?,
        }
        write!(f, "; raise --timeout if the host is only slow")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_says_who_was_where_and_what_to_do() {
        let e = Stall {
            round: 2,
            missing: vec![
                (
                    0,
                    Some(Progress::At {
                        round: 2,
                        iteration: 3,
                    }),
                ),
                (1, None),
            ],
            semaphore: Some(1),
            timeout: Duration::from_millis(4_000),
        }
        .to_string();
        assert_eq!(
            e,
            "timed out after 4.0 s in round 2: vCPU(s) 0, 1 had not arrived; vCPU 0 was in \
             round 2 iteration 3, vCPU 1's progress is unreadable; rendezvous semaphore = 1 \
             (read from guest memory); raise --timeout if the host is only slow"
        );
    }
}
