//! The host TSC's frequency, measured against CLOCK_MONOTONIC: once per
//! process, over [`SPAN`], from two samples each taken between two TSC reads
//! (the tightest of a few), so a sample's error is the width of its bracket.

use std::sync::OnceLock;
use std::time::Duration;

use crate::tsc::host_clock::ClockPoint;

/// How long the measurement runs.
pub const SPAN: Duration = Duration::from_millis(50);

/// How the frequency was obtained, in words (for the reports).
pub fn source() -> String {
    format!(
        "measured against CLOCK_MONOTONIC over {} ms",
        SPAN.as_millis()
    )
}

/// `(ns, tsc)`: a CLOCK_MONOTONIC reading and the midpoint of the tightest
/// bracket of TSC reads around one.
fn sample() -> Option<(u64, u64)> {
    ClockPoint::of(libc::CLOCK_MONOTONIC).map(|p| (p.raw_ns, p.mid_tsc()))
}

/// Measures the TSC frequency over about `span`, in kHz; `None` when the
/// clock cannot be read or the TSC did not advance.
pub fn measure_khz(span: Duration) -> Option<u32> {
    let (ns0, tsc0) = sample()?;
    std::thread::sleep(span);
    let (ns1, tsc1) = sample()?;
    let ns = ns1.checked_sub(ns0).filter(|&d| d > 0)?;
    let cycles = tsc1.checked_sub(tsc0).filter(|&d| d > 0)?;
    let khz = u128::from(cycles) * 1_000_000 / u128::from(ns);
    u32::try_from(khz).ok().filter(|&k| k > 0)
}

/// The host TSC's frequency in kHz, measured over [`SPAN`] on the first call
/// and remembered.
pub fn tsc_khz() -> Option<u32> {
    static KHZ: OnceLock<Option<u32>> = OnceLock::new();
    *KHZ.get_or_init(|| measure_khz(SPAN))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two measurements agree with each other: a TSC frequency is not
    /// something that changes between two calls (constant TSC), and the
    /// measurement is good to far better than 5 %.
    #[test]
    fn two_measurements_agree() {
        let a = measure_khz(Duration::from_millis(30)).expect("a frequency");
        let b = tsc_khz().expect("a frequency");
        let rel = (f64::from(a) - f64::from(b)).abs() / f64::from(b);
        assert!(rel < 0.05, "{a} kHz vs {b} kHz");
        assert_eq!(tsc_khz(), Some(b), "measured once");
        assert!(source().contains("CLOCK_MONOTONIC"));
    }
}
