"""A suite run's verdict (rtp_ref.suites.verdict): failing tests grouped under the findings they pin, in the
findings' order, an unlisted failure under the shared contract, a skip counted as a failure, 0 tests a failure."""

from __future__ import annotations

import json
from pathlib import Path

from rtp_ref.suites.findings import FINDINGS
from rtp_ref.suites.run import Outcome
from rtp_ref.suites.verdict import Verdict, write_report


def _first_two_findings() -> tuple[str, str]:
    first, second = [f for f in FINDINGS if f.failing][:2]
    return first.failing[0], second.failing[0]


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


def test_no_tests_is_a_failure() -> None:
    v = Verdict("plugins", "reference", ())
    assert not v.ok and v.summary() == "0 tests ran"
    assert Verdict("plugins", "reference", (Outcome("m::t", "passed", ""),)).ok
