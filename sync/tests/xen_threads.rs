//! Xen's rendezvous functions on host threads (see `common`): every named TSC
//! rendezvous variant, every parameter combination, and the standard
//! rendezvous, on N = 1..=8 simulated CPUs with injected TSC offsets.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};

use common::{run_cpus, Setup, Sim};
use tsc_sync::{
    rendezvous, xen_std_rendezvous, xen_tsc_rendezvous, Cpu, Readings, Shared, StampPlace, Variant,
    XenAlgorithm, XenParams, ITERATIONS, OWN_LINE_MASTER_TSC_STAMP_OFFSET,
    OWN_LINE_MAX_TSC_STAMP_OFFSET, SHARED_SIZE, XEN_4_15, XEN_6CA022A1, XEN_HEAD, XEN_RFC_V3,
};

const NAMED: [(&str, XenParams); 4] = [
    ("xen-4.15", XEN_4_15),
    ("xen-6ca022a1", XEN_6CA022A1),
    ("xen-head", XEN_HEAD),
    ("xen-rfc-v3", XEN_RFC_V3),
];

/// All 16 parameter combinations.
fn every_params() -> Vec<XenParams> {
    let mut all = Vec::new();
    for stamps in [StampPlace::SemaphoreLine, StampPlace::OwnLine] {
        for latched in [false, true] {
            for pause_after_write in [false, true] {
                for prefetch in [false, true] {
                    all.push(XenParams {
                        stamps,
                        latched,
                        pause_after_write,
                        prefetch,
                    });
                }
            }
        }
    }
    all
}

/// Distinct, partly negative offsets, so that the CPUs' first TSCs differ.
fn skewed(n: u32) -> Vec<u64> {
    (0..u64::from(n))
        .map(|k| {
            let d = k * 1_000_003;
            if k % 2 == 0 {
                d
            } else {
                d.wrapping_neg()
            }
        })
        .collect()
}

fn the_other(place: StampPlace) -> StampPlace {
    match place {
        StampPlace::SemaphoreLine => StampPlace::OwnLine,
        StampPlace::OwnLine => StampPlace::SemaphoreLine,
    }
}

/// One TSC rendezvous of `params` on `n` CPUs, checked against what Xen's
/// protocol guarantees.
fn check_tsc_round(params: XenParams, n: u32, ctx: &str) {
    let shared = Shared::new();
    let setup = Setup {
        offsets: skewed(n),
        deadline: std::time::Duration::from_secs(60),
        ..Setup::default()
    };
    let outs = run_cpus(n, &setup, |sim| {
        xen_tsc_rendezvous(params, &shared, sim.cpu, n, sim)
    });

    let v = outs[0].0.written;
    let max_first = outs.iter().map(|(o, _)| o.tsc_first).max().unwrap_or(0);
    for (o, sim) in &outs {
        let c = format!("{ctx} cpu={}", sim.cpu);
        assert!(o.wrote, "{c}: the TSC rendezvous writes");
        assert_eq!(
            sim.tsc_writes,
            vec![v],
            "{c}: exactly one write, of the common value"
        );
        assert_eq!(o.written, v, "{c}: different values written");
        assert!(o.tsc_first != 0, "{c}: tsc += !tsc keeps it non-zero");
        assert!(
            v >= o.tsc_first,
            "{c}: wrote {v} below a first TSC {}",
            o.tsc_first
        );
        assert!(
            o.tsc_before_write >= o.tsc_first,
            "{c}: write before first read"
        );
        assert!(
            o.tsc_after_loop >= v,
            "{c}: the TSC after the write is below it"
        );
        let expected: Vec<u32> = (0..ITERATIONS).collect();
        assert_eq!(sim.iterations, expected, "{c}: progress hook");
        assert_eq!(sim.before_writes, 1, "{c}: before_write once");
    }
    assert_eq!(
        v, max_first,
        "{ctx}: the value is the max first-iteration TSC"
    );
    assert_eq!(
        shared.semaphore.load(Ordering::SeqCst),
        0,
        "{ctx}: semaphore ends at 0"
    );

    // The stamps live where the params say; the other line is untouched.
    let (stamp, max_stamp) = shared.stamps(params.stamps);
    assert_eq!(stamp.load(Ordering::SeqCst), v, "{ctx}: master_tsc_stamp");
    let max_ap = outs[1..]
        .iter()
        .map(|(o, _)| o.tsc_first)
        .max()
        .unwrap_or(0);
    assert_eq!(
        max_stamp.load(Ordering::SeqCst),
        max_ap,
        "{ctx}: max_tsc_stamp"
    );
    let (other, other_max) = shared.stamps(the_other(params.stamps));
    assert_eq!(
        (
            other.load(Ordering::SeqCst),
            other_max.load(Ordering::SeqCst)
        ),
        (0, 0),
        "{ctx}: the unused line's stamps stay zero"
    );
    assert_eq!(
        shared.master_stime.load(Ordering::SeqCst),
        0,
        "{ctx}: master_stime"
    );
}

