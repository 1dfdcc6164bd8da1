"""A suite run's verdict (rtp_ref.suites.verdict): failing tests grouped under the findings they pin, in the
findings' order, an unlisted failure under the shared contract, absent tests apart under the feature they need, a
skip counted as a failure, 0 tests (or only absent ones) a failure; and how absence is told (rtp_ref.suites.run,
features, absence)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rtp_ref.errors import RtpRefError
from rtp_ref.suites.absence import refused_keyword, require
from rtp_ref.suites.features import FEATURES_BY_NAME, declared_absent
from rtp_ref.suites.findings import FINDINGS
from rtp_ref.suites.run import ABSENT, Outcome, junit_outcomes
from rtp_ref.suites.verdict import Verdict, write_report


def _first_two_findings() -> tuple[str, str]:
    first, second = [f for f in FINDINGS if f.failing][:2]
    return first.failing[0], second.failing[0]


def _absent(test: str, feature: str) -> Outcome:
    return Outcome(test, ABSENT, f"absent: {feature}: the kit lists it in absent_features", feature)


def test_failures_are_grouped_by_finding_and_the_rest_is_the_shared_contract(tmp_path: Path) -> None:
    first, second = _first_two_findings()
    outcomes = (Outcome(second, "failure", "AssertionError: b"), Outcome("m::test_ok", "passed", ""),
                Outcome("m::test_unlisted", "failure", "AssertionError: c"), Outcome(first, "skipped", "why"))
    v = Verdict("args", "my:kit", outcomes)
    groups = v.by_finding()
    assert [g[0] for g in groups][:2] == [f for f in FINDINGS if f.failing][:2]  # the findings' order
    assert groups[-1][0] is None and [o.test for o in groups[-1][1]] == ["m::test_unlisted"]
    assert not v.ok and v.summary() == "1 passed, 3 failed, on 2 finding(s)"
    assert "FAILED  (no listed finding: the shared contract)" in v.lines()
    junit = tmp_path / "j.xml"
    junit.write_text("<testsuites/>")
    write_report(v, junit, tmp_path / "out")
    doc = json.loads((tmp_path / "out" / "check-args.json").read_text())
    assert doc["ok"] is False and len(doc["tests"]) == 4 and doc["findings"][-1]["ref"] is None
    assert "| (none) | the shared contract | `m::test_unlisted` |" in (tmp_path / "out" / "check-args.md").read_text()


def test_absent_tests_are_counted_and_printed_apart_never_under_a_finding(tmp_path: Path) -> None:
    """A test a finding lists, absent on this implementation, is under its feature only, and fails nothing."""
    importer = FEATURES_BY_NAME["loader_importer"]
    mapped = importer.tests[0]
    assert any(mapped in f.failing for f in FINDINGS)  # the case that matters: a mapped test, absent
    loading = FEATURES_BY_NAME["package_loading"]
    outcomes = (Outcome("m::test_ok", "passed", ""), _absent(mapped, "loader_importer"),
                _absent(loading.tests[0], "package_loading"), _absent(loading.tests[1], "package_loading"))
    v = Verdict("plugins", "my:kit", outcomes)
    assert v.ok and v.failed == [] and v.by_finding() == []
    assert v.summary() == "1 passed, 0 failed, 3 absent (2 feature(s))"
    lines = v.lines()
    assert lines[0] == f"ABSENT  package_loading: {loading.what}"  # the features' order
    assert f"ABSENT  loader_importer: {importer.what} (asked for by {importer.asked_by})" in lines
    assert f"          {mapped}" in lines and not any(line.startswith("FAILED") for line in lines)
    junit = tmp_path / "j.xml"
    junit.write_text("<testsuites/>")
    write_report(v, junit, tmp_path / "out")
    doc = json.loads((tmp_path / "out" / "check-plugins.json").read_text())
    assert [a["feature"] for a in doc["absent"]] == ["package_loading", "loader_importer"]
    assert doc["findings"] == [] and doc["ok"] is True
    markdown = (tmp_path / "out" / "check-plugins.md").read_text()
    assert f"| loader_importer | {importer.what} | {importer.asked_by} | `{mapped}` |" in markdown


def test_no_tests_or_only_absent_ones_is_a_failure() -> None:
    v = Verdict("plugins", "reference", ())
    assert not v.ok and v.summary() == "0 tests ran"
    assert Verdict("plugins", "reference", (Outcome("m::t", "passed", ""),)).ok
    only_absent = Verdict("plugins", "k", (_absent("m::t", "package_list"),))
    assert not only_absent.ok and only_absent.summary() == "0 passed, 0 failed, 1 absent (1 feature(s))"


def test_a_skip_is_absent_only_when_it_names_a_listed_feature(tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    junit.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="plugins.test_plugins_behaviour" name="test_a">'
        '<skipped type="pytest.skip" message="absent: package_list: the kit lists it"/></testcase>'
        '<testcase classname="plugins.test_plugins_behaviour" name="test_b">'
        '<skipped type="pytest.skip" message="absent: no_such_feature: made up"/></testcase>'
        '<testcase classname="plugins.test_plugins_behaviour" name="test_c">'
        '<skipped type="pytest.skip" message="why"/></testcase>'
        "</testsuite></testsuites>")
    outcomes = junit_outcomes(junit)
    assert [(o.test, o.outcome, o.feature) for o in outcomes] == [
        ("test_plugins_behaviour::test_a", ABSENT, "package_list"),
        ("test_plugins_behaviour::test_b", "skipped", ""),
        ("test_plugins_behaviour::test_c", "skipped", "")]


class _Kit:
    name = "k"

    def __init__(self, *absent: str) -> None:
        self.absent_features = frozenset(absent)


def test_a_kit_may_list_only_features_of_its_suite() -> None:
    assert declared_absent(_Kit("enable_env"), "args") == {"enable_env"}
    assert declared_absent(object(), "args") == frozenset()
    with pytest.raises(RtpRefError, match=r"unknown absent_features \['package_list'\]; valid: \['enable_env'\]"):
        declared_absent(_Kit("package_list"), "args")


def test_require_and_refused_keyword_end_a_test_absent_only_for_the_feature_at_hand() -> None:
    with pytest.raises(pytest.skip.Exception, match=r"^absent: enable_env: the kit lists it"):
        require(_Kit("enable_env"), "enable_env")
    require(_Kit(), "enable_env")  # present: nothing happens
    with (pytest.raises(pytest.skip.Exception, match=r"^absent: enable_env: TypeError: .*'enable_env'"),
          refused_keyword(_Kit(), "enable_env", "enable_env")):
        raise TypeError("add_argument() got an unexpected keyword argument 'enable_env'")
    # another keyword refused: the test's own failure
    with pytest.raises(TypeError, match="'env_name'"), refused_keyword(_Kit(), "enable_env", "enable_env"):
        raise TypeError("add_argument() got an unexpected keyword argument 'env_name'")
    with pytest.raises(pytest.fail.Exception, match="the kit has no load_packages, plugin_source"):
        require(_Kit(), "package_loading")


def test_a_run_with_fewer_examples_says_so_in_its_report() -> None:
    asked = Verdict("args", "my:kit", (Outcome("m::t", "passed", ""),), examples=10)
    assert asked.as_json()["examples"] == 10
    assert "1 passed, 0 failed (10 hypothesis examples per property test)" in asked.markdown().splitlines()
    default = Verdict("args", "my:kit", (Outcome("m::t", "passed", ""),))
    assert default.as_json()["examples"] is None and default.run_settings == ""
