//! The VM and its vCPUs: creating the VM ([`vm`]), the vCPU threads and their
//! run loop ([`vcpu`]), why a vCPU stopped ([`exit`]), the spin breaker for
//! overcommitted hosts ([`spin`]) and Linux's sync in guest memory
//! ([`sync_area`]). [`crate::pool`] starts, drives and
//! stops them.

pub mod exit;
pub mod spin;
pub mod sync_area;
pub mod vcpu;
pub mod vm;
