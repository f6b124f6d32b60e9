//! Summary records: every `--summary-every` minutes a long run writes one
//! JSON line with its statistics so far into its `--output` stream, among
//! the round lines (schema `tsc-rendezvous/summary/v1`,
//! `vmm/schema/summary-v1.json`), so that a soak killed without warning
//! (SIGKILL, a lost machine) still leaves them behind. `run`'s record holds
//! every variant so far (the completed ones whole), `compare`'s every
//! variant's statistics.

use std::time::{Duration, Instant};

use serde::Serialize;

use super::RunSummary;

/// The schema identifier of every summary record.
pub const SUMMARY_SCHEMA: &str = "tsc-rendezvous/summary/v1";

/// The default interval between summary records, minutes.
pub const DEFAULT_EVERY_MINUTES: u64 = 10;

/// When the next record is due.
#[derive(Clone, Copy, Debug)]
pub struct Every {
    interval: Duration,
    next: Instant,
}

impl Every {
    /// A record every `interval`, the first one `interval` from now.
    pub fn new(interval: Duration) -> Every {
        Every {
            interval,
            next: Instant::now() + interval,
        }
    }

    /// Whether a record is due now; if so the next one is due an interval
    /// later (intervals missed while a round ran are not caught up).
    pub fn due(&mut self) -> bool {
        let now = Instant::now();
        if now < self.next {
            return false;
        }
        while self.next <= now {
            self.next += self.interval;
        }
        true
    }
}

/// One variant of a `run` summary record.
#[derive(Clone, Debug, Serialize)]
pub struct RunEntry {
    /// The variant.
    pub variant: String,
    /// Whether its run had ended when the record was written.
    pub complete: bool,
    /// Whether the decided rounds' writes took effect.
    pub writes_honoured: Option<bool>,
    /// Its statistics so far.
    pub summary: RunSummary,
}

/// `run`'s summary record.
#[derive(Debug, Serialize)]
pub struct RunRecord<'a> {
    /// [`SUMMARY_SCHEMA`].
    pub schema: &'static str,
    /// `run`.
    pub command: &'static str,
    /// This tool's version.
    pub tool_version: &'static str,
    /// Seconds since the run started.
    pub elapsed_seconds: f64,
    /// vCPU count.
    pub vcpus: u32,
    /// Every variant so far, in the order run; the last one may be running.
    pub runs: &'a [RunEntry],
}

impl<'a> RunRecord<'a> {
    /// The record of `runs`, `elapsed` into the run.
    pub fn new(vcpus: u32, elapsed: Duration, runs: &'a [RunEntry]) -> RunRecord<'a> {
        RunRecord {
            schema: SUMMARY_SCHEMA,
            command: "run",
            tool_version: env!("CARGO_PKG_VERSION"),
            elapsed_seconds: elapsed.as_secs_f64(),
            vcpus,
            runs,
        }
    }
}

/// One line (no line end) of a record.
pub fn line<T: Serialize>(record: &T) -> serde_json::Result<String> {
    serde_json::to_string(record)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::VariantAccumulator;

    #[test]
    fn a_record_is_due_once_per_interval() {
        let mut e = Every::new(Duration::from_secs(3600));
        assert!(!e.due(), "not before the first interval");
        let mut e = Every {
            interval: Duration::from_secs(60),
            next: Instant::now() - Duration::from_secs(150),
        };
        assert!(e.due());
        assert!(!e.due(), "missed intervals are not caught up");
    }

    #[test]
    fn a_run_record_names_its_schema_and_holds_each_variant() {
        let acc = VariantAccumulator::new();
        let runs = [RunEntry {
            variant: "xen-head".into(),
            complete: false,
            writes_honoured: acc.writes_honoured(),
            summary: acc.summary(None),
        }];
        let text = line(&RunRecord::new(2, Duration::from_millis(1500), &runs)).expect("JSON");
        let v: serde_json::Value = serde_json::from_str(&text).expect("parses");
        assert_eq!(v["schema"], SUMMARY_SCHEMA);
        assert_eq!(v["command"], "run");
        assert_eq!(v["elapsed_seconds"], 1.5);
        assert_eq!(v["runs"][0]["variant"], "xen-head");
        assert_eq!(v["runs"][0]["complete"], false);
        assert!(!text.contains('\n'), "one line");
    }
}
