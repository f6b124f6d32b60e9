//! The command line.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use tsc_contract::{layout, Variant};

/// Runs Xen's TSC calibration rendezvous, with real `wrmsr IA32_TSC` writes,
/// on the vCPUs of a tiny KVM guest and reports the TSC skew it leaves behind.
#[derive(Debug, Parser)]
#[command(name = "tsc-rendezvous", version, about, long_about = None)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Cli {
    /// What to do; `run` when omitted.
    #[command(subcommand)]
    pub command: Option<Cmd>,
    /// `run`'s options, accepted without the subcommand too.
    #[command(flatten)]
    pub run: RunArgs,
}

impl Cli {
    /// The `run` options, whichever way they were given.
    pub fn run_args(self) -> RunArgs {
        match self.command {
            Some(Cmd::Run(a)) => a,
            Some(Cmd::Compare(_)) | None => self.run,
        }
    }
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Run the rendezvous and report the skew (the default).
    Run(RunArgs),
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

    /// Give up after this many seconds per variant. Default: 60 s plus 100 ms
    /// per round and vCPU.
    #[arg(long, value_name = "SECS", value_parser = parse_timeout)]
    pub timeout: Option<f64>,

    /// Run this guest ELF instead of the embedded one (for testing guests).
    #[arg(long, value_name = "PATH")]
    pub guest: Option<PathBuf>,
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
        parse(args).expect("valid arguments").run_args()
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
    fn the_default_timeout_grows_with_the_work() {
        assert!(default_timeout(8, 1000) > default_timeout(2, 100));
        assert_eq!(default_timeout(1, 1), Duration::from_millis(60_100));
    }
}
