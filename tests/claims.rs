//! Every claim the README and the pages under docs/ make, and the test that
//! exercises it. The documentation is read as the tests read it
//! (`common::docs`), cut into its claims: every paragraph, every bullet,
//! every row of a table that states claims, and every table of measured
//! figures as a whole (code blocks, headings and the README's navigation
//! tables are not claims). Each row below quotes a claim verbatim (`"..."`,
//! whitespace collapsed) from its page and names the tests that exercise it;
//! `the_claims_table_maps_every_claim_to_a_real_test` fails when a claim of
//! the documentation has no row, when a quote is not in its page, or when a
//! named test does not exist (a `#[test]` fn, or for the kernel matrix a
//! judge of its checker). Tests are named `FILE::TEST` for `tests/FILE.rs`,
//! or `PATH::TEST` for a test in any other file of the repository.
//!
//! Figures measured once (the tables of results, timings, the kernel
//! matrix's outcomes) depend on the host they were measured on: they are
//! mapped to the tests that exercise the same path and, for the kernels,
//! to the judge of `tools/qemu-kvm/kernel-matrix-check.py` that asserts
//! them in every matrix run; the benchmark (`tools/bench`) is not a test.
//!
//! | page | claim | tests that exercise it |
//! |---|---|---|
//! | README.md | "A KVM mini-VMM with a tiny Rust guest that" | `kvm_run::every_variant_on_1_2_and_4_vcpus`, `kvm_run::readable_report_states_the_verdict`, `guest_image::the_guest_contains_the_instructions_the_rendezvous_needs` |
//! | README.md | "It is for hypervisor and kernel engineers who want" | `kvm_run::readable_report_states_the_verdict`, `cli::the_documented_defaults_are_the_binarys` |
//! | README.md | "Linux x86-64 with KVM: a **readable and writable `/dev/kvm`**." | `cli::an_unreadable_kvm_device_says_how_to_get_access`, `vmm/src/vstate/vm.rs::open_errors_say_how_to_get_access` |
//! | README.md | "Rust stable (the host target only: the guest is" | `guest_image::the_embedded_guest_has_no_sse_x87_or_avx_instruction`, `vmm/src/guest_image.rs::the_embedded_guest_passes_the_checks` |
//! | README.md | "The KVM tests skip with a message when `/dev/kvm`" | `claims::the_kvm_tests_skip_without_kvm_unless_ci_is_set`, `claims::ci_runs_every_step_the_readme_names` |
//! | README.md | "Two `no_std` crates are shared by the guest and" | `layers::no_import_cycles`, `layers::import_chains_are_short`, `layers::files_are_short`, `layers::functions_are_short`, `contract/src/lib.rs::layout_regions_do_not_overlap`, `rendezvous_threads::every_variant_ends_with_one_common_value_not_below_any_first_tsc`, `native::every_variant_runs_on_1_2_4_and_8_threads` |
//! | README.md | "Per round the data flows down the page and" | `vmm/src/check/mod.rs::checks_are_numbered_in_order_with_distinct_ids`, `contract/src/lib.rs::variants_round_trip_by_name_and_raw_value`, `native::compare_on_host_threads_works_end_to_end`, `kvm_run::every_variant_on_1_2_and_4_vcpus` |
//! | README.md | "After every round, with every vCPU parked outside `KVM_RUN`," | `kvm_run::json_report_matches_the_schema_and_the_data`, `kvm_run::offsets_from_debugfs_are_exact`, `vmm/src/analysis/tests.rs::a_mismatch_between_methods_is_reported`, `vmm/src/analysis/honoured.rs::undecided_verdicts_count_for_neither_side` |
//! | README.md | "Xen before the seed: the write reloads the master's" | `sync/tests/xen_threads.rs::existing_variants_behave_as_before` |
//! | README.md | "the seed (Xen 4.16): the value latched into a" | `sync/tests/xen_threads.rs::named_tsc_variants_write_one_common_value_on_1_to_8_cpus` |
//! | README.md | "Xen HEAD: as the seed, plus a PAUSE after" | `guest_image::the_guest_contains_the_instructions_the_rendezvous_needs`, `sync/tests/xen_threads.rs::named_tsc_variants_write_one_common_value_on_1_to_8_cpus` |
//! | README.md | "Jan Beulich's unmerged RFC: the stamp on a cache" | `sync/tests/xen_threads.rs::the_rfc_prefetches_its_own_line` |
//! | README.md | "Xen's std rendezvous: no TSC write, the baseline" | `sync/tests/xen_threads.rs::std_rendezvous_writes_nothing_and_leaves_the_skew_on_1_to_8_cpus` |
//! | README.md | "Linux's `tsc_sync.c`: warp checks and TSC_ADJUST compensation, CPU 0" | `sync/tests/linux_threads.rs::cpus_in_sync_pass_on_the_first_run`, `native::the_std_rendezvous_keeps_a_skew_and_linux_moves_only_what_it_wrote` |
//! | docs/measuring.md | "Every vCPU enters the guest in 64-bit mode and" | `vmm/src/arch/x86_64/regs.rs::sregs_enable_long_mode_with_paging`, `kvm_run::every_variant_on_1_2_and_4_vcpus` |
//! | docs/measuring.md | "`IA32_TSC_ADJUST` (`KVM_GET_MSRS`)," | `kvm_run::json_report_matches_the_schema_and_the_data` |
//! | docs/measuring.md | "`IA32_TSC` (`KVM_GET_MSRS`) between two host TSC reads, giving an" | `vmm/src/analysis/tests.rs::the_bracket_error_bar_covers_reads_anywhere_in_both_brackets`, `vmm/src/tsc/mod.rs::the_bracket_estimate_uses_the_midpoint` |
//! | docs/measuring.md | "the vCPU's exact TSC offset: the `KVM_VCPU_TSC_OFFSET` vCPU attribute" | `kvm_run::offsets_from_debugfs_are_exact`, `kvm_run::a_vm_created_off_the_main_thread_finds_its_debugfs_offsets`, `vmm/src/tsc/debugfs.rs::the_offset_file_is_found_from_pid_and_vm_fd_and_reread`, `kvm_run::host_facts_are_reported` |
//! | docs/measuring.md | "`KVM_GET_TSC_KHZ`." | `vmm/src/check/same_start.rs::exact_offsets_must_be_equal`, `kvm_run::host_facts_are_reported` |
//! | docs/measuring.md | "From them it computes each vCPU's TSC offset relative" | `vmm/src/analysis/tests.rs::honoured_writes_move_the_offsets_by_the_adjust_deltas`, `vmm/src/analysis/tests.rs::ignored_writes_give_the_would_be_skew_from_tsc_adjust`, `vmm/src/analysis/tests.rs::a_mismatch_between_methods_is_reported`, `vmm/src/analysis/accumulate.rs::deltas_are_taken_against_the_previous_round` |
//! | docs/measuring.md | "**Did the hypervisor honour the writes?** It is decided" | `vmm/src/analysis/honoured.rs::honoured_writes_are_decided_exactly_with_the_offsets`, `vmm/src/analysis/honoured.rs::honoured_writes_from_the_bracket_need_a_delta_above_the_error`, `vmm/src/analysis/honoured.rs::undecided_host_evidence_leaves_the_verdict_to_a_decisive_guest`, `vmm/src/analysis/honoured.rs::contradictory_evidence_is_undecided_and_said`, `kvm_run::without_exact_offsets_the_bracket_and_the_guest_decide` |
//! | docs/measuring.md | "**The seed's metric** (Xen commit 6ca022a1): CPU 0's loop-exit" | `vmm/src/analysis/tests.rs::ignored_writes_give_the_would_be_skew_from_tsc_adjust`, `vmm/src/compare/analyse.rs::the_exit_time_of_a_variant_without_a_write_is_not_compared`, `kvm_run::readable_report_states_the_verdict` |
//! | docs/measuring.md | "The variants (`--variant`, `--variants`, `check --variant`; `all` runs every" | `vmm/src/cmd/mod.rs::the_default_run_is_every_variant_and_matches_run_args_default`, `cli::unknown_variants_list_the_valid_ones`, `cli::check_and_compare_refuse_unknown_variants_the_same_way` |
//! | docs/measuring.md | "`write_tsc(r->master_tsc_stamp)`: a shared-memory load right after the release" | `sync/tests/xen_threads.rs::existing_variants_behave_as_before` |
//! | docs/measuring.md | "the value latched into a local at the end" | `sync/tests/xen_threads.rs::named_tsc_variants_write_one_common_value_on_1_to_8_cpus` |
//! | docs/measuring.md | "as the seed, plus a PAUSE right after the" | `guest_image::the_guest_contains_the_instructions_the_rendezvous_needs` |
//! | docs/measuring.md | "as before the seed, with `master_tsc_stamp` on a cache" | `sync/tests/xen_threads.rs::prefetch_only_when_asked_and_only_on_non_final_iterations`, `sync/tests/xen_threads.rs::the_rfc_prefetches_its_own_line` |
//! | docs/measuring.md | "none: one pass, then `rdtsc_ordered()`; the no-write baseline, its" | `sync/tests/xen_threads.rs::std_rendezvous_writes_nothing_and_leaves_the_skew_on_1_to_8_cpus` |
//! | docs/measuring.md | "CPU 0 as source against each AP in turn:" | `sync/tests/linux_threads.rs::compensation_rule`, `sync/tests/linux_threads.rs::windows_follow_packages`, `sync/tests/linux_threads.rs::random_warps_end_the_pair_at_once_without_compensating`, `sync/tests/linux_threads.rs::without_tsc_adjust_a_skewed_target_ends_unstable` |
//! | docs/measuring.md | "As in Xen: CPU 0 is the master, five" | `sync/tests/xen_threads.rs::every_parameter_combination_keeps_the_invariants`, `sync/tests/xen_threads.rs::shared_layout_keeps_line_0_and_adds_line_1`, `rendezvous_threads::shared_state_fits_its_page_on_cache_lines`, `rendezvous_threads::a_single_cpu_writes_its_own_first_tsc` |
//! | docs/measuring.md | "`cargo run --release` on a 2-core development VM whose" | `kvm_run::readable_report_states_the_verdict` |
//! | docs/measuring.md | "**Host**: the hypervisor flavour (VMX, SVM or PVM, from" | `vmm/src/host.rs::flavor_comes_from_the_loaded_modules`, `kvm_run::host_facts_are_reported` |
//! | docs/measuring.md | "**The verdict**: here the writes were **not** honoured. PVM" | `vmm/src/report/text.rs::the_verdict_says_what_the_data_says`, `kvm_run::readable_report_states_the_verdict` |
//! | docs/measuring.md | "**Typical round**: per vCPU, the TSC_ADJUST delta (negative: the" | `vmm/src/report/model.rs::the_typical_round_is_the_one_nearest_the_median`, `vmm/src/report/accumulate.rs::the_typical_round_is_near_the_final_median` |
//! | docs/measuring.md | "**Over all rounds**: median, p90 and max of the" | `vmm/src/report/accumulate.rs::the_summary_equals_the_one_of_all_rounds` |
//! | docs/measuring.md | "On PVM (`/sys/module/kvm_pvm` present) the guest's ring-0 code is" | `kvm_run::readable_report_states_the_verdict`, `vmm/src/host.rs::flavor_comes_from_the_loaded_modules`, `faults::an_instruction_kvm_cannot_emulate_is_a_kvm_internal_error_on_pvm` |
//! | docs/compare.md | "The seed claims the latched write cut CPU 0's" | `kvm_compare::compare_measures_every_variant_in_balanced_order_and_outputs_agree`, `cli::the_documented_defaults_are_the_binarys` |
//! | docs/compare.md | "**One VM, interleaved.** All variants run in the same" | `kvm_compare::compare_measures_every_variant_in_balanced_order_and_outputs_agree`, `kvm_compare::without_a_seed_the_clock_picks_one_and_the_report_says_which`, `kvm_compare::a_fresh_vm_per_block_warms_each_up_and_keeps_the_counts`, `vmm/src/compare/plan.rs::the_schedule_is_fixed_by_the_seed` |
//! | docs/compare.md | "**Warm-up.** Every VM starts with `--warmup` rounds (default 20)," | `kvm_compare::a_fresh_vm_per_block_warms_each_up_and_keeps_the_counts`, `claims::compare_counts_the_rounds_whose_methods_disagree`, `cli::the_documented_defaults_are_the_binarys` |
//! | docs/compare.md | "**Metrics per variant**: CPU 0's loop-exit time (the seed's" | `kvm_compare::compare_measures_every_variant_in_balanced_order_and_outputs_agree`, `reference_stats::summaries_match_numpy` |
//! | docs/compare.md | "**Comparison** of every variant with the first named (the" | `vmm/src/stats/inference.rs::the_bootstrap_interval_covers_a_known_shift`, `vmm/src/stats/inference.rs::the_bootstrap_is_reproducible_and_centred_on_no_shift`, `reference_stats::mann_whitney_matches_scipy`, `vmm/src/compare/analyse.rs::distinguishable_needs_the_interval_and_the_test`, `vmm/src/compare/analyse.rs::verdicts_say_sooner_later_or_noise` |
//! | docs/compare.md | "**Outputs**: the readable tables and verdicts on stdout; `--json`" | `kvm_compare::compare_measures_every_variant_in_balanced_order_and_outputs_agree`, `kvm_compare::a_fresh_vm_every_two_blocks_and_every_csv_column`, `vmm/src/compare/csv.rs::each_column_holds_its_value_and_missing_values_are_empty`, `vmm/src/compare/plot.rs::the_axis_ends_at_a_quarter_past_the_largest_p90`, `claims::the_plot_legend_counts_the_rounds_beyond_the_axis`, `soak::a_comparison_by_time_streams_its_rounds_and_summary_records`, `vmm/src/output/progress.rs::a_line_is_drawn_only_when_enabled_and_after_a_second`, `vmm/src/output/progress.rs::the_line_says_rounds_medians_and_times` |
//! | docs/compare.md | "Caveat on the error bars: the bootstrap and the" | `vmm/src/stats/inference.rs::the_bootstrap_is_reproducible_and_centred_on_no_shift`, `vmm/src/compare/plan.rs::every_block_runs_each_variant_once` |
//! | docs/compare.md | "Every variant on this machine (2-core cloud VM, AMD" | `kvm_compare::compare_measures_every_variant_in_balanced_order_and_outputs_agree`, `native::compare_on_host_threads_works_end_to_end` |
//! | docs/compare.md | "KVM (PVM): CPU 0 exit, median / p90" | `kvm_compare::compare_measures_every_variant_in_balanced_order_and_outputs_agree`, `native::compare_on_host_threads_works_end_to_end` |
//! | docs/compare.md | "Cycles; 1,000 measured rounds per variant and 20 warm-up" | `kvm_compare::the_readable_report_has_the_tables_the_seed_and_a_verdict`, `native::compare_on_host_threads_works_end_to_end` |
//! | docs/compare.md | "It does **not** reproduce the seed's claim, and cannot" | `kvm_compare::the_readable_report_has_the_tables_the_seed_and_a_verdict`, `faults::an_instruction_kvm_cannot_emulate_is_a_kvm_internal_error_on_pvm` |
//! | docs/compare.md | "PVM ignores the TSC writes, so no TSC actually" | `vmm/src/analysis/tests.rs::ignored_writes_give_the_would_be_skew_from_tsc_adjust`, `native::the_std_rendezvous_keeps_a_skew_and_linux_moves_only_what_it_wrote` |
//! | docs/compare.md | "On the host backend all variants share the threads" | `native::the_std_rendezvous_keeps_a_skew_and_linux_moves_only_what_it_wrote`, `initial_skew::on_host_threads_xen_std_leaves_the_skew_exactly_as_given`, `initial_skew::on_host_threads_the_writing_variants_remove_the_skew` |
//! | docs/compare.md | "Host-backend differences come in steps of this machine's `rdtsc`" | `native::every_variant_runs_on_1_2_4_and_8_threads` |
//! | docs/compare.md | "With more vCPUs than cores the numbers measure the" | `native::more_threads_than_cpus_are_warned_about_and_still_finish`, `kvm_run::every_variant_on_1_2_and_4_vcpus` |
//! | docs/compare.md | "Caveat on the error bars (see above): rounds are" | `vmm/src/stats/inference.rs::the_bootstrap_is_reproducible_and_centred_on_no_shift` |
//! | docs/host-backend.md | "`--backend host` (for `run` and `compare`; the default is" | `native::run_json_validates_and_says_host_and_the_windows_used`, `native::the_text_report_says_no_hypervisor_and_names_the_cpu` |
//! | docs/host-backend.md | "**One thread per "vCPU"**, started once per run (per" | `vmm/src/backend/host/affinity.rs::threads_are_pinned_only_when_there_are_enough_cpus`, `vmm/src/backend/host/affinity.rs::a_pinned_thread_runs_where_it_was_pinned`, `native::more_threads_than_cpus_are_warned_about_and_still_finish` |
//! | docs/host-backend.md | "**Real instructions**: `lfence; rdtsc`, `pause`, `prefetcht0`. The TSC write" | `vmm/src/backend/host/cpu.rs::a_tsc_write_moves_offset_and_tsc_adjust_together`, `vmm/src/backend/host/cpu.rs::a_tsc_adjust_write_moves_the_offset_by_the_change` |
//! | docs/host-backend.md | "**The same analysis.** After every round, with every thread" | `vmm/src/backend/host/round.rs::results_decode_as_a_guests_would`, `native::compare_on_host_threads_works_end_to_end` |
//! | docs/host-backend.md | "The TSC frequency is **measured once** against CLOCK_MONOTONIC (50" | `vmm/src/backend/host/clock.rs::two_measurements_agree`, `native::run_json_validates_and_says_host_and_the_windows_used` |
//! | docs/host-backend.md | "The JSON's `host` says `"backend": "host"`, `"offset_source": "host_thread"`, and" | `native::run_json_validates_and_says_host_and_the_windows_used`, `vmm/src/host.rs::host_facts_round_trip_and_old_documents_load_as_kvm`, `vmm/src/host.rs::the_host_backend_says_its_offsets_are_per_thread` |
//! | docs/host-backend.md | "`--timeout`, SIGINT and SIGTERM stop it as they stop" | `native::sigterm_stops_a_long_host_run_with_its_report`, `vmm/src/backend/host/tests.rs::the_deadline_stops_a_round_cleanly`, `vmm/src/backend/host/cpu.rs::relax_unwinds_when_aborted_or_late`, `native::guest_options_are_refused_on_the_host_backend` |
//! | docs/host-backend.md | "The table in [compare.md](compare.md), "Results", has every variant on" | `native::compare_on_host_threads_works_end_to_end` |
//! | docs/host-backend.md | "The exit times are ~300 cycles natively against ~70,000-90,000" | `native::every_variant_runs_on_1_2_4_and_8_threads` |
//! | docs/host-backend.md | "**This machine's `rdtsc` advances in steps of ~24.5 cycles**" | `native::every_variant_runs_on_1_2_4_and_8_threads` |
//! | docs/host-backend.md | "This OS itself runs in a VM (the report" | `native::the_text_report_says_no_hypervisor_and_names_the_cpu`, `vmm/src/host.rs::cpuinfo_gives_the_first_model_and_its_flags` |
//! | docs/host-backend.md | "The skew left by Xen's rendezvous is ~100 cycles" | `native::the_std_rendezvous_keeps_a_skew_and_linux_moves_only_what_it_wrote`, `vmm/src/backend/host/tests.rs::the_tsc_rendezvous_removes_a_skew_and_the_std_one_keeps_it` |
//! | docs/host-backend.md | "Method (c)'s error bar is tens of thousands of" | `native::run_json_validates_and_says_host_and_the_windows_used`, `vmm/src/analysis/tests.rs::the_bracket_error_bar_covers_reads_anywhere_in_both_brackets` |
//! | docs/host-backend.md | "`linux-tsc-sync` runs each warp check for a window: Linux" | `vmm/src/cmd/args.rs::windows_parse_and_bad_ones_name_the_fix`, `vmm/src/options.rs::windows_convert_at_the_tsc_frequency`, `native::run_json_validates_and_says_host_and_the_windows_used`, `native::the_kvm_backend_uses_and_reports_the_windows_asked_for`, `sync/tests/linux_threads.rs::windows_follow_packages` |
//! | docs/host-backend.md | "A VM's vCPUs start with one TSC offset, so" | `initial_skew::the_targets_spread_the_skew_from_vcpu_0_to_the_last`, `vmm/src/initial_skew.rs::targets_spread_the_skew_evenly_from_vcpu_0_to_the_last` |
//! | docs/host-backend.md | "KVM: every vCPU's offset is set through the vCPU" | `initial_skew::on_kvm_the_skew_is_applied_exactly_or_the_run_stops_saying_why`, `vmm/src/initial_skew.rs::verification_accepts_exactly_the_targets_even_across_the_wrap` |
//! | docs/host-backend.md | "`--backend host`: the threads' own offsets, set when the" | `initial_skew::on_host_threads_xen_std_leaves_the_skew_exactly_as_given` |
//! | docs/host-backend.md | "The report says what was set (`Initial skew: ..." | `initial_skew::the_cli_reports_the_skew_in_json_and_text` |
//! | docs/host-backend.md | "`xen-std` writes no TSC and leaves the skew to" | `initial_skew::on_host_threads_xen_std_leaves_the_skew_exactly_as_given`, `initial_skew::on_host_threads_the_writing_variants_remove_the_skew`, `vmm/src/backend/host/tests.rs::linux_tsc_sync_compensates_a_skew_it_is_given` |
//! | docs/checks.md | "Seven named checks, each PASS / FAIL / UNDECIDED" | `check::verdicts_match_the_host_and_every_format_is_well_formed`, `vmm/src/check/mod.rs::checks_are_numbered_in_order_with_distinct_ids` |
//! | docs/checks.md | "every vCPU starts with the same TSC offset and" | `vmm/src/check/same_start.rs::exact_offsets_must_be_equal`, `vmm/src/check/same_start.rs::bracketed_offsets_must_agree_within_their_error` |
//! | docs/checks.md | "the single-vCPU expected-behaviour table of the KVM selftest `tsc_msrs_test`:" | `vmm/src/check/tsc_msrs.rs::the_table_matches_the_selftest`, `vmm/src/check/tsc_msrs.rs::a_table_read_as_expected_passes_with_every_stage`, `vmm/src/check/tsc_msrs.rs::expectations_follow_the_selftest_rules` |
//! | docs/checks.md | "after a rendezvous on N vCPUs, per vCPU and" | `vmm/src/check/adjust_offset.rs::equal_deltas_pass_and_one_cycle_off_fails`, `vmm/src/check/adjust_offset.rs::nothing_written_is_nothing_judged` |
//! | docs/checks.md | "after the rendezvous every write took effect (KVM's evidence" | `vmm/src/check/writes_honoured/tests.rs::recorded_reads_tell_an_ignored_write_from_an_honoured_one`, `vmm/src/check/writes_honoured/tests.rs::the_later_read_alone_catches_recorded_ignored_writes`, `vmm/src/check/writes_honoured/tests.rs::a_later_read_too_coarse_for_the_writes_is_undecided`, `vmm/src/check/writes_honoured/tests.rs::undecided_host_evidence_with_a_decisive_guest_passes` |
//! | docs/checks.md | "a guest-visible, lock-ordered warp test (Linux's `check_tsc_warp` pattern) on" | `vmm/src/check/warp.rs::warps_within_the_skew_pass_and_beyond_it_fail`, `vmm/src/check/warp.rs::the_shortest_hand_off_decides_whether_no_warp_means_anything` |
//! | docs/checks.md | "median and p99 skew over the rounds within `--max-skew-ns`" | `vmm/src/check/skew_threshold.rs::check_6_applies_both_limits_to_median_and_p99`, `check::skew_limits_decide_check_6` |
//! | docs/checks.md | "a snapshot after a rendezvous, restored by the documented" | `vmm/src/check/save_restore/tests.rs::a_restore_that_kept_everything_passes`, `vmm/src/check/save_restore/tests.rs::a_clock_shift_the_bound_cannot_tell_from_none_is_undecided`, `vmm/src/check/save_restore/tests.rs::nothing_written_before_the_snapshot_is_nothing_judged`, `vmm/src/check/save_restore/tests.rs::snapped_offsets_and_a_lost_tsc_adjust_fail`, `vmm/src/check/save_restore/tests.rs::a_shift_the_clock_does_not_explain_fails_and_a_stepped_clock_is_undecided` |
//! | docs/checks.md | "Each verdict comes from the evidence: **FAIL** needs evidence" | `vmm/src/check/adjust_offset.rs::unmoved_offsets_are_named_from_the_data`, `vmm/src/check/tsc_msrs.rs::an_ignoring_hypervisor_is_diagnosed_from_the_data`, `vmm/src/check/tsc_msrs.rs::one_misbehaving_stage_does_not_fail_the_later_ones`, `vmm/src/check/warp.rs::no_hand_off_is_undecided`, `check::verdicts_match_the_host_and_every_format_is_well_formed` |
//! | docs/checks.md | "Inside QEMU with `kvm_amd` (real SVM KVM) checks 1-4" | `tools/qemu-kvm/kernel-matrix-check.py::judge_check` |
//! | docs/checks.md | "`--baseline FILE` takes an earlier `check --json` result of" | `vmm/src/check/baseline.rs::a_worse_verdict_regresses`, `vmm/src/check/baseline.rs::missing_checks_regress_and_new_ones_do_not`, `vmm/src/check/baseline.rs::a_grown_median_skew_regresses_beyond_the_tolerance_only`, `check::a_baseline_flags_worse_verdicts_and_accepts_equal_ones` |
//! | docs/checks.md | "Exit codes, the formats CI systems read (JUnit, KTAP," | `check::verdicts_match_the_host_and_every_format_is_well_formed` |
//! | docs/ci.md | "Exit codes of `check`: **0** every check passed (or" | `check::a_baseline_flags_worse_verdicts_and_accepts_equal_ones`, `cli::check_and_compare_exit_2_without_a_usable_kvm_device`, `signals::sigterm_stops_check_and_the_json_judges_what_was_measured` |
//! | docs/ci.md | "`--ktap FILE` writes the results in KTAP version 1," | `claims::a_regressed_skip_fails_in_kunits_parser_too`, `check::verdicts_match_the_host_and_every_format_is_well_formed`, `vmm/src/check/ktap.rs::each_verdict_has_its_line`, `vmm/src/check/ktap.rs::a_regression_is_not_ok_and_an_interruption_is_said` |
//! | docs/ci.md | "`--junit FILE` writes one testsuite with one testcase per" | `check::verdicts_match_the_host_and_every_format_is_well_formed`, `vmm/src/check/junit.rs::escaping_covers_markup_and_control_characters` |
//! | docs/ci.md | "[`.github/workflows/tsc-check.yml`](.github/workflows/tsc-check.yml) runs on GitHub-hosted Linux runners: a udev rule" | `claims::the_github_workflow_opens_kvm_runs_the_tests_and_publishes_junit` |
//! | docs/restore.md | "Every VMM with snapshots or live migration must carry" | `restore::restore_json_matches_the_schema_and_the_host` |
//! | docs/restore.md | "creates a VM in command mode and runs **one" | `restore::restore_json_matches_the_schema_and_the_host`, `restore::the_readable_report_shows_each_method_and_what_it_did` |
//! | docs/restore.md | "takes a **snapshot**: all of guest memory (16 MiB)" | `restore::restore_json_matches_the_schema_and_the_host`, `vmm/src/vstate/vcpu/state.rs::the_completed_out_is_told_from_a_pending_one` |
//! | docs/restore.md | "**destroys** the VM, waits `--delay-ms` (default 100, 0..=60000: a" | `vmm/src/cmd/restore.rs::the_delay_is_bounded_and_says_why`, `restore::a_failure_in_any_step_frees_both_vms` |
//! | docs/restore.md | "**resumes the same guest**: it continues its command loop" | `restore::restore_json_matches_the_schema_and_the_host` |
//! | docs/restore.md | "**The pending port I/O.** A parked vCPU sits at" | `vmm/src/vstate/vcpu/state.rs::the_completed_out_is_told_from_a_pending_one`, `restore::restore_json_matches_the_schema_and_the_host` |
//! | docs/restore.md | "Documentation/virt/kvm/devices/vcpu.rst, "TSC offset": KVM_SET_CLOCK with the source's kvmclock and" | `vmm/src/restore/offsets.rs::relative_offsets_survive_bit_exact`, `vmm/src/restore/offsets.rs::no_scaling_of_the_host_tsc_difference`, `vmm/src/restore/offsets.rs::offsets_wrap_around`, `vmm/src/restore/methods.rs::the_documented_method_names_what_an_old_kernel_lacks`, `restore::a_kernel_without_the_clock_flags_runs_msr_only_and_check_7_skips` |
//! | docs/restore.md | "what many VMMs do: KVM_SET_MSRS of TSC_ADJUST, then of" | `vmm/src/restore/methods.rs::a_write_asks_for_the_offset_of_its_bracket`, `restore::restore_json_matches_the_schema_and_the_host` |
//! | docs/restore.md | "the same, then every IA32_TSC written a second time" | `restore::restore_json_matches_the_schema_and_the_host`, `vmm/src/restore/words.rs::a_second_write_replaced_by_the_first_is_named` |
//! | docs/restore.md | "Per method and vCPU the report has the offset" | `vmm/src/restore/words.rs::a_kept_skew_is_said_to_survive`, `vmm/src/restore/words.rs::a_snapped_offset_is_named_with_whose_offset_it_got`, `vmm/src/restore/words.rs::writes_replaced_by_the_creation_offset_and_a_tsc_that_went_back_are_said`, `restore::the_readable_report_shows_each_method_and_what_it_did`, `vmm/src/restore/offsets.rs::bounds_grow_with_their_intervals` |
//! | docs/restore.md | "Guests tell time by kvmclock, not by raw TSC reads, and the restore failures" | `restore::restore_json_matches_the_schema_and_the_host` |
//! | docs/restore.md | "**kvmclock across the restore.** Every guest reads kvmclock" | `restore::restore_json_matches_the_schema_and_the_host`, `vmm/src/restore/clock_derive_tests.rs::a_kvmclock_that_advanced_by_the_host_time_is_continuous`, `vmm/src/restore/clock_derive_tests.rs::the_host_bracket_is_rounded_outwards` |
//! | docs/restore.md | "**The bound.** The jump is kvmclock's advance minus the host time" | `vmm/src/restore/clock_derive_tests.rs::the_allowance_is_ntp_over_the_interval_and_the_pages_ages`, `vmm/src/restore/clock_derive_tests.rs::a_kvmclock_that_restarted_or_lost_time_jumped_or_went_backwards`, `vmm/src/restore/clock_derive_tests.rs::readings_that_cannot_decide_are_undecided_with_why`, `vmm/src/restore/clock_derive_tests.rs::the_documented_clock_gives_its_set_clock_time_and_a_stepped_clock` |
//! | docs/restore.md | "**The clock after the guest ran again** (after the warp test)" | `vmm/src/restore/keeps_tests.rs::the_master_clock_is_kept_off_broken_or_undecided`, `vmm/src/session/seen.rs::agreement_finds_the_pair_furthest_apart_and_the_widest_bound`, `restore::restore_json_matches_the_schema_and_the_host` |
//! | docs/restore.md | "**A chained restore** (unless `--no-chain`)" | `restore::restore_json_matches_the_schema_and_the_host`, `restore::no_chain_skips_the_second_restore`, `restore::a_failure_in_any_step_frees_both_vms` |
//! | docs/restore.md | "**What the method keeps**, after one and after two restores" | `vmm/src/restore/keeps_tests.rs::which_property_a_method_keeps`, `vmm/src/restore/keeps_tests.rs::the_exact_skew_is_kept_lost_or_unknown`, `vmm/src/restore/keeps_tests.rs::the_clock_after_report_and_the_chain_agree_with_the_measurement`, `restore::restore_json_matches_the_schema_and_the_host` |
//! | docs/restore.md | "All of it is in the JSON per method" | `restore::restore_json_matches_the_schema_and_the_host`, `restore::the_readable_report_shows_each_method_and_what_it_did` |
//! | docs/restore.md | "Two vCPUs, `restore --json --vcpus 2 --delay-ms D --warp-iterations" | `tools/qemu-kvm/kernel-matrix-check.py::judge_restore` |
//! | docs/restore.md | "skew before -> after (cycles)" | `tools/qemu-kvm/kernel-matrix-check.py::judge_restore` |
//! | docs/restore.md | "**documented** kept every relative offset bit-exact on 6.1 and" | `tools/qemu-kvm/kernel-matrix-check.py::judge_restore`, `vmm/src/restore/offsets.rs::bounds_grow_with_their_intervals` |
//! | docs/restore.md | "**msr** always loses the skew: a host IA32_TSC write" | `tools/qemu-kvm/kernel-matrix-check.py::judge_restore`, `vmm/src/restore/words.rs::a_snapped_offset_is_named_with_whose_offset_it_got` |
//! | docs/restore.md | "**msr-twice** adds nothing good: on 6.12 vCPU 0's second" | `vmm/src/restore/words.rs::a_second_write_replaced_by_the_first_is_named` |
//! | docs/restore.md | "**PVM** cannot offset the TSC: the offsets read 0" | `vmm/src/check/save_restore/tests.rs::a_hypervisor_that_ignores_offsets_fails_with_the_data`, `restore::restore_json_matches_the_schema_and_the_host` |
//! | docs/restore.md | "Exit codes as `run`: 0 every method asked for" | `restore::bad_input_is_refused_with_the_fix`, `restore::a_restore_that_fails_half_way_reports_what_it_measured`, `restore::a_failure_in_any_step_frees_both_vms`, `restore::sigint_during_the_delay_keeps_the_snapshot`, `signals::restore_under_timeout_keeps_its_report`, `restore::a_kernel_without_the_clock_flags_runs_msr_only_and_check_7_skips` |
//! | docs/restore.md | "**SKIP** where the kernel lacks KVM_VCPU_TSC_OFFSET or the KVM_CLOCK_REALTIME" | `restore::a_kernel_without_the_clock_flags_runs_msr_only_and_check_7_skips`, `vmm/src/check/save_restore/tests.rs::an_unfinished_measurement_is_not_a_pass` |
//! | docs/restore.md | "**FAIL** when a saved offset did not move by" | `vmm/src/check/save_restore/tests.rs::a_hypervisor_that_ignores_offsets_fails_with_the_data`, `vmm/src/check/save_restore/tests.rs::snapped_offsets_and_a_lost_tsc_adjust_fail`, `vmm/src/check/save_restore/tests.rs::a_guest_tsc_that_went_back_or_stood_still_fails`, `vmm/src/check/save_restore/tests.rs::a_shift_the_clock_does_not_explain_fails_and_a_stepped_clock_is_undecided` |
//! | docs/restore.md | "**UNDECIDED** when CLOCK_REALTIME moved against the TSC by more" | `vmm/src/check/save_restore/tests.rs::a_shift_the_clock_does_not_explain_fails_and_a_stepped_clock_is_undecided`, `vmm/src/check/save_restore/tests.rs::a_clock_shift_the_bound_cannot_tell_from_none_is_undecided`, `vmm/src/check/save_restore/tests.rs::nothing_written_before_the_snapshot_is_nothing_judged` |
//! | docs/restore.md | "**FAIL** too, from the clock part" | `vmm/src/check/save_restore_clock.rs::backwards_jumped_and_a_broken_promise_fail`, `vmm/src/check/save_restore_clock.rs::an_undecided_kvmclock_is_not_a_failure_and_a_lost_chain_skew_is`, `vmm/src/check/save_restore_clock.rs::a_continuous_kvmclock_and_a_kept_skew_are_informative` |
//! | docs/restore.md | "**PASS** otherwise; the reason says what the warp test" | `vmm/src/check/save_restore/tests.rs::a_restore_that_kept_everything_passes` |
//! | docs/restore.md | "Measured (`check --json --rounds 20 --warp-iterations 2000` inside QEMU;" | `tools/qemu-kvm/kernel-matrix-check.py::judge_check` |
//! | docs/restore.md | "The warp test inside QEMU mostly cannot resolve the" | `tools/qemu-kvm/kernel-matrix-check.py::judge_check`, `vmm/src/check/warp.rs::the_shortest_hand_off_decides_whether_no_warp_means_anything` |
//! | docs/kernel-matrix.md | "These development machines only have PVM, which ignores TSC" | `tools/qemu-kvm/kernel-matrix-check.py::judge_boot`, `tools/qemu-kvm/kernel-matrix-check.py::judge_kernel` |
//! | docs/kernel-matrix.md | "[`tools/qemu-kvm/kernel-matrix.sh`](tools/qemu-kvm/kernel-matrix.sh), run by `.ci/run`, builds the binary and the" | `tools/qemu-kvm/kernel-matrix-check.py::judge_check`, `tools/qemu-kvm/kernel-matrix-check.py::judge_ktap`, `tools/qemu-kvm/kernel-matrix-check.py::judge_run`, `tools/qemu-kvm/kernel-matrix-check.py::judge_restore`, `tools/qemu-kvm/kernel-matrix-check.py::judge_skew`, `tools/qemu-kvm/kernel-matrix-check.py::judge_tests` |
//! | docs/kernel-matrix.md | "Measured by that step in `.ci/run` on a clean" | `tools/qemu-kvm/kernel-matrix-check.py::judge_check`, `tools/qemu-kvm/kernel-matrix-check.py::judge_run`, `tools/qemu-kvm/kernel-matrix-check.py::judge_restore`, `tools/qemu-kvm/kernel-matrix-check.py::judge_skew` |
//! | docs/kernel-matrix.md | "initial skew 10^8: xen-std / linux-tsc-sync / Xen's writing" | `tools/qemu-kvm/kernel-matrix-check.py::judge_check`, `tools/qemu-kvm/kernel-matrix-check.py::judge_restore`, `tools/qemu-kvm/kernel-matrix-check.py::judge_skew`, `tools/qemu-kvm/kernel-matrix-check.py::judge_tests` |
//! | docs/kernel-matrix.md | "Check 6 SKIPs because no limit was given. Check" | `tools/qemu-kvm/kernel-matrix-check.py::judge_check`, `tools/qemu-kvm/kernel-matrix-check.py::judge_run` |
//! | docs/kernel-matrix.md | "Why the kernels differ, and where the tool follows" | `vmm/src/check/tsc_msrs.rs::expectations_follow_the_selftest_rules` |
//! | docs/kernel-matrix.md | "**Linux 5.10, commit 0c899c25**: guest writes of IA32_TSC are" | `vmm/src/check/tsc_msrs.rs::expectations_follow_the_selftest_rules`, `tools/qemu-kvm/kernel-matrix-check.py::judge_check` |
//! | docs/kernel-matrix.md | "**Linux 5.16**: the vCPU attribute `KVM_VCPU_TSC_OFFSET` and the KVM_CLOCK_REALTIME" | `kvm_run::offsets_from_debugfs_are_exact`, `vmm/src/restore/methods.rs::the_documented_method_names_what_an_old_kernel_lacks`, `initial_skew::on_kvm_the_skew_is_applied_exactly_or_the_run_stops_saying_why`, `tools/qemu-kvm/kernel-matrix-check.py::judge_skew` |
//! | docs/kernel-matrix.md | "**Linux 6.7, commit bf328e22**: a VM's first host (user-space)" | `tools/qemu-kvm/kernel-matrix-check.py::judge_restore`, `vmm/src/restore/words.rs::a_snapped_offset_is_named_with_whose_offset_it_got` |
//! | docs/long-runs.md | "A soak runs for hours; its memory must not" | `soak::run_memory_is_flat_from_10k_to_100k_rounds_on_the_host_backend`, `soak::a_run_by_time_ends_on_time_reports_and_writes_summary_records`, `faults::sigterm_stops_the_run_and_the_json_report_keeps_the_rounds` |
//! | docs/long-runs.md | "**`--duration DUR`** (`30s`, `90m`, `8h`, `1h30m`; at most `30d`;" | `vmm/src/cmd/args.rs::durations_parse_with_their_units_and_add_up`, `vmm/src/cmd/run/tests.rs::a_duration_is_shared_by_the_variants`, `vmm/src/compare/plan.rs::a_schedule_by_time_ends_at_a_block_boundary_after_its_time`, `soak::by_time_the_watchdog_deadline_is_per_round`, `vmm/src/cmd/run/tests.rs::by_time_the_watchdog_is_per_round` |
//! | docs/long-runs.md | "**Nothing is held per round.** The rounds are generated" | `soak::run_memory_is_flat_on_kvm`, `soak::histogram_statistics_match_the_exact_ones_within_the_stated_precision`, `soak::inference_from_histograms_agrees_with_the_exact_inference`, `vmm/src/stats/distribution/tests.rs::memory_does_not_grow_past_the_limit`, `vmm/src/compare/plan.rs::a_huge_schedule_allocates_nothing_up_front` |
//! | docs/long-runs.md | "**Streams.** `run --json` is written as the rounds complete:" | `vmm/src/report/stream.rs::a_streamed_document_is_one_valid_document`, `signals::run_keeps_its_report_through_a_process_group_kill`, `faults::sigterm_stops_the_run_and_the_json_report_keeps_the_rounds`, `soak::a_run_by_time_ends_on_time_reports_and_writes_summary_records`, `vmm/src/report/summary.rs::a_record_is_due_once_per_interval` |
//! | docs/long-runs.md | "**`--backend host`** runs every round of a variant on" | `vmm/src/run/mod.rs::a_host_run_with_round_deadlines_numbers_its_rounds_as_one_run`, `vmm/src/run/mod.rs::a_host_run_by_time_ends_when_its_time_is_up` |
//! | docs/long-runs.md | "A one-line progress report (rounds, median skew so far," | `vmm/src/output/progress.rs::a_line_is_drawn_only_when_enabled_and_after_a_second`, `vmm/src/output/progress.rs::the_line_says_rounds_medians_and_times` |
//! | docs/long-runs.md | "`tests/soak.rs` checks it: peak memory of `run` (10k against" | `soak::run_memory_is_flat_from_10k_to_100k_rounds_on_the_host_backend`, `soak::run_memory_is_flat_on_kvm`, `soak::compare_memory_is_flat_from_5k_to_50k_rounds_on_the_host_backend`, `soak::histogram_statistics_match_the_exact_ones_within_the_stated_precision`, `soak::runs_and_comparisons_by_time_on_kvm_end_on_time`, `soak::a_compare_of_a_hundred_million_rounds_starts_at_once_and_stops_on_sigterm`, `soak::a_run_of_u32_max_rounds_starts_at_once_and_stops_on_sigterm`, `soak::rounds_and_durations_that_cannot_be_honoured_are_refused` |
//! | docs/long-runs.md | "`--json` prints one document, schema `tsc-rendezvous/run/v1`, specified in [`vmm/schema/run-v1.json`](vmm/schema/run-v1.json)" | `kvm_run::json_report_matches_the_schema_and_the_data` |
//! | docs/long-runs.md | "The document is streamed (see above): each run's rounds" | `soak::run_memory_is_flat_on_kvm`, `vmm/src/report/accumulate.rs::past_the_limit_the_summary_is_within_the_precision` |
//! | docs/speed.md | "Rounds run back to back in one VM (no" | `alloc::extra_rounds_cost_only_their_result_records`, `kvm_run::every_variant_on_1_2_and_4_vcpus` |
//! | docs/speed.md | "The benchmark (`tools/bench`, not a test: timings depend on" | `soak::run_memory_is_flat_on_kvm` |
//! | docs/speed.md | "On this machine (2 cores, PVM), one run of" | `kvm_run::every_variant_on_1_2_and_4_vcpus` |
//! | docs/speed.md | "measured" | `kvm_run::every_variant_on_1_2_and_4_vcpus`, `hygiene::a_thousand_vms_leave_no_threads_fds_or_memory_behind` |
//! | docs/speed.md | "The target of 1,000 rounds/s for 2 vCPUs is" | `kvm_run::every_variant_on_1_2_and_4_vcpus`, `native::more_threads_than_cpus_are_warned_about_and_still_finish` |
//! | docs/speed.md | "Memory and CPU as the rounds grow (2 vCPUs;" | `soak::run_memory_is_flat_on_kvm`, `soak::compare_memory_is_flat_from_5k_to_50k_rounds_on_the_host_backend` |
//! | docs/speed.md | "CPU per round at 10k / 100k / 1M" | `soak::run_memory_is_flat_on_kvm`, `soak::run_memory_is_flat_from_10k_to_100k_rounds_on_the_host_backend`, `soak::compare_memory_is_flat_from_5k_to_50k_rounds_on_the_host_backend` |
//! | docs/speed.md | "Peak RSS stays under the goal of 1.2x from" | `soak::run_memory_is_flat_on_kvm`, `soak::run_memory_is_flat_from_10k_to_100k_rounds_on_the_host_backend`, `alloc::extra_rounds_cost_only_their_result_records` |
//! | docs/troubleshooting.md | "A run never hangs and never throws away what" | `faults::a_stalled_vcpu_is_caught_by_the_watchdog_with_its_round_and_iteration`, `faults::a_guest_panic_is_reported_with_its_text`, `cli::zero_vcpus_is_refused`, `faults::ctrl_c_stops_the_run_and_keeps_the_rounds`, `faults::sigterm_stops_the_run_and_the_json_report_keeps_the_rounds` |
//! | docs/troubleshooting.md | "the run completed and was reported" | `faults::a_delayed_write_shows_up_as_skew_not_as_write_latency`, `vmm/src/cmd/common.rs::exit_codes_are_the_documented_ones` |
//! | docs/troubleshooting.md | "the run failed after it started: a timeout, a" | `faults::a_stalled_vcpu_is_caught_by_the_watchdog_with_its_round_and_iteration`, `faults::a_triple_fault_names_the_vcpu_and_round_and_its_registers_follow`, `faults::a_guest_panic_is_reported_with_its_text`, `faults::a_cpu_exception_names_its_vector_rip_and_error_code`, `faults::a_record_with_impossible_values_is_refused`, `faults::a_port_write_to_an_unknown_port_is_refused` |
//! | docs/troubleshooting.md | "it could not run: bad arguments, no usable `/dev/kvm`," | `cli::zero_vcpus_is_refused`, `cli::a_missing_kvm_device_says_how_to_get_one`, `cli::a_kvm_lacking_a_capability_names_it`, `cli::a_guest_that_is_not_an_elf_is_refused`, `faults::an_unwritable_output_file_is_a_usage_error` |
//! | docs/troubleshooting.md | "stopped by SIGINT (Ctrl-C); completed rounds reported" | `faults::ctrl_c_stops_the_run_and_keeps_the_rounds`, `signals::ctrl_c_stops_compare_even_when_the_shell_ignores_it`, `signals::ctrl_c_stops_check_and_the_table_is_printed` |
//! | docs/troubleshooting.md | "stopped by SIGTERM; completed rounds reported" | `faults::sigterm_stops_the_run_and_the_json_report_keeps_the_rounds`, `signals::sigterm_stops_compare_and_every_output_keeps_the_measured_rounds`, `signals::sigterm_stops_check_and_the_json_judges_what_was_measured` |
//! | docs/troubleshooting.md | "These hold for `run` and `compare`; `check` has its" | `faults::compare_exits_1_when_the_watchdog_fires_and_keeps_what_it_measured`, `check::a_baseline_flags_worse_verdicts_and_accepts_equal_ones`, `signals::check_keeps_its_report_through_a_process_group_kill` |
//! | docs/troubleshooting.md | "Each variant's run has a deadline: by default 60" | `faults::a_stalled_vcpu_is_caught_by_the_watchdog_with_its_round_and_iteration`, `faults::a_stall_in_the_first_round_reports_no_rounds_but_still_ends`, `faults::the_watchdog_joins_every_vcpu_thread_within_the_grace_period`, `vmm/src/options.rs::the_default_timeout_grows_with_the_work`, `cli::the_documented_defaults_are_the_binarys`, `cli::help_documents_the_options` |
//! | docs/troubleshooting.md | "(one line). Each vCPU publishes where it is: at" | `vmm/src/watchdog.rs::a_timeout_says_who_was_where_and_what_to_do`, `faults::a_stalled_vcpu_is_caught_by_the_watchdog_with_its_round_and_iteration`, `contract/src/lib.rs::progress_words_round_trip_and_garbage_is_invalid` |
//! | docs/troubleshooting.md | "`--output FILE` writes one JSON object per line, one" | `faults::sigterm_stops_the_run_and_the_json_report_keeps_the_rounds`, `faults::a_vcpu_reporting_the_wrong_round_is_refused`, `signals::ctrl_c_stops_run_even_when_the_shell_ignores_it`, `signals::ctrl_c_stops_compare_even_when_the_shell_ignores_it`, `signals::ctrl_c_stops_check_even_when_the_shell_ignores_it`, `signals::ctrl_c_stops_restore_even_when_the_shell_ignores_it`, `signals::sigterm_stops_check_and_the_json_judges_what_was_measured`, `signals::sigterm_stops_compare_and_every_output_keeps_the_measured_rounds` |
//! | docs/troubleshooting.md | "Only the first signal counts; what follows it while" | `signals::run_under_timeout_keeps_its_report`, `signals::compare_under_timeout_keeps_its_report`, `signals::check_under_timeout_keeps_its_report`, `signals::restore_under_timeout_keeps_its_report`, `signals::run_keeps_its_report_through_a_process_group_kill`, `signals::compare_keeps_its_report_through_a_process_group_kill`, `signals::check_keeps_its_report_through_a_process_group_kill`, `signals::restore_keeps_its_report_through_a_process_group_kill`, `signals::the_issues_timeout_command_keeps_its_json_every_time`, `signals::a_second_sigint_within_the_grace_keeps_the_report`, `signals::a_second_ctrl_c_kills_the_process_at_once`, `vmm/src/stop.rs::only_a_late_second_sigint_escalates` |
//! | docs/troubleshooting.md | "join the `kvm` group (`sudo usermod -aG kvm $USER`," | `cli::an_unreadable_kvm_device_says_how_to_get_access` |
//! | docs/troubleshooting.md | "load `kvm_intel`/`kvm_amd`, or enable nested virtualisation for this VM" | `cli::a_missing_kvm_device_says_how_to_get_one` |
//! | docs/troubleshooting.md | "the device answered KVM_GET_API_VERSION with something other than 12" | `cli::a_device_that_is_not_kvm_is_named` |
//! | docs/troubleshooting.md | "the kernel's KVM is too old for this tool" | `cli::a_kvm_lacking_a_capability_names_it` |
//! | docs/troubleshooting.md | "`N vCPUs do not fit the guest memory layout;" | `cli::more_vcpus_than_kvm_or_the_layout_allows_is_refused`, `cli::too_many_vcpus_for_the_layout_is_refused` |
//! | docs/troubleshooting.md | "`--guest` is not an ELF, is truncated, is position-independent," | `cli::a_guest_that_is_not_an_elf_is_refused`, `cli::a_truncated_guest_is_refused`, `cli::a_position_independent_guest_is_refused`, `cli::a_guest_with_a_segment_outside_guest_memory_is_refused` |
//! | docs/troubleshooting.md | "the watchdog fired; see above" | `faults::a_stalled_vcpu_is_caught_by_the_watchdog_with_its_round_and_iteration` |
//! | docs/troubleshooting.md | "the vCPU shut down; its registers follow (on SVM" | `faults::a_triple_fault_names_the_vcpu_and_round_and_its_registers_follow` |
//! | docs/troubleshooting.md | "the guest gave up; its console text follows" | `faults::a_guest_panic_is_reported_with_its_text` |
//! | docs/troubleshooting.md | "an exception reached the guest's IDT; vector, RIP and" | `faults::a_cpu_exception_names_its_vector_rip_and_error_code` |
//! | docs/troubleshooting.md | "KVM could not emulate an instruction (on PVM: an" | `faults::an_instruction_kvm_cannot_emulate_is_a_kvm_internal_error_on_pvm` |
//! | docs/troubleshooting.md | "the guest broke the port protocol (unknown port or" | `faults::a_port_write_to_an_unknown_port_is_refused`, `faults::a_port_write_of_the_wrong_size_is_refused` |
//! | docs/troubleshooting.md | "the record the guest wrote failed validation (wrong magic," | `faults::a_record_with_an_index_out_of_range_is_refused`, `faults::a_record_with_impossible_values_is_refused` |
//! | docs/troubleshooting.md | "`vCPU k reported the end of round ...` /" | `faults::a_vcpu_reporting_the_wrong_round_is_refused`, `faults::a_vcpu_that_finishes_early_is_refused` |
//! | docs/troubleshooting.md | "you (or a supervisor) stopped the run" | `faults::ctrl_c_stops_the_run_and_keeps_the_rounds`, `faults::sigterm_stops_the_run_and_the_json_report_keeps_the_rounds` |
//! | docs/troubleshooting.md | "Everything the guest writes (records, progress slots, the semaphore," | `fuzz::a_truncated_guest_is_refused_exactly_when_it_lacks_what_is_loaded`, `contract/src/lib.rs::validation_catches_each_inconsistency`, `contract/src/lib.rs::progress_words_round_trip_and_garbage_is_invalid`, `claims::ci_runs_every_step_the_readme_names` |
//! | docs/troubleshooting.md | "`--inject KIND[,vcpu=K][,round=R][,iter=I][,cycles=C]` makes the guest misbehave on purpose, so" | `faults::every_fault_kind_has_a_test_here`, `faults::compare_exits_1_on_a_guest_fault_and_keeps_what_it_measured`, `vmm/src/cmd/mod.rs::injections_parse_and_bad_ones_name_the_fix`, `cli::an_injection_outside_the_run_is_refused` |
//! | docs/troubleshooting.md | "spins forever at the start of round R, iteration" | `faults::a_stalled_vcpu_is_caught_by_the_watchdog_with_its_round_and_iteration` |
//! | docs/troubleshooting.md | "spins C TSC cycles before its final TSC write" | `faults::a_delayed_write_shows_up_as_skew_not_as_write_latency` |
//! | docs/troubleshooting.md | "triple-faults in round R, iteration I" | `faults::a_triple_fault_names_the_vcpu_and_round_and_its_registers_follow` |
//! | docs/troubleshooting.md | "panics in round R, iteration I" | `faults::a_guest_panic_is_reported_with_its_text` |
//! | docs/troubleshooting.md | "reports round R with a 2-byte port write" | `faults::a_port_write_of_the_wrong_size_is_refused` |
//! | docs/troubleshooting.md | "writes a record naming vCPU N+1000 in round R" | `faults::a_record_with_an_index_out_of_range_is_refused` |
//! | docs/troubleshooting.md | "writes a record whose value written is below its" | `faults::a_record_with_impossible_values_is_refused` |
//! | docs/troubleshooting.md | "exit 1, `CPU exception #GP (vector 13) at rip=...," | `faults::a_cpu_exception_names_its_vector_rip_and_error_code` |
//! | docs/troubleshooting.md | "copies `xorps xmm0, xmm0; ret` onto its stack at" | `faults::an_instruction_kvm_cannot_emulate_is_a_kvm_internal_error_on_pvm` |
//! | docs/troubleshooting.md | "reports the end of round R to port 0x5ff" | `faults::a_port_write_to_an_unknown_port_is_refused` |
//! | docs/troubleshooting.md | "exit 1, `vCPU K reported the end of round" | `faults::a_vcpu_reporting_the_wrong_round_is_refused` |
//! | docs/troubleshooting.md | "exit 1, `vCPU K reported it had finished every" | `faults::a_vcpu_that_finishes_early_is_refused` |
//! | docs/troubleshooting.md | "Two environment variables exist only for the tests of" | `cli::a_device_that_is_not_kvm_is_named`, `cli::a_kvm_lacking_a_capability_names_it` |

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