#[test]
fn named_tsc_variants_write_one_common_value_on_1_to_8_cpus() {
    for (name, params) in NAMED {
        for n in 1..=8u32 {
            let reps = if n <= 2 { 20 } else { 5 };
            for rep in 0..reps {
                check_tsc_round(params, n, &format!("{name} n={n} rep={rep}"));
            }
        }
    }
}

#[test]
fn every_parameter_combination_keeps_the_invariants() {
    for params in every_params() {
        for n in [1, 2, 3, 5] {
            for rep in 0..3 {
                check_tsc_round(params, n, &format!("{params:?} n={n} rep={rep}"));
            }
        }
    }
}

#[test]
fn prefetch_only_when_asked_and_only_on_non_final_iterations() {
    for params in every_params() {
        for n in 1..=4u32 {
            let shared = Shared::new();
            let outs = run_cpus(n, &Setup::default(), |sim| {
                xen_tsc_rendezvous(params, &shared, sim.cpu, n, sim)
            });
            let stamp_addr = std::ptr::from_ref(shared.stamps(params.stamps).0) as usize;
            for (_, sim) in &outs {
                let expected = if params.prefetch {
                    vec![stamp_addr; ITERATIONS as usize - 1]
                } else {
                    Vec::new()
                };
                assert_eq!(sim.prefetches, expected, "{params:?} n={n} cpu={}", sim.cpu);
            }
        }
    }
}

#[test]
fn the_rfc_prefetches_its_own_line() {
    let shared = Shared::new();
    let base = std::ptr::from_ref(&shared) as usize;
    let outs = run_cpus(3, &Setup::default(), |sim| {
        xen_tsc_rendezvous(XEN_RFC_V3, &shared, sim.cpu, 3, sim)
    });
    for (_, sim) in &outs {
        assert!(sim
            .prefetches
            .iter()
            .all(|&a| a == base + OWN_LINE_MASTER_TSC_STAMP_OFFSET));
    }
    assert_eq!(shared.master_tsc_stamp.load(Ordering::SeqCst), 0);
    assert_eq!(shared.max_tsc_stamp.load(Ordering::SeqCst), 0);
    assert_ne!(shared.own_line.master_tsc_stamp.load(Ordering::SeqCst), 0);
}

#[test]
fn variants_and_names_map_to_their_algorithms() {
    let expected = [
        (Variant::Xen415, XEN_4_15),
        (Variant::Xen6ca022a1, XEN_6CA022A1),
        (Variant::XenHead, XEN_HEAD),
        (Variant::XenRfcV3, XEN_RFC_V3),
    ];
    assert_eq!(
        Variant::ALL.len(),
        expected.len() + 2,
        "a new variant: extend this test"
    );
    for (v, p) in expected {
        assert_eq!(XenAlgorithm::for_variant(v), Some(XenAlgorithm::Tsc(p)));
        assert_eq!(
            XenAlgorithm::from_name(v.name()),
            Some(XenAlgorithm::Tsc(p))
        );
    }
    assert_eq!(
        XenAlgorithm::for_variant(Variant::XenStd),
        Some(XenAlgorithm::Std)
    );
    assert_eq!(XenAlgorithm::for_variant(Variant::LinuxTscSync), None);
    for (name, p) in NAMED {
        assert_eq!(XenAlgorithm::from_name(name), Some(XenAlgorithm::Tsc(p)));
    }
    assert_eq!(XenAlgorithm::from_name("xen-std"), Some(XenAlgorithm::Std));
    assert_eq!(XenAlgorithm::from_name("xen-4.16"), None);
    // The RFC differs from 4.15 in exactly the line and the prefetch.
    assert_eq!(
        XEN_RFC_V3,
        XenParams {
            stamps: StampPlace::OwnLine,
            prefetch: true,
            ..XEN_4_15
        }
    );
}

