//! The command line.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use tsc_contract::{layout, Inject, Variant};
use tsc_sync::ITERATIONS;

use crate::runner::Injection;

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
    /// failed or regressed against the baseline; 2: the checks could not run.
    Check(CheckArgs),
    /// Measure two or more variants interleaved in one VM and compare them.
    Compare(CompareArgs),
}

/// Options of `compare`.
#[derive(Debug, Args, Clone)]
pub struct CompareArgs {
    /// Number of vCPUs taking part.
    #[arg(long, default_value_t = 2, value_parser = parse_vcpus)]
    pub vcpus: u32,

    /// The variants to compare, comma-separated; the first is the baseline.
    #[arg(long, default_value = "xen-4.15,xen-6ca022a1", value_parser = parse_variant_list)]
    pub variants: VariantList,

    /// Measured rounds per variant.
    #[arg(long, default_value_t = 1000, value_parser = parse_rounds)]
    pub rounds: u32,

    /// Warm-up rounds at the start of every VM: run, counted, excluded.
    #[arg(long, default_value_t = 20)]
    pub warmup: u32,

    /// Seed of the round order and of the bootstrap (default: from the clock;
    /// it is printed either way).
    #[arg(long)]
    pub seed: Option<u64>,

    /// Create a fresh VM every this many blocks (a block runs each variant
    /// once); 0 runs everything in one VM, 1 is a fresh VM per block.
    #[arg(long, default_value_t = 0, value_name = "BLOCKS")]
    pub fresh_vm_every: u32,

    /// Bootstrap replicates of each confidence interval.
    #[arg(long, default_value_t = 2000, value_parser = parse_bootstrap)]
    pub bootstrap: u32,

    /// Print one JSON document (schema `tsc-rendezvous/compare/v1`).
    #[arg(long)]
    pub json: bool,

    /// Write the raw data, one row per measured round and vCPU, to this CSV file.
    #[arg(long, value_name = "PATH")]
    pub csv: Option<PathBuf>,

    /// Draw the distributions (CDFs) into this SVG file.
    #[arg(long, value_name = "PATH")]
    pub plot: Option<PathBuf>,

    /// Give up after this many seconds per VM. Default: 60 s plus 100 ms per
    /// round and vCPU.
    #[arg(long, value_name = "SECS", value_parser = parse_timeout)]
    pub timeout: Option<f64>,

    /// Run this guest ELF instead of the embedded one.
    #[arg(long, value_name = "PATH")]
    pub guest: Option<PathBuf>,
}

/// `--variants`: two or more distinct variants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VariantList(pub Vec<Variant>);

fn parse_variant_list(s: &str) -> Result<VariantList, String> {
    let mut out = Vec::new();
    for name in s.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let v = Variant::from_name(name)
            .ok_or_else(|| format!("unknown variant '{name}'; valid: {}", valid_variants()))?;
        if out.contains(&v) {
            return Err(format!("variant '{name}' is listed twice"));
        }
        out.push(v);
    }
    if out.len() < 2 {
        return Err(format!(
            "name at least two variants to compare, comma-separated (valid: {})",
            valid_variants()
        ));
    }
    Ok(VariantList(out))
}

fn parse_bootstrap(s: &str) -> Result<u32, String> {
    let n: u32 = s
        .parse()
        .map_err(|_| format!("'{s}' is not a whole number"))?;
    if !(100..=1_000_000).contains(&n) {
        return Err("use between 100 and 1000000 bootstrap replicates".into());
    }
    Ok(n)
}

/// Options of `check`.
#[derive(Debug, Args, Clone)]
pub struct CheckArgs {
    /// vCPUs for the rendezvous, warp and skew checks.
    #[arg(long, default_value_t = 2, value_parser = parse_vcpus)]
    pub vcpus: u32,

    /// Rendezvous rounds for checks 3-6.
    #[arg(long, default_value_t = 200, value_parser = parse_rounds)]
    pub rounds: u32,