/// The repository's root.
fn root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// One row of the table above.
struct Row {
    page: String,
    quote: String,
    tests: Vec<String>,
}

/// The rows of the table above.
fn table() -> Vec<Row> {
    include_str!("claims.rs")
        .lines()
        .take_while(|l| l.starts_with("//!"))
        .filter_map(|l| l.strip_prefix("//! | "))
        .filter(|l| !l.starts_with("---") && !l.starts_with("page |"))
        .map(|l| {
            let cells: Vec<&str> = l.trim_end_matches(" |").splitn(3, " | ").collect();
            assert_eq!(cells.len(), 3, "a row has three cells: {l}");
            let quote = cells[1]
                .strip_prefix('"')
                .and_then(|q| q.strip_suffix('"'))
                .unwrap_or_else(|| panic!("a claim is quoted: {l}"));
            Row {
                page: cells[0].to_string(),
                quote: quote.to_string(),
                tests: cells[2]
                    .split('`')
                    .skip(1)
                    .step_by(2)
                    .map(str::to_string)
                    .collect(),
            }
        })
        .collect()
}

/// Sections that only point elsewhere: the README's page index and its
/// layout of the repository.
const NAVIGATION: &[(&str, &str)] = &[
    ("README.md", "Documentation"),
    ("README.md", "Layout of the repository"),
];