/// A single CPU whose TSC counts its reads, logging every operation.
#[derive(Default)]
struct Recorder {
    now: u64,
    log: Vec<String>,
}

impl Cpu for Recorder {
    fn rdtsc_ordered(&mut self) -> u64 {
        self.now += 7;
        self.log.push(format!("rdtsc {}", self.now));
        self.now
    }
    fn write_tsc(&mut self, value: u64) {
        self.now = value;
        self.log.push(format!("write {value}"));
    }
    fn relax(&mut self) {
        self.log.push("relax".into());
    }
    fn iteration_start(&mut self, iteration: u32) {
        self.log.push(format!("iteration {iteration}"));
    }
    fn before_write(&mut self) {
        self.log.push("before_write".into());
    }
    fn prefetch(&mut self, addr: *const u8) {
        let _ = addr;
        self.log.push("prefetch".into());
    }
}

/// The rendezvous as it was before the parameterised entry point (this
/// crate's previous code, for the three variants), as the behaviour to keep.
mod reference {
    use super::*;

    pub struct Old {
        pub tsc_first: u64,
        pub written: u64,
        pub tsc_before_write: u64,
        pub tsc_after_loop: u64,
    }

    pub fn rendezvous<C: Cpu>(
        variant: Variant,
        r: &Shared,
        cpu: u32,
        total: u32,
        ops: &mut C,
    ) -> Old {
        let mut tsc: u64 = 0;
        let mut master_tsc: u64 = 0;
        let latched = !matches!(variant, Variant::Xen415);
        let pause_after_write = matches!(variant, Variant::XenHead);
        let mut out = Old {
            tsc_first: 0,
            written: 0,
            tsc_before_write: 0,
            tsc_after_loop: 0,
        };
        for i in (0..ITERATIONS).rev() {
            ops.iteration_start(ITERATIONS - 1 - i);
            if cpu == 0 {
                while r.semaphore.load(Ordering::Acquire) != total - 1 {
                    ops.relax();
                }
                if tsc == 0 {
                    tsc = ops.rdtsc_ordered();
                    r.master_tsc_stamp.store(tsc, Ordering::Relaxed);
                } else if r.master_tsc_stamp.load(Ordering::Relaxed)
                    < r.max_tsc_stamp.load(Ordering::Relaxed)
                {
                    r.master_tsc_stamp
                        .store(r.max_tsc_stamp.load(Ordering::Relaxed), Ordering::Relaxed);
                }
                r.semaphore.fetch_add(1, Ordering::AcqRel);
                if i == 0 {
                    write(r, latched, master_tsc, pause_after_write, ops, &mut out);
                }
                while r.semaphore.load(Ordering::Acquire) != 2 * total - 1 {
                    ops.relax();
                }
                r.semaphore.store(0, Ordering::Release);
            } else {
                r.semaphore.fetch_add(1, Ordering::AcqRel);
                while r.semaphore.load(Ordering::Acquire) < total {
                    ops.relax();
                }
                if tsc == 0 {
                    let mut cur = r.max_tsc_stamp.load(Ordering::Relaxed);
                    tsc = ops.rdtsc_ordered();
                    while tsc > cur {
                        cur = match r.max_tsc_stamp.compare_exchange(
                            cur,
                            tsc,
                            Ordering::AcqRel,
                            Ordering::Acquire,
                        ) {
                            Ok(prev) | Err(prev) => prev,
                        };
                    }
                }
                if i == 0 {
                    write(r, latched, master_tsc, pause_after_write, ops, &mut out);
                }
                r.semaphore.fetch_add(1, Ordering::AcqRel);
                while r.semaphore.load(Ordering::Acquire) > total {
                    ops.relax();
                }
            }
            tsc += u64::from(tsc == 0);
            if latched {
                master_tsc = r.master_tsc_stamp.load(Ordering::Relaxed);
            }
        }
        out.tsc_after_loop = ops.rdtsc_ordered();
        out.tsc_first = tsc;
        out
    }

    fn write<C: Cpu>(
        r: &Shared,
        latched: bool,
        master_tsc: u64,
        pause_after_write: bool,
        ops: &mut C,
        out: &mut Old,
    ) {
        let value = if latched {
            master_tsc
        } else {
            r.master_tsc_stamp.load(Ordering::Relaxed)
        };
        ops.before_write();
        out.tsc_before_write = ops.rdtsc_ordered();
        ops.write_tsc(value);
        if pause_after_write {
            ops.relax();
        }
        out.written = value;
    }
}

