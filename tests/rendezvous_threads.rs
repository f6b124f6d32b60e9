//! The rendezvous on host threads: the same code the guest runs, on a
//! simulated per-CPU TSC (host TSC plus a per-thread offset that `write_tsc`
//! moves), for N = 1..=8, every variant, many repetitions.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use tsc_sync::{rendezvous, Cpu, Readings, Shared, Variant};
use tsc_vmm::host_rdtsc;

/// The variants that run Xen's TSC rendezvous (one common write); the std
/// rendezvous and Linux's sync have their own host-thread tests in tsc-sync.
fn xen_tsc_variants() -> impl Iterator<Item = Variant> {
    Variant::ALL.into_iter().filter(|v| v.writes_common_tsc())
}

/// A CPU whose TSC is the host's plus an offset, as under a hypervisor.
struct SimCpu {
    offset: u64,
    writes: u32,
    deadline: Instant,
}

impl Cpu for SimCpu {
    fn rdtsc_ordered(&mut self) -> u64 {
        host_rdtsc().wrapping_add(self.offset)
    }
    fn write_tsc(&mut self, value: u64) {
        self.offset = value.wrapping_sub(host_rdtsc());
        self.writes += 1;
    }
    fn relax(&mut self) {
        // More threads than cores: let the others run, and never hang a test.
        std::thread::yield_now();
        assert!(
            Instant::now() < self.deadline,
            "rendezvous did not finish in time"
        );
    }
}

/// Runs `reps` rendezvous on `n` threads; returns each repetition's outcomes
/// and the semaphore values seen at the end.
fn run(variant: Variant, n: u32, reps: usize) -> Vec<(Vec<Readings>, u32)> {
    let shared = Arc::new(Shared::new());
    let barrier = Arc::new(Barrier::new(n as usize));
    let deadline = Instant::now() + Duration::from_secs(60);
    let handles: Vec<_> = (0..n)
        .map(|cpu| {
            let shared = shared.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let mut sim = SimCpu {
                    offset: 0,
                    writes: 0,
                    deadline,
                };
                let mut outs = Vec::new();
                for _ in 0..reps {
                    // Every calibration starts from fresh shared state.
                    if barrier.wait().is_leader() {
                        shared.semaphore.store(0, Ordering::SeqCst);
                        shared.master_tsc_stamp.store(0, Ordering::SeqCst);
                        shared.max_tsc_stamp.store(0, Ordering::SeqCst);
                    }
                    barrier.wait();
                    let writes_before = sim.writes;
                    outs.push(rendezvous(variant, &shared, cpu, n, &mut sim));
                    assert_eq!(
                        sim.writes,
                        writes_before + 1,
                        "exactly one TSC write per round"
                    );
                    barrier.wait();
                    outs.push(Readings {
                        tsc_first: u64::from(shared.semaphore.load(Ordering::SeqCst)),
                        ..Readings::default()
                    });
                }
                outs
            })
        })
        .collect();
    let per_cpu: Vec<Vec<Readings>> = handles
        .into_iter()
        .map(|h| h.join().expect("rendezvous thread"))
        .collect();
    (0..reps)
        .map(|r| {
            let outs = per_cpu.iter().map(|o| o[2 * r]).collect();
            let semaphore = per_cpu[0][2 * r + 1].tsc_first as u32;
            (outs, semaphore)
        })
        .collect()
}

#[test]
fn every_variant_ends_with_one_common_value_not_below_any_first_tsc() {
    for variant in xen_tsc_variants() {
        for n in 1..=8u32 {
            let reps = if n <= 2 { 200 } else { 40 };
            for (rep, (outs, semaphore)) in run(variant, n, reps).into_iter().enumerate() {
                let ctx = format!("{} n={n} rep={rep}", variant.name());
                let v = outs[0].written;
                assert!(
                    outs.iter().all(|o| o.written == v),
                    "{ctx}: different values written"
                );
                let max_first = outs.iter().map(|o| o.tsc_first).max().unwrap_or(0);
                assert!(
                    v >= max_first,
                    "{ctx}: wrote {v} below a first-iteration TSC {max_first}"
                );
                assert_eq!(
                    v, max_first,
                    "{ctx}: the value is the max first-iteration TSC"
                );
                assert_eq!(semaphore, 0, "{ctx}: semaphore did not end at 0");
                for o in &outs {
                    assert!(o.tsc_first != 0, "{ctx}: tsc += !tsc keeps it non-zero");
                    assert!(
                        o.tsc_before_write >= o.tsc_first,
                        "{ctx}: write before first read"
                    );
                }
            }
        }
    }
}

