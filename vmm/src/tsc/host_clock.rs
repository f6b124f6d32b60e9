//! The host's clock against its TSC, as KVM's kvmclock needs them to agree:
//! without the master clock KVM anchors each pvclock page on the host's
//! CLOCK_MONOTONIC_RAW (plus the boot offset) and the host's TSC, read one
//! after the other, and a page it rewrites moves kvmclock by how far that
//! clock ran off the TSC (at KVM's TSC frequency) since the page's last
//! anchoring. This measures that rate from two reads of the clock, each
//! bracketed by host TSC reads, taken at the start and at the end of a
//! measurement: a sound interval, since the raw clock is the clocksource's
//! counter at a fixed multiplier (no NTP slew) and its average rate over the
//! span is its rate. The bracketed read serves every host clock the crate
//! reads. It uses only [`host_rdtsc`] and the rate bound of two bracketed
//! reads ([`RateBound::linear`]).

use serde::Serialize;

use super::rate::{Bracketed, RateBound};
use super::state::host_rdtsc;

/// Reads per point; the one with the tightest bracket is kept.
const TRIES: usize = 7;

/// One read of a host clock (CLOCK_MONOTONIC_RAW unless said) between two
/// host TSC reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ClockPoint {
    /// The clock, ns.
    pub raw_ns: u64,
    /// Host TSC just before.
    pub tsc_before: u64,
    /// Host TSC just after.
    pub tsc_after: u64,
}

/// The host clock `id` (CLOCK_MONOTONIC_RAW, CLOCK_MONOTONIC, ...) in ns;
/// `None` when it cannot be read.
pub fn clock_ns(id: libc::clockid_t) -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into `ts`, valid and
    // writable for the call.
    let rc = unsafe { libc::clock_gettime(id, &mut ts) };
    if rc != 0 {
        return None;
    }
    let secs = u64::try_from(ts.tv_sec).ok()?;
    let nanos = u64::try_from(ts.tv_nsec).ok()?;
    secs.checked_mul(1_000_000_000)?.checked_add(nanos)
}

impl ClockPoint {
    /// The tightest of a few bracketed reads of CLOCK_MONOTONIC_RAW; `None`
    /// when the clock cannot be read.
    pub fn now() -> Option<ClockPoint> {
        ClockPoint::of(libc::CLOCK_MONOTONIC_RAW)
    }

    /// The tightest of a few bracketed reads of clock `id`; `None` when the
    /// clock cannot be read.
    pub fn of(id: libc::clockid_t) -> Option<ClockPoint> {
        let mut best: Option<ClockPoint> = None;
        for _ in 0..TRIES {
            let tsc_before = host_rdtsc();
            let raw_ns = clock_ns(id)?;
            let tsc_after = host_rdtsc();
            let p = ClockPoint {
                raw_ns,
                tsc_before,
                tsc_after,
            };
            if best.is_none_or(|b| p.width() < b.width()) {
                best = Some(p);
            }
        }
        best
    }

    /// The bracket's width, host TSC cycles.
    pub fn width(&self) -> u64 {
        self.tsc_after.wrapping_sub(self.tsc_before)
    }

    /// The bracket's midpoint, host TSC.
    pub fn mid_tsc(&self) -> u64 {
        self.tsc_before / 2 + self.tsc_after / 2
    }
}

/// The host's raw clock against its TSC over a span: how far the clock's
/// rate lies from the TSC's at `khz`, in parts per million, as a sound
/// interval.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct ClockDrift {
    /// The first read.
    pub first: ClockPoint,
    /// The last read.
    pub last: ClockPoint,
    /// The TSC frequency the rate is against (KVM's for the host), kHz.
    pub khz: u32,
    /// The clock ran at least this many ppm faster than the TSC at `khz`
    /// (negative: slower).
    pub lo_ppm: f64,
    /// And at most this many.
    pub hi_ppm: f64,
}