    /// The variant to run (xen-4.15, xen-6ca022a1, xen-head).
    #[arg(long, default_value = "xen-head", value_parser = parse_one_variant)]
    pub variant: Variant,

    /// Iterations of the guest warp test per vCPU.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub warp_iterations: u64,

    /// Check 6 fails when the median or p99 skew exceeds this many ns.
    #[arg(long, value_name = "NS", value_parser = parse_positive)]
    pub max_skew_ns: Option<f64>,

    /// Check 6 fails when the median or p99 skew exceeds this many cycles.
    #[arg(long, value_name = "CYCLES")]
    pub max_skew_cycles: Option<u64>,

    /// Print the result as JSON (schema `tsc-rendezvous/check/v1`,
    /// vmm/schema/check-v1.json) instead of the readable table.
    #[arg(long)]
    pub json: bool,

    /// Also write a JUnit XML file (one testcase per check).
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,

    /// Compare with an earlier `check --json` result: a check whose verdict
    /// got worse (PASS > SKIP > FAIL), a missing check, or a median skew that
    /// grew beyond the tolerance fails (exit code 1).
    #[arg(long, value_name = "FILE")]
    pub baseline: Option<PathBuf>,

    /// Allowed growth of the median skew against the baseline, in percent
    /// (growth below 1,000 cycles never counts).
    #[arg(long, value_name = "PERCENT", default_value_t = 50.0, value_parser = parse_percent)]
    pub tolerance: f64,

    /// Give up after this many seconds. Default: 120 s plus 100 ms per round
    /// and vCPU.
    #[arg(long, value_name = "SECS", value_parser = parse_timeout)]
    pub timeout: Option<f64>,
}

impl CheckArgs {
    /// The deadline of the whole check.
    pub fn timeout(&self) -> Duration {
        match self.timeout {
            Some(s) => Duration::from_secs_f64(s),
            None => Duration::from_secs(60) + default_timeout(self.vcpus, self.rounds),
        }
    }
}

fn parse_one_variant(s: &str) -> Result<Variant, String> {
    Variant::from_name(s)
        .ok_or_else(|| format!("unknown variant '{s}'; valid: {}", valid_variants()))
}

fn parse_positive(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("'{s}' is not a number"))?;
    if !(v > 0.0 && v.is_finite()) {
        return Err("must be a positive number".into());
    }
    Ok(v)
}

fn parse_percent(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim_end_matches('%')
        .parse()
        .map_err(|_| format!("'{s}' is not a percentage"))?;
    if !(0.0..=10_000.0).contains(&v) {
        return Err("the tolerance must be between 0 and 10000 percent".into());
    }
    Ok(v)
}

/// Options of `run`.
#[derive(Debug, Args, Clone)]
pub struct RunArgs {
    /// Number of vCPUs taking part (1 up to what KVM and the guest layout allow).
    #[arg(long, default_value_t = 2, value_parser = parse_vcpus)]
    pub vcpus: u32,

    /// The variant to run, or `all` for every variant one after another.
    /// Variants: xen-4.15 (before the seed), xen-6ca022a1 (the seed: latched
    /// value), xen-head (the seed plus a PAUSE after the write).
    #[arg(long, default_value = "all", value_parser = parse_variants)]
    pub variant: VariantChoice,

    /// Rendezvous rounds per variant.
    #[arg(long, default_value_t = 100, value_parser = parse_rounds)]
    pub rounds: u32,

    /// Print one JSON document (schema `tsc-rendezvous/run/v1`, see the README)
    /// instead of the readable report.
    #[arg(long)]
    pub json: bool,

    /// Watchdog: give up after this many seconds per variant, stop every vCPU
    /// and report where each one was. Default: 60 s plus 100 ms per round and
    /// vCPU.
    #[arg(long, value_name = "SECS", value_parser = parse_timeout)]
    pub timeout: Option<f64>,

    /// Run this guest ELF instead of the embedded one (for testing guests).
    #[arg(long, value_name = "PATH")]
    pub guest: Option<PathBuf>,

