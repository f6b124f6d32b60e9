//! Every claim of the README's sections "When things go wrong" and
//! "Comparing variants", and the test that fails when it breaks. The table is
//! checked by this file: every test it names exists, every row of the
//! README's error and fault-injection tables is in it, and every fault kind
//! of the contract too (`the_claims_table_is_complete_and_names_real_tests`).
//! Tests are named `FILE::TEST` for `tests/FILE.rs`, or `PATH::TEST` for unit
//! tests in the source.
//!
//! | README claim | test that fails when it breaks |
//! |---|---|
//! | **When things go wrong** | |
//! | a run never hangs: every run has a deadline | `faults::a_stalled_vcpu_is_caught_by_the_watchdog_with_its_round_and_iteration`, `faults::a_stall_in_the_first_round_reports_no_rounds_but_still_ends` (every test there is bounded by the run's own deadline) |
//! | errors are one line on stderr, starting with `error:` | `faults::a_guest_panic_is_reported_with_its_text` (and every fault test), `cli::zero_vcpus_is_refused` (and every usage test) |
//! | exit 0: completed and reported | `faults::a_delayed_write_shows_up_as_skew_not_as_write_latency`, `kvm_compare::compare_measures_every_variant_in_balanced_order_and_outputs_agree` |
//! | exit 1 (`run`): timeout, triple fault, panic, CPU exception, invalid data, unexpected exit; completed rounds still reported | `faults::a_stalled_vcpu_is_caught_by_the_watchdog_with_its_round_and_iteration`, `faults::a_triple_fault_names_the_vcpu_and_round_and_its_registers_follow`, `faults::a_guest_panic_is_reported_with_its_text`, `faults::a_cpu_exception_names_its_vector_rip_and_error_code`, `faults::a_record_with_impossible_values_is_refused`, `faults::a_port_write_to_an_unknown_port_is_refused` |
//! | exit 1 (`compare`): the watchdog; what completed is reported and in `--csv` | `faults::compare_exits_1_when_the_watchdog_fires_and_keeps_what_it_measured`, `faults::compare_exits_1_on_a_guest_fault_and_keeps_what_it_measured` |
//! | exit 2: bad arguments | `cli::zero_vcpus_is_refused`, `cli::unknown_variants_list_the_valid_ones`, `cli::an_injection_outside_the_run_is_refused` |
//! | exit 2: no usable `/dev/kvm` (`run`, `compare`, `check`) | `cli::a_missing_kvm_device_says_how_to_get_one`, `cli::check_and_compare_exit_2_without_a_usable_kvm_device` |
//! | exit 2: a KVM lacking a capability (`run`, `compare`, `check`) | `cli::a_kvm_lacking_a_capability_names_it`, `cli::check_and_compare_exit_2_when_kvm_lacks_a_capability` |
//! | exit 2: an unusable `--guest` image | `cli::a_guest_that_is_not_an_elf_is_refused`, `cli::a_truncated_guest_is_refused` |
//! | exit 2: an unwritable `--output` file (and `compare --csv`) | `faults::an_unwritable_output_file_is_a_usage_error`, `cli::compare_refuses_an_unwritable_output_before_running` |
//! | exit 130 on SIGINT (`run`, `compare`, `check`) | `faults::ctrl_c_stops_the_run_and_keeps_the_rounds`, `signals::ctrl_c_stops_compare_even_when_the_shell_ignores_it`, `signals::ctrl_c_stops_check_and_the_table_is_printed` |
//! | exit 143 on SIGTERM (`run`, `compare`, `check`) | `faults::sigterm_stops_the_run_and_the_json_report_keeps_the_rounds`, `signals::sigterm_stops_compare_and_every_output_keeps_the_measured_rounds`, `signals::sigterm_stops_check_and_the_json_judges_what_was_measured` |
//! | exit codes as `--help` states them | `vmm/src/cmd/common.rs::exit_codes_are_the_documented_ones`, `cli::help_documents_the_options` |
//! | watchdog default: 60 s plus 100 ms per round and vCPU, stated in `--help` | `vmm/src/options.rs::the_default_timeout_grows_with_the_work`, `cli::the_documented_defaults_are_the_binarys` |
//! | the watchdog stops every vCPU and reports who was where (round, 0-based iteration) and the semaphore read from guest memory | `faults::a_stalled_vcpu_is_caught_by_the_watchdog_with_its_round_and_iteration`, `faults::a_stall_in_the_first_round_reports_no_rounds_but_still_ends`, `vmm/src/watchdog.rs::a_timeout_says_who_was_where_and_what_to_do` |
//! | the watchdog joins every thread within 5 s | `faults::the_watchdog_joins_every_vcpu_thread_within_the_grace_period` (the join itself, from the pool's log line) |
//! | `--output`: one JSON line per completed round (`tsc-rendezvous/round/v1`, the report's round fields plus `schema` and `vcpu_count`), kept when the run fails or is interrupted | `faults::sigterm_stops_the_run_and_the_json_report_keeps_the_rounds`, `faults::a_vcpu_reporting_the_wrong_round_is_refused` (and every fault test: exactly the completed rounds streamed) |
//! | Ctrl-C / SIGTERM stop `run`, `compare`, `check` cleanly, also with SIGINT ignored by the shell; the report is printed and marked incomplete | `signals::ctrl_c_stops_compare_even_when_the_shell_ignores_it`, `faults::ctrl_c_stops_the_run_and_keeps_the_rounds` |
//! | `check` judges the rounds it has and skips what it could not measure | `signals::sigterm_stops_check_and_the_json_judges_what_was_measured` |
//! | `compare --csv`/`--plot` are written for the completed rounds | `signals::sigterm_stops_compare_and_every_output_keeps_the_measured_rounds` |
//! | a second Ctrl-C kills the process at once | `signals::a_second_ctrl_c_kills_the_process_at_once` |
//! | error `cannot open /dev/kvm (...): no permission` | `cli::an_unreadable_kvm_device_says_how_to_get_access` (needs root and setpriv) |
//! | error `cannot open /dev/kvm (...): /dev/kvm does not exist` | `cli::a_missing_kvm_device_says_how_to_get_one` |
//! | error `... is not a usable KVM device` | `cli::a_device_that_is_not_kvm_is_named` |
//! | error `this KVM lacks KVM_CAP_...` | `cli::a_kvm_lacking_a_capability_names_it` |
//! | error `N vCPUs do not fit the guest memory layout; use at most 512` / `--vcpus N is more than this KVM (KVM_CAP_MAX_VCPUS) allows` | `cli::more_vcpus_than_kvm_or_the_layout_allows_is_refused` |
//! | error `the guest image PATH is unusable: ...` | `cli::a_position_independent_guest_is_refused`, `cli::a_guest_with_a_segment_outside_guest_memory_is_refused` |
//! | error `timed out after ...` | `faults::a_stalled_vcpu_is_caught_by_the_watchdog_with_its_round_and_iteration` |
//! | error `vCPU k in round r: triple fault (KVM_EXIT_SHUTDOWN)`, its registers follow | `faults::a_triple_fault_names_the_vcpu_and_round_and_its_registers_follow` |
//! | error `vCPU k in round r: the guest panicked`, its console text follows | `faults::a_guest_panic_is_reported_with_its_text` |
//! | error `vCPU k in round r: CPU exception #GP ...`: vector, RIP, error code | `faults::a_cpu_exception_names_its_vector_rip_and_error_code` |
//! | error `vCPU k in round r: KVM internal error, suberror 1` | `faults::an_instruction_kvm_cannot_emulate_is_a_kvm_internal_error_on_pvm` |
//! | error `vCPU k in round r: unexpected exit: port write to ...` (unknown port or wrong size) | `faults::a_port_write_to_an_unknown_port_is_refused`, `faults::a_port_write_of_the_wrong_size_is_refused` |
//! | error `vCPU k's record of round r is invalid: ...` | `faults::a_record_with_an_index_out_of_range_is_refused`, `faults::a_record_with_impossible_values_is_refused` |
//! | error `vCPU k reported the end of round ...` / `... had finished every round while ...` | `faults::a_vcpu_reporting_the_wrong_round_is_refused`, `faults::a_vcpu_that_finishes_early_is_refused` |
//! | error `interrupted by SIGINT` / `SIGTERM` | `faults::ctrl_c_stops_the_run_and_keeps_the_rounds`, `faults::sigterm_stops_the_run_and_the_json_report_keeps_the_rounds` |
//! | everything the guest writes is validated; the record decoder, the analysis and the ELF checker are fuzzed | `fuzz::a_record_validates_exactly_when_the_contract_says`, `fuzz::the_analysis_never_panics_on_validated_records`, `fuzz::the_elf_checker_accepts_exactly_the_images_the_rules_allow`, `fuzz::a_truncated_guest_is_refused_exactly_when_it_lacks_what_is_loaded` |
//! | `--inject`: one test per fault, and `--inject` accepts every kind | `faults::every_fault_kind_has_a_test_here` |
//! | inject `stall` | `faults::a_stalled_vcpu_is_caught_by_the_watchdog_with_its_round_and_iteration` |
//! | inject `delay`: exit 0, the skew of round R grows by about C, outside the write latency | `faults::a_delayed_write_shows_up_as_skew_not_as_write_latency` |
//! | inject `triple-fault` | `faults::a_triple_fault_names_the_vcpu_and_round_and_its_registers_follow` |
//! | inject `panic` | `faults::a_guest_panic_is_reported_with_its_text` |
//! | inject `corrupt-size` | `faults::a_port_write_of_the_wrong_size_is_refused` |
//! | inject `corrupt-index` | `faults::a_record_with_an_index_out_of_range_is_refused` |
//! | inject `corrupt-value` | `faults::a_record_with_impossible_values_is_refused` |
//! | inject `gp` | `faults::a_cpu_exception_names_its_vector_rip_and_error_code` |
//! | inject `sse` | `faults::an_instruction_kvm_cannot_emulate_is_a_kvm_internal_error_on_pvm` |
//! | inject `bad-port` | `faults::a_port_write_to_an_unknown_port_is_refused` |
//! | inject `wrong-round` | `faults::a_vcpu_reporting_the_wrong_round_is_refused` |
//! | inject `early-done` | `faults::a_vcpu_that_finishes_early_is_refused` |
//! | `TSC_RENDEZVOUS_KVM_DEVICE`, `TSC_RENDEZVOUS_TEST_HIDE_CAP` | `cli::a_device_that_is_not_kvm_is_named`, `cli::a_kvm_lacking_a_capability_names_it` |
//! | **Comparing variants** | |
//! | one VM, blocks each running every variant once, in an order drawn from `--seed`; the same seed gives the same order | `kvm_compare::compare_measures_every_variant_in_balanced_order_and_outputs_agree` |
//! | `--seed` defaults to the clock; the seed is printed and in the JSON | `kvm_compare::without_a_seed_the_clock_picks_one_and_the_report_says_which`, `kvm_compare::the_readable_report_has_the_tables_the_seed_and_a_verdict` |
//! | `--fresh-vm-every K` (`1`: a fresh VM per block) | `kvm_compare::a_fresh_vm_per_block_warms_each_up_and_keeps_the_counts`, `kvm_compare::a_fresh_vm_every_two_blocks_and_every_csv_column` |
//! | `--warmup` rounds (default 20) run in every VM, are counted and excluded | `kvm_compare::a_fresh_vm_per_block_warms_each_up_and_keeps_the_counts`, `kvm_compare::compare_measures_every_variant_in_balanced_order_and_outputs_agree`, `cli::the_documented_defaults_are_the_binarys` |
//! | nothing else is dropped; rounds with disagreeing methods stay in and are counted | `kvm_compare::a_fresh_vm_every_two_blocks_and_every_csv_column`, `claims::compare_counts_the_rounds_whose_methods_disagree` |
//! | metrics per variant: n, median, mean, p10, p90, p99, max, standard deviation | `kvm_compare::compare_measures_every_variant_in_balanced_order_and_outputs_agree` (from the CSV, independently), `reference_stats::summaries_match_numpy` |
//! | difference of medians with a percentile-bootstrap 95% CI, seeded, `--bootstrap` replicates (default 2000) | `vmm/src/stats/inference.rs::the_bootstrap_interval_covers_a_known_shift`, `vmm/src/stats/inference.rs::the_bootstrap_is_reproducible_and_centred_on_no_shift`, `cli::the_documented_defaults_are_the_binarys` |
//! | Mann-Whitney U, two-sided: exact without ties below 50, else normal with tie-corrected variance and continuity correction | `reference_stats::mann_whitney_matches_scipy` |
//! | distinguishable: the CI excludes 0 and p < 0.05 | `vmm/src/compare/analyse.rs::distinguishable_needs_the_interval_and_the_test` |
//! | one verdict line per variant on CPU 0's exit time | `vmm/src/compare/analyse.rs::verdicts_say_sooner_later_or_noise`, `kvm_compare::the_readable_report_has_the_tables_the_seed_and_a_verdict` |
//! | the readable tables on stdout | `kvm_compare::the_readable_report_has_the_tables_the_seed_and_a_verdict` |
//! | the counted disagreements in the text | `claims::compare_counts_the_rounds_whose_methods_disagree`, `kvm_compare::the_readable_report_has_the_tables_the_seed_and_a_verdict` |
//! | `--json`: schema `tsc-rendezvous/compare/v1`, validated | `kvm_compare::compare_measures_every_variant_in_balanced_order_and_outputs_agree` |
//! | `--csv`: the documented columns, one row per measured round and vCPU, warm-up rounds not written | `kvm_compare::a_fresh_vm_every_two_blocks_and_every_csv_column`, `vmm/src/compare/csv.rs::each_column_holds_its_value_and_missing_values_are_empty` |
//! | `--plot`: CDFs of CPU 0's exit time and of the skew side by side | `kvm_compare::compare_measures_every_variant_in_balanced_order_and_outputs_agree` |
//! | the x axes end at 1.25x the largest p90; the legend says how many lie beyond | `vmm/src/compare/plot.rs::the_axis_ends_at_a_quarter_past_the_largest_p90`, `vmm/src/compare/plot.rs::the_legend_counts_what_lies_beyond_the_axis`, `claims::the_plot_legend_counts_the_rounds_beyond_the_axis`, `kvm_compare::compare_measures_every_variant_in_balanced_order_and_outputs_agree` |
//! | the progress line: only when stderr is a terminal and never with `--json`, from the first second, at most 4 redraws a second, cleared before the report | `vmm/src/output/progress.rs::a_line_is_drawn_only_when_enabled_and_after_a_second`, `kvm_compare::compare_measures_every_variant_in_balanced_order_and_outputs_agree` (no line on a pipe) |
//! | the line says rounds so far, the median skew so far, elapsed and left | `vmm/src/output/progress.rs::the_line_says_rounds_medians_and_times`, `vmm/src/output/progress.rs::the_time_left_follows_the_rate_so_far` |
//! | `--output FILE` streams every measured round | `soak::a_comparison_by_time_streams_its_rounds_and_summary_records` |

