"""A suite run's outcomes as findings: every failing test with the bug or review finding it pins, the summary, and
the report files (``check-args.json``, ``check-args.md``, ``junit.xml``)."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rtp_ref.suites.findings import FINDINGS, Finding, findings_of
from rtp_ref.suites.run import Outcome

#: outcomes that fail a run (a skip is no pass either: the suites skip nothing, so one means the kit is broken)
FAILED = ("failure", "error", "skipped")


@dataclass(frozen=True)
class Verdict:
    """One suite's run against one implementation."""

    suite: str
    impl: str
    outcomes: tuple[Outcome, ...]

    @property
    def failed(self) -> list[Outcome]:
        """The tests that did not pass."""
        return [o for o in self.outcomes if o.outcome in FAILED]

    @property
    def ok(self) -> bool:
        """Every test passed, and there were tests (0 tests run is a failure)."""
        return bool(self.outcomes) and not self.failed

    def by_finding(self) -> list[tuple[Finding | None, list[Outcome]]]:
        """The failing tests grouped by the finding each pins, in the findings' order; tests no finding lists come
        last under None (a behaviour both implementations share is broken: the contract, not a known bug)."""
        groups: dict[str, tuple[Finding | None, list[Outcome]]] = {}
        for o in self.failed:
            found: list[Finding | None] = [*findings_of(o.test)] or [None]
            for f in found:
                key = f.ref if f is not None else ""
                groups.setdefault(key, (f, []))[1].append(o)
        return sorted(groups.values(), key=lambda g: FINDINGS.index(g[0]) if g[0] is not None else len(FINDINGS))

    def summary(self) -> str:
        """``54 passed, 38 failed, on 17 findings``."""
        passed = len(self.outcomes) - len(self.failed)
        findings = sum(1 for f, _ in self.by_finding() if f is not None)
        tail = f", on {findings} finding(s)" if findings else ""
        return f"{passed} passed, {len(self.failed)} failed{tail}" if self.outcomes else "0 tests ran"

    def as_json(self) -> dict[str, Any]:
        """The verdict as one JSON document."""
        return {"suite": self.suite, "impl": self.impl, "ok": self.ok, "summary": self.summary(),
                "findings": [{"ref": f.ref if f else None, "what": f.what if f else "not a listed finding: a "
                              "behaviour of the shared contract", "tests": [vars(o) for o in tests]}
                             for f, tests in self.by_finding()],
                "tests": [vars(o) for o in self.outcomes]}

    def lines(self) -> list[str]:
        """The findings table as text lines, one finding then its failing tests."""
        out = []
        for f, tests in self.by_finding():
            out.append(f"FAILED  {f.ref}: {f.what}" if f else "FAILED  (no listed finding: the shared contract)")
            out += [f"          {o.test}: {o.outcome}: {o.message.splitlines()[0][:160] if o.message else ''}"
                    for o in tests]
        return out

    def markdown(self) -> str:
        """The findings table as markdown."""
        rows = [f"# rtp-ref check-{self.suite}: {self.impl}", "", self.summary(), "",
                "| finding | what it is | failing tests |", "|---|---|---|"]
        for f, tests in self.by_finding():
            names = "<br>".join(f"`{o.test}`" for o in tests)
            rows.append(f"| {f.ref if f else '(none)'} | {f.what if f else 'the shared contract'} | {names} |")
        return "\n".join(rows) + "\n"


def write_report(verdict: Verdict, junit: Path, out: Path) -> None:
    """Write ``check-<suite>.json``, ``check-<suite>.md`` and ``junit.xml`` into ``out`` (created)."""
    out.mkdir(parents=True, exist_ok=True)
    stem = f"check-{verdict.suite}"
    (out / f"{stem}.json").write_text(json.dumps(verdict.as_json(), indent=1) + "\n")
    (out / f"{stem}.md").write_text(verdict.markdown())
    shutil.copyfile(junit, out / "junit.xml")
