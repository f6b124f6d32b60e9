//! The measured figures, each beside its floor, in one run: the host
//! backend against the minimal rendezvous loop; KVM's per-round cost
//! against the ioctls a round needs; the first result against a bare boot;
//! `check`; many vCPUs on few cores against a bare boot of as many.

use std::time::Instant;

use tsc_contract::Variant;
use tsc_vmm::{run_streaming, Backend, RunOptions};

use crate::bare;
use crate::children::{cost_and_output, cpu_clock, opts, time_to_first_line};
use crate::host_floor;
use crate::profile;
use crate::syscalls;
use crate::table::{num, Better, Row, Table};

/// What a run of the tool measured in this process.
#[derive(Clone, Copy, Debug)]
pub struct ToolRun {
    /// Rounds per second from the first result to the last.
    pub rounds_per_s: f64,
    /// The main thread's CPU per round over the same span, microseconds.
    pub main_us: f64,
    /// Every thread's CPU per round over the same span, microseconds.
    pub all_us: f64,
    /// Wall time including the setup, seconds.
    pub wall_s: f64,
    /// The median CPU-0 exit latency, cycles.
    pub cpu0_exit_median: f64,
}

/// Runs `o` in this process and times it from its first result to its last.
pub fn tool_run(o: &RunOptions) -> Result<(ToolRun, String), String> {
    let start = Instant::now();
    let n = o.schedule.len();
    let mut first: Option<(Instant, f64, f64)> = None;
    let mut last = (start, 0.0, 0.0);
    let mut exits = Vec::with_capacity(n);
    let mut seen = 0usize;
    let facts = run_streaming(o, &mut |r| {
        seen += 1;
        // The CPU clocks are system calls (no vDSO): read them at the first
        // and the last result only, so that the bench adds nothing to the
        // rounds between them that it measures.
        if seen == 1 || seen == n {
            let now = (
                Instant::now(),
                cpu_clock(libc::CLOCK_THREAD_CPUTIME_ID),
                cpu_clock(libc::CLOCK_PROCESS_CPUTIME_ID),
            );
            first.get_or_insert(now);
            last = now;
        }
        if let Some(e) = r.cpu0_exit_latency_cycles {
            exits.push(e);
        }
        Ok(())
    })
    .map_err(|f| f.to_string())?;
    let wall_s = start.elapsed().as_secs_f64();
    if seen != n {
        return Err(format!("the run ended after {seen} of its {n} rounds"));
    }
    let (t0, m0, a0) = first.ok_or("no round completed")?;
    let (t1, m1, a1) = last;
    let per = (n.saturating_sub(1)).max(1) as f64;
    exits.sort_unstable();
    let pacing = facts
        .host
        .pacing
        .map_or_else(|| "unknown".to_string(), |p| p.name().to_string());
    Ok((
        ToolRun {
            rounds_per_s: per / (t1 - t0).as_secs_f64(),
            main_us: (m1 - m0) * 1e6 / per,
            all_us: (a1 - a0) * 1e6 / per,
            wall_s,
            cpu0_exit_median: exits.get(exits.len() / 2).map_or(f64::NAN, |&e| e as f64),
        },
        pacing,
    ))
}