mod common;

use std::borrow::Cow;
use std::time::Duration;

use tsc_contract::{Inject, Variant};
use tsc_vmm::OffsetSource;
use tsc_vmm::{
    analyse_comparison as analyse, draw_plot, render_comparison as render_text, CompareData,
    CompareOptions, MeasuredRound,
};
use tsc_vmm::{HostInfo, KvmFlavor};
use tsc_vmm::{RoundResult, SkewBasis, VcpuResult};

/// The sources the table may name, by the name it uses.
const SOURCES: &[(&str, &str)] = &[
    ("faults", include_str!("faults.rs")),
    ("signals", include_str!("signals.rs")),
    ("cli", include_str!("cli.rs")),
    ("fuzz", include_str!("fuzz.rs")),
    ("kvm_compare", include_str!("kvm_compare.rs")),
    ("reference_stats", include_str!("reference_stats.rs")),
    ("claims", include_str!("claims.rs")),
    ("common", include_str!("common/mod.rs")),
    (
        "vmm/src/cmd/common.rs",
        include_str!("../vmm/src/cmd/common.rs"),
    ),
    ("vmm/src/options.rs", include_str!("../vmm/src/options.rs")),
    (
        "vmm/src/output/progress.rs",
        include_str!("../vmm/src/output/progress.rs"),
    ),
    ("soak", include_str!("soak.rs")),
    ("vmm/src/error.rs", include_str!("../vmm/src/error.rs")),
    (
        "vmm/src/watchdog.rs",
        include_str!("../vmm/src/watchdog.rs"),
    ),
    (
        "vmm/src/stats/inference.rs",
        include_str!("../vmm/src/stats/inference.rs"),
    ),
    (
        "vmm/src/compare/analyse.rs",
        include_str!("../vmm/src/compare/analyse.rs"),
    ),
    (
        "vmm/src/compare/csv.rs",
        include_str!("../vmm/src/compare/csv.rs"),
    ),
    (
        "vmm/src/compare/plot.rs",
        include_str!("../vmm/src/compare/plot.rs"),
    ),
];