/// On one CPU (deterministic), `rendezvous(variant)` does exactly what the
/// previous code did: the same operations in the same order, the same
/// outcome, the same shared state.
/// The variants that existed before this crate grew the others.
const EXISTING: [Variant; 3] = [Variant::Xen415, Variant::Xen6ca022a1, Variant::XenHead];

#[test]
fn existing_variants_behave_as_before() {
    for v in EXISTING {
        let (old_shared, new_shared) = (Shared::new(), Shared::new());
        let mut old_cpu = Recorder {
            now: 1000,
            ..Recorder::default()
        };
        let mut new_cpu = Recorder {
            now: 1000,
            ..Recorder::default()
        };
        let old = reference::rendezvous(v, &old_shared, 0, 1, &mut old_cpu);
        let new = rendezvous(v, &new_shared, 0, 1, &mut new_cpu);
        assert_eq!(new_cpu.log, old_cpu.log, "{}", v.name());
        assert_eq!(
            new,
            Readings {
                tsc_first: old.tsc_first,
                written: old.written,
                tsc_before_write: old.tsc_before_write,
                tsc_after_loop: old.tsc_after_loop,
                wrote: true,
            },
            "{}",
            v.name()
        );
        for (a, b) in [
            (&old_shared.master_tsc_stamp, &new_shared.master_tsc_stamp),
            (&old_shared.max_tsc_stamp, &new_shared.max_tsc_stamp),
        ] {
            assert_eq!(
                a.load(Ordering::SeqCst),
                b.load(Ordering::SeqCst),
                "{}",
                v.name()
            );
        }
        assert_eq!(
            new_shared.semaphore.load(Ordering::SeqCst),
            old_shared.semaphore.load(Ordering::SeqCst)
        );
    }
}

/// And on several threads the previous code and the new one agree on every
/// invariant (they cannot agree on timing).
#[test]
fn existing_variants_through_rendezvous_on_threads() {
    for v in EXISTING {
        for n in 1..=6u32 {
            let shared = Shared::new();
            let outs = run_cpus(n, &Setup::default(), |sim| {
                rendezvous(v, &shared, sim.cpu, n, sim)
            });
            let value = outs[0].0.written;
            let max_first = outs.iter().map(|(o, _)| o.tsc_first).max().unwrap_or(0);
            assert_eq!(value, max_first, "{} n={n}", v.name());
            assert!(outs
                .iter()
                .all(|(o, s)| o.wrote && o.written == value && s.tsc_writes == [value]));
            assert_eq!(shared.semaphore.load(Ordering::SeqCst), 0);
            assert_eq!(shared.own_line.master_tsc_stamp.load(Ordering::SeqCst), 0);
            assert_eq!(shared.own_line.max_tsc_stamp.load(Ordering::SeqCst), 0);
            assert!(outs.iter().all(|(_, s)| s.prefetches.is_empty()));
        }
    }
}

#[test]
fn shared_layout_keeps_line_0_and_adds_line_1() {
    use std::mem::{align_of, offset_of, size_of};
    assert_eq!(size_of::<Shared>(), SHARED_SIZE);
    assert_eq!(SHARED_SIZE, 128);
    assert_eq!(align_of::<Shared>(), 64);
    // Line 0 exactly as the single-line layout (Xen's).
    assert_eq!(offset_of!(Shared, semaphore), 0);
    assert_eq!(offset_of!(Shared, master_stime), 8);
    assert_eq!(offset_of!(Shared, master_tsc_stamp), 16);
    assert_eq!(offset_of!(Shared, max_tsc_stamp), 24);
    // Line 1: the RFC's stamps.
    assert_eq!(offset_of!(Shared, own_line), 64);
    let s = Shared::new();
    let base = std::ptr::from_ref(&s) as usize;
    let at = |a: &AtomicU64| std::ptr::from_ref(a) as usize - base;
    assert_eq!(
        at(&s.own_line.master_tsc_stamp),
        OWN_LINE_MASTER_TSC_STAMP_OFFSET
    );
    assert_eq!(at(&s.own_line.max_tsc_stamp), OWN_LINE_MAX_TSC_STAMP_OFFSET);
    assert_eq!(at(s.stamps(StampPlace::SemaphoreLine).0), 16);
    assert_eq!(at(s.stamps(StampPlace::OwnLine).1), 72);
    assert_eq!(OWN_LINE_MASTER_TSC_STAMP_OFFSET / 64, 1, "on line 1");
    assert_eq!(tsc_contract::layout::RENDEZVOUS % 64, 0);
    assert!(SHARED_SIZE as u64 <= tsc_contract::layout::RECORDS - tsc_contract::layout::RENDEZVOUS);
}

