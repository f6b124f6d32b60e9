//! Units and number formatting that every layer may use: cycles to
//! nanoseconds at a TSC frequency, whole numbers with thousands separators,
//! durations as `H:MM:SS`. A leaf: it uses nothing of this crate.

use std::time::Duration;

/// How much CLOCK_REALTIME (and kvmclock, which KVM derives from the host's
/// clocks) may run off the TSC under NTP, in parts per million: Linux slews
/// by at most 500 ppm of frequency (MAXFREQ) plus at most 500 ppm of phase
/// adjustment (MAX_TICKADJ, 500 us/s).
pub const NTP_MAX_PPM: u64 = 1_000;

/// The skew Linux's clocksource watchdog lets pass (`WATCHDOG_MAX_SKEW`,
/// 100 to 125 us depending on the version), ns: the floor a bound must be
/// within when nothing measured says what it must exclude.
pub const WATCHDOG_MAX_SKEW_NS: u64 = 100_000;

/// A cycle count in nanoseconds at `tsc_khz`.
pub fn cycles_to_ns(cycles: f64, tsc_khz: u32) -> f64 {
    cycles * 1_000_000.0 / f64::from(tsc_khz)
}

/// A (signed) cycle count in nanoseconds at `khz`; `None` when the
/// frequency is unknown (0).
pub fn cycles_to_ns_at(cycles: i128, khz: u32) -> Option<f64> {
    (khz != 0).then(|| cycles as f64 * 1e6 / f64::from(khz))
}

/// A whole number of cycles with thousands separators; `-` for NaN.
pub fn fmt_num(x: f64) -> String {
    if !x.is_finite() {
        return "-".into();
    }
    let v = x.round() as i128;
    let digits = v.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if v < 0 {
        format!("-{out}")
    } else {
        out
    }
}

/// An integer with thousands separators.
pub fn fmt_int(x: impl Into<i128>) -> String {
    fmt_num(x.into() as f64)
}

/// `H:MM:SS` (whole seconds; days as hours).
pub fn hms(d: Duration) -> String {
    let s = d.as_secs();
    format!("{}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cycles_convert_at_the_given_frequency() {
        assert_eq!(cycles_to_ns(2_000.0, 2_000_000), 1_000.0);
        assert_eq!(cycles_to_ns_at(-2_000, 2_000_000), Some(-1_000.0));
        assert_eq!(cycles_to_ns_at(1, 0), None);
    }

    #[test]
    fn numbers_get_thousands_separators() {
        assert_eq!(fmt_num(1_234_567.4), "1,234,567");
        assert_eq!(fmt_num(-1_000.0), "-1,000");
        assert_eq!(fmt_num(999.0), "999");
        assert_eq!(fmt_num(f64::NAN), "-");
        assert_eq!(fmt_int(-12_345i64), "-12,345");
    }

    #[test]
    fn durations_print_as_hours_minutes_seconds() {
        assert_eq!(hms(Duration::from_secs(3 * 3600 + 62)), "3:01:02");
        assert_eq!(hms(Duration::from_secs(30 * 3600)), "30:00:00");
    }
}
