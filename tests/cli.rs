//! The binary's handling of bad input: a one-line error naming the problem and
//! the fix, exit code 2, no panic.

use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tsc-rendezvous"))
        .args(args)
        .env("RUST_BACKTRACE", "1")
        .output()
        .expect("the binary runs")
}

fn assert_usage_error(args: &[&str], words: &[&str]) {
    let out = run(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    for w in words {
        assert!(err.contains(w), "{args:?}: '{w}' missing from: {err}");
    }
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    assert!(out.stdout.is_empty(), "{args:?}: nothing on stdout");
}

#[test]
fn zero_vcpus_is_refused() {
    assert_usage_error(&["run", "--vcpus", "0"], &["--vcpus", "at least one vCPU"]);
}

#[test]
fn zero_rounds_is_refused() {
    assert_usage_error(
        &["run", "--rounds", "0"],
        &["--rounds", "at least one round"],
    );
}

#[test]
fn unknown_variants_list_the_valid_ones() {
    assert_usage_error(
        &["run", "--variant", "xen-9"],
        &[
            "unknown variant 'xen-9'",
            "xen-4.15, xen-6ca022a1, xen-head",
        ],
    );
}

#[test]
fn too_many_vcpus_for_the_layout_is_refused() {
    assert_usage_error(&["--vcpus", "4096"], &["at most 512"]);
}

#[test]
fn a_missing_guest_image_is_named() {
    assert_usage_error(
        &["run", "--guest", "/nonexistent/guest.elf", "--rounds", "1"],
        &["/nonexistent/guest.elf"],
    );
}

#[test]
fn help_documents_the_options() {
    let out = run(&["run", "--help"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    for opt in [
        "--vcpus",
        "--variant",
        "--rounds",
        "--json",
        "--timeout",
        "--guest",
    ] {
        assert!(text.contains(opt), "{opt} missing from --help");
    }
}

#[test]
fn compare_refuses_an_unwritable_output_before_running() {
    assert_usage_error(
        &["compare", "--csv", "/nonexistent-dir/rounds.csv"],
        &["cannot create the CSV file", "writable path"],
    );
    assert_usage_error(
        &["compare", "--variants", "xen-4.15"],
        &["--variants", "at least two variants"],
    );
}
