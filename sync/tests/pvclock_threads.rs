//! The guest's kvmclock reader against a simulated pvclock page: the scale
//! arithmetic (shifts both ways, the 128-bit product, the wrap of a TSC
//! below the timestamp), and the version protocol against a writer thread
//! that keeps updating the page: an odd version is never used, a read never
//! mixes two updates' fields, and a page that stays odd gives up after the
//! retries it was allowed, saying so.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::{run_cpus, Setup};
use tsc_sync::pvclock::{
    kvmclock_at, read, scale_delta, KvmclockCpu, PvclockPage, PVCLOCK_TSC_STABLE_BIT,
};
use tsc_sync::Cpu;

/// The scale by the definition, in 128 bits with no early truncation of the
/// left shift: what `scale_delta` must equal wherever the shift keeps every
/// bit of the delta.
fn reference(delta: u64, mul: u32, shift: i8) -> u128 {
    let d = if shift < 0 {
        u128::from(delta) >> shift.unsigned_abs()
    } else {
        u128::from(delta) << shift
    };
    (d * u128::from(mul)) >> 32
}

#[test]
fn the_scale_is_the_fixed_point_product_with_shifts_both_ways() {
    // 2 GHz: 0.5 ns per cycle, mul = 2^31 without a shift.
    assert_eq!(scale_delta(2_000, 1 << 31, 0), 1_000);
    // The same frequency as Linux encodes it: shift -1, mul 2^32 - 1.
    assert_eq!(scale_delta(2_000, u32::MAX, -1), 999);
    for (delta, mul, shift) in [
        (123_456_789u64, 0x8000_0000u32, 1i8),
        (u64::MAX, 0xFFFF_FFFF, -1),
        (1 << 40, 0x1234_5678, 2),
        (7, 0xFFFF_FFFF, 31),
        (u64::MAX >> 3, 0xDEAD_BEEF, 3),
    ] {
        let want = reference(delta, mul, shift);
        assert_eq!(
            u128::from(scale_delta(delta, mul, shift)),
            want,
            "{delta} {mul} {shift}"
        );
    }
    // Shifts past the width leave nothing, as the kernel's would.
    assert_eq!(scale_delta(u64::MAX, u32::MAX, -64), 0);
    assert_eq!(scale_delta(1, u32::MAX, 64), 0);
    // A TSC below the timestamp wraps to a huge distance (the kernel's
    // unsigned arithmetic): a stale page after a backwards TSC write shows.
    let stale = kvmclock_at(100, 200, 5_000, 1 << 31, 0);
    assert!(stale > 1 << 62, "{stale}");
    assert_eq!(kvmclock_at(300, 200, 5_000, 1 << 31, 0), 5_050);
}

/// What the writer puts on the page in update `k`: every field derived from
/// `k`, so that a reading whose fields come from two updates is detectable.
fn fields(k: u64) -> (u64, u64, u32) {
    (k * 1_000, k * 7 + 3, 0x4000_0000 | (k as u32 & 0xFFFF))
}

fn write_update(page: &PvclockPage, version: u32, k: u64) {
    let (ts, st, mul) = fields(k);
    page.version.store(version, Ordering::Release);
    page.tsc_timestamp.store(ts, Ordering::Release);
    page.system_time.store(st, Ordering::Release);
    page.tsc_to_system_mul.store(mul, Ordering::Release);
    page.flags.store(PVCLOCK_TSC_STABLE_BIT, Ordering::Release);
    page.version.store(version + 1, Ordering::Release);
}

#[test]
fn a_read_never_mixes_two_updates_or_uses_an_odd_version() {
    let page = Arc::new(PvclockPage::default());
    write_update(&page, 0, 0);
    let done = Arc::new(AtomicBool::new(false));
    let writer = {
        let (page, done) = (page.clone(), done.clone());
        std::thread::spawn(move || {
            let mut k = 1u64;
            while !done.load(Ordering::Relaxed) {
                // Odd while updating, even after (version 2k-1 -> 2k).
                write_update(&page, (2 * k - 1) as u32, k);
                k += 1;
            }
            k
        })
    };
    let results = run_cpus(1, &Setup::default(), |sim| {
        let mut retried = 0u32;
        for _ in 0..20_000 {
            let r = read(&page, sim, 1_000_000);
            assert_eq!(r.version % 2, 0, "an odd version was used: {r:?}");
            let k = u64::from(r.version / 2);
            assert_eq!(
                (r.tsc_timestamp, r.system_time, r.mul),
                fields(k),
                "fields of two updates mixed: {r:?}"
            );
            retried += r.retries;
        }
        retried
    });
    done.store(true, Ordering::Relaxed);
    let updates = writer.join().expect("writer");
    assert!(updates > 1, "the page was updated while read");
    let _ = results;
}

#[test]
fn a_page_that_stays_odd_gives_up_after_its_retries() {
    let page = PvclockPage::default();
    page.version.store(3, Ordering::Release);
    let r = run_cpus(1, &Setup::default(), |sim| read(&page, sim, 5));
    assert_eq!((r[0].0.version, r[0].0.retries), (3, 5), "{:?}", r[0].0);
}

/// Through [`KvmclockCpu`], a CPU's "TSC" is its kvmclock in ns: at 2 GHz
/// (mul 2^31), 2,000 cycles of the simulated TSC are 1,000 ns.
#[test]
fn a_kvmclock_cpu_reads_nanoseconds() {
    let page = PvclockPage::default();
    page.tsc_to_system_mul.store(1 << 31, Ordering::Release);
    page.system_time.store(1_000_000, Ordering::Release);
    let r = run_cpus(1, &Setup::default(), |sim| {
        let base = sim.tsc_now();
        page.tsc_timestamp.store(base, Ordering::Release);
        let mut k = KvmclockCpu {
            inner: sim,
            page: &page,
        };
        let a = k.rdtsc_ordered();
        let b = k.rdtsc_ordered();
        (a, b)
    });
    let (a, b) = r[0].0;
    assert!(a >= 1_000_000 && b >= a, "{a} {b}");
}
