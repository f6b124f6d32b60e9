//! Where `run` writes as it goes: the `--output` stream of JSON lines and
//! the `--json` document on stdout, each begun only when there is something
//! to write.

use std::io::{BufWriter, Stdout, Write};

use crate::analysis::RoundResult;
use crate::output::target::Sink;
use crate::report::stream::{JsonStream, RunTail};
use crate::report::VariantReport;

/// The `--output` stream: one JSON line per completed round, flushed at once,
/// and the summary records.
pub(super) struct Stream {
    pub(super) out: Option<BufWriter<Sink>>,
    pub(super) vcpus: u32,
}

impl Stream {
    pub(super) fn line(&mut self, line: serde_json::Result<String>) -> Result<(), String> {
        let Some(out) = self.out.as_mut() else {
            return Ok(());
        };
        let line = line.map_err(|e| e.to_string())?;
        out.write_all(line.as_bytes())
            .and_then(|_| out.write_all(b"\n"))
            .and_then(|_| out.flush())
            .map_err(|e| e.to_string())
    }

    pub(super) fn write(&mut self, round: &RoundResult) -> Result<(), String> {
        if self.out.is_none() {
            return Ok(());
        }
        let line = crate::output::lines::round_line(self.vcpus, round);
        self.line(line)
    }
}

/// `--json` on stdout: begun at the first round, each run at its first
/// round, so that an empty run never appears.
pub(super) enum Json {
    /// No `--json`.
    Off,
    /// `--json`, nothing written yet.
    Pending,
    /// The document is open.
    Open(JsonStream<BufWriter<Stdout>>),
    /// Writing failed: the error.
    Failed(String),
}

impl Json {
    /// Writes `r`, opening the document and the run first where needed.
    pub(super) fn round(
        &mut self,
        variant: &str,
        vcpus: u32,
        r: &RoundResult,
    ) -> Result<(), String> {
        let result = match self {
            Json::Off | Json::Failed(_) => return Ok(()),
            Json::Pending => match JsonStream::begin(BufWriter::new(std::io::stdout()), vcpus) {
                Ok(s) => {
                    *self = Json::Open(s);
                    return self.round(variant, vcpus, r);
                }
                Err(e) => Err(e),
            },
            Json::Open(s) => (if s.in_run() {
                Ok(())
            } else {
                s.begin_run(variant, vcpus)
            })
            .and_then(|_| s.round(r)),
        };
        result.map_err(|e| self.fail(e))
    }

    /// Ends the current run, if one is open.
    pub(super) fn end_run(&mut self, v: &VariantReport) {
        if let Json::Open(s) = self {
            if !s.in_run() {
                return;
            }
            let tail = RunTail {
                writes_honoured: v.writes_honoured,
                summary: &v.summary,
                notes: &v.notes,
                kvm_clock: v.kvm_clock.as_ref(),
            };
            if let Err(e) = s.end_run(&tail) {
                self.fail(e);
            }
        }
    }

    fn fail(&mut self, e: std::io::Error) -> String {
        let msg = format!("cannot write the JSON report to standard output: {e}");
        *self = Json::Failed(msg.clone());
        msg
    }
}
