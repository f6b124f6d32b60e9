//! The `run` report: the JSON document (schema `tsc-rendezvous/run/v1`, in
//! `vmm/schema/run-v1.json`, written as the rounds complete by [`stream`]),
//! the readable text built from the same summaries ([`text`]) and the
//! summary records a soak writes to its `--output` ([`summary`]). What a
//! variant's run keeps is bounded ([`VariantAccumulator`]): its statistics
//! and its typical round, never its rounds.

mod accumulate;
mod kvm_clock;
mod model;
pub mod stream;
pub mod summary;
mod text;

pub use accumulate::{variant_report, VariantAccumulator};
pub use model::{Report, RunSummary, VariantReport};
pub use text::render_text;

/// The schema identifier written into every JSON report.
pub const SCHEMA: &str = "tsc-rendezvous/run/v1";