#[test]
fn a_single_cpu_writes_its_own_first_tsc() {
    for variant in xen_tsc_variants() {
        for (outs, semaphore) in run(variant, 1, 50) {
            assert_eq!(outs.len(), 1);
            assert_eq!(outs[0].written, outs[0].tsc_first);
            assert_eq!(semaphore, 0);
        }
    }
}

/// The shared state lives where the guest layout says, cache-line aligned,
/// and fits the page the layout reserves for it.
#[test]
fn shared_state_fits_its_page_on_cache_lines() {
    assert_eq!(std::mem::size_of::<Shared>(), tsc_sync::SHARED_SIZE);
    assert_eq!(std::mem::align_of::<Shared>(), 64);
    assert_eq!(tsc_contract::layout::RENDEZVOUS % 64, 0);
}

/// The warp test on host threads whose TSCs differ by a known, huge skew:
/// thread 1 runs SKEW cycles ahead of thread 0. Then every hand-off of the
/// lock from thread 1 to thread 0 is a backwards step of about SKEW, every
/// other step is forward, and the test reports exactly that. It runs until
/// such a hand-off happened (bounded by a deadline, not by an iteration
/// count, so a loaded machine cannot make it flaky).
#[test]
fn the_warp_test_sees_an_injected_skew_at_every_hand_off_and_nothing_else() {
    use tsc_sync::warp::{warp_test, WarpShared};
    const SKEW: u64 = 1 << 40;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let shared = Arc::new(WarpShared::new());
        let handles: Vec<_> = (0..2u32)
            .map(|i| {
                let shared = shared.clone();
                std::thread::spawn(move || {
                    let mut sim = SimCpu {
                        offset: u64::from(i) * SKEW,
                        writes: 0,
                        deadline,
                    };
                    warp_test(&shared, i, 2, 20_000, &mut sim)
                })
            })
            .collect();
        let outs: Vec<_> = handles
            .into_iter()
            .map(|h| h.join().expect("warp thread"))
            .collect();
        // Thread 0 (behind) sees a warp exactly when it takes the lock from
        // thread 1; thread 1 never sees one.
        assert_eq!(outs[0].warps, outs[0].handoffs, "{outs:?}");
        assert_eq!(outs[1].warps, 0, "{outs:?}");
        assert!(outs[0].max_warp <= SKEW, "{outs:?}");
        // Thread 0's hand-offs are all warps, so it has no forward one.
        assert_eq!(outs[0].shortest_handoff, u64::MAX, "{outs:?}");
        if outs[1].handoffs > 0 {
            // Thread 1's forward steps across a hand-off are at least SKEW.
            assert!(outs[1].shortest_handoff >= SKEW, "{outs:?}");
        }
        if outs[0].handoffs > 0 {
            assert!(outs[0].max_warp > SKEW / 2, "{outs:?}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the lock never passed from thread 1 to thread 0 in 120 s"
        );
    }
}

#[test]
fn a_single_cpu_never_warps() {
    use tsc_sync::warp::{warp_test, WarpShared};
    let shared = WarpShared::new();
    let mut sim = SimCpu {
        offset: 0,
        writes: 0,
        deadline: Instant::now() + Duration::from_secs(60),
    };
    let out = warp_test(&shared, 0, 1, 10_000, &mut sim);
    assert_eq!((out.max_warp, out.warps, out.handoffs), (0, 0, 0));
    assert_eq!(out.shortest_handoff, u64::MAX, "no hand-off, no interval");
}

/// Records the progress hook's calls; a TSC that just counts.
struct Recorder {
    now: u64,
    iterations: Vec<u32>,
}

