//! The progress line of a long run on a terminal: rounds so far, the current
//! median skew, time elapsed and left, redrawn in place on stderr at most
//! [`REDRAWS_PER_SECOND`] times a second, from the first second on, and
//! cleared before the report. Only when stderr is a terminal and the output
//! is not JSON (as `compare`'s progress has always been).

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use crate::units::{fmt_num, hms};

/// How often the line is redrawn at most.
pub const REDRAWS_PER_SECOND: u32 = 4;

/// A run shorter than this never shows a line.
const FIRST_AFTER: Duration = Duration::from_secs(1);

/// A line redrawn in place on stderr.
#[derive(Debug)]
pub struct ProgressLine {
    enabled: bool,
    started: Instant,
    last: Option<Instant>,
    drawn: bool,
}

impl ProgressLine {
    /// A line that draws only when `enabled`.
    pub fn new(enabled: bool) -> ProgressLine {
        ProgressLine {
            enabled,
            started: Instant::now(),
            last: None,
            drawn: false,
        }
    }

    /// The line of a command: drawn when stderr is a terminal and the
    /// output is not `json`.
    pub fn on_stderr(json: bool) -> ProgressLine {
        ProgressLine::new(!json && std::io::stderr().is_terminal())
    }

    /// Whether a redraw is due now (cheap; call it after every round).
    pub fn due(&self) -> bool {
        if !self.enabled {
            return false;
        }
        let now = Instant::now();
        now.duration_since(self.started) >= FIRST_AFTER
            && self.last.is_none_or(|t| {
                now.duration_since(t) >= Duration::from_secs(1) / REDRAWS_PER_SECOND
            })
    }

    /// Redraws the line with `text` when a redraw is due.
    pub fn draw(&mut self, text: impl FnOnce() -> String) {
        if !self.due() {
            return;
        }
        self.last = Some(Instant::now());
        self.drawn = true;
        let mut err = std::io::stderr().lock();
        // Carriage return and "erase line": the line is replaced in place.
        let _ = write!(err, "\r\x1b[2K{}", text());
        let _ = err.flush();
    }

    /// Removes the line (before the report or an error is printed).
    pub fn clear(&mut self) {
        if self.drawn {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K");
            let _ = err.flush();
            self.drawn = false;
        }
    }
}

impl Drop for ProgressLine {
    fn drop(&mut self) {
        self.clear();
    }
}

/// Time left of `total` rounds after `done` in `elapsed`, at the rate so
/// far; `None` before the first round.
pub fn eta(elapsed: Duration, done: u64, total: u64) -> Option<Duration> {
    if done == 0 {
        return None;
    }
    let per_round = elapsed.as_secs_f64() / done as f64;
    let secs = per_round * total.saturating_sub(done) as f64;
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs.min(1e10)))
}

/// The line's text: `what`, rounds so far (of `total` when known), the
/// median skew in cycles (`medians`: one per variant, in order), time
/// elapsed and left.
pub fn status(
    what: &str,
    done: u64,
    total: Option<u64>,
    medians: &[Option<f64>],
    elapsed: Duration,
    left: Option<Duration>,
) -> String {
    let of = total.map_or_else(String::new, |t| format!(" of {}", fmt_num(t as f64)));
    let medians: Vec<String> = medians
        .iter()
        .map(|m| m.map_or_else(|| "-".to_string(), fmt_num))
        .collect();
    // Time left rounded up: "0:00:00 left" only at the end.
    let left = left.map_or_else(
        || "?".to_string(),
        |d| hms(Duration::from_secs(d.as_secs_f64().ceil() as u64)),
    );
    format!(
        "{what}: {}{of} rounds, median skew {} cycles, {} elapsed, {left} left",
        fmt_num(done as f64),
        medians.join(" | "),
        hms(elapsed)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_as_hours_minutes_seconds() {
        assert_eq!(hms(Duration::from_secs(0)), "0:00:00");
        assert_eq!(hms(Duration::from_secs(3_723)), "1:02:03");
        assert_eq!(hms(Duration::from_secs(30 * 86_400)), "720:00:00");
        assert_eq!(hms(Duration::from_millis(59_999)), "0:00:59");
    }

    #[test]
    fn the_time_left_follows_the_rate_so_far() {
        // 100 of 400 rounds in 10 s: 30 s left.
        assert_eq!(
            eta(Duration::from_secs(10), 100, 400),
            Some(Duration::from_secs(30))
        );
        assert_eq!(eta(Duration::from_secs(10), 0, 400), None);
        assert_eq!(eta(Duration::from_secs(10), 400, 400), Some(Duration::ZERO));
    }

    #[test]
    fn the_line_says_rounds_medians_and_times() {
        let s = status(
            "xen-head",
            12_345,
            None,
            &[Some(3_826.0)],
            Duration::from_secs(83),
            Some(Duration::from_millis(396_200)),
        );
        assert_eq!(
            s,
            "xen-head: 12,345 rounds, median skew 3,826 cycles, 0:01:23 elapsed, 0:06:37 left"
        );
        let s = status(
            "compare",
            5,
            Some(2_020),
            &[Some(1.0), None],
            Duration::ZERO,
            None,
        );
        assert!(
            s.contains("5 of 2,020 rounds, median skew 1 | - cycles"),
            "{s}"
        );
        assert!(s.ends_with("? left"), "{s}");
    }

    /// A disabled line (stderr not a terminal, or JSON) is never due, and a
    /// line is not due before the run has taken a second.
    #[test]
    fn a_line_is_drawn_only_when_enabled_and_after_a_second() {
        assert!(!ProgressLine::new(false).due());
        let fresh = ProgressLine::new(true);
        assert!(!fresh.due());
        let old = ProgressLine {
            started: Instant::now() - Duration::from_secs(2),
            ..ProgressLine::new(true)
        };
        assert!(old.due());
        let just_drawn = ProgressLine {
            last: Some(Instant::now()),
            ..old
        };
        assert!(!just_drawn.due(), "at most a few redraws a second");
    }
}
