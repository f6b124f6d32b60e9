//! Memory and CPU as the rounds grow (issue 13): the peak RSS of `run` and
//! `compare` at 10k, 100k and 1M rounds and the ratio 1M / 10k (goal: under
//! 1.2), and the CPU time per round, of the whole process and of its main
//! thread (the VMM's own code: the round loop, the analysis, the
//! statistics, the outputs; the vCPU threads run the guest), which should be
//! flat as the rounds grow. Each command runs in a child (this binary
//! re-executed as the tsc-rendezvous command line), which reports its own
//! `VmHWM` and `getrusage` at its end. The host backend runs all three
//! counts; KVM runs 10k and 100k (1M takes about 13 minutes per command at
//! ~1,270 rounds/s on this 2-core PVM host; `--kvm-1m` includes it).

use crate::children::cost_of;

/// The command line of `what` (`run` or `compare`) on `backend` for
/// `rounds` rounds (`compare`: measured rounds in all, half per variant).
fn command(what: &str, backend: &str, rounds: u64) -> Vec<String> {
    let mut a: Vec<String> = vec![what.into(), "--backend".into(), backend.into()];
    match what {
        "run" => a.extend(["--variant".into(), "xen-head".into()]),
        _ => a.extend(["--seed".into(), "1".into()]),
    }
    let per = if what == "run" { rounds } else { rounds / 2 };
    a.extend(["--rounds".into(), per.to_string()]);
    a
}

/// The memory and CPU section; returns whether every command ran.
pub fn memory_section(quick: bool, kvm_1m: bool) -> bool {
    let (small, mid, large) = if quick {
        (1_000u64, 10_000u64, 100_000u64)
    } else {
        (10_000, 100_000, 1_000_000)
    };
    println!(
        "\nMemory and CPU as the rounds grow (2 vCPUs; run: xen-head; compare: xen-4.15 vs \
         xen-6ca022a1, seed 1, the rounds in all, half per variant; stdout discarded)"
    );
    println!(
        "  {:<8} {:<7} {:>10} {:>13} {:>9} {:>10} {:>17} {:>17}",
        "command",
        "backend",
        "rounds",
        "peak RSS KiB",
        "wall s",
        "rounds/s",
        "CPU us/round",
        "main thread us/r"
    );
    let mut ok = true;
    let mut ratios = Vec::new();
    for what in ["run", "compare"] {
        for backend in ["host", "kvm"] {
            let counts: Vec<u64> = if backend == "kvm" && !kvm_1m {
                vec![small, mid]
            } else {
                vec![small, mid, large]
            };
            let mut costs = Vec::new();
            for &n in &counts {
                match cost_of(&command(what, backend, n), &[0]) {
                    Ok(c) => {
                        println!(
                            "  {what:<8} {backend:<7} {n:>10} {:>13} {:>9.1} {:>10.0} {:>17.2} {:>17.2}",
                            c.peak_kib,
                            c.wall_s,
                            n as f64 / c.wall_s,
                            c.all_cpu_us / n as f64,
                            c.main_cpu_us / n as f64
                        );
                        costs.push((n, c));
                    }
                    Err(e) => {
                        println!("  {what:<8} {backend:<7} {n:>10} failed: {e}");
                        ok = false;
                    }
                }
            }
            if let (Some((n0, c0)), Some((n1, c1))) = (costs.first(), costs.last()) {
                if n1 > n0 {
                    ratios.push(format!(
                        "  {what} {backend}: peak RSS {n1} / {n0} rounds = {:.3}; main-thread CPU \
                         per round {:.3}x, all CPU per round {:.3}x",
                        c1.peak_kib as f64 / c0.peak_kib.max(1) as f64,
                        (c1.main_cpu_us / *n1 as f64) / (c0.main_cpu_us / *n0 as f64),
                        (c1.all_cpu_us / *n1 as f64) / (c0.all_cpu_us / *n0 as f64)
                    ));
                }
            }
        }
    }
    println!("\nRatios, largest count against the smallest (goal: peak RSS under 1.2; CPU per round flat or falling)");
    for r in ratios {
        println!("{r}");
    }
    if !kvm_1m {
        println!(
            "  (kvm: {} rounds not run: about 13 minutes per command on a 2-core PVM host; \
             --kvm-1m runs it)",
            large
        );
    }
    ok
}