#[test]
fn an_all_zero_shared_state_is_a_fresh_one() {
    // SAFETY: Shared is made of atomics and integers, for which all-zero
    // bytes are valid values.
    let zeroed: Shared = unsafe { std::mem::zeroed() };
    assert_eq!(zeroed.semaphore.load(Ordering::SeqCst), 0);
    let fresh = Shared::new();
    // SAFETY: Shared is SHARED_SIZE bytes of plain data without padding
    // holes that could be uninitialised (every byte is a field or a zeroed
    // `_pad`/`_rest` integer).
    let bytes: [u8; SHARED_SIZE] = unsafe { std::mem::transmute_copy(&fresh) };
    assert!(bytes.iter().all(|&b| b == 0), "Shared::new() is all zero");
    // And a zeroed state works for every variant.
    for params in [XEN_4_15, XEN_RFC_V3] {
        // SAFETY: as above.
        let s: Shared = unsafe { std::mem::zeroed() };
        let outs = run_cpus(2, &Setup::default(), |sim| {
            xen_tsc_rendezvous(params, &s, sim.cpu, 2, sim)
        });
        assert_eq!(outs[0].0.written, outs[1].0.written);
    }
}

/// One standard rendezvous on `n` CPUs with injected offsets.
fn check_std_round(n: u32, via: &str, ctx: &str) {
    let shared = Shared::new();
    let offsets = skewed(n);
    let setup = Setup {
        offsets: offsets.clone(),
        deadline: std::time::Duration::from_secs(60),
        ..Setup::default()
    };
    let alg = XenAlgorithm::from_name("xen-std").expect("xen-std is named");
    let outs = run_cpus(n, &setup, |sim: &mut Sim| {
        let entry = sim.clock.now();
        let out = match via {
            "fn" => xen_std_rendezvous(&shared, sim.cpu, n, sim),
            _ => alg.run(&shared, sim.cpu, n, sim),
        };
        (entry, out)
    });
    let last_entry = outs.iter().map(|((e, _), _)| *e).max().unwrap_or(0);
    for (k, ((_, o), sim)) in outs.iter().enumerate() {
        let c = format!("{ctx} cpu={k}");
        assert!(!o.wrote, "{c}: the std rendezvous writes nothing");
        assert!(sim.tsc_writes.is_empty(), "{c}: a TSC write happened");
        assert_eq!(
            sim.offset, offsets[k],
            "{c}: the skew it found is left as it was"
        );
        assert_eq!((o.written, o.tsc_before_write), (0, 0), "{c}");
        assert_eq!(o.tsc_first, o.tsc_after_loop, "{c}: one TSC read");
        assert_eq!(sim.rdtsc_count, 1, "{c}: exactly one TSC read");
        assert_eq!(sim.iterations, vec![0], "{c}: progress hook once");
        assert_eq!(sim.before_writes, 0, "{c}");
        // The read is the tail's: after every CPU has arrived.
        let clock_at_read = o.tsc_first.wrapping_sub(offsets[k]);
        assert!(
            clock_at_read >= last_entry,
            "{c}: TSC read before every CPU arrived"
        );
    }
    assert_eq!(
        shared.semaphore.load(Ordering::SeqCst),
        n,
        "{ctx}: semaphore ends at N, not reset"
    );
    for place in [StampPlace::SemaphoreLine, StampPlace::OwnLine] {
        let (a, b) = shared.stamps(place);
        assert_eq!(
            (a.load(Ordering::SeqCst), b.load(Ordering::SeqCst)),
            (0, 0),
            "{ctx}"
        );
    }
}

#[test]
fn std_rendezvous_writes_nothing_and_leaves_the_skew_on_1_to_8_cpus() {
    for n in 1..=8u32 {
        for rep in 0..10 {
            check_std_round(n, "fn", &format!("xen-std n={n} rep={rep}"));
        }
        check_std_round(n, "alg", &format!("xen-std via XenAlgorithm n={n}"));
    }
}