/// The rows of the table above: (claim, tests).
fn table() -> Vec<(String, String)> {
    include_str!("claims.rs")
        .lines()
        .take_while(|l| l.starts_with("//!"))
        .filter_map(|l| l.strip_prefix("//! | "))
        .filter(|l| !l.starts_with("---") && !l.starts_with("README claim"))
        .filter_map(|l| {
            let (claim, tests) = l.rsplit_once(" | ")?;
            Some((claim.to_string(), tests.trim_end_matches(" |").to_string()))
        })
        .collect()
}

/// The first column of the documentation's table under `heading`.
fn readme_table(heading: &str) -> Vec<String> {
    let readme = common::docs::all();
    let at = readme
        .find(heading)
        .unwrap_or_else(|| panic!("the documentation has no '{heading}'"));
    readme[at..]
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| l.split('|').nth(1).unwrap_or_default().trim().to_string())
        .collect()
}

/// Fault kinds the contract has and the README's table does not list yet:
/// their rows are written, for the README's owner to merge. A kind added
/// later without documentation fails the test below (it is not here).
const AWAITING_README: &[&str] = &[];

#[test]
fn the_claims_table_is_complete_and_names_real_tests() {
    let rows = table();
    assert!(rows.len() > 50, "the table parses: {} rows", rows.len());
    let text: String = rows.iter().map(|(c, t)| format!("{c} | {t}\n")).collect();
    // Every test named exists where the table says.
    let mut named = 0;
    for (claim, tests) in &rows {
        for cell in tests.split('`').skip(1).step_by(2) {
            let Some((source, test)) = cell.rsplit_once("::") else {
                continue;
            };
            let (_, content) = SOURCES
                .iter()
                .find(|(name, _)| *name == source)
                .unwrap_or_else(|| panic!("'{claim}': unknown source {source}"));
            let is_fn = content.contains(&format!("fn {test}("));
            assert!(is_fn, "'{claim}': no fn {test} in {source}");
            named += 1;
        }
    }
    assert!(named > 60, "{named} tests named");
    // Every row of the README's error table, by the message it starts with.
    let errors = readme_table("### What the errors mean");
    assert!(errors.len() >= 15, "{errors:?}");
    for message in &errors {
        assert!(
            text.contains(&format!("error {message}")),
            "the README's error row {message} has no claim here"
        );
    }
    // Every fault kind, the README's and the contract's.
    let kinds = readme_table("### Fault injection");
    assert!(kinds.len() >= 7, "{kinds:?}");
    let names: Vec<&str> = Inject::ALL[1..].iter().map(|k| k.name()).collect();
    for kind in &kinds {
        let kind = kind.trim_matches('`');
        assert!(
            names.contains(&kind),
            "the README documents an unknown kind {kind}"
        );
    }
    for kind in &names {
        assert!(
            text.contains(&format!("inject `{kind}`")),
            "the fault kind {kind} has no claim here"
        );
        let documented = kinds.iter().any(|k| k.trim_matches('`') == *kind);
        assert!(
            documented || AWAITING_README.contains(kind),
            "the fault kind {kind} is not in the README's fault-injection table"
        );
    }
}

