//! What every command writes with: printing a report (JSON or text) to
//! standard output, the progress line of a long run ([`progress`]), the
//! lines every report shares ([`lines`]: `--output` round lines, the
//! precision of bounded statistics, the initial skew, the spin breaker) and
//! where a file option writes ([`target`]: a file, or `-` for stdout) and
//! wall-clock times as outputs write them ([`time`]).

pub mod lines;
pub mod progress;
pub mod target;
pub mod time;

use serde::Serialize;

/// Why a report could not be printed.
#[derive(Debug, thiserror::Error, displaydoc::Display)]
pub enum PrintError {
    /// cannot encode it as JSON: {0}
    Json(#[source] serde_json::Error),
    /// cannot write it to standard output: {0}
    Write(#[source] std::io::Error),
}

/// Prints `value` to standard output: pretty JSON when `json`, else the text
/// `render` makes of it. Shared by `run`, `check` and `compare`.
pub fn print<T: Serialize>(
    value: &T,
    json: bool,
    render: impl FnOnce(&T) -> String,
) -> Result<(), PrintError> {
    use std::io::Write;
    let text = if json {
        serde_json::to_string_pretty(value).map_err(PrintError::Json)? + "\n"
    } else {
        render(value)
    };
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|_| stdout.flush())
        .map_err(PrintError::Write)
}
