//! The pool's wait for chained rounds ([`crate::vstate::chain`]): the vCPU
//! threads run the rounds back to back and the coordinator sleeps until a
//! batch of them is complete, waking once for all of them.

use std::sync::mpsc::TryRecvError;
use std::time::Instant;

use super::{VcpuPool, POLL};
use crate::stop::{self, Signal};
use crate::vstate::error::PoolError;
use crate::vstate::vcpu::Event;

impl VcpuPool {
    /// Chained rounds: waits until round `round` is complete, sleeping
    /// until the chain has completed every round through `until` (a batch,
    /// one wake-up for all of them). Returns at once when it already is or
    /// when the chain is paused (`paused()`: the caller resumes it or says
    /// why not). A vCPU's failure ends the wait only once every round that
    /// completed before it has been waited for: nothing measured is lost.
    pub fn wait_chained(
        &mut self,
        round: u32,
        until: u32,
        paused: impl Fn() -> bool,
    ) -> Result<(), PoolError> {
        let Some(chain) = self.chain.clone() else {
            return Err(PoolError::NotPlanned { round });
        };
        loop {
            while self.failure.is_none() {
                let ev = match self.events.try_recv() {
                    Ok(ev) => ev,
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        self.failure = Some(PoolError::Lost(0));
                        break;
                    }
                };
                self.received += 1;
                // The failing vCPU never reports: its round is the one running.
                let running = chain.completed();
                self.failure = match ev {
                    Event::Failed { vcpu, error } => Some(PoolError::Vcpu {
                        vcpu,
                        round: running,
                        error,
                    }),
                    Event::Stopped { vcpu } => Some(PoolError::Lost(vcpu)),
                    Event::Finished { vcpu } => Some(PoolError::FinishedEarly {
                        vcpu,
                        round: running,
                    }),
                    _ => None,
                };
            }
            let done = chain.completed();
            if done > round {
                return Ok(());
            }
            if let Some(failure) = self.failure.take() {
                return Err(failure);
            }
            if paused() {
                return Ok(());
            }
            if let Some(signal) = stop::requested() {
                return Err(PoolError::Interrupted {
                    signal: Signal(signal),
                    round: done,
                });
            }
            let left = self.deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                for (v, d) in self.done.iter_mut().enumerate() {
                    *d = chain.arrived(v as u32);
                }
                return Err(self.stall(done));
            }
            // One event per round completed from here on.
            let wanted = until.max(round).saturating_add(1).saturating_sub(done);
            self.hub
                .wait(self.received, u64::from(wanted.max(1)), left.min(POLL));
        }
    }
}