// ---------------------------------------------------------------------------
// Synthetic compare data: the outputs' rules on values chosen by hand.

fn host() -> HostInfo {
    HostInfo {
        kvm_flavor: KvmFlavor::Pvm,
        kernel_release: "6.1.0".into(),
        kernel_version: Some((6, 1)),
        tsc_khz: Some(2_000_000),
        cpu_model: None,
        cpu_tsc_flags: Vec::new(),
        clocksource: None,
        tsc_offset_attr: true,
        offset_source: OffsetSource::KvmVcpuTscOffset,
        guest_tsc_adjust: true,
        backend: tsc_vmm::Backend::Kvm,
        host_threads: None,
        sync_windows: None,
        initial_skew_cycles: None,
        pacing: None,
    }
}

fn vcpu(id: u32, exit: i64) -> VcpuResult {
    VcpuResult {
        id,
        tsc_adjust_delta: -1000,
        guest_adjust_delta: Some(-1000),
        offset_delta: Some(0),
        written_value: 1_000_000,
        tsc_first: 999_000,
        tsc_before_write: 1_000_500,
        tsc_after_loop: 1_000_900,
        wrote: true,
        tsc_at_write: Some(1_001_000),
        write_latency_cycles: Some(500),
        exit_latency_cycles: Some(exit),
        write_honoured: Some(false),
        decided_by: None,
        host_saw_write: Some(false),
        guest_saw_jump: Some(false),
        rel_offset_adjust: 0,
        rel_offset_attr: Some(0),
        rel_offset_bracket: 0,
        rel_offset_bracket_error: 0,
        tsc_khz: 2_000_000,
    }
}

