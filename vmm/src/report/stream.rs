//! `run --json` written as the rounds complete: the document's head, then
//! each variant's rounds one per line as they come, then its summary, and the
//! host facts and the round count last; so the memory of a run does not grow
//! with its rounds, and a run stopped by a signal still ends with a complete
//! document. The caller begins the document and each run at its first round,
//! so that every run has rounds (as the schema requires).

use std::io::{self, Write};

use serde::Serialize;

use super::{RunSummary, SCHEMA};
use crate::analysis::RoundResult;
use crate::host::HostInfo;
use crate::tsc::clock_points::ClockPoints;

/// Where a [`JsonStream`] is in the document.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum At {
    /// Inside `runs`, before the first run.
    Runs,
    /// Inside `runs`, after a run.
    AfterRun,
    /// Inside a run's `rounds`, before its first round.
    Rounds,
    /// Inside a run's `rounds`, after a round.
    AfterRound,
    /// After the end.
    Done,
}

/// The end of one variant's run.
#[derive(Debug, Serialize)]
pub struct RunTail<'a> {
    /// Whether the decided rounds' writes took effect.
    pub writes_honoured: Option<bool>,
    /// Statistics over the rounds.
    pub summary: &'a RunSummary,
    /// Observations about the run as a whole.
    pub notes: &'a [String],
    /// `--kvmclock` (KVM): KVM_GET_CLOCK at the run's fixed points; absent
    /// otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kvm_clock: Option<&'a ClockPoints>,
}

fn json<T: Serialize + ?Sized>(v: &T) -> io::Result<String> {
    serde_json::to_string(v).map_err(io::Error::other)
}

/// The run report (schema `tsc-rendezvous/run/v1`), written as it goes.
pub struct JsonStream<W: Write> {
    out: W,
    at: At,
}

impl<W: Write> JsonStream<W> {
    /// Writes the document's head.
    pub fn begin(mut out: W, vcpus: u32) -> io::Result<JsonStream<W>> {
        write!(
            out,
            "{{\"schema\":{},\"tool_version\":{},\"vcpus\":{vcpus},\"runs\":[",
            json(SCHEMA)?,
            json(env!("CARGO_PKG_VERSION"))?
        )?;
        out.flush()?;
        Ok(JsonStream { out, at: At::Runs })
    }

    /// Whether a run is open (begun and not ended).
    pub fn in_run(&self) -> bool {
        matches!(self.at, At::Rounds | At::AfterRound)
    }

    /// Starts a variant's run.
    pub fn begin_run(&mut self, variant: &str, vcpus: u32) -> io::Result<()> {
        let sep = if self.at == At::AfterRun { ",\n" } else { "\n" };
        write!(
            self.out,
            "{sep}{{\"variant\":{},\"vcpus\":{vcpus},\"rounds\":[",
            json(variant)?
        )?;
        self.at = At::Rounds;
        Ok(())
    }

    /// Writes one round of the current run, and flushes it.
    pub fn round(&mut self, r: &RoundResult) -> io::Result<()> {
        let sep = if self.at == At::AfterRound {
            ",\n"
        } else {
            "\n"
        };
        self.out.write_all(sep.as_bytes())?;
        serde_json::to_writer(&mut self.out, r).map_err(io::Error::other)?;
        self.at = At::AfterRound;
        self.out.flush()
    }

    /// Ends the current run with its summary.
    pub fn end_run(&mut self, tail: &RunTail<'_>) -> io::Result<()> {
        let t = json(tail)?;
        // `t` is `{...}`: its fields continue the run's object.
        let fields = t.trim_start_matches('{');
        write!(self.out, "\n],{fields}")?;
        self.at = At::AfterRun;
        self.out.flush()
    }