    /// Stream one JSON line per completed round to FILE (schema
    /// `tsc-rendezvous/round/v1`), flushed as it goes, so an interrupted or
    /// failed run keeps every round it measured.
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Inject a fault, to test the error handling: KIND[,vcpu=K][,round=R][,iter=I][,cycles=C]
    /// (K, R, I default to 0; I is the rendezvous iteration, 0..=4 in execution order).
    /// KINDs: stall (vCPU K spins forever at the start of round R iteration I; the
    /// watchdog ends the run), delay (vCPU K spins C TSC cycles before its final
    /// write in round R), triple-fault (vCPU K triple-faults in round R iteration I),
    /// panic (the guest panics on vCPU K in round R iteration I), corrupt-size
    /// (vCPU K reports round R with a 2-byte port write), corrupt-index (vCPU K's
    /// record of round R names a vCPU out of range), corrupt-value (vCPU K's record
    /// of round R holds impossible TSC values).
    #[arg(long, value_name = "SPEC", value_parser = parse_inject, verbatim_doc_comment)]
    pub inject: Option<Injection>,
}

impl Default for RunArgs {
    fn default() -> Self {
        RunArgs {
            vcpus: 2,
            variant: VariantChoice::All,
            rounds: 100,
            json: false,
            timeout: None,
            guest: None,
            output: None,
            inject: None,
        }
    }
}

impl RunArgs {
    /// The variants to run, in order.
    pub fn variants(&self) -> Vec<Variant> {
        match &self.variant {
            VariantChoice::All => Variant::ALL.to_vec(),
            VariantChoice::One(v) => vec![*v],
        }
    }

    /// Checks what clap cannot check alone (options against each other);
    /// the error names the problem and the fix.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(inj) = &self.inject {
            if inj.vcpu >= self.vcpus {
                return Err(format!(
                    "--inject names vCPU {} but the run has {} vCPU(s); use vcpu=0..{}",
                    inj.vcpu,
                    self.vcpus,
                    self.vcpus - 1
                ));
            }
            if inj.round >= self.rounds {
                return Err(format!(
                    "--inject names round {} but the run has {} round(s); use round=0..{}",
                    inj.round,
                    self.rounds,
                    self.rounds - 1
                ));
            }
        }
        Ok(())
    }

    /// The deadline of one variant's run.
    pub fn timeout(&self) -> Duration {
        match self.timeout {
            Some(s) => Duration::from_secs_f64(s),
            None => default_timeout(self.vcpus, self.rounds),
        }
    }
}

/// 60 s plus 100 ms per round and vCPU.
pub fn default_timeout(vcpus: u32, rounds: u32) -> Duration {
    Duration::from_secs(60) + Duration::from_millis(100) * vcpus.saturating_mul(rounds)
}

/// `--variant`: one variant or all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VariantChoice {
    /// Every variant.
    All,
    /// Just this one.
    One(Variant),
}

fn valid_variants() -> String {
    Variant::ALL.map(Variant::name).join(", ")
}

fn parse_variants(s: &str) -> Result<VariantChoice, String> {
    if s == "all" {
        return Ok(VariantChoice::All);
    }
    Variant::from_name(s)
        .map(VariantChoice::One)
        .ok_or_else(|| format!("unknown variant '{s}'; valid: {}, all", valid_variants()))
}

fn parse_vcpus(s: &str) -> Result<u32, String> {
    let n: u32 = s
        .parse()
        .map_err(|_| format!("'{s}' is not a whole number"))?;
    if n == 0 {
        return Err("at least one vCPU is needed; use --vcpus 1 or more".into());
    }
    if n > layout::MAX_VCPUS {
        return Err(format!(
            "{n} vCPUs do not fit the guest memory layout; use at most {}",
            layout::MAX_VCPUS
        ));
    }
    Ok(n)
}