/// A measured round of `variant` with CPU 0's exit time `exit`, skew `skew`
/// and `disagreements` disagreements.
fn round(seq: u32, variant: Variant, exit: i64, skew: u64, disagreements: usize) -> MeasuredRound {
    MeasuredRound {
        seq,
        vm: 0,
        block: seq / 2,
        round_in_vm: seq,
        result: RoundResult {
            round: seq,
            variant: Cow::Borrowed(variant.name()),
            skew_cycles: skew,
            skew_cycles_attr: Some(0),
            skew_cycles_bracket: 0,
            skew_cycles_bracket_error: 0,
            writes_honoured: Some(false),
            undecided_vcpus: 0,
            skew_basis: SkewBasis::Offsets,
            cpu0_exit_latency_cycles: Some(exit),
            sync: None,
            disagreements: (0..disagreements)
                .map(|i| format!("disagreement {i}"))
                .collect(),
            vcpus: vec![vcpu(0, exit)],
        },
    }
}

fn options(variants: Vec<Variant>, rounds: u32) -> CompareOptions {
    CompareOptions {
        vcpus: 1,
        variants,
        rounds,
        warmup: 0,
        seed: 1,
        fresh_vm_every: 0,
        bootstrap: 100,
        timeout: Duration::from_secs(60),
        image: None,
        backend: tsc_vmm::Backend::Kvm,
        sync_windows_ms: (20, 2),
        initial_skew: None,
        inject: None,
    }
}