/// The host backend, N = 2, against the minimal loop on pinned threads:
/// `reps` alternations of the two.
pub fn host(t: &mut Table, rounds: u32, reps: usize) -> Result<(), String> {
    let n = host_floor::allowed_cpus().len().min(2) as u32;
    let variant = Variant::Xen6ca022a1;
    let o = RunOptions {
        backend: Backend::Host,
        vcpus: n,
        schedule: vec![variant; rounds as usize],
        timeout: std::time::Duration::from_secs(600),
        ..RunOptions::default()
    };
    let (mut tool, mut floor) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        floor.push(host_floor::run(n, rounds, variant)?);
        tool.push(tool_run(&o)?.0);
    }
    let rate: Vec<f64> = tool.iter().map(|r| r.rounds_per_s).collect();
    let floor_rate: Vec<f64> = floor.iter().map(|r| r.rounds_per_s).collect();
    let row = Row::new(
        "host_rounds_per_s",
        format!(
            "host backend, {n} threads, {} rounds of {}: rounds/s",
            num(f64::from(rounds)),
            variant.name()
        ),
        "rounds/s",
        Better::Higher,
        &rate,
    )
    .with_floor(
        format!("the same rendezvous on {n} pinned threads, spin waits"),
        &floor_rate,
    );
    let met = row.ratio.is_some_and(|r| r <= 2.0);
    t.rows
        .push(row.with_target("within 2x of the floor".into(), met));
    let main: Vec<f64> = tool.iter().map(|r| r.main_us).collect();
    // The floor's threads spin through every round: a round's wall time is
    // its thread 0's CPU.
    let floor_us: Vec<f64> = floor_rate.iter().map(|r| 1e6 / r).collect();
    t.rows.push(
        Row::new(
            "host_main_us_per_round",
            "host backend: main-thread CPU per round".into(),
            "us",
            Better::Lower,
            &main,
        )
        .with_floor("the minimal loop's thread 0, per round".into(), &floor_us),
    );
    let ex: Vec<f64> = tool.iter().map(|r| r.cpu0_exit_median).collect();
    let fex: Vec<f64> = floor.iter().map(|r| r.cpu0_exit_median).collect();
    t.rows.push(
        Row::new(
            "host_cpu0_exit_median",
            "host backend: CPU 0's exit latency, median (the same measurement)".into(),
            "cycles",
            Better::Lower,
            &ex,
        )
        .with_floor("the minimal loop's".into(), &fex),
    );
    if floor.iter().any(|f| !f.pinned) {
        t.notes
            .push("host floor: a thread could not be pinned".into());
    }
    Ok(())
}

/// KVM, N = 2: main-thread CPU per round against what the main thread's
/// own ioctls cost (counted with strace, timed on a bare vCPU).
pub fn kvm_round(t: &mut Table, rounds: usize, reps: usize) -> Result<(), String> {
    let costs = bare::ioctl_costs(2_000)?;
    for c in &costs {
        t.rows.push(Row::new(
            &format!("ioctl_us {}", c.name),
            format!("bare vCPU: {}", c.name),
            "us",
            Better::Lower,
            &[c.us],
        ));
    }
    let cost_of_ioctl = |name: &str| -> f64 {
        let key = name.trim_start_matches("ioctl ");
        costs
            .iter()
            .find(|c| c.name.starts_with(key))
            .map_or(0.0, |c| c.us)
    };
    // (the main thread's, every thread's) ioctl cost per round.
    let mut ioctl_us: Option<(f64, f64)> = None;
    if syscalls::available() {
        let base = ["run", "--vcpus", "2", "--variant", "xen-head"];
        match syscalls::per_round(&base, 100, 300) {
            Ok(rows) => {
                let (mut main, mut all) = (0.0, 0.0);
                for (on_main, name, per) in &rows {
                    let who = if *on_main {
                        "main thread"
                    } else {
                        "other threads"
                    };
                    t.notes.push(format!(
                        "kvm N=2 syscalls per round, {who}: {name} {per:.2}"
                    ));
                    if name.starts_with("ioctl") {
                        let us = per * cost_of_ioctl(name);
                        all += us;
                        if *on_main {
                            main += us;
                        }
                    }
                }
                ioctl_us = Some((main, all));
            }
            Err(e) => t.notes.push(format!("syscall counts: {e}")),
        }
    } else {
        t.notes
            .push("syscall counts: strace is not installed".into());
    }
    let mut runs = Vec::new();
    for _ in 0..reps {
        runs.push(tool_run(&opts(2, rounds))?.0);
    }
    let wake: Vec<f64> = (0..reps).map(|_| sleep_and_wake_us(500)).collect();
    let main: Vec<f64> = runs.iter().map(|r| r.main_us).collect();
    let mut row = Row::new(
        "kvm_main_us_per_round",
        "kvm, 2 vCPUs: main-thread CPU per round".into(),
        "us",
        Better::Lower,
        &main,
    );
    if let Some((m, _)) = ioctl_us {
        row = row.with_floor(
            "the main thread's own ioctls per round (counted, timed)".into(),
            &[m],
        );
        let met = row.beyond.is_some_and(|b| b <= 10.0);
        row = row.with_target("at most 10 us beyond the ioctls' own cost".into(), met);
    }
    t.rows.push(row);
    t.rows.push(
        Row::new(
            "kvm_main_us_per_round_vs_wake",
            "kvm, 2 vCPUs: main-thread CPU per round (again)".into(),
            "us",
            Better::Lower,
            &main,
        )
        .with_floor(
            "a thread's sleep and wake-up (park/unpark, 1 ms apart)".into(),
            &wake,
        ),
    );
    let all: Vec<f64> = runs.iter().map(|r| r.all_us).collect();
    let mut row = Row::new(
        "kvm_all_us_per_round",
        "kvm, 2 vCPUs: CPU per round, all threads (the guest's emulation included)".into(),
        "us",
        Better::Lower,
        &all,
    );
    if let Some((_, a)) = ioctl_us {
        row = row.with_floor(
            "the ioctls a round needs, every thread (counted, timed)".into(),
            &[a],
        );
    }
    t.rows.push(row);
    Ok(())
}