    /// Ends the document with the host facts, the rounds per variant (asked
    /// for; with a duration, the most any variant ran) and, for a run by
    /// time, each variant's share of the duration.
    pub fn end(
        mut self,
        host: &HostInfo,
        rounds_per_variant: u32,
        duration_per_variant: Option<std::time::Duration>,
    ) -> io::Result<W> {
        let duration = duration_per_variant.map_or_else(String::new, |d| {
            format!(",\"duration_per_variant_seconds\":{}", d.as_secs_f64())
        });
        write!(
            self.out,
            "\n],\"rounds_per_variant\":{rounds_per_variant}{duration},\"host\":{}}}\n",
            json(host)?
        )?;
        self.at = At::Done;
        self.out.flush()?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::{HostInfo, KvmFlavor};
    use crate::report::VariantAccumulator;

    fn round(i: u32, skew: u64) -> RoundResult {
        RoundResult {
            round: i,
            variant: "xen-head".into(),
            skew_cycles: skew,
            skew_cycles_attr: None,
            skew_cycles_bracket: 0,
            skew_cycles_bracket_error: 0,
            skew_cycles_guest: None,
            skew_cycles_guest_error: None,
            writes_honoured: Some(false),
            undecided_vcpus: 0,
            skew_basis: crate::analysis::SkewBasis::Offsets,
            cpu0_exit_latency_cycles: Some(100),
            sync: None,
            disagreements: Vec::new(),
            vcpus: Vec::new(),
            kvmclock: None,
        }
    }

    fn host() -> HostInfo {
        HostInfo {
            kvm_flavor: KvmFlavor::Pvm,
            kernel_release: "6.1".into(),
            kernel_version: Some((6, 1)),
            tsc_khz: Some(1_000_000),
            cpu_model: None,
            cpu_tsc_flags: vec![],
            clocksource: None,
            tsc_offset_attr: true,
            offset_source: crate::tsc::OffsetSource::KvmVcpuTscOffset,
            guest_tsc_adjust: true,
            backend: crate::host::Backend::Kvm,
            host_threads: None,
            sync_windows: None,
            initial_skew_cycles: None,
            pacing: None,
            host_tsc_khz: None,
            guest_tsc: None,
        }
    }

    /// Two runs streamed: the result parses as one document with every round
    /// in order and each run's summary of exactly its rounds.
    #[test]
    fn a_streamed_document_is_one_valid_document() {
        let mut s = JsonStream::begin(Vec::new(), 2).expect("head");
        for (variant, skews) in [("xen-4.15", [5u64, 7, 6]), ("xen-head", [9, 8, 10])] {
            assert!(!s.in_run());
            s.begin_run(variant, 2).expect("run");
            assert!(s.in_run());
            let mut acc = VariantAccumulator::new();
            for (i, &k) in skews.iter().enumerate() {
                let r = round(i as u32, k);
                s.round(&r).expect("round");
                acc.add(&r);
            }
            let summary = acc.summary(Some(1_000_000));
            s.end_run(&RunTail {
                writes_honoured: acc.writes_honoured(),
                summary: &summary,
                notes: &["a note".to_string()],
                kvm_clock: None,
            })
            .expect("tail");
        }
        let bytes = s
            .end(&host(), 3, Some(std::time::Duration::from_millis(2500)))
            .expect("end");
        let doc: serde_json::Value = serde_json::from_slice(&bytes).expect("one JSON document");
        assert_eq!(doc["schema"], SCHEMA);
        assert_eq!(doc["rounds_per_variant"], 3);
        assert_eq!(doc["duration_per_variant_seconds"], 2.5);
        assert_eq!(doc["host"]["kvm_flavor"], "pvm");
        let runs = doc["runs"].as_array().expect("runs");
        assert_eq!(runs.len(), 2);
        assert_eq!(runs[1]["variant"], "xen-head");
        let skews: Vec<u64> = runs[1]["rounds"]
            .as_array()
            .expect("rounds")
            .iter()
            .filter_map(|r| r["skew_cycles"].as_u64())
            .collect();
        assert_eq!(skews, [9, 8, 10]);
        assert_eq!(runs[1]["summary"]["skew_cycles"]["max"], 10.0);
        assert_eq!(runs[0]["summary"]["rounds"], 3);
        assert_eq!(runs[0]["notes"][0], "a note");
        assert_eq!(runs[0]["writes_honoured"], false);
    }

    /// `--kvmclock`'s KVM_GET_CLOCK points end their run's object; a run
    /// without them has no `kvm_clock`.
    #[test]
    fn a_runs_clock_points_are_in_its_tail_only_when_taken() {
        use crate::tsc::clock::ClockSample;
        use crate::tsc::clock_points::{ClockPoint, ClockPoints};
        let sample = ClockSample {
            clock_ns: 7,
            flags: 2,
            ..ClockSample::default()
        };
        let points = ClockPoints {
            fresh: Some(ClockPoint::new(None, Ok(sample))),
            ..ClockPoints::default()
        };
        let mut s = JsonStream::begin(Vec::new(), 2).expect("head");
        let summary = VariantAccumulator::new().summary(None);
        for kvm_clock in [Some(&points), None] {
            s.begin_run("xen-head", 2).expect("run");
            s.round(&round(0, 1)).expect("round");
            s.end_run(&RunTail {
                writes_honoured: None,
                summary: &summary,
                notes: &[],
                kvm_clock,
            })
            .expect("tail");
        }
        let bytes = s.end(&host(), 1, None).expect("end");
        let doc: serde_json::Value = serde_json::from_slice(&bytes).expect("one JSON document");
        let k = &doc["runs"][0]["kvm_clock"];
        assert_eq!(k["fresh"]["clock_ns"], 7);
        assert_eq!(k["fresh"]["flag_names"][0], "KVM_CLOCK_TSC_STABLE");
        assert!(
            k["after_last"].is_null() && k["tsc_stable_changed"].is_null(),
            "{k}"
        );
        assert!(doc["runs"][1].get("kvm_clock").is_none(), "{doc}");
    }
}