fn data(rounds: Vec<MeasuredRound>) -> CompareData {
    CompareData {
        host: host(),
        rounds,
        warmup_rounds_run: 0,
        vms: 1,
        elapsed: Duration::from_secs(1),
        notes: Vec::new(),
    }
}

/// "rounds whose readback methods disagree, stay in (... counted)": the
/// text states how many rounds had disagreements (once per round, however
/// many it had), the JSON counts them per variant, and nothing is said when
/// there are none.
#[test]
fn compare_counts_the_rounds_whose_methods_disagree() {
    let (a, b) = (Variant::Xen415, Variant::Xen6ca022a1);
    // 10 rounds each; a's rounds 0, 3, 4 disagree (round 4 twice), b's 7.
    let rounds: Vec<MeasuredRound> = (0..20)
        .map(|seq| {
            let (v, i) = if seq % 2 == 0 {
                (a, seq / 2)
            } else {
                (b, seq / 2)
            };
            let n = match (v == a, i) {
                (true, 0 | 3) => 1,
                (true, 4) => 2,
                (false, 7) => 1,
                _ => 0,
            };
            round(seq, v, 20_000 + i64::from(seq), 4_000, n)
        })
        .collect();
    let report = analyse(&options(vec![a, b], 10), data(rounds.clone()), None);
    let counts: Vec<usize> = report
        .per_variant
        .iter()
        .map(|p| p.rounds_with_disagreements)
        .collect();
    assert_eq!(counts, [3, 1]);
    let text = render_text(&report);
    assert!(
        text.contains("4 round(s) had disagreeing readback methods; they are kept (see --csv)."),
        "{text}"
    );
    assert_eq!(report.per_variant[0].rounds, 10, "kept, not dropped");
    let calm: Vec<MeasuredRound> = rounds
        .into_iter()
        .map(|mut r| {
            r.result.disagreements.clear();
            r
        })
        .collect();
    let text = render_text(&analyse(&options(vec![a, b], 10), data(calm), None));
    assert!(!text.contains("disagreeing"), "{text}");
}