/// The CPU a thread spends, per cycle, to park and be unparked by another
/// thread 1 ms later (what a coordinator that sleeps while the vCPUs run a
/// round pays at least once per round), microseconds.
pub fn sleep_and_wake_us(cycles: u32) -> f64 {
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
    let (ready, done) = (AtomicU32::new(0), AtomicBool::new(false));
    let me = std::thread::current();
    let mut per = f64::NAN;
    std::thread::scope(|s| {
        let (ready, done, me) = (&ready, &done, me.clone());
        s.spawn(move || {
            for k in 1..=cycles {
                while ready.load(Ordering::Acquire) < k {
                    std::thread::yield_now();
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
                done.store(true, Ordering::Release);
                me.unpark();
            }
        });
        let t0 = cpu_clock(libc::CLOCK_THREAD_CPUTIME_ID);
        for k in 1..=cycles {
            done.store(false, Ordering::Relaxed);
            ready.store(k, Ordering::Release);
            while !done.load(Ordering::Acquire) {
                std::thread::park();
            }
        }
        per = (cpu_clock(libc::CLOCK_THREAD_CPUTIME_ID) - t0) * 1e6 / f64::from(cycles);
    });
    per
}

/// The ioctls one vCPU makes per round, timed on a bare vCPU: KVM_RUN to
/// its next exit, KVM_GET_MSRS of IA32_TSC_ADJUST and of the bracketed
/// IA32_TSC, the offset attribute, the frequency (the counts `strace` finds
/// per vCPU and round: `kvm_round`'s notes), microseconds.
fn vcpu_ioctls_per_round_us() -> Result<f64, String> {
    let costs = bare::ioctl_costs(500)?;
    let us = |name: &str| {
        costs
            .iter()
            .find(|c| c.name.starts_with(name))
            .map(|c| c.us)
    };
    let (Some(run), Some(msr), Some(attr), Some(khz)) = (
        us("KVM_RUN"),
        us("KVM_GET_MSRS"),
        us("KVM_GET_DEVICE_ATTR"),
        us("KVM_GET_TSC_KHZ"),
    ) else {
        return Err(format!("ioctl costs: {costs:?}"));
    };
    Ok(run + 2.0 * msr + attr + khz)
}

/// KVM rounds per second at N = 1, 2, 4, 8 (N = 8: at least 200), each
/// against the rate its vCPUs' ioctls alone would allow on the host's
/// cores.
pub fn kvm_rates(t: &mut Table, base: usize, cores: usize) -> Result<(), String> {
    let per_vcpu = vcpu_ioctls_per_round_us()?;
    for (n, rounds) in [(1u32, base), (2, base), (4, base / 3), (8, base / 3)] {
        let rounds = rounds.max(20);
        let (r, pacing) = tool_run(&opts(n, rounds))?;
        let over = if n as usize > cores {
            ", overcommitted"
        } else {
            ""
        };
        let mut row = Row::new(
            &format!("kvm_rounds_per_s_{n}"),
            format!(
                "kvm, {n} vCPUs, {} rounds: rounds/s (pacing {pacing}{over})",
                num(rounds as f64)
            ),
            "rounds/s",
            Better::Higher,
            &[r.rounds_per_s],
        )
        .with_floor(
            format!(
                "{n} vCPUs' ioctls per round alone (bare vCPU, {} core(s) at once)",
                cores.clamp(1, n as usize)
            ),
            &[cores.clamp(1, n as usize) as f64 * 1e6 / (f64::from(n) * per_vcpu)],
        );
        if n == 8 {
            row = row.with_target("at least 200 rounds/s".into(), r.rounds_per_s >= 200.0);
        }
        t.rows.push(row);
    }
    Ok(())
}

/// Process start to the first result at N = 2, against process start to a
/// bare boot's first exit; and the teardown of a bare boot.
pub fn first_result(t: &mut Table, reps: usize) -> Result<(), String> {
    let (mut tool, mut floor, mut noop, mut teardown) = (vec![], vec![], vec![], vec![]);
    for _ in 0..reps {
        tool.push(
            time_to_first_line(&["--first-result-child"])?
                .0
                .as_secs_f64()
                * 1e3,
        );
        let (d, rest) = time_to_first_line(&["--bare-boot-child", "2"])?;
        floor.push(d.as_secs_f64() * 1e3);
        if let Some(us) = rest
            .lines()
            .find_map(|l| l.strip_prefix("teardown_us "))
            .and_then(|v| v.trim().parse::<f64>().ok())
        {
            teardown.push(us / 1e3);
        }
        noop.push(time_to_first_line(&["--noop-child"])?.0.as_secs_f64() * 1e3);
    }
    let row = Row::new(
        "first_result_ms",
        "process start to the first result, kvm, 2 vCPUs".into(),
        "ms",
        Better::Lower,
        &tool,
    )
    .with_floor(
        "process start to a bare VM's 2 vCPUs' first exit".into(),
        &floor,
    );
    let met = row.ratio.is_some_and(|r| r <= 2.0);
    t.rows
        .push(row.with_target("within 2x of the bare-boot floor".into(), met));
    t.rows.push(Row::new(
        "bare_teardown_ms",
        "bare VM, 2 vCPUs: teardown".into(),
        "ms",
        Better::Lower,
        &teardown,
    ));
    t.rows.push(Row::new(
        "process_start_ms",
        "process start to its first line (no VM)".into(),
        "ms",
        Better::Lower,
        &noop,
    ));
    if syscalls::available() {
        profile::first_run(t, reps)?;
    }
    Ok(())
}

/// `check` with all its checks, wall, against the bare boots and teardowns
/// of the VMs it creates (counted with strace when it is installed).
pub fn check(t: &mut Table, reps: usize) -> Result<(), String> {
    let mut walls = Vec::new();
    let mut parts: Vec<Vec<(String, f64)>> = Vec::new();
    for _ in 0..reps {
        // On a host that ignores TSC writes (PVM) checks fail: exit 1.
        let args = ["check".to_string(), "--json".to_string()];
        let (cost, out) = cost_and_output(&args, &[0, 1], true)?;
        walls.push(cost.wall_s);
        parts.push(profile::check_parts(&out)?);
    }
    let mut row = Row::new(
        "check_wall_s",
        format!(
            "check, all {} checks (2 vCPUs, 200 rounds, warp {}): wall",
            tsc_vmm::check_count(),
            tsc_vmm::CHECK_WARP_ITERATIONS
        ),
        "s",
        Better::Lower,
        &walls,
    );
    let mut boots = Vec::new();
    for _ in 0..reps {
        let b = bare::boot(2, || {})?;
        boots.push((b.to_first_exit + b.teardown).as_secs_f64());
    }
    if let Some(vms) = syscalls::vms_created(&["check"]) {
        let per: Vec<f64> = boots.iter().map(|b| b * vms as f64).collect();
        row = row.with_floor(
            format!("{vms} bare boots and teardowns (the VMs check creates)"),
            &per,
        );
    }
    let met = row.value <= 0.3;
    t.rows.push(row.with_target("at most 0.3 s".into(), met));
    profile::check(t, &parts);
    Ok(())
}

/// 10 rounds at 16, 32, 64 vCPUs (VM setup included), against a bare boot
/// and teardown of as many vCPUs.
pub fn overcommit(t: &mut Table, cores: usize) -> Result<(), String> {
    for n in [16u32, 32, 64] {
        let (r, pacing) = tool_run(&opts(n, 10))?;
        let b = bare::boot(n, || {})?;
        let mut row = Row::new(
            &format!("vcpus_{n}_10_rounds_s"),
            format!("10 rounds at {n} vCPUs on {cores} cores, VM setup included (pacing {pacing})"),
            "s",
            Better::Lower,
            &[r.wall_s],
        )
        .with_floor(
            format!("a bare boot and teardown of {n} vCPUs"),
            &[(b.to_first_exit + b.teardown).as_secs_f64()],
        );
        if n == 64 {
            let met = row.value < 5.0;
            row = row.with_target("under 5 s".into(), met);
        }
        t.rows.push(row);
    }
    Ok(())
}