impl Cpu for Recorder {
    fn rdtsc_ordered(&mut self) -> u64 {
        self.now += 1;
        self.now
    }
    fn write_tsc(&mut self, value: u64) {
        self.now = value;
    }
    fn relax(&mut self) {}
    fn iteration_start(&mut self, iteration: u32) {
        self.iterations.push(iteration);
    }
}

#[test]
fn the_progress_hook_sees_every_iteration_in_order() {
    for variant in xen_tsc_variants() {
        let shared = Shared::new();
        let mut cpu = Recorder {
            now: 100,
            iterations: Vec::new(),
        };
        let out = rendezvous(variant, &shared, 0, 1, &mut cpu);
        let expected: Vec<u32> = (0..tsc_sync::ITERATIONS).collect();
        assert_eq!(cpu.iterations, expected, "{}", variant.name());
        assert_eq!(
            out.written, out.tsc_first,
            "one CPU writes its own first TSC"
        );
    }
}

/// Pins the calling thread to host CPU `cpu` when this process may use it;
/// says whether it did (a test runs unpinned where it cannot).
fn pin_to(cpu: usize) -> bool {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET and
    // sched_setaffinity only read and write that set, for the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

/// Runs the forced hand-off test on two threads (pinned to host CPUs 0 and
/// 1 where they can be) whose TSCs are the host's plus `offsets`; returns
/// pair (0, 1)'s and pair (1, 0)'s results.
fn handoff_on_threads(offsets: [u64; 2], exchanges: u32) -> Vec<tsc_contract::HandoffResult> {
    use tsc_sync::handoff::{handoff_test, HandoffParams, HandoffShared};
    let shared = Arc::new(HandoffShared::default());
    let deadline = Instant::now() + Duration::from_secs(120);
    let params = HandoffParams {
        total: 2,
        exchanges,
        all: true,
        tag: 1,
    };
    let handles: Vec<_> = (0..2u32)
        .map(|i| {
            let shared = shared.clone();
            let offset = offsets[i as usize];
            std::thread::spawn(move || {
                pin_to(i as usize);
                let mut sim = SimCpu {
                    offset,
                    writes: 0,
                    deadline,
                };
                let mut out = Vec::new();
                handoff_test(&shared, i, params, &mut sim, |p, r| out.push((p, *r)));
                out
            })
        })
        .collect();
    let mut all: Vec<(u32, tsc_contract::HandoffResult)> = handles
        .into_iter()
        .flat_map(|h| h.join().expect("hand-off thread"))
        .collect();
    all.sort_by_key(|(p, _)| *p);
    all.into_iter().map(|(_, r)| r).collect()
}

/// The hand-off test on real host threads (the guest's code, the host's
/// `rdtsc`) recovers an offset set on purpose, within its bound: first the
/// host CPUs' own relative offset (whatever it is) with nothing added, then
/// with thread 1 moved by D; D lies in the difference of the two intervals,
/// in both directions of the pair, and so does 0 not.
#[test]
fn the_hand_off_test_on_host_threads_recovers_an_offset_within_its_bound() {
    const D: u64 = 1 << 36;
    let base = handoff_on_threads([0, 0], 200);
    let moved = handoff_on_threads([0, D], 200);
    for (k, (b, m)) in base.iter().zip(&moved).enumerate() {
        b.validate(b.a, b.b, 1, 200).expect("valid");
        m.validate(m.a, m.b, 1, 200).expect("valid");
        // Pair (0, 1) sees thread 1 move by +D; pair (1, 0) by -D.
        let d = if (m.a, m.b) == (0, 1) {
            i128::from(D)
        } else {
            -i128::from(D)
        };
        let lo = i128::from(m.lower) - i128::from(b.upper);
        let hi = i128::from(m.upper) - i128::from(b.lower);
        assert!(
            lo <= d && d <= hi,
            "pair {k}: {d} outside [{lo}, {hi}]: {b:?} {m:?}"
        );
        assert!(
            !(lo <= 0 && 0 <= hi),
            "pair {k}: the move is resolved: [{lo}, {hi}]"
        );
        // Each interval is at most its shortest round trip wide.
        for r in [b, m] {
            assert!(i128::from(r.upper) - i128::from(r.lower) <= i128::from(r.min_rtt));
        }
    }
}