fn parse_rounds(s: &str) -> Result<u32, String> {
    let n: u32 = s
        .parse()
        .map_err(|_| format!("'{s}' is not a whole number"))?;
    if n == 0 {
        return Err("at least one round is needed; use --rounds 1 or more".into());
    }
    Ok(n)
}

fn valid_injections() -> String {
    Inject::ALL[1..]
        .iter()
        .map(|k| k.name())
        .collect::<Vec<_>>()
        .join(", ")
}

fn parse_inject(s: &str) -> Result<Injection, String> {
    let mut parts = s.split(',');
    let kind_name = parts.next().unwrap_or_default().trim();
    let kind = Inject::from_name(kind_name)
        .filter(|k| *k != Inject::None)
        .ok_or_else(|| format!("unknown fault '{kind_name}'; valid: {}", valid_injections()))?;
    let mut inj = Injection {
        kind,
        vcpu: 0,
        round: 0,
        iteration: 0,
        cycles: 0,
    };
    for part in parts {
        let (key, value) = part.split_once('=').ok_or_else(|| {
            format!("'{part}' is not KEY=VALUE; use vcpu=, round=, iter= or cycles=")
        })?;
        let number = |what: &str| -> Result<u64, String> {
            value
                .trim()
                .parse::<u64>()
                .map_err(|_| format!("{what}='{value}' is not a whole number"))
        };
        let small = |what: &str| -> Result<u32, String> {
            u32::try_from(number(what)?).map_err(|_| format!("{what}={value} is too large"))
        };
        match key.trim() {
            "vcpu" => inj.vcpu = small("vcpu")?,
            "round" => inj.round = small("round")?,
            "iter" => inj.iteration = small("iter")?,
            "cycles" => inj.cycles = number("cycles")?,
            other => {
                return Err(format!(
                    "unknown key '{other}'; use vcpu=, round=, iter= or cycles="
                ))
            }
        }
    }
    if inj.iteration >= ITERATIONS {
        return Err(format!(
            "iter={} is out of range; the rendezvous has iterations 0..={}",
            inj.iteration,
            ITERATIONS - 1
        ));
    }
    if kind == Inject::Delay && inj.cycles == 0 {
        return Err("delay needs a number of cycles, e.g. delay,vcpu=1,cycles=1000000".into());
    }
    Ok(inj)
}

fn parse_timeout(s: &str) -> Result<f64, String> {
    let t: f64 = s
        .parse()
        .map_err(|_| format!("'{s}' is not a number of seconds"))?;
    if !(t > 0.0 && t <= 1e7) {
        return Err("the timeout must be a positive number of seconds".into());
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn check_options_parse_with_their_defaults() {
        let c = check_args(&["check"]);
        assert_eq!(
            (c.vcpus, c.rounds, c.variant, c.tolerance),
            (2, 200, Variant::XenHead, 50.0)
        );
        assert_eq!(
            (c.max_skew_ns, c.max_skew_cycles, c.json),
            (None, None, false)
        );
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
        assert_eq!(c.junit.as_deref(), Some(std::path::Path::new("checks.xml")));
        assert_eq!(
            (c.max_skew_ns, c.tolerance, c.json),
            (Some(50000.0), 20.0, true)
        );
        assert!(parse(&["check", "--max-skew-ns", "-5"]).is_err());
        assert!(parse(&["check", "--variant", "all"]).is_err());
        assert!(parse(&["check", "--warp-iterations", "0"]).is_err());
    }

    #[test]
    fn defaults_are_two_vcpus_every_variant_100_rounds() {
        let a = run_args(&[]);
        assert_eq!((a.vcpus, a.rounds, a.json), (2, 100, false));
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
        assert_eq!((c.vcpus, c.fresh_vm_every, c.seed), (2, 0, None));
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
        assert_eq!(c.plot, Some(PathBuf::from("compare.svg")));
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

    #[test]
    fn the_default_timeout_grows_with_the_work() {
        assert!(default_timeout(8, 1000) > default_timeout(2, 100));
        assert_eq!(default_timeout(1, 1), Duration::from_millis(60_100));
    }
}
