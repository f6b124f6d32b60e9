//! Wall-clock times as the outputs write them: RFC 3339 in UTC (KCIDB's
//! `start_time`) and Unix seconds (OpenMetrics' timestamps).

use std::time::{SystemTime, UNIX_EPOCH};

/// Seconds since the Unix epoch (negative before it).
pub fn unix_seconds(t: SystemTime) -> f64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    }
}

/// `t` as RFC 3339 in UTC with microseconds, e.g.
/// `2026-12-05T08:02:43.123456+00:00`. Times before 1970 are written as the
/// epoch (no run of this tool started then).
pub fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (y, m, day) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}.{:06}+00:00",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        d.subsec_micros()
    )
}

/// The proleptic Gregorian (year, month, day) of a day count since
/// 1970-01-01 (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn known_dates_are_written_as_rfc_3339() {
        let at = |secs: u64, micros: u64| {
            rfc3339(UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_micros(micros))
        };
        assert_eq!(at(0, 0), "1970-01-01T00:00:00.000000+00:00");
        // `date -u -d @951782400`: the leap day of 2000.
        assert_eq!(at(951_782_400, 5), "2000-02-29T00:00:00.000005+00:00");
        // `date -u -d @1796457763`: 2026-12-05 08:02:43.
        assert_eq!(
            at(1_796_457_763, 123_456),
            "2026-12-05T08:02:43.123456+00:00"
        );
        assert_eq!(at(4_107_542_399, 0), "2100-02-28T23:59:59.000000+00:00");
        assert_eq!(unix_seconds(UNIX_EPOCH + Duration::from_millis(1500)), 1.5);
    }
}
