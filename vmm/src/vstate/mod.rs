//! The VM and its vCPUs.

pub mod vcpu;
pub mod vm;
