"""Which bug or review finding each test of the shipped suites pins: the mapping, as data.

Every bug of rtp-llm's argument parsing and plugin loading that docs/sources.md lists (its "§" sections) and every
review finding about them maps to the behaviour tests (``module::name[params]``) that cover it: ``failing``
tests fail on an implementation with the bug, ``coverage`` tests answer a finding about missing tests and pass
everywhere. An implementation that lacks a feature a test needs (rtp_ref/suites/features.py) reports that test
absent, never under a finding: rtp-ref's emulations of rtp-llm fail exactly the ``failing`` tests that are not
absent there (tests/args/test_legacy_emulation.py). ``rtp-ref check-args`` and ``check-plugins`` print, for each
failing test, the findings it maps to.

Not a finding: rtp-llm never binds a ``None`` value (§1 bug 11 in docs/sources.md). That is its alias design
(an alias's ``None`` default must not overwrite the canonical value) and no server type yields ``None`` from
text, so the suites accept it; the reference's own choice (an explicit ``None`` is bound) is tested in
tests/args/test_args_reference.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from rtp_ref.suites.test_ids import AP, BOTH, PP, A, P, ids


@dataclass(frozen=True)
class Finding:
    """One listed bug or review finding (``ref``, as docs/sources.md numbers it) and the tests that cover it."""

    ref: str
    what: str
    failing: tuple[str, ...] = ()
    coverage: tuple[str, ...] = ()


FINDINGS = (
    Finding(
        "§1 bug 1",
        "--flag=value not seen as given; a deprecated alias in env beat --canon=5 in bindings",
        ids(A, "test_equals_form_flag_beats_env", *BOTH)
        + ids(A, "test_equals_form_flag_beats_env_alias_in_bindings", *BOTH)
        + ids(AP, "test_command_line_beats_env_beats_default", "equals-form"),
    ),
    Finding(
        "§1 bug 2",
        "abbreviated flags not seen as given",
        ids(A, "test_abbreviated_flag_beats_env", *BOTH)
        + ids(AP, "test_command_line_beats_env_beats_default", "abbreviated"),
    ),
    Finding(
        "§1 bug 3",
        "malformed env value: exit in env mode, silently dropped in CLI mode",
        ids(
            A,
            "test_malformed_int_env_value_fails_fast",
            "argv-no-flags",
            "argv-other-flag",
            "list-no-flags",
            "list-other-flag",
        )
        + ids(A, "test_malformed_boolean_env_value_fails_fast", "argv"),
    ),
    Finding(
        "§1 bug 4",
        "CLI-mode env fill bypassed choices and mutually exclusive groups",
        ids(A, "test_env_value_outside_choices_is_rejected", *BOTH)
        + ids(A, "test_env_values_obey_mutual_exclusion", *BOTH)
        + ids(A, "test_command_line_member_of_exclusive_group_masks_env", *BOTH),
    ),
    Finding(
        "§1 bug 5",
        "CLI-mode env fill ignored nargs",
        ids(A, "test_env_list_values_are_split_and_converted", "argv-two", "list-two", "list-one")
        + ids(AP, "test_command_line_beats_env_beats_default", "list-values"),
    ),
    Finding(
        "§1 bug 6",
        "store_true: '0' stored as a string, or 'unrecognized arguments'",
        ids(A, "test_store_true_reads_env_as_a_boolean", "argv-1", "argv-0", "list-1", "list-0")
        + ids(AP, "test_command_line_beats_env_beats_default", "store-true"),
    ),
    Finding(
        "§1 bug 7",
        "env values starting with '-' failed in env mode",
        ids(A, "test_env_value_starting_with_a_dash_is_a_value", "argv")
        + ids(AP, "test_command_line_beats_env_beats_default", "dash-values"),
    ),
    Finding(
        "§1 bug 8",
        "a HELP (VERSION) variable printed help (the version) and exited 0",
        ids(A, "test_help_variable_is_ignored", *BOTH)
        + ids(A, "test_version_variable_is_ignored", *BOTH)
        + ids(A, "test_control_actions_have_no_env_variable"),
    ),
    Finding(
        "§1 bug 9",
        "positionals env-filled in CLI mode; short options and tokens after -- mis-scanned",
        ids(A, "test_positional_is_not_filled_from_env", "list")
        + ids(A, "test_short_option_beats_env", *BOTH)
        + ids(A, "test_tokens_after_double_dash_are_not_flags", *BOTH),
    ),
    Finding(
        "§1 bug 10",
        "class-level mappings shared by parsers; stale CLI set on reuse; parse_known_args skipped env",
        ids(A, "test_parsers_do_not_share_env_mappings", *BOTH)
        + ids(A, "test_parsers_keep_their_own_variable_names", *BOTH)
        + ids(A, "test_reused_parser_forgets_the_previous_command_line")
        + ids(A, "test_parse_known_args_reads_env"),
    ),
    Finding(
        "§1 bug 12",
        "parser-level enable_env had no effect; enable_env=False silently dropped env_name",
        ids(A, "test_parser_level_enable_env_false_is_command_line_only", *BOTH)
        + ids(A, "test_enable_env_false_with_env_name_is_an_error", "parser", "group"),
    ),
    Finding(
        "§1 bug 13",
        "the old CLI was broken (the spec gives only line numbers); our command surface is the "
        "generator's, which must fail on bad input",
        ids(A, "test_generator_command_fails_on_a_malformed_value"),
    ),
    Finding(
        "§1 PR",
        "keywords passed the package-path check; ',,' gave []",
        ids(P, "test_package_list_rejects_a_bad_item_by_name", "import.x")
        + ids(P, "test_package_list_with_no_name_is_rejected", ",,", "", " , ")
        + ids(PP, "test_any_package_list_text_follows_the_rules", "items", "no-name"),
        ids(P, "test_package_list_last_flag_wins")
        + ids(P, "test_package_list_is_never_read_from_the_environment", *BOTH),
    ),
    Finding(
        "§2",
        "generator: string values dropped, set booleans dropped (str2bool with a default, store_true)",
        ids(A, "test_generator_writes_string_values")
        + ids(A, "test_generator_writes_set_booleans")
        + ids(AP, "test_generated_command_line_round_trips", "strings", "booleans"),
        # run with its own --only-env-vars (as an adapter passes it), the generator leaves unset variables out
        ids(A, "test_generator_leaves_unset_variables_out"),
    ),
    Finding(
        "§6",
        "found running the suites against PR #1266 (main has them too): bind_to=123 accepted at registration; a "
        "generator variable that does not convert, or an nargs one, silently gave the default; list defaults "
        "written as one token; "
        "str2bool's error without the value; subcommand options never env-mapped; a negative number in exponent "
        "form ('-1e-05') written as a separate token, which argparse reads as an option",
        ids(A, "test_a_bind_to_that_is_no_binding_is_refused_at_registration")
        + ids(A, "test_generator_writes_nargs_values_as_separate_tokens")
        + ids(A, "test_str2bool_error_names_the_bad_value")
        + ids(A, "test_malformed_boolean_env_value_fails_fast", "list")
        + ids(A, "test_a_subcommand_option_reads_its_variable_or_subcommands_are_refused")
        + ids(AP, "test_generated_command_line_round_trips", "lists", "numbers"),
    ),
    Finding(
        "§3",
        "registration not atomic; architectures[0] only; repo mapping unused; inference errors -> None",
        ids(P, "test_failed_registration_changes_nothing")
        + ids(P, "test_inference_tries_every_listed_architecture")
        + ids(P, "test_inference_falls_back_to_the_registered_repo")
        + ids(P, "test_inference_failure_says_what_was_found_and_what_to_do"),
        ids(P, "test_conflicting_name_is_rejected") + ids(P, "test_conflicting_architecture_is_rejected"),
    ),
    Finding(
        "§4",
        "extra_data_path and local_extra_data_path never initialised",
        ids(P, "test_model_args_fields_all_have_values"),
    ),
    Finding(
        "§4 pickle",
        "a ModelArgs pickled by a version without a field raised AttributeError on that field (default slot "
        "pickling)",
        ids(P, "test_model_args_pickled_without_a_field_reads_its_default"),
    ),
    Finding(
        "§5",
        "ATOM replaced built-ins by writing the dicts; a later built-in import raised the conflict",
        ids(P, "test_plugin_override_replaces_a_model_type_with_a_warning")
        + ids(P, "test_builtin_registered_after_an_override_keeps_the_plugin"),
    ),
    Finding(
        "review P2 enable_env",
        "parser-level enable_env not passed to the group",
        ids(A, "test_parser_level_enable_env_false_is_command_line_only", *BOTH),
    ),
    Finding(
        "review P2 invisible",
        "a set EXTERNAL_MODEL_PACKAGES was dropped without a warning; the flag's help did not say importing runs "
        "the packages' code (coverage: each loaded package logged at INFO)",
        ids(A, "test_cli_only_variable_that_is_set_is_logged", *BOTH)
        + ids(P, "test_package_flag_help_says_importing_runs_the_packages_code"),
        ids(P, "test_loading_logs_each_package_at_info"),
    ),
    Finding(
        "review P2 mode flip",
        "the CLI-only flag switched env parsing to the silent mode",
        ids(A, "test_cli_only_flag_does_not_make_bad_env_values_silent", *BOTH),
    ),
    Finding(
        "review P2 absence",
        "CLI-only was the absence of a mapping in a global dict",
        ids(A, "test_cli_only_dest_cannot_get_a_variable_later")
        + ids(A, "test_parsers_do_not_share_env_mappings", *BOTH),
    ),
    Finding(
        "review P2 mocked import",
        "package loading tested only through a mocked import, its two call sites untested (coverage: real "
        "packages, spawn, pickle, the model-config entry point on its own)",
        (),
        ids(P, "test_real_package_registers_its_architecture")
        + ids(P, "test_packages_load_in_order_and_stop_at_the_first_failure")
        + ids(P, "test_conflicting_plugin_registration_fails_naming_the_package")
        + ids(P, "test_loading_again_does_not_run_plugin_code_again")
        + ids(P, "test_plugin_architecture_is_inferred_without_a_model_type")
        + ids(P, "test_spawned_worker_loads_the_plugin_and_resolves_the_model")
        + ids(P, "test_model_config_entry_point_loads_the_packages_itself")
        + ids(P, "test_model_args_pickle_round_trip_keeps_the_packages"),
    ),
    Finding(
        "review P2 isolation",
        "tests had to reload the module to reset class-level mappings",
        ids(A, "test_parsers_do_not_share_env_mappings", *BOTH),
    ),
    Finding(
        "review P2 env immunity",
        "one injection path only, result not mechanism, no positive control",
        ids(A, "test_parser_level_enable_env_false_is_command_line_only", *BOTH),
        ids(
            A,
            "test_cli_only_argument_ignores_env_while_others_read_it",
            "argv-no-flags",
            "argv-other-flag",
            "list-no-flags",
            "list-other-flag",
        ),
    ),
    Finding(
        "review P2 SystemExit only",
        "invalid package path test asserted SystemExit only",
        ids(P, "test_package_list_rejects_a_bad_item_by_name", "import.x"),
        ids(
            P,
            "test_package_list_rejects_a_bad_item_by_name",
            "../x",
            "a/b.py",
            "a-b",
            ".a",
            "a..b",
            "good.pkg, bad-pkg",
        ),
    ),
    Finding(
        "review P3 propose",
        "create_propose_model_config dropped external_model_packages and relied on call order (#1330)",
        ids(P, "test_draft_args_inherit_external_model_packages")
        + ids(P, "test_spawned_worker_resolves_the_draft_model_from_the_plugin"),
    ),
    Finding(
        "review P3 help",
        "-h/--help registered as the HELP variable",
        ids(A, "test_control_actions_have_no_env_variable")
        + ids(A, "test_help_variable_is_ignored", *BOTH),
    ),
    Finding(
        "review P3 empty",
        "empty items silently dropped: None and [] indistinguishable",
        ids(P, "test_package_list_with_no_name_is_rejected", ",,", "", " , ")
        + ids(PP, "test_any_package_list_text_follows_the_rules", "no-name"),
    ),
    Finding(
        "review P3 mock.patch",
        "importlib patched globally; the loader takes no importer",
        ids(P, "test_loader_takes_an_injected_importer"),
    ),
    Finding(
        "review P3 test name",
        "test named 'space separated' for the separate-token form (coverage: names say the argv form)",
        (),
        ids(P, "test_package_list_separate_token_form")
        + ids(P, "test_package_list_equals_form")
        + ids(P, "test_package_list_strips_blanks_and_drops_duplicates_in_order")
        + ids(PP, "test_valid_package_lists_parse_to_the_names_in_order"),
    ),
)


def findings_of(test_id: str) -> list[Finding]:
    """The findings whose ``failing`` tests include ``test_id`` (``module::name[params]``)."""
    return [f for f in FINDINGS if test_id in f.failing]
