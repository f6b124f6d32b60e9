//! Unit tests of `run`: its arguments and the checks clap cannot make.

use clap::Parser;

use super::*;
use crate::cmd::{Cli, Cmd};

fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
    Cli::try_parse_from(std::iter::once("tsc-rendezvous").chain(args.iter().copied()))
}

fn run_args(args: &[&str]) -> RunArgs {
    parse(args)
        .expect("valid arguments")
        .run_args()
        .expect("a run")
}

#[test]
fn the_backend_and_the_windows_default_to_kvm_and_linux() {
    let a = run_args(&[]);
    assert_eq!((a.backend, a.linux_windows), (Backend::Kvm, (20, 2)));
    let d = RunArgs::default();
    assert_eq!((d.backend, d.linux_windows), (a.backend, a.linux_windows));
    let a = run_args(&["--backend", "host", "--linux-windows", "50,5"]);
    assert_eq!((a.backend, a.linux_windows), (Backend::Host, (50, 5)));
    let a = run_args(&["run", "--backend", "host"]);
    assert_eq!(a.backend, Backend::Host);
    assert!(parse(&["--backend", "qemu"]).is_err());
    assert!(parse(&["--linux-windows", "20"]).is_err());
    let c = match parse(&["compare", "--backend", "host", "--linux-windows", "3,1"])
        .expect("valid")
        .command
    {
        Some(Cmd::Compare(c)) => c,
        other => panic!("not compare: {other:?}"),
    };
    assert_eq!((c.backend, c.linux_windows), (Backend::Host, (3, 1)));
}

#[test]
fn the_host_backend_refuses_guest_options_with_the_fix() {
    let a = run_args(&["--backend", "host", "--inject", "panic"]);
    let e = a.validate().expect_err("no guest to inject into");
    assert!(e.contains("--backend kvm"), "{e}");
    let a = run_args(&["--backend", "host", "--guest", "g.elf"]);
    assert!(a.validate().is_err());
    assert!(run_args(&["--backend", "host"]).validate().is_ok());
    assert!(run_args(&["--inject", "panic"]).validate().is_ok());
}

/// The help of --inject names every fault kind the contract has.
#[test]
fn the_inject_help_lists_every_fault_kind() {
    use clap::CommandFactory;
    let mut cmd = Cli::command();
    let run = cmd
        .find_subcommand_mut("run")
        .expect("the run subcommand")
        .clone();
    let help = run
        .get_arguments()
        .find(|a| a.get_id() == "inject")
        .and_then(|a| a.get_long_help().or(a.get_help()))
        .map(|h| {
            h.to_string()
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        })
        .expect("--inject has help");
    for kind in &tsc_contract::Inject::ALL[1..] {
        assert!(
            help.contains(&format!("{} (", kind.name())),
            "--inject help does not explain {}: {help}",
            kind.name()
        );
    }
}

/// By time, every round has the deadline of a one-round run (or
/// --timeout), not one that grows with the rounds; by rounds there is no
/// per-round deadline.
#[test]
fn by_time_the_watchdog_is_per_round() {
    let a = run_args(&["--duration", "8h", "--vcpus", "4"]);
    assert_eq!(a.round_timeout(), Some(default_round_timeout(4)));
    assert_eq!(a.round_timeout(), Some(Duration::from_millis(60_400)));
    let a = run_args(&["--duration", "8h", "--timeout", "5"]);
    assert_eq!(a.round_timeout(), Some(Duration::from_secs(5)));
    let a = run_args(&["--rounds", "1000"]);
    assert_eq!(a.round_timeout(), None);
    assert_eq!(a.timeout(), default_timeout(2, 1000));
}

/// `--duration` is split evenly over the variants run; with it a run may
/// have as many rounds as the counter holds (an injection anywhere in
/// them is accepted).
#[test]
fn a_duration_is_shared_by_the_variants() {
    let a = run_args(&["--duration", "60s"]);
    assert_eq!(
        a.duration_per_variant(),
        Some(Duration::from_secs(60) / tsc_contract::Variant::ALL.len() as u32)
    );
    let a = run_args(&["--duration", "60s", "--variant", "xen-head"]);
    assert_eq!(a.duration_per_variant(), Some(Duration::from_secs(60)));
    assert_eq!(a.max_rounds(), MAX_ROUNDS);
    let a = run_args(&["--duration", "1h", "--inject", "stall,round=100000"]);
    assert!(a.validate().is_ok());
    let a = run_args(&["--rounds", "10", "--inject", "stall,round=100000"]);
    assert!(a.validate().is_err());
    assert_eq!(run_args(&[]).duration_per_variant(), None);
}

#[test]
fn rounds_and_duration_exclude_each_other_and_summaries_need_an_output() {
    let e = parse(&["--rounds", "5", "--duration", "3s"]).expect_err("both");
    assert_eq!(e.kind(), clap::error::ErrorKind::ArgumentConflict);
    // The default --rounds does not conflict.
    assert!(parse(&["--duration", "3s"]).is_ok());
    assert!(parse(&["run", "--summary-every", "5"]).is_err());
    let a = run_args(&["--summary-every", "0.5", "--output", "x.jsonl"]);
    assert_eq!(a.summary_every, Some(Duration::from_secs(30)));
}

/// `--initial-skew` takes whole cycles (digits may be grouped with `_`),
/// for `run` and `compare` alike, and is absent unless asked for.
#[test]
fn the_initial_skew_is_whole_cycles_for_run_and_compare() {
    assert_eq!(run_args(&[]).initial_skew, None);
    assert_eq!(
        run_args(&["--initial-skew", "1_000_000"]).initial_skew,
        Some(1_000_000)
    );
    assert_eq!(run_args(&["--initial-skew", "0"]).initial_skew, Some(0));
    for bad in ["1.5", "", "1e6", "1000000000000000001"] {
        assert!(
            parse(&[&format!("--initial-skew={bad}")]).is_err(),
            "{bad:?}"
        );
    }
    match parse(&["compare", "--initial-skew", "42"]).map(|c| c.command) {
        Ok(Some(Cmd::Compare(c))) => assert_eq!(c.initial_skew, Some(42)),
        other => panic!("not compare: {other:?}"),
    }
}
