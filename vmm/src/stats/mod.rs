//! Statistics, pure and without I/O: order statistics over per-round values
//! ([`order`]), comparing two samples (a seeded PRNG, bootstrap intervals of
//! a median shift, the Mann-Whitney U test: [`inference`]), and the same on
//! a distribution whose memory is bounded whatever the number of rounds
//! ([`distribution`]).

pub mod distribution;
pub mod inference;
mod order;

pub use order::{percentile_sorted, summarize, Summary};
