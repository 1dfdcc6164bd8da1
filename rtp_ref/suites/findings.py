"""Which bug or review finding each test of the shipped suites pins: the mapping, as data.

Every bug of rtp-llm's argument parsing and plugin loading that docs/sources.md lists (its "§" sections) and every
review finding about them maps to the behaviour tests (``module::name[params]``) that cover it: ``failing``
tests fail on an implementation with the bug (rtp-ref's emulation of rtp-llm fails exactly these:
tests/args/test_legacy_emulation.py), ``coverage`` tests answer a finding about missing tests and pass
everywhere. ``rtp-ref check-args`` and ``check-plugins`` print, for each failing test, the findings it maps to.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Finding:
    """One listed bug or review finding (``ref``, as docs/sources.md numbers it) and the tests that cover it."""

    ref: str
    what: str
    failing: tuple[str, ...] = ()
    coverage: tuple[str, ...] = ()


def _ids(module: str, name: str, *params: str) -> tuple[str, ...]:
    return tuple(f"{module}::{name}[{p}]" for p in params) if params else (f"{module}::{name}",)


A, AP, P, PP = (
    "test_args_behaviour",
    "test_args_properties",
    "test_plugins_behaviour",
    "test_plugins_properties",
)
BOTH = ("argv", "list")

FINDINGS = (
    Finding(
        "§1 bug 1",
        "--flag=value not seen as given; a deprecated alias in env beat --canon=5 in bindings",
        _ids(A, "test_equals_form_flag_beats_env", *BOTH)
        + _ids(A, "test_equals_form_flag_beats_env_alias_in_bindings", *BOTH)
        + _ids(AP, "test_command_line_beats_env_beats_default"),
    ),
    Finding(
        "§1 bug 2", "abbreviated flags not seen as given", _ids(A, "test_abbreviated_flag_beats_env", *BOTH)
    ),
    Finding(
        "§1 bug 3",
        "malformed env value: exit in env mode, silently dropped in CLI mode",
        _ids(
            A,
            "test_malformed_int_env_value_fails_fast",
            "argv-no-flags",
            "argv-other-flag",
            "list-no-flags",
            "list-other-flag",
        )
        + _ids(A, "test_malformed_boolean_env_value_fails_fast", "argv"),
    ),
    Finding(
        "§1 bug 4",
        "CLI-mode env fill bypassed choices and mutually exclusive groups",
        _ids(A, "test_env_value_outside_choices_is_rejected", *BOTH)
        + _ids(A, "test_env_values_obey_mutual_exclusion", *BOTH)
        + _ids(A, "test_command_line_member_of_exclusive_group_masks_env", *BOTH),
    ),
    Finding(
        "§1 bug 5",
        "CLI-mode env fill ignored nargs",
        _ids(A, "test_env_list_values_are_split_and_converted", "argv-two", "list-two", "list-one"),
    ),
    Finding(
        "§1 bug 6",
        "store_true: '0' stored as a string, or 'unrecognized arguments'",
        _ids(A, "test_store_true_reads_env_as_a_boolean", "argv-1", "argv-0", "list-1", "list-0"),
    ),
    Finding(
        "§1 bug 7",
        "env values starting with '-' failed in env mode",
        _ids(A, "test_env_value_starting_with_a_dash_is_a_value", "argv"),
    ),
    Finding(
        "§1 bug 8",
        "a HELP (VERSION) variable printed help (the version) and exited 0",
        _ids(A, "test_help_variable_is_ignored", *BOTH)
        + _ids(A, "test_version_variable_is_ignored", *BOTH)
        + _ids(A, "test_control_actions_have_no_env_variable"),
    ),
    Finding(
        "§1 bug 9",
        "positionals env-filled in CLI mode; short options and tokens after -- mis-scanned",
        _ids(A, "test_positional_is_not_filled_from_env", "list")
        + _ids(A, "test_short_option_beats_env", *BOTH)
        + _ids(A, "test_tokens_after_double_dash_are_not_flags", *BOTH),
    ),
    Finding(
        "§1 bug 10",
        "class-level mappings shared by parsers; stale CLI set on reuse; parse_known_args skipped env",
        _ids(A, "test_parsers_do_not_share_env_mappings", *BOTH)
        + _ids(A, "test_reused_parser_forgets_the_previous_command_line")
        + _ids(A, "test_parse_known_args_reads_env"),
    ),
    Finding(
        "§1 bug 11",
        "a binding value of None was never applied",
        _ids(A, "test_explicit_none_value_is_bound", *BOTH),
    ),
    Finding(
        "§1 bug 12",
        "parser-level enable_env had no effect; enable_env=False silently dropped env_name",
        _ids(A, "test_parser_level_enable_env_false_is_command_line_only", *BOTH)
        + _ids(A, "test_enable_env_false_with_env_name_is_an_error", "parser", "group"),
    ),
    Finding(
        "§1 bug 13",
        "the old CLI was broken (the spec gives only line numbers); our command surface is the "
        "generator's, which must fail on bad input",
        _ids(A, "test_generator_command_fails_on_a_malformed_value"),
    ),
    Finding(
        "§1 PR",
        "keywords passed the package-path check; ',,' gave []",
        _ids(P, "test_package_list_rejects_a_bad_item_by_name", "import.x")
        + _ids(P, "test_package_list_with_no_name_is_rejected", ",,", "", " , ")
        + _ids(PP, "test_any_package_list_text_follows_the_rules"),
        _ids(P, "test_package_list_last_flag_wins")
        + _ids(P, "test_package_list_is_never_read_from_the_environment", *BOTH),
    ),
    Finding(
        "§2",
        "generator: strings dropped, set str2bool dropped, defaults emitted, exit 0 on errors",
        _ids(A, "test_generator_writes_string_values")
        + _ids(A, "test_generator_writes_set_booleans")
        + _ids(A, "test_generator_leaves_unset_variables_out")
        + _ids(AP, "test_generated_command_line_round_trips"),
    ),
    Finding(
        "§6",
        "run against PR #1266: bind_to=123 accepted at registration; a generator variable that does not "
        "convert, or an nargs one, silently gave the default; list defaults written as one token; "
        "str2bool's error without the value; subcommand options never env-mapped",
        _ids(A, "test_a_bind_to_that_is_no_binding_is_refused_at_registration")
        + _ids(A, "test_generator_writes_nargs_values_as_separate_tokens")
        + _ids(A, "test_str2bool_error_names_the_bad_value")
        + _ids(A, "test_malformed_boolean_env_value_fails_fast", "list")
        + _ids(A, "test_a_subcommand_option_reads_its_variable_or_subcommands_are_refused"),
    ),
    Finding(
        "§3",
        "registration not atomic; architectures[0] only; repo mapping unused; inference errors -> None",
        _ids(P, "test_failed_registration_changes_nothing")
        + _ids(P, "test_inference_tries_every_listed_architecture")
        + _ids(P, "test_inference_falls_back_to_the_registered_repo")
        + _ids(P, "test_inference_failure_says_what_was_found_and_what_to_do"),
        _ids(P, "test_conflicting_name_is_rejected") + _ids(P, "test_conflicting_architecture_is_rejected"),
    ),
    Finding(
        "§4",
        "extra_data_path and local_extra_data_path never initialised",
        _ids(P, "test_model_args_fields_all_have_values"),
    ),
    Finding(
        "§5",
        "ATOM replaced built-ins by writing the dicts; a later built-in import raised the conflict",
        _ids(P, "test_plugin_override_replaces_a_model_type_with_a_warning")
        + _ids(P, "test_builtin_registered_after_an_override_keeps_the_plugin"),
    ),
    Finding(
        "review P2 enable_env",
        "parser-level enable_env not passed to the group",
        _ids(A, "test_parser_level_enable_env_false_is_command_line_only", *BOTH),
    ),
    Finding(
        "review P2 invisible",
        "a set EXTERNAL_MODEL_PACKAGES was dropped without a warning",
        _ids(A, "test_cli_only_variable_that_is_set_is_logged", *BOTH),
    ),
    Finding(
        "review P2 mode flip",
        "the CLI-only flag switched env parsing to the silent mode",
        _ids(A, "test_cli_only_flag_does_not_make_bad_env_values_silent", *BOTH),
    ),
    Finding(
        "review P2 absence",
        "CLI-only was the absence of a mapping in a global dict",
        _ids(A, "test_cli_only_dest_cannot_get_a_variable_later")
        + _ids(A, "test_parsers_do_not_share_env_mappings", *BOTH),
    ),
    Finding(
        "review P2 mocked import",
        "package loading tested only through a mocked import (coverage: real packages, spawn, pickle)",
        (),
        _ids(P, "test_real_package_registers_its_architecture")
        + _ids(P, "test_packages_load_in_order_and_stop_at_the_first_failure")
        + _ids(P, "test_conflicting_plugin_registration_fails_naming_the_package")
        + _ids(P, "test_loading_again_does_not_run_plugin_code_again")
        + _ids(P, "test_plugin_architecture_is_inferred_without_a_model_type")
        + _ids(P, "test_spawned_worker_loads_the_plugin_and_resolves_the_model")
        + _ids(P, "test_model_args_pickle_round_trip_keeps_the_packages"),
    ),
    Finding(
        "review P2 isolation",
        "tests had to reload the module to reset class-level mappings",
        _ids(A, "test_parsers_do_not_share_env_mappings", *BOTH),
    ),
    Finding(
        "review P2 env immunity",
        "one injection path only, result not mechanism, no positive control",
        _ids(A, "test_parser_level_enable_env_false_is_command_line_only", *BOTH),
        _ids(
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
        _ids(P, "test_package_list_rejects_a_bad_item_by_name", "import.x"),
        _ids(
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
        _ids(P, "test_draft_args_inherit_external_model_packages")
        + _ids(P, "test_spawned_worker_resolves_the_draft_model_from_the_plugin"),
    ),
    Finding(
        "review P3 help",
        "-h/--help registered as the HELP variable",
        _ids(A, "test_control_actions_have_no_env_variable")
        + _ids(A, "test_help_variable_is_ignored", *BOTH),
    ),
    Finding(
        "review P3 empty",
        "empty items silently dropped: None and [] indistinguishable",
        _ids(P, "test_package_list_with_no_name_is_rejected", ",,", "", " , ")
        + _ids(PP, "test_any_package_list_text_follows_the_rules"),
    ),
    Finding(
        "review P3 mock.patch",
        "importlib patched globally; the loader takes no importer",
        _ids(P, "test_loader_takes_an_injected_importer"),
    ),
    Finding(
        "review P3 test name",
        "test named 'space separated' for the separate-token form (coverage: names say the argv form)",
        (),
        _ids(P, "test_package_list_separate_token_form")
        + _ids(P, "test_package_list_equals_form")
        + _ids(P, "test_package_list_strips_blanks_and_drops_duplicates_in_order")
        + _ids(PP, "test_valid_package_lists_parse_to_the_names_in_order"),
    ),
)

def findings_of(test_id: str) -> list[Finding]:
    """The findings whose ``failing`` tests include ``test_id`` (``module::name[params]``)."""
    return [f for f in FINDINGS if test_id in f.failing]