impl ClockDrift {
    /// The drift from `first` to `last` at `khz`; `None` when the brackets
    /// overlap, either clock went backwards or stood still, or `khz` is 0.
    pub fn between(first: ClockPoint, last: ClockPoint, khz: u32) -> Option<ClockDrift> {
        if khz == 0 || last.raw_ns <= first.raw_ns {
            return None;
        }
        // The clock's ns per host TSC cycle, however the reads fell in
        // their brackets; at `khz` a cycle is 10^6 / khz ns.
        let read = |p: ClockPoint| Bracketed {
            value: p.raw_ns,
            before: p.tsc_before,
            after: p.tsc_after,
        };
        let rate = RateBound::linear(read(first), read(last), 0)?;
        let ppm = |ns_per_cycle: f64| (ns_per_cycle * f64::from(khz) / 1e6 - 1.0) * 1e6;
        Some(ClockDrift {
            first,
            last,
            khz,
            lo_ppm: ppm(rate.lo),
            hi_ppm: ppm(rate.hi),
        })
    }

    /// The largest rate the interval allows either way, ppm.
    pub fn worst_ppm(&self) -> f64 {
        self.lo_ppm.abs().max(self.hi_ppm.abs())
    }

    /// The span measured over, ns of the raw clock.
    pub fn span_ns(&self) -> u64 {
        self.last.raw_ns.saturating_sub(self.first.raw_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(raw_ns: u64, tsc: u64, width: u64) -> ClockPoint {
        ClockPoint {
            raw_ns,
            tsc_before: tsc,
            tsc_after: tsc + width,
        }
    }

    /// A clock 1000 ppm slow against a 1 GHz TSC reads so, within the
    /// brackets' share of the span.
    #[test]
    fn a_slow_clock_is_bounded_around_its_rate() {
        let d = ClockDrift::between(
            point(0, 0, 100),
            point(999_000_000, 1_000_000_000, 100),
            1_000_000,
        )
        .unwrap();
        assert!(d.lo_ppm <= -1_000.0 && d.hi_ppm >= -1_000.0, "{d:?}");
        assert!(
            d.hi_ppm - d.lo_ppm < 1.0,
            "brackets of 100 ns in 1 s: {d:?}"
        );
        assert!((d.worst_ppm() - 1_000.0).abs() < 1.0);
    }

    /// Wider brackets give a wider interval, never a narrower one.
    #[test]
    fn wider_brackets_widen_the_interval() {
        let narrow =
            ClockDrift::between(point(0, 0, 10), point(1_000_000, 1_000_000, 10), 1_000_000)
                .unwrap();
        let wide = ClockDrift::between(
            point(0, 0, 1_000),
            point(1_000_000, 1_000_000, 1_000),
            1_000_000,
        )
        .unwrap();
        assert!(wide.lo_ppm < narrow.lo_ppm && wide.hi_ppm > narrow.hi_ppm);
        assert!(wide.lo_ppm <= 0.0 && wide.hi_ppm >= 0.0);
    }

    /// Overlapping brackets, a clock going back and an unknown frequency
    /// give no interval.
    #[test]
    fn what_bounds_nothing_is_refused() {
        assert!(ClockDrift::between(point(0, 0, 10), point(5, 5, 10), 1_000_000).is_none());
        assert!(ClockDrift::between(point(9, 0, 1), point(5, 100, 1), 1_000_000).is_none());
        assert!(ClockDrift::between(point(0, 0, 1), point(5, 100, 1), 0).is_none());
    }

    /// This host's clock against its own TSC: an interval whatever its
    /// width (the reads are real), and brackets that are not reversed.
    #[test]
    fn the_host_can_be_read() {
        let a = ClockPoint::now().expect("CLOCK_MONOTONIC_RAW");
        std::thread::sleep(std::time::Duration::from_millis(5));
        let b = ClockPoint::now().expect("CLOCK_MONOTONIC_RAW");
        assert!(a.tsc_after >= a.tsc_before && b.raw_ns > a.raw_ns);
        let d = ClockDrift::between(a, b, 1_000_000).expect("an interval");
        assert!(d.lo_ppm <= d.hi_ppm);
    }
}
