//! From raw readings to findings: per round, each vCPU's TSC offset relative to
//! vCPU 0 by three independent methods, whether the hypervisor honoured the
//! writes, the skew, and the seed's loop-exit time.
//!
//! All arithmetic on TSC values wraps (a u64 TSC may be written anywhere) and
//! differences are taken as signed 64-bit values.
//!
//! The three methods (see `kvm-tsc.md` in the project notes):
//! - (a) TSC_ADJUST deltas. KVM adds the delta of every guest TSC write
//!   (value written - TSC when KVM handled the write) to the vCPU's virtual
//!   TSC_ADJUST, on Linux >= 5.10 exactly and on PVM too. When all vCPUs write
//!   the same value, the spread of the deltas is the spread of the moments the
//!   writes were handled: the skew the writes leave behind (or would have, if
//!   the hypervisor ignores them).
//! - (b) the exact offsets: KVM_VCPU_TSC_OFFSET (Linux >= 5.16) or KVM's
//!   debugfs (any kernel, as root).
//! - (c) IA32_TSC read through KVM, bracketed by host TSC reads: an estimate of
//!   each offset with an error bar of half the bracket (the read happened
//!   somewhere inside it); a relative offset carries both vCPUs' error bars.
//!
//! Every method that is available is cross-checked against the others and any
//! disagreement is reported with the round, never hidden. Whether a write
//! took effect is decided from the evidence ([`honoured`]): KVM's when it is
//! conclusive, else the guest's; inconclusive evidence stays undecided.

mod accumulate;
mod arith;
pub mod clock_jump;
pub mod guest_view;
pub mod honoured;
pub mod kvmclock;
mod round;

pub use accumulate::RoundAccumulator;
pub use arith::{signed_delta, spread};
pub use honoured::{DecidedBy, Decision};
pub use round::{analyse_round, Base, RoundResult, SkewBasis, VcpuResult, VcpuSample};

#[cfg(test)]
pub(crate) use round::synthetic_round;

#[cfg(test)]
mod tests;
