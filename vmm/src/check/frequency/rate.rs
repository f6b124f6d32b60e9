//! The rate a pvclock page's multiplier and shift stand for, beside the
//! sound rate bound of two bracketed reads ([`RateBound`], from
//! [`crate::tsc::rate`]). Pure arithmetic.

use crate::tsc::rate::F64_SLOP;
pub use crate::tsc::rate::{Bracketed, RateBound};

/// The TSC rate, kHz, at which a pvclock page's `mul` and `shift` turn TSC
/// cycles into ns (`ns = (cycles << shift) * mul >> 32`, a right shift when
/// negative): `10^6 * 2^32 / (mul * 2^shift)`. `None` for a page without a
/// multiplier.
pub fn page_khz(mul: u32, shift: i8) -> Option<f64> {
    if mul == 0 {
        return None;
    }
    let scale = f64::from(mul) * 2f64.powi(i32::from(shift));
    Some(1e6 * 2f64.powi(32) / scale)
}

/// How far [`page_khz`] may be from the rate KVM computed the page for,
/// relative: KVM rounds the multiplier down to an integer, so at most one
/// unit of `mul` (plus the f64's own rounding).
pub fn page_khz_error(mul: u32) -> f64 {
    if mul == 0 {
        return f64::INFINITY;
    }
    1.0 / f64::from(mul) + F64_SLOP
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pages_multiplier_stands_for_its_rate() {
        // KVM's kvm_get_time_scale for 2 GHz: shift -1, mul 2^32 (ns = c/2).
        let k = page_khz(u32::MAX, -1).expect("a multiplier");
        assert!(
            (k - 2_000_000.0).abs() / 2e6 < page_khz_error(u32::MAX),
            "{k}"
        );
        // 1 GHz: shift 0, mul 2^32 - 1 is 1 ns per cycle, rounded down.
        let k = page_khz(u32::MAX, 0).expect("a multiplier");
        assert!(
            (k - 1_000_000.0).abs() / 1e6 < page_khz_error(u32::MAX),
            "{k}"
        );
        assert_eq!(page_khz(0, 0), None);
    }
}
