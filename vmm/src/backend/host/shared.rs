//! The state the threads of one round share: fresh (all zero) for every
//! round, Xen's rendezvous' and Linux's sync's, each on cache lines of its
//! own, exactly as a guest's shared memory holds them.

use tsc_sync::{LinuxShared, Shared};

/// The shared state of one round: fresh (all zero) for every round, each
/// part on cache lines of its own (both are 64-byte aligned).
#[derive(Debug, Default)]
pub struct RoundShared {
    /// Xen's rendezvous.
    pub xen: Shared,
    /// Linux's sync.
    pub linux: LinuxShared,
}
