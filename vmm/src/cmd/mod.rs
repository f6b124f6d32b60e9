//! The command line: the top-level parser and one module per subcommand,
//! each holding its options and what it does ([`run`], [`compare`],
//! [`check`], [`restore`], [`watch`]: `kvmclock-watch`; [`generate`]: the
//! shell completions and man pages made from this parser); what they share
//! is in [`common`] (exit codes, stop handling, the guest image, output
//! files) and [`args`] (value parsers).

pub mod args;
pub mod check;
pub mod common;
pub mod compare;
pub mod generate;
pub mod restore;
pub mod run;
pub mod watch;

use clap::{CommandFactory, Parser, Subcommand};

pub use args::parse_inject;
use check::CheckArgs;
use common::Exit;
use compare::CompareArgs;
use generate::{CompletionsArgs, ManArgs};
use run::RunArgs;

/// Runs Xen's TSC calibration rendezvous, with real `wrmsr IA32_TSC` writes,
/// on the vCPUs of a tiny KVM guest and reports the TSC skew it leaves behind.
#[derive(Debug, Parser)]
#[command(name = "tsc-rendezvous", version, about, long_about = None)]
#[command(args_conflicts_with_subcommands = true, after_help = EXIT_CODES)]
pub struct Cli {
    /// What to do; `run` when omitted.
    #[command(subcommand)]
    pub command: Option<Cmd>,
    /// `run`'s options, accepted without the subcommand too.
    #[command(flatten)]
    pub run: RunArgs,
}

impl Cli {
    /// The `run` options, whichever way they were given; `None` for another
    /// subcommand.
    pub fn run_args(self) -> Option<RunArgs> {
        match self.command {
            Some(Cmd::Run(a)) => Some(a),
            None => Some(self.run),
            Some(_) => None,
        }
    }
}

/// The exit codes, as `--help` states them.
pub const EXIT_CODES: &str = "Exit codes: 0 done; 1 the run failed after it started (timeout, \
vCPU error, invalid guest data; completed rounds are still reported); 2 it could not run (bad \
arguments, no usable /dev/kvm, missing KVM capability, bad --guest image); 130 SIGINT, 143 \
SIGTERM (completed rounds are still reported).";

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Run the rendezvous and report the skew (the default).
    #[command(after_help = EXIT_CODES)]
    Run(RunArgs),
    /// Named regression checks of the hypervisor's guest TSC handling, with
    /// verdicts. Exit code 0: every check passed (or was skipped); 1: a check
    /// failed or regressed against the baseline; 2: the checks could not run;
    /// 130/143: stopped by SIGINT/SIGTERM (what was measured is reported);
    /// with --kselftest-exit-codes, 4: every check skipped or undecided, or
    /// no usable KVM.
    Check(CheckArgs),
    /// Measure two or more variants interleaved in one VM and compare them.
    Compare(CompareArgs),
    /// Snapshot a VM after a rendezvous, destroy it, restore it by each
    /// method (documented, msr, msr-twice) and report what each did to the
    /// vCPUs' relative TSC offsets and to the guests' TSCs.
    #[command(after_help = EXIT_CODES)]
    Restore(restore::RestoreArgs),
    /// One guest IA32_TSC write, then every vCPU's kvmclock against the
    /// host's clock for a while: how long a pvclock page KVM left stale
    /// stays stale, and whether kvmclock comes back to real time.
    #[command(after_help = EXIT_CODES)]
    KvmclockWatch(watch::WatchArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell)
    /// generated from these options.
    Completions(CompletionsArgs),
    /// Print the man page (or a subcommand's, or write them all with
    /// --out-dir), generated from these options.
    Man(ManArgs),
}

