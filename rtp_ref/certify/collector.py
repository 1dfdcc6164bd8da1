"""A pytest plugin object that turns a conformance run into report.json and report.md.

Activated by ``--rtp-report DIR`` (``rtp-ref certify`` passes it). Under xdist it runs on the
controller only; the workers' test reports reach it through ``pytest_runtest_logreport`` with
each case's record in ``user_properties`` (key ``rtp_ref_case``), so a worker that dies still
leaves the cases it finished, and its crash appears as a failed case.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Generator, Mapping
from pathlib import Path
from typing import Any

import pytest

from rtp_ref.certify.faults import read_faults
from rtp_ref.certify.quarantine import QUARANTINE_FILE, Quarantine
from rtp_ref.certify.report import OUTCOMES, build_report, render_markdown
from rtp_ref.certify.session import describe_run, discover_run_kernels
from rtp_ref.certify.signals import interrupts_held
from rtp_ref.certify.worker_watch import WorkerWatch

CASE_PROPERTY = "rtp_ref_case"
#: Written at collection by each process that collects (``case_index_file``): nodeid -> the case's
#: kernel, layout and kind, so a case whose worker died before reporting still has them.
CASE_INDEX_GLOB = ".cases-*.json"


def case_index_file(out_dir: Path) -> Path:
    """Where this process writes its collection index (one file per xdist worker)."""
    return out_dir / f".cases-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}.json"


def write_case_index(out_dir: Path, index: Mapping[str, Mapping[str, Any]]) -> None:
    """Record the collected cases' identities (see CASE_INDEX_GLOB)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    case_index_file(out_dir).write_text(json.dumps(index))


def read_case_index(out_dir: Path) -> dict[str, dict[str, Any]]:
    """Every process's collection index merged (the files stay)."""
    merged: dict[str, dict[str, Any]] = {}
    for path in sorted(out_dir.glob(CASE_INDEX_GLOB)):
        try:
            merged.update(json.loads(path.read_text()))
        except (OSError, json.JSONDecodeError):
            continue  # a worker killed mid-write: the other workers' copies hold the same index
    return merged


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
    """Collects one record per test and writes the report files when the session ends; the kernels' origins
    are taken when it starts (``discover_run_kernels``).

    It also supervises the run's workers (controller side): ``Quarantine`` stops running a
    (kernel, layout) pair after ``crash_limit`` worker deaths, ``WorkerWatch`` stops the run when
    workers die of their environment. Every collected case is in the report: one that never ran is
    a failed "not run" case, and the report is then marked incomplete.
    """

    def __init__(self, config: pytest.Config, out_dir: Path, crash_limit: int) -> None:
        self.out_dir = out_dir
        self.started = time.time()
        self.kernels = discover_run_kernels(config)
        self.cases: dict[str, dict[str, Any]] = {}
        self.interrupted = False
        self._index: dict[str, dict[str, Any]] = {}
        self.watch = WorkerWatch(config, out_dir)
        config.pluginmanager.register(self.watch, "rtp_ref_worker_watch")
        config.pluginmanager.register(Quarantine(out_dir, crash_limit, self.case_identity), "rtp_ref_quarantine")

    def case_identity(self, nodeid: str) -> dict[str, Any] | None:
        """The collection index's record of ``nodeid`` (kernel, layout, kind...), if any process wrote one."""
        if nodeid not in self._index:
            self._index = read_case_index(self.out_dir)
        return self._index.get(nodeid)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        case = self.cases.setdefault(report.nodeid, {"nodeid": report.nodeid})
        judged = None
        for key, value in report.user_properties:
            if key == CASE_PROPERTY and isinstance(value, str):  # JSON, so junit.xml shows it as JSON too
                record = json.loads(value)
                judged = record.pop("outcome", None)
                case.update(record)
        # A passing setup or teardown says nothing about the case; everything else decides it.
        # xdist reports a crashed worker's test with when="???": that is a failed case.
        if report.when == "call" or not report.passed:
            # the engine's judgement where the case returned one (rtp_ref.certify.verdict); pytest's own outcome
            # only for a case that never returned it (a crash, a hang, the suite's own error)
            outcome = judged if judged in OUTCOMES and report.when == "call" else _outcome(report)
            if report.when in ("setup", "teardown") and outcome == "failed":
                outcome = "error"
            previous = case.get("outcome")
            if previous in (None, "passed"):
                case.update(outcome=outcome, reason=_reason(report), duration_s=round(report.duration, 6))
            elif outcome in ("failed", "error"):  # e.g. the worker died after the case failed
                case["reason"] = f"{case.get('reason', '')} / then: {_reason(report)}"

    def pytest_keyboard_interrupt(self) -> None:
        self.interrupted = True

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> Generator[None, Any, None]:
        # A wrapper around every other plugin's sessionfinish (xdist's shuts its workers down there): the report is
        # written after them, and also when one of them raised (a Ctrl-C that came as the run ended, say).
        outcome = yield
        if os.environ.get("PYTEST_XDIST_WORKER"):
            return
        if outcome.excinfo is not None and issubclass(outcome.excinfo[0], KeyboardInterrupt):
            self.interrupted = True
        # a second Ctrl-C (a terminal's reaches every worker too, and they tell the controller) must not cut the
        # report short: it is what the interrupted run leaves
        with interrupts_held():
            self._write_report(session, exitstatus)

    def _write_report(self, session: pytest.Session, exitstatus: int) -> None:
        index = read_case_index(self.out_dir)
        for path in self.out_dir.glob(CASE_INDEX_GLOB):
            path.unlink(missing_ok=True)
        (self.out_dir / QUARANTINE_FILE).unlink(missing_ok=True)
        faults = read_faults(self.out_dir)
        stop_reason = self.watch.stop_reason or self.watch.xdist_stop_reason() or (
            "interrupted (Ctrl-C, SIGINT)" if self.interrupted else None)
        for nodeid, case in self.cases.items():
            fault = faults.get(nodeid)
            if fault is not None:
                case["reason"] = f"{fault.reason} ({case['reason']})" if case.get("reason") else fault.reason
                case["failed_checks"] = sorted({*case.get("failed_checks", []), fault.check})
            for key, value in index.get(nodeid, {}).items():
                case.setdefault(key, value)
            case.setdefault("outcome", "error")
            case.setdefault("reason", "no result was reported for this case")
        not_run = [nodeid for nodeid in index if nodeid not in self.cases]
        for nodeid in not_run:
            why = stop_reason or ("interrupted" if self.interrupted else "the session ended before it")
            self.cases[nodeid] = {"nodeid": nodeid, **index[nodeid], "outcome": "error",
                                  "failed_checks": ["support.not_run"], "reason": f"not run: {why}"}
        cases = list(self.cases.values())
        complete = not self.interrupted and exitstatus in (0, 1) and not not_run and stop_reason is None
        report = build_report(**describe_run(session.config, cases, self.started, self.kernels), cases=cases,
                              complete=complete, exit_status=int(exitstatus), stop_reason=stop_reason)
        write_report(report, self.out_dir)


def json_safe(value: Any) -> Any:
    """``value`` with NaN and infinities as the strings "nan", "inf", "-inf" (strict JSON has none)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, Mapping):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def write_report(report: Mapping[str, Any], out_dir: Path) -> None:
    """Write report.json and report.md into ``out_dir`` (created if needed), atomically each."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, text in (("report.json", json.dumps(json_safe(report), indent=1, allow_nan=False) + "\n"),
                       ("report.md", render_markdown(report))):
        tmp = out_dir / f".{name}.tmp"
        tmp.write_text(text)
        tmp.replace(out_dir / name)
