"""The behaviour tests can fail: against the emulation of rtp-llm, exactly the bug tests fail.

``FINDINGS`` maps every bug of docs/sources.md (rtp-llm sections) and every review finding about
args and plugins (docs/sources.md#rtp-llm-plugin-pr-review) to the behaviour tests that cover it. The meta-test
runs the four behaviour modules in a fresh pytest with the emulation as the implementation
(tests/args/legacy_rtp_llm.py, tests/plugins/legacy_rtp_llm_plugins.py) and checks that

* the failing tests are exactly the ``failing`` tests of all findings (no more: the emulation is
  faithful to the sound part of the contract; no fewer: every bug test can fail),
* each fails by an assertion (``assert``, ``pytest.fail``, "DID NOT RAISE"), not by an accident of
  the emulation, except where ``OTHER_FAILURE`` says what the missing feature raises,
* the ``coverage`` tests (review findings about missing tests, not about behaviour) pass there too.

docs/args-and-plugins.md shows the same table; ``test_docs_show_the_same_mapping`` keeps them equal.
"""

from __future__ import annotations

import re
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.processes import child_env

BEHAVIOUR_MODULES = (
    "tests/args/test_args_behaviour.py",
    "tests/args/test_args_properties.py",
    "tests/plugins/test_plugins_behaviour.py",
    "tests/plugins/test_plugins_properties.py",
)
LEGACY_KITS = {
    "RTP_REF_ARGS_IMPL": "tests.args.legacy_rtp_llm:legacy_args_kit",
    "RTP_REF_PLUGINS_IMPL": "tests.plugins.legacy_rtp_llm_plugins:legacy_plugins_kit",
}
DOCS = Path(__file__).resolve().parents[2] / "docs" / "args-and-plugins.md"


@dataclass(frozen=True)
class Finding:
    """One listed bug or review finding and the tests (``module::name[params]``) that cover it."""

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

#: Failures that are not assertions: the emulation lacks the feature, and says so this way.
OTHER_FAILURE = {f"{P}::test_loader_takes_an_injected_importer": "TypeError: load_external_model_packages()"}
_ASSERTION = ("AssertionError", "assert ", "Failed: ")


def _expected_failing() -> set[str]:
    return {test for finding in FINDINGS for test in finding.failing}


def _plugin_options(config: pytest.Config) -> list[str]:
    """The ``-p`` options of this run (e.g. ``-p no:cacheprovider``), so the inner run matches."""
    args = list(config.invocation_params.args)
    options: list[str] = []
    for i, arg in enumerate(args):
        if arg == "-p" and i + 1 < len(args):
            options += ["-p", args[i + 1]]
        elif arg.startswith("-p") and len(arg) > 2:
            options.append(arg)
    return options


def _junit_outcomes(path: Path) -> dict[str, tuple[str, str]]:
    """``module::name[params] -> (outcome, message)`` from a JUnit XML report."""
    outcomes: dict[str, tuple[str, str]] = {}
    for case in ElementTree.parse(path).getroot().iter("testcase"):
        test_id = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            element = case.find(tag)
            if element is not None:
                outcome, message = tag, element.get("message") or ""
        outcomes[test_id] = (outcome, message)
    return outcomes


def test_legacy_emulation_fails_exactly_the_bug_tests(pytestconfig: pytest.Config, tmp_path: Path) -> None:
    report = tmp_path / "legacy.xml"
    # its own hypothesis storage: keep its failures out of ours
    environ = child_env(**LEGACY_KITS, HYPOTHESIS_STORAGE_DIRECTORY=str(tmp_path / "hypothesis"))
    command = [
        sys.executable,
        "-m",
        "pytest",
        *_plugin_options(pytestconfig),
        "-p",
        "no:cacheprovider",
        "-q",
        f"--junitxml={report}",
        *BEHAVIOUR_MODULES,
    ]
    run = subprocess.run(
        command,
        cwd=pytestconfig.rootpath,
        env=environ,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert report.exists(), run.stdout[-3000:] + run.stderr[-3000:]
    outcomes = _junit_outcomes(report)
    broken = {test: outcome for test, (outcome, _) in outcomes.items() if outcome in ("error", "skipped")}
    assert not broken, (broken, run.stdout[-3000:])
    failed = {test for test, (outcome, _) in outcomes.items() if outcome == "failure"}
    expected = _expected_failing()
    assert failed == expected, {
        "fail on the emulation but are not mapped to a finding": sorted(failed - expected),
        "mapped but pass on the emulation": sorted(expected - failed),
    }
    wrong_kind = {
        test: outcomes[test][1][:200]
        for test in expected
        if not outcomes[test][1].startswith(OTHER_FAILURE.get(test, _ASSERTION))
    }
    assert not wrong_kind, wrong_kind
    coverage = {test for finding in FINDINGS for test in finding.coverage}
    assert coverage <= outcomes.keys() and not coverage & failed


def _base_name(test_id: str) -> str:
    return test_id.split("::", 1)[1].split("[", 1)[0]


def test_docs_show_the_same_mapping() -> None:
    text = DOCS.read_text(encoding="utf-8")
    section = text[text.index("## Bug -> test mapping") :]
    table = "\n".join(line for line in section.splitlines() if line.startswith("| "))
    in_docs = set(re.findall(r"`(test_\w+)`", table))
    mapped = {_base_name(t) for finding in FINDINGS for t in (*finding.failing, *finding.coverage)}
    assert in_docs == mapped, {
        "only in the docs": sorted(in_docs - mapped),
        "not in the docs": sorted(mapped - in_docs),
    }
    for finding in FINDINGS:
        assert finding.ref in table, f"{finding.ref} is not in the docs table"
