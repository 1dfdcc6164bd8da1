"""Plugins suite checks that PR #1266's emulation passes, or that no emulation can run, fail on a kit that breaks
what they check (tests.plugins.broken_kits), and a kit that hands over a parser without the flag gets the flag's
tests absent, not passed; all in the suite's own pytest process (the model-config check in a spawned worker)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rtp_ref.suites.run import ABSENT
from tests.args.suite_runs import outcomes_of
from tests.plugins.broken_kits import NaiveMainKit

P = "test_plugins_behaviour"


def test_loading_without_a_log_record_per_package_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    test = f"{P}::test_loading_logs_each_package_at_info"
    found = outcomes_of("plugins", "tests.plugins.broken_kits:silent_loader_kit", [test], tmp_path, monkeypatch)
    assert found[test].outcome == "failure", found[test]


def test_a_model_config_entry_point_that_does_not_load_the_packages_fails(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    test = f"{P}::test_model_config_entry_point_loads_the_packages_itself"
    found = outcomes_of("plugins", "tests.plugins.broken_kits:one_call_site_kit", [test], tmp_path, monkeypatch)
    assert found[test].outcome == "failure" and "not registered" in found[test].message, found[test]


def test_the_tests_of_features_no_rtp_llm_version_has_fail_when_the_features_are_made_up(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The §5 and mock.patch tests end absent on both emulations; an override written the way ROCm/ATOM writes the
    registry, and an importer taken and ignored, fail them."""
    tests = [f"{P}::test_plugin_override_replaces_a_model_type_with_a_warning",
             f"{P}::test_builtin_registered_after_an_override_keeps_the_plugin",
             f"{P}::test_loader_takes_an_injected_importer"]
    found = outcomes_of("plugins", "tests.plugins.broken_kits:made_up_features_kit", tests, tmp_path, monkeypatch)
    assert {t: o.outcome for t, o in found.items()} == {t: "failure" for t in tests}, found
    assert "confict!" in found[tests[1]].message, found[tests[1]]


NO_NAME = [f"{P}::test_package_list_with_no_name_is_rejected[,,]",
           f"{P}::test_package_list_with_no_name_is_rejected[ , ]",
           f"{P}::test_package_list_with_no_name_is_rejected[]",
           f"{P}::test_package_list_rejects_a_bad_item_by_name[../x]",
           f"{P}::test_package_flag_help_says_importing_runs_the_packages_code"]


def test_a_parser_without_the_flag_makes_the_flag_tests_absent_not_passed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """argparse rejects the unknown flag with exit 2 naming it, which the ``,,`` tests once took for the value's
    rejection: they passed on rtp-llm's main, which has no such flag."""
    with pytest.raises(SystemExit) as rejected:
        NaiveMainKit().package_list_parser().parse_args(["--external_model_packages", ",,"])
    assert rejected.value.code == 2 and "--external_model_packages" in capsys.readouterr().err
    found = outcomes_of("plugins", "tests.plugins.broken_kits:naive_main_kit", NO_NAME, tmp_path, monkeypatch)
    assert {t: (o.outcome, o.feature) for t, o in found.items()} == {t: (ABSENT, "package_list") for t in NO_NAME}
    assert all("package_list_parser() has no --external_model_packages" in o.message for o in found.values())


def test_a_kit_that_leaves_a_feature_out_without_declaring_it_is_told_what_to_do(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    test = NO_NAME[0]
    found = outcomes_of("plugins", "tests.plugins.broken_kits:undeclared_main_kit", [test], tmp_path, monkeypatch)
    assert found[test].outcome == "failure", found[test]
    assert "no parse_package_list, package_list_parser" in found[test].message
    assert "absent_features" in found[test].message
