//! Architecture-specific guest setup. Only x86-64 exists.

pub mod x86_64;
