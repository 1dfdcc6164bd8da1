"""A pytest plugin object that turns a conformance run into report.json and report.md.

Activated by ``--rtp-report DIR`` (``rtp-ref certify`` passes it). Under xdist it runs on the
controller only; the workers' test reports reach it through ``pytest_runtest_logreport`` with
each case's record in ``user_properties`` (key ``rtp_ref_case``), so a worker that dies still
leaves the cases it finished, and its crash appears as a failed case.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from rtp_ref.certify.report import build_report, render_markdown

CASE_PROPERTY = "rtp_ref_case"


def _outcome(report: pytest.TestReport) -> str:
    if hasattr(report, "wasxfail"):
        return "xfailed" if report.skipped else "xpassed"
    if report.failed and "XPASS(strict)" in str(report.longrepr):
        return "xpassed"
    if report.passed:
        return "passed"
    if report.skipped:
        return "skipped"
    return "failed" if report.when == "call" else "error"


def _reason(report: pytest.TestReport) -> str:
    if hasattr(report, "wasxfail"):
        return str(report.wasxfail)
    if report.skipped and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2])
    if report.failed:
        text = getattr(report, "longreprtext", "") or str(report.longrepr)
        lines = [ln for ln in text.splitlines() if ln.startswith("E ")] or text.splitlines()[-1:]
        return " / ".join(ln[1:].strip() if ln.startswith("E ") else ln for ln in lines[:4])[:600]
    return ""


class ReportCollector:
    """Collects one record per test and writes the report files when the session ends."""

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = out_dir
        self.cases: dict[str, dict[str, Any]] = {}
        self.interrupted = False

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        case = self.cases.setdefault(report.nodeid, {"nodeid": report.nodeid})
        for key, value in report.user_properties:
            if key == CASE_PROPERTY and isinstance(value, dict):
                case.update(value)
        # A passing setup or teardown says nothing about the case; everything else decides it.
        # xdist reports a crashed worker's test with when="???": that is a failed case.
        if report.when == "call" or not report.passed:
            outcome = _outcome(report)
            if report.when in ("setup", "teardown") and outcome == "failed":
                outcome = "error"
            if case.get("outcome") in (None, "passed") or outcome == "error":
                case.update(outcome=outcome, reason=_reason(report), duration_s=round(report.duration, 6))

    def pytest_keyboard_interrupt(self) -> None:
        self.interrupted = True

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if os.environ.get("PYTEST_XDIST_WORKER"):
            return
        from rtp_ref.certify.session import describe_run

        for case in self.cases.values():
            case.setdefault("outcome", "error")
            case.setdefault("reason", "no result was reported for this case")
        cases = list(self.cases.values())
        complete = not self.interrupted and exitstatus in (0, 1)
        report = build_report(**describe_run(session.config, cases), cases=cases, complete=complete,
                              exit_status=int(exitstatus))
        write_report(report, self.out_dir)


def write_report(report: Mapping[str, Any], out_dir: Path) -> None:
    """Write report.json and report.md into ``out_dir`` (created if needed), atomically each."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, text in (("report.json", json.dumps(report, indent=1, allow_nan=False) + "\n"),
                       ("report.md", render_markdown(report))):
        tmp = out_dir / f".{name}.tmp"
        tmp.write_text(text)
        tmp.replace(out_dir / name)
