//! What every subcommand shares: exit codes, the stop handling, the checked
//! guest image and output files that must be writable before anything runs.

use std::path::Path;
use std::process::ExitCode;

use tsc_contract::layout;

use crate::error::RunError;
use crate::guest_image;
use crate::output::target::{OutputTarget, Sink};
use crate::stop;

/// How a command ended. The exit codes are the same for every subcommand:
/// 0 done, 1 failed after it started (for `check`: a check failed or
/// regressed), 2 could not run, 128 + signal when SIGINT or SIGTERM stopped it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Completed and reported.
    Done,
    /// Failed after it started (what completed is still reported).
    Failed,
    /// Could not run: bad arguments, no usable KVM, an unusable input.
    CannotRun,
    /// Stopped by this signal (what completed is still reported).
    Stopped(i32),
    /// `check --kselftest-exit-codes`: every check was skipped or undecided
    /// (kselftest's KSFT_SKIP, 4).
    Skipped,
}

impl Exit {
    /// The exit code.
    pub fn code(self) -> u8 {
        match self {
            Exit::Done => 0,
            Exit::Failed => 1,
            Exit::CannotRun => 2,
            Exit::Skipped => 4,
            Exit::Stopped(signal) => stop::exit_code(signal),
        }
    }

    /// How a run that ended with `error` exits.
    pub fn of(error: &RunError) -> Exit {
        match error.signal() {
            Some(signal) => Exit::Stopped(signal),
            None if error.is_setup() => Exit::CannotRun,
            None => Exit::Failed,
        }
    }

    /// The worse of two ways to end: a signal wins over everything, then
    /// "could not run", then "failed", then "skipped".
    pub fn worst(self, other: Exit) -> Exit {
        let rank = |e: Exit| match e {
            Exit::Done => 0,
            Exit::Skipped => 1,
            Exit::Failed => 2,
            Exit::CannotRun => 3,
            Exit::Stopped(_) => 4,
        };
        if rank(other) > rank(self) {
            other
        } else {
            self
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> ExitCode {
        ExitCode::from(e.code())
    }
}

/// Prints a one-line error and says the command could not run.
pub fn cannot_run(msg: impl std::fmt::Display) -> Exit {
    eprintln!("error: {msg}");
    Exit::CannotRun
}

/// Installs the SIGINT/SIGTERM handlers every command runs under: the first
/// signal stops the command cleanly, repeats are absorbed (a wrapper's or a
/// process-group kill's copy must not throw the report away), and only a
/// SIGINT [`stop::KILL_GRACE`] or more after the first kills at once.
pub fn install_stop_handlers() -> Result<(), Exit> {
    stop::install_handlers().map_err(cannot_run)
}

/// Reads and checks a `--guest` image; `None` for the embedded guest.
pub fn load_guest(path: Option<&Path>) -> Result<Option<Vec<u8>>, Exit> {
    let Some(path) = path else { return Ok(None) };
    let bytes = std::fs::read(path).map_err(|e| {
        cannot_run(format_args!(
            "cannot read the guest image {}: {e}; give the path of a guest ELF",
            path.display()
        ))
    })?;
    guest_image::check(&bytes).map_err(|e| {
        cannot_run(format_args!(
            "the guest image {} is unusable: {e}; give a static, non-PIE x86-64 ELF linked inside {:#x}..{:#x}",
            path.display(),
            layout::IMAGE,
            layout::IMAGE_END
        ))
    })?;
    Ok(Some(bytes))
}

/// Opens an output before anything is measured, so that an unwritable path
/// fails at once (`what`: "CSV", "plot", "--output", ...); `-` is stdout.
pub fn create_output(target: &OutputTarget, what: &str) -> Result<Sink, Exit> {
    target.create().map_err(|e| {
        cannot_run(format_args!(
            "cannot create the {what} file {target}: {e}; give a writable path"
        ))
    })
}

/// Checks that at most one thing writes to standard output: `--json` (when
/// `json`) or one of `outputs` (option name, its value) given as `-`. Two of
/// them are a usage error naming both (exit 2). `Ok(true)` when a file
/// option took stdout (the readable report is then not printed).
pub fn stdout_once(json: bool, outputs: &[(&str, Option<&OutputTarget>)]) -> Result<bool, Exit> {
    let mut takers = outputs
        .iter()
        .filter(|(_, t)| t.is_some_and(OutputTarget::is_stdout))
        .map(|(name, _)| format!("{name} -"));
    let first = takers.next();
    let second = takers
        .next()
        .or_else(|| (json && first.is_some()).then(|| "--json".to_string()));
    match (first, second) {
        (Some(a), Some(b)) => Err(cannot_run(format_args!(
            "{a} and {b} would both write to standard output: give all but one of them \
             a file name"
        ))),
        (first, _) => Ok(first.is_some()),
    }
}

/// A note for a report cut short by `error`.
pub fn incomplete_note(completed: u32, asked: u64, error: &RunError) -> String {
    format!("incomplete: {completed} of {asked} round(s) completed before the error: {error}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_are_the_documented_ones() {
        assert_eq!(Exit::Done.code(), 0);
        assert_eq!(Exit::Failed.code(), 1);
        assert_eq!(Exit::CannotRun.code(), 2);
        assert_eq!(Exit::Skipped.code(), 4);
        assert_eq!(Exit::Stopped(libc::SIGINT).code(), 130);
        assert_eq!(Exit::Stopped(libc::SIGTERM).code(), 143);
    }

    #[test]
    fn run_errors_map_to_their_class() {
        assert_eq!(Exit::of(&RunError::interrupted(15, 0)), Exit::Stopped(15));
        assert_eq!(Exit::of(&RunError::NothingToRun), Exit::CannotRun);
        assert_eq!(Exit::of(&RunError::Lost(0)), Exit::Failed);
    }

    #[test]
    fn the_worse_ending_wins() {
        assert_eq!(Exit::Done.worst(Exit::Failed), Exit::Failed);
        assert_eq!(Exit::Failed.worst(Exit::Done), Exit::Failed);
        assert_eq!(Exit::Failed.worst(Exit::Stopped(2)), Exit::Stopped(2));
        assert_eq!(Exit::Stopped(2).worst(Exit::CannotRun), Exit::Stopped(2));
    }

    #[test]
    fn only_one_thing_writes_to_stdout() {
        let dash = OutputTarget::Stdout;
        let file = OutputTarget::File("x".into());
        assert_eq!(stdout_once(true, &[("--ktap", Some(&file))]), Ok(false));
        assert_eq!(
            stdout_once(false, &[("--ktap", Some(&dash)), ("--junit", None)]),
            Ok(true)
        );
        assert_eq!(
            stdout_once(false, &[("--ktap", Some(&dash)), ("--kcidb", Some(&dash))]),
            Err(Exit::CannotRun)
        );
        assert_eq!(
            stdout_once(true, &[("--ktap", Some(&dash))]),
            Err(Exit::CannotRun)
        );
    }
}