/// "Its x axes end at 1.25x the largest p90 ...; the legend says how many
/// lie beyond", worked by hand (type-7 p90 of n sorted values: at rank
/// 0.9 (n - 1)):
/// - CPU 0's exit time: xen-4.15 has 20 rounds at 20,000 + 100 i and two the
///   scheduler delayed (2e7, 3e7): 22 values, p90 at rank 18.9 = 21,890.
///   xen-6ca022a1 has 19 rounds at 21,000 + 100 i, one at 28,000 and one at
///   5e6: 21 values, p90 at rank 18 = 22,800. The axis ends at 1.25 x
///   22,800 = 28,500: 2 and 1 rounds lie beyond (28,000 does not).
/// - The skew: xen-4.15 22 rounds at 4,000 but one at 1e7; xen-6ca022a1 20
///   at 4,200 and one at 5,000. p90s 4,000 and 4,200: the axis ends at
///   5,250: 1 and 0 beyond.
///
/// (An axis ending a quarter of the body past the p90 instead, at p90 +
/// (p90 - min) / 4, would leave 28,000 and 5,000 beyond it.)
#[test]
fn the_plot_legend_counts_the_rounds_beyond_the_axis() {
    let (a, b) = (Variant::Xen415, Variant::Xen6ca022a1);
    let mut rounds = Vec::new();
    let mut seq = 0;
    let mut push = |v: Variant, exit: i64, skew: u64| {
        rounds.push(round(seq, v, exit, skew, 0));
        seq += 1;
    };
    for i in 0..20 {
        push(a, 20_000 + 100 * i, if i == 5 { 10_000_000 } else { 4_000 });
    }
    push(a, 20_000_000, 4_000);
    push(a, 30_000_000, 4_000);
    for i in 0..19 {
        push(b, 21_000 + 100 * i, 4_200);
    }
    push(b, 28_000, 4_200);
    push(b, 5_000_000, 5_000);
    let report = analyse(&options(vec![a, b], 20), data(rounds.clone()), None);
    let path = std::env::temp_dir().join(format!("tsc-claims-{}.svg", std::process::id()));
    draw_plot(&path, &report, &rounds).expect("the plot is drawn");
    let svg = std::fs::read_to_string(&path).expect("the SVG was written");
    let _ = std::fs::remove_file(&path);
    let doc = roxmltree::Document::parse(&svg).expect("well-formed SVG");
    let legends: Vec<String> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text().map(|t| t.trim().to_string()))
        .filter(|t| t.contains("beyond the axis"))
        .collect();
    assert_eq!(
        legends,
        [
            "xen-4.15 (n = 22, 2 beyond the axis)",
            "xen-6ca022a1 (n = 21, 1 beyond the axis)",
            "xen-4.15 (n = 22, 1 beyond the axis)",
            "xen-6ca022a1 (n = 21, 0 beyond the axis)",
        ]
    );
}

/// Every page under docs/ is read by the tests that read the documentation.
#[test]
fn every_documentation_page_is_read_by_the_tests() {
    common::docs::check_pages_listed();
}
