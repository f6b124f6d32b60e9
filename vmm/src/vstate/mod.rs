//! The VM and its vCPUs: creating the VM ([`vm`]), the vCPU threads and their
//! run loop ([`vcpu`]), why a vCPU stopped ([`exit`]) and the spin breaker
//! for overcommitted hosts ([`spin`]). [`crate::pool`] starts, drives and
//! stops them.

pub mod exit;
pub mod spin;
pub mod vcpu;
pub mod vm;