/// Tables of figures measured once: each is one claim, named by the start
/// of its header row.
const MEASURED_TABLES: &[&str] = &[
    "| kernel | offsets from",
    "| variant | KVM (PVM)",
    "| kernel | D ms",
    "| what | measured",
    "| command, backend | peak RSS",
];

/// One claim of the documentation: a paragraph, a bullet, a table row, or
/// a table of measured figures; its text with whitespace collapsed.
struct Claim {
    page: &'static str,
    section: String,
    text: String,
}

fn flat(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn is_bullet(line: &str) -> bool {
    let t = line.trim_start();
    if t.starts_with("- ") || t.starts_with("* ") {
        return true;
    }
    let digits = line.chars().take_while(char::is_ascii_digit).count();
    digits > 0 && line[digits..].starts_with(". ")
}

/// Every claim of one page.
fn claims_of(page: &'static str, text: &str) -> Vec<Claim> {
    let mut out: Vec<(String, String)> = Vec::new();
    let (mut section, mut code) = (String::new(), false);
    let mut current: Option<String> = None;
    let mut table: Option<Vec<String>> = None;
    let measured = |header: &str| MEASURED_TABLES.iter().any(|h| header.starts_with(h));
    for line in text.lines() {
        let flush = |out: &mut Vec<(String, String)>, current: &mut Option<String>, s: &str| {
            if let Some(c) = current.take() {
                out.push((s.to_string(), flat(&c)));
            }
        };
        if line.starts_with("```") {
            flush(&mut out, &mut current, &section);
            code = !code;
            continue;
        }
        if code {
            continue;
        }
        if line.starts_with('#') {
            flush(&mut out, &mut current, &section);
            section = line.trim_start_matches('#').trim().to_string();
            table = None;
            continue;
        }
        if NAVIGATION.contains(&(page, section.as_str())) {
            continue;
        }
        if line.starts_with('|') {
            flush(&mut out, &mut current, &section);
            match table.as_mut() {
                None => {
                    if measured(line) {
                        out.push((section.clone(), flat(line)));
                    }
                    table = Some(vec![line.to_string()]);
                }
                Some(t) => {
                    t.push(line.to_string());
                    if t.len() > 2 && !measured(&t[0]) {
                        out.push((section.clone(), flat(line)));
                    }
                }
            }
            continue;
        }
        table = None;
        if line.trim().is_empty() || line.starts_with("![") {
            flush(&mut out, &mut current, &section);
            continue;
        }
        if is_bullet(line) {
            flush(&mut out, &mut current, &section);
            current = Some(line.trim().to_string());
            continue;
        }
        match current.as_mut() {
            Some(c) => {
                c.push(' ');
                c.push_str(line);
            }
            None => current = Some(line.to_string()),
        }
    }
    if let Some(c) = current {
        out.push((section.clone(), flat(&c)));
    }
    out.into_iter()
        // The page's opening line says what the page is about and links
        // back; a short line ending in ':' introduces the claims after it.
        .filter(|(_, t)| !t.contains("Back to the [README]"))
        .filter(|(_, t)| !(t.ends_with(':') && t.split(' ').count() < 8))
        .map(|(section, text)| Claim {
            page,
            section,
            text,
        })
        .collect()
}

/// Every claim of the documentation.
fn claims() -> Vec<Claim> {
    common::docs::PAGES
        .iter()
        .flat_map(|(page, text)| claims_of(page, text))
        .collect()
}

/// Whether `test` names a test of the repository: `NAME::FN` is `#[test] fn
/// FN` in tests/NAME.rs, `PATH::FN` the same in PATH, and for the kernel
/// matrix's checker (Python) `def FN(`.
fn test_exists(test: &str) -> Result<(), String> {
    let (source, name) = test
        .rsplit_once("::")
        .ok_or_else(|| format!("{test} is not FILE::TEST"))?;
    let path = if source.contains('/') {
        root().join(source)
    } else {
        root().join("tests").join(format!("{source}.rs"))
    };
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("{test}: cannot read {}: {e}", path.display()))?;
    if source.ends_with(".py") {
        return text
            .contains(&format!("def {name}("))
            .then_some(())
            .ok_or_else(|| format!("{test}: no def {name} in {source}"));
    }
    let at = text
        .find(&format!("fn {name}("))
        .ok_or_else(|| format!("{test}: no fn {name} in {source}"))?;
    // The attributes and doc comments right above it hold #[test].
    let above: Vec<&str> = text[..at]
        .lines()
        .rev()
        .skip(1)
        .map(str::trim)
        .take_while(|l| l.starts_with("#[") || l.starts_with("///") || l.starts_with("//"))
        .collect();
    let this_line = text[..at].lines().last().unwrap_or("").trim();
    if above.contains(&"#[test]") || this_line.starts_with("#[test]") {
        Ok(())
    } else {
        Err(format!("{test}: fn {name} in {source} is not a #[test]"))
    }
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
fn the_claims_table_maps_every_claim_to_a_real_test() {
    let rows = table();
    let all = claims();
    assert!(
        all.len() > 150,
        "the documentation parses: {} claims",
        all.len()
    );
    assert!(
        rows.len() >= all.len() / 2,
        "the table parses: {} rows",
        rows.len()
    );
    // Every quote is a claim of its page, and names real tests.
    let mut broken = Vec::new();
    for r in &rows {
        if !all
            .iter()
            .any(|c| c.page == r.page && c.text.contains(&r.quote))
        {
            broken.push(format!(
                "{}: \"{}\" is no claim of that page",
                r.page, r.quote
            ));
        }
        if r.tests.is_empty() {
            broken.push(format!("{}: \"{}\" names no test", r.page, r.quote));
        }
        broken.extend(r.tests.iter().filter_map(|t| test_exists(t).err()));
    }
    // Every claim has a row.
    for c in &all {
        let mapped = rows
            .iter()
            .any(|r| r.page == c.page && c.text.contains(&r.quote));
        if !mapped {
            broken.push(format!(
                "{} § {}: no row maps the claim \"{:.160}\"",
                c.page, c.section, c.text
            ));
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
    // Every fault kind, the documentation's and the contract's.
    let kinds = readme_table("### Fault injection");
    assert!(kinds.len() >= 7, "{kinds:?}");
    let names: Vec<&str> = Inject::ALL[1..].iter().map(|k| k.name()).collect();
    for kind in &kinds {
        let kind = kind.trim_matches('`');
        assert!(
            names.contains(&kind),
            "the documentation lists an unknown kind {kind}"
        );
    }
    for kind in &names {
        let documented = kinds.iter().any(|k| k.trim_matches('`') == *kind);
        assert!(
            documented || AWAITING_README.contains(kind),
            "the fault kind {kind} is not in the fault-injection table"
        );
    }
}

/// The checker above must see what it is meant to: a made-up page whose
/// claims it cuts as documented, and a test that is not a test.
#[test]
fn the_claims_checker_cuts_pages_into_their_claims() {
    let page = "# T\n\nIntro line. Back to the [README](../README.md).\n\n## A\n\nOne para\nwrapped.\n\n\
                - a bullet\n  continued\n- another\n\n```\ncode, not a claim\n```\n\n\
                | h1 | h2 |\n|---|---|\n| r1 | x |\n| r2 | y |\n\n| what | measured |\n|---|---|\n| 1 | 2 |\n\n\
                Short intro:\n";
    let got: Vec<String> = claims_of("docs/x.md", page)
        .into_iter()
        .map(|c| c.text)
        .collect();
    assert_eq!(
        got,
        [
            "One para wrapped.",
            "- a bullet continued",
            "- another",
            "| r1 | x |",
            "| r2 | y |",
            "| what | measured |",
        ]
    );
    assert!(test_exists("claims::the_claims_checker_cuts_pages_into_their_claims").is_ok());
    assert!(test_exists("claims::table").is_err(), "a helper is no test");
    assert!(test_exists("claims::no_such_test").is_err());
    assert!(test_exists("tools/qemu-kvm/kernel-matrix-check.py::judge_check").is_ok());
}

/// "The KVM tests skip with a message when `/dev/kvm` is not usable, except
/// when the `CI` environment variable is set: then they fail."
#[test]
fn the_kvm_tests_skip_without_kvm_unless_ci_is_set() {
    let missing = std::path::Path::new("/nonexistent/kvm");
    assert!(!common::kvm_usable_or_skip(missing, false), "skipped");
    let failed = std::panic::catch_unwind(|| common::kvm_usable_or_skip(missing, true));
    assert!(
        failed.is_err(),
        "with CI set a missing /dev/kvm fails the test"
    );
}

/// "`.ci/run` runs formatting, clippy, the tests, a bounded fuzzing run,
/// the kernel matrix inside QEMU and smoke runs of `run` and `compare`,
/// exactly as CI does", with `CI` set (the KVM tests then fail instead of
/// skipping).
#[test]
fn ci_runs_every_step_the_readme_names() {
    let ci = std::fs::read_to_string(root().join(".ci/run")).expect(".ci/run is readable");
    let steps: Vec<&str> = ci
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#'))
        .collect();
    let runs = |what: &str| steps.iter().any(|l| l.contains(what));
    for step in [
        "export CI=",
        "cargo fmt --all --check",
        "cargo clippy --workspace --all-targets",
        "-D warnings",
        "cargo test --workspace",
        "timeout 900 cargo test --release --locked --test fuzz",
        "tools/qemu-kvm/kernel-matrix.sh",
        "cargo run --release --locked -- --rounds",
        "cargo run --release --locked -- compare",
    ] {
        assert!(runs(step), ".ci/run does not run `{step}`");
    }
}

/// "`.github/workflows/tsc-check.yml` runs on GitHub-hosted Linux runners and
/// uses the action as another repository would": the workflow runs the action
/// (`uses: ./`), then the tests with `CI` set, then publishes the action's
/// JUnit file; the action opens `/dev/kvm` with a udev rule (it is
/// `root:kvm 0660` there), mounts debugfs, and then runs `check` with JSON,
/// JUnit, KTAP and Markdown, in that order.
#[test]
fn the_github_workflow_opens_kvm_runs_the_tests_and_publishes_junit() {
    let read = |path: &str| {
        std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
    };
    let (wf, action) = (read(".github/workflows/tsc-check.yml"), read("action.yml"));
    let at = |text: &str, what: &str| {
        text.find(what)
            .unwrap_or_else(|| panic!("no `{what}` in {}", &text[..text.len().min(80)]))
    };
    assert!(wf.contains("runs-on: ubuntu-latest"));
    let uses = at(&wf, "uses: ./");
    let tests = at(&wf, "run: cargo test --workspace");
    let publish = at(&wf, "report_paths: ${{ steps.check.outputs.junit-file }}");
    assert!(
        uses < tests && tests < publish,
        "action, tests, publish: in that order"
    );
    assert!(
        wf[uses..tests].contains(r#"CI: "true""#),
        "the tests run with CI set"
    );
    let udev = at(&action, r#"KERNEL=="kvm", GROUP="kvm", MODE="0666""#);
    let debugfs = at(&action, "mount -t debugfs debugfs /sys/kernel/debug");
    let check = at(&action, "args=(check ");
    assert!(
        udev < debugfs && debugfs < check,
        "kvm, debugfs, check: in that order"
    );
    let args = &action[check..check + 200.min(action.len() - check)];
    for flag in ["--json", "--junit", "--ktap", "--markdown"] {
        assert!(args.contains(flag), "check runs with {flag}: {args}");
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
        rel_offset_guest: None,
        rel_offset_guest_error: None,
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
            skew_cycles_guest: None,
            skew_cycles_guest_error: None,
            writes_honoured: Some(false),
            undecided_vcpus: 0,
            skew_basis: SkewBasis::Offsets,
            cpu0_exit_latency_cycles: Some(exit),
            sync: None,
            disagreements: (0..disagreements)
                .map(|i| format!("disagreement {i}"))
                .collect(),
            vcpus: vec![vcpu(0, exit)],
            kvmclock: None,
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
        kvmclock: false,
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
    common::docs::check_links();
}

/// "`--ktap FILE` ... so kernel CI systems take them as they take
/// kselftests; a check that regressed against the baseline is `not ok`"
/// (docs/ci.md), read by the rules of the kernel's own parser (KUnit's
/// kunit_parser.py, `common::ktap::kunit`): a check whose verdict is SKIP
/// but which was PASS in the baseline must count as a failure there, not
/// as skipped. Check 6 SKIPs without a limit; the baseline says it passed.
#[test]
fn a_regressed_skip_fails_in_kunits_parser_too() {
    if !common::kvm_or_skip() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("tsc-claims-ktap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let run = |extra: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_tsc-rendezvous"))
            .args([
                "check",
                "--rounds",
                "5",
                "--warp-iterations",
                "1000",
                "--json",
            ])
            .args(extra)
            .output()
            .expect("the binary runs");
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stderr)));
        (out, doc)
    };
    let (_, mut base) = run(&[]);
    let checks = base["checks"].as_array_mut().expect("checks");
    let c6 = checks
        .iter_mut()
        .find(|c| c["id"] == "skew-threshold")
        .expect("check 6");
    assert_eq!(c6["verdict"], "SKIP", "no limit given: {c6}");
    c6["verdict"] = "PASS".into();
    let (base_path, ktap_path) = (dir.join("base.json"), dir.join("check.ktap"));
    std::fs::write(&base_path, base.to_string()).expect("baseline written");
    let (out, doc) = run(&[
        "--baseline",
        base_path.to_str().expect("utf-8"),
        "--ktap",
        ktap_path.to_str().expect("utf-8"),
    ]);
    assert_eq!(out.status.code(), Some(1), "a regression fails the run");
    let text = std::fs::read_to_string(&ktap_path).expect("KTAP written");
    let _ = std::fs::remove_dir_all(&dir);
    common::ktap::self_test();
    common::ktap::validate(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let read = common::ktap::kunit(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let checks = doc["checks"].as_array().expect("checks");
    assert_eq!(read.len(), checks.len(), "{text}");
    for (k, c) in read.iter().zip(checks) {
        let regressed = c["baseline"]["regressed"] == true;
        let want = match (c["verdict"].as_str().unwrap_or(""), regressed) {
            (_, true) | ("FAIL", _) => common::ktap::KunitStatus::Failure,
            ("PASS", false) => common::ktap::KunitStatus::Success,
            _ => common::ktap::KunitStatus::Skipped,
        };
        assert_eq!(k.name, c["id"].as_str().unwrap_or(""), "{text}");
        assert_eq!(k.status, want, "{}: {c}\n{text}", k.name);
    }
    let c6 = &read[5];
    assert_eq!(
        (c6.name.as_str(), c6.status),
        ("skew-threshold", common::ktap::KunitStatus::Failure),
        "{text}"
    );
}
