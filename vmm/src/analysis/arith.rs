//! The arithmetic of TSC values: they wrap (a u64 TSC may be written
//! anywhere), so differences are taken as signed 64-bit values.

/// Signed difference `a - b` of two wrapping u64 values.
pub fn signed_delta(a: u64, b: u64) -> i64 {
    a.wrapping_sub(b) as i64
}

/// Spread (max - min) of values, 0 for none.
pub fn spread(values: impl IntoIterator<Item = i64>) -> u64 {
    let mut it = values.into_iter();
    let Some(first) = it.next() else { return 0 };
    let (lo, hi) = it.fold((first, first), |(lo, hi), v| (lo.min(v), hi.max(v)));
    (i128::from(hi) - i128::from(lo)) as u64
}
