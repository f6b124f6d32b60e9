//! The VM and its vCPUs.

pub mod spin;
pub mod vcpu;
pub mod vm;
