//! The VM and its vCPUs, as Firecracker's `vstate/` keeps them: creating the
//! VM ([`vm`]), its guest memory as the host reads and writes it
//! ([`memory`]), Linux's sync results in it ([`sync_area`]), the vCPU
//! threads and their run loop ([`vcpu`], why a vCPU stopped in
//! [`vcpu::error`], one vCPU's saved state in [`vcpu::state`]), the pool that
//! starts, drives and stops them ([`pool`], with its own [`PoolError`]) and
//! the spin breaker for overcommitted hosts ([`spin`]), the short scheduler
//! slice a vCPU thread with a core of its own asks for ([`slice`]), and
//! rounds the vCPU threads run back to back ([`chain`]).

pub mod chain;
pub mod error;
pub mod kick;
pub mod memory;
pub mod pool;
pub mod slice;
pub mod spin;
pub mod sync_area;
pub mod vcpu;
pub mod vm;

pub use error::{PoolError, VmError};
pub use memory::MemError;
pub use pool::VcpuPool;
pub use vcpu::state::{PioCompletion, PioState, Saved, StateError};