/// Runs the command the arguments name.
pub fn dispatch(cli: Cli) -> Exit {
    match cli.command {
        Some(Cmd::Check(args)) => check::main(&args),
        Some(Cmd::Compare(args)) => compare::main(&args),
        Some(Cmd::Restore(args)) => restore::main(&args),
        Some(Cmd::KvmclockWatch(args)) => watch::main(&args),
        Some(Cmd::Run(args)) => run::main(&args),
        Some(Cmd::Completions(args)) => generate::completions(&args, Cli::command()),
        Some(Cmd::Man(args)) => generate::man(&args, Cli::command()),
        None => run::main(&cli.run),
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use tsc_contract::{Inject, Variant};

    use super::args::VariantList;
    use super::*;
    use crate::options::Injection;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("tsc-rendezvous").chain(args.iter().copied()))
    }

    fn run_args(args: &[&str]) -> RunArgs {
        parse(args)
            .expect("valid arguments")
            .run_args()
            .expect("a run")
    }

    fn check_args(args: &[&str]) -> CheckArgs {
        match parse(args).expect("valid arguments").command {
            Some(Cmd::Check(c)) => c,
            other => panic!("not a check: {other:?}"),
        }
    }

    #[test]
    fn check_options_parse() {
        // The defaults themselves are checked against the README and
        // --help in tests/cli.rs.
        let c = check_args(&[
            "check",
            "--junit",
            "checks.xml",
            "--json",
            "--max-skew-ns",
            "50000",
            "--tolerance",
            "20%",
        ]);
        assert_eq!(
            c.junit.as_ref().and_then(|t| t.path()),
            Some(std::path::Path::new("checks.xml"))
        );
        let k = check_args(&["check", "--ktap", "-", "--kcidb-origin", "lab_7"]);
        assert!(k.ktap.as_ref().is_some_and(|t| t.is_stdout()));
        assert_eq!(k.kcidb_origin, "lab_7");
        assert!(parse(&["check", "--kcidb-origin", "My-Lab"]).is_err());
        assert_eq!(
            (c.max_skew_ns, c.tolerance, c.json),
            (Some(50000.0), 20.0, true)
        );
        assert!(parse(&["check", "--max-skew-ns", "-5"]).is_err());
        assert!(parse(&["check", "--variant", "all"]).is_err());
        assert!(parse(&["check", "--warp-iterations", "0"]).is_err());
    }

    #[test]
    fn the_default_run_is_every_variant_and_matches_run_args_default() {
        let a = run_args(&[]);
        assert_eq!(a.variants(), Variant::ALL.to_vec());
        assert_eq!(run_args(&["run"]).variants(), Variant::ALL.to_vec());
        let d = RunArgs::default();
        assert_eq!(
            (d.vcpus, d.rounds, d.variant),
            (a.vcpus, a.rounds, a.variant)
        );
    }

    #[test]
    fn run_options_work_without_the_subcommand() {
        let a = run_args(&["--json", "--vcpus", "3"]);
        assert_eq!((a.vcpus, a.json), (3, true));
    }

    #[test]
    fn the_issue_example_parses() {
        let a = run_args(&[
            "run",
            "--vcpus",
            "4",
            "--variant",
            "xen-6ca022a1",
            "--rounds",
            "500",
            "--json",
        ]);
        assert_eq!((a.vcpus, a.rounds, a.json), (4, 500, true));
        assert_eq!(a.variants(), vec![Variant::Xen6ca022a1]);
    }

    #[test]
    fn bad_values_are_rejected_with_the_fix() {
        let e = parse(&["run", "--vcpus", "0"])
            .expect_err("0 vCPUs")
            .to_string();
        assert!(e.contains("at least one vCPU"), "{e}");
        let e = parse(&["run", "--rounds", "0"])
            .expect_err("0 rounds")
            .to_string();
        assert!(e.contains("at least one round"), "{e}");
        let e = parse(&["run", "--variant", "xen-4.16"])
            .expect_err("unknown")
            .to_string();
        assert!(e.contains("xen-4.15, xen-6ca022a1, xen-head"), "{e}");
        let e = parse(&["run", "--vcpus", "100000"])
            .expect_err("too many")
            .to_string();
        assert!(e.contains("at most 512"), "{e}");
        let e = parse(&["run", "--timeout", "0"])
            .expect_err("zero")
            .to_string();
        assert!(e.contains("positive"), "{e}");
        assert!(parse(&["run", "--vcpus", "two"]).is_err());
    }

    fn compare_args(args: &[&str]) -> CompareArgs {
        match parse(args).expect("valid arguments").command {
            Some(Cmd::Compare(c)) => c,
            other => panic!("not compare: {other:?}"),
        }
    }

    #[test]
    fn compare_defaults_to_the_seed_and_its_parent_on_two_vcpus() {
        let c = compare_args(&["compare"]);
        assert_eq!(
            c.variants,
            VariantList(vec![Variant::Xen415, Variant::Xen6ca022a1])
        );
        assert_eq!(c.seed, None, "the seed comes from the clock");
    }

    #[test]
    fn the_compare_example_of_the_issue_parses() {
        let c = compare_args(&[
            "compare",
            "--vcpus",
            "4",
            "--rounds",
            "5000",
            "--variants",
            "xen-4.15,xen-head",
            "--plot",
            "compare.svg",
            "--csv",
            "rounds.csv",
            "--json",
            "--seed",
            "7",
        ]);
        assert_eq!(
            (c.vcpus, c.rounds, c.json, c.seed),
            (4, 5000, true, Some(7))
        );
        assert_eq!(
            c.variants,
            VariantList(vec![Variant::Xen415, Variant::XenHead])
        );
        assert_eq!(
            c.plot,
            Some(crate::output::target::OutputTarget::File(PathBuf::from(
                "compare.svg"
            )))
        );
    }

    #[test]
    fn compare_needs_two_distinct_known_variants() {
        for bad in ["xen-4.15", "xen-4.15,xen-4.15", "xen-4.15,nope"] {
            assert!(parse(&["compare", "--variants", bad]).is_err(), "{bad}");
        }
        assert!(parse(&["compare", "--bootstrap", "5"]).is_err());
    }

    #[test]
    fn injections_parse_and_bad_ones_name_the_fix() {
        let a = run_args(&["--inject", "stall,vcpu=1,round=2,iter=3"]);
        assert_eq!(
            a.inject,
            Some(Injection {
                kind: Inject::Stall,
                vcpu: 1,
                round: 2,
                iteration: 3,
                cycles: 0
            })
        );
        assert!(a.validate().is_ok(), "vCPU 1 of 2, round 2 of 100");
        let a = run_args(&["--inject", "delay,cycles=5000", "--rounds", "1"]);
        assert_eq!(a.inject.map(|i| i.cycles), Some(5000));
        assert!(a.validate().is_ok());
        for (spec, words) in [
            ("explode", "valid: stall, delay"),
            ("stall,iter=5", "iterations 0..=4"),
            ("stall,vcpu", "KEY=VALUE"),
            ("stall,cpu=1", "unknown key"),
            ("delay", "cycles"),
            ("panic,round=x", "whole number"),
        ] {
            let e = parse(&["--inject", spec]).expect_err(spec).to_string();
            assert!(e.contains(words), "{spec}: {e}");
        }
        let a = run_args(&["--inject", "panic,vcpu=2", "--vcpus", "2"]);
        let e = a.validate().expect_err("vCPU 2 of 2");
        assert!(e.contains("vcpu=0..1"), "{e}");
        let a = run_args(&["--inject", "panic,round=3", "--rounds", "3"]);
        let e = a.validate().expect_err("round 3 of 3");
        assert!(e.contains("round=0..2"), "{e}");
    }
}
