"""The features the suites test that an implementation may not have, and the tests that need each: the data.

A suite judges only what an implementation has. A test that needs a feature the implementation lacks ends
``absent`` (a skip whose reason starts with ``ABSENT_PREFIX``, rtp_ref/suites/absence.py), never failed and
never passed, and ``rtp-ref check-args`` / ``check-plugins`` count and print those apart, under the feature. A
kit says a feature is absent in its ``absent_features``; the suites also detect two kinds of absence at the
implementation's own boundary (a ``TypeError`` for a keyword it does not take, a parser without the flag).
"""

from __future__ import annotations

from dataclasses import dataclass

from rtp_ref.errors import RtpRefError
from rtp_ref.suites.test_ids import BOTH, PP, A, P, ids

#: the start of an absent test's skip reason: ``absent: FEATURE: why``
ABSENT_PREFIX = "absent: "


@dataclass(frozen=True)
class Feature:
    """One optional feature: its ``name`` (what a kit lists in ``absent_features``), what it is, the kit members
    only it needs (a kit without the feature may leave them out), the tests that need it, and the finding
    that asks for it, if it is one a finding asks for."""

    name: str
    suite: str
    what: str
    members: tuple[str, ...] = ()
    tests: tuple[str, ...] = ()
    asked_by: str | None = None


FEATURES = (
    Feature(
        "enable_env",
        "args",
        "command-line-only arguments: add_argument(..., enable_env=False) on a parser and on a group (PR #1266)",
        (),
        ids(A, "test_cli_only_argument_takes_equals_form_and_abbreviation", *BOTH)
        + ids(A, "test_last_repeated_cli_only_flag_wins", *BOTH)
        + ids(A, "test_cli_only_argument_ignores_env_while_others_read_it",
              "argv-no-flags", "argv-other-flag", "list-no-flags", "list-other-flag")
        + ids(A, "test_parsers_do_not_share_env_mappings", *BOTH)
        + ids(A, "test_parser_level_enable_env_false_is_command_line_only", *BOTH)
        + ids(A, "test_enable_env_false_with_env_name_is_an_error", "parser", "group")
        + ids(A, "test_cli_only_variable_that_is_set_is_logged", *BOTH)
        + ids(A, "test_cli_only_flag_does_not_make_bad_env_values_silent", *BOTH)
        + ids(A, "test_cli_only_dest_cannot_get_a_variable_later"),
    ),
    Feature(
        "package_list",
        "plugins",
        "the --external_model_packages flag on the server's parser and its value parser (PR #1266)",
        ("parse_package_list", "package_list_parser"),
        ids(P, "test_package_list_separate_token_form")
        + ids(P, "test_package_list_equals_form")
        + ids(P, "test_package_list_strips_blanks_and_drops_duplicates_in_order")
        + ids(P, "test_package_list_last_flag_wins")
        + ids(P, "test_package_list_is_never_read_from_the_environment", *BOTH)
        + ids(P, "test_package_list_rejects_a_bad_item_by_name",
              "../x", "a/b.py", "a-b", ".a", "a..b", "import.x", "good.pkg, bad-pkg")
        + ids(P, "test_package_list_with_no_name_is_rejected", ",,", "", " , ")
        + ids(P, "test_package_flag_help_says_importing_runs_the_packages_code")
        + ids(PP, "test_valid_package_lists_parse_to_the_names_in_order")
        + ids(PP, "test_any_package_list_text_follows_the_rules", "items", "no-name"),
    ),
    Feature(
        "package_loading",
        "plugins",
        "loading external model packages: the loader, ModelArgs.external_model_packages, and loading at the "
        "model entry points (PR #1266)",
        ("load_packages", "plugin_source", "model_config_class"),
        ids(P, "test_real_package_registers_its_architecture")
        + ids(P, "test_packages_load_in_order_and_stop_at_the_first_failure")
        + ids(P, "test_conflicting_plugin_registration_fails_naming_the_package")
        + ids(P, "test_loading_again_does_not_run_plugin_code_again")
        + ids(P, "test_loading_logs_each_package_at_info")
        + ids(P, "test_loader_takes_an_injected_importer")
        + ids(P, "test_plugin_architecture_is_inferred_without_a_model_type")
        + ids(P, "test_spawned_worker_loads_the_plugin_and_resolves_the_model")
        + ids(P, "test_model_config_entry_point_loads_the_packages_itself")
        + ids(P, "test_spawned_worker_resolves_the_draft_model_from_the_plugin")
        + ids(P, "test_model_args_pickle_round_trip_keeps_the_packages")
        + ids(P, "test_draft_args_inherit_external_model_packages"),
    ),
    Feature(
        "loader_importer",
        "plugins",
        "an importer injected into the loader: load_packages(names, importer=...)",
        (),
        ids(P, "test_loader_takes_an_injected_importer"),
        asked_by="review P3 mock.patch",
    ),
    Feature(
        "override_registration",
        "plugins",
        "the registry's own way for a plugin to replace a model type: register(..., override=True)",
        (),
        ids(P, "test_plugin_override_replaces_a_model_type_with_a_warning")
        + ids(P, "test_builtin_registered_after_an_override_keeps_the_plugin"),
        asked_by="§5",
    ),
)

FEATURES_BY_NAME = {feature.name: feature for feature in FEATURES}


def suite_features(suite: str) -> dict[str, Feature]:
    """The features of one suite (``args`` or ``plugins``), by name."""
    return {f.name: f for f in FEATURES if f.suite == suite}


def absent_feature_of(message: str) -> str | None:
    """The feature an absent test's skip reason names (``absent: FEATURE: why``), else None."""
    if not message.startswith(ABSENT_PREFIX):
        return None
    return message[len(ABSENT_PREFIX):].split(":", 1)[0].strip()


def declared_absent(kit: object, suite: str) -> frozenset[str]:
    """The kit's ``absent_features`` (none when it has no such attribute). RtpRefError naming the valid names
    when one is not a feature of ``suite``: a misspelt name must not silently stand for nothing."""
    names = frozenset(getattr(kit, "absent_features", frozenset()))
    valid = suite_features(suite)
    unknown = sorted(names - valid.keys())
    if unknown:
        raise RtpRefError(f"the {suite} kit {getattr(kit, 'name', kit)!r} lists unknown absent_features "
                          f"{unknown}; valid: {sorted(valid)}")
    return names
