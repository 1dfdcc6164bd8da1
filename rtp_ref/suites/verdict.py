"""A suite run's outcomes as findings: every failing test with the bug or review finding it pins, every absent
test under the feature the implementation lacks, the summary, and the report files (``check-args.json``,
``check-args.md``, ``junit.xml``)."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rtp_ref.suites.features import FEATURES, Feature
from rtp_ref.suites.findings import FINDINGS, Finding, findings_of
from rtp_ref.suites.run import ABSENT, Outcome

#: outcomes that fail a run (a skip is no pass either: the suites skip nothing but absent tests, so one means
#: the kit is broken)
FAILED = ("failure", "error", "skipped")


@dataclass(frozen=True)
class Verdict:
    """One suite's run against one implementation."""

    suite: str
    impl: str
    outcomes: tuple[Outcome, ...]
    #: hypothesis examples per property test when the run asked for a number (``--examples``), else None: the
    #: profile's
    examples: int | None = None

    @property
    def run_settings(self) -> str:
        """`` (N hypothesis examples per property test)`` for a run that asked for N, else nothing."""
        return "" if self.examples is None else f" ({self.examples} hypothesis examples per property test)"

    @property
    def failed(self) -> list[Outcome]:
        """The tests that did not pass and were not absent."""
        return [o for o in self.outcomes if o.outcome in FAILED]

    @property
    def absent(self) -> list[Outcome]:
        """The tests that need a feature the implementation lacks: neither passed nor failed."""
        return [o for o in self.outcomes if o.outcome == ABSENT]

    @property
    def passed(self) -> list[Outcome]:
        """The tests that passed."""
        return [o for o in self.outcomes if o.outcome == "passed"]

    @property
    def ok(self) -> bool:
        """No test failed and at least one passed (0 tests run, or every one absent, is no pass)."""
        return bool(self.passed) and not self.failed

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

    def by_feature(self) -> list[tuple[Feature, list[Outcome]]]:
        """The absent tests grouped by the feature each needs, in the features' order."""
        groups: dict[str, list[Outcome]] = {}
        for o in self.absent:
            groups.setdefault(o.feature, []).append(o)
        return [(f, groups[f.name]) for f in FEATURES if f.name in groups]

    def summary(self) -> str:
        """``54 passed, 38 failed, 12 absent (1 feature), on 17 finding(s)``; the absent part only when some are."""
        if not self.outcomes:
            return "0 tests ran"
        findings = sum(1 for f, _ in self.by_finding() if f is not None)
        parts = [f"{len(self.passed)} passed", f"{len(self.failed)} failed"]
        if self.absent:
            parts.append(f"{len(self.absent)} absent ({len(self.by_feature())} feature(s))")
        return ", ".join(parts) + (f", on {findings} finding(s)" if findings else "")

    def as_json(self) -> dict[str, Any]:
        """The verdict as one JSON document."""
        return {"suite": self.suite, "impl": self.impl, "examples": self.examples, "ok": self.ok,
                "summary": self.summary(),
                "findings": [{"ref": f.ref if f else None, "what": f.what if f else "not a listed finding: a "
                              "behaviour of the shared contract", "tests": [vars(o) for o in tests]}
                             for f, tests in self.by_finding()],
                "absent": [{"feature": f.name, "what": f.what, "asked_by": f.asked_by,
                            "tests": [vars(o) for o in tests]} for f, tests in self.by_feature()],
                "tests": [vars(o) for o in self.outcomes]}

    def lines(self) -> list[str]:
        """The findings table, then the absent features, as text lines: a heading then its tests."""
        out = []
        for f, tests in self.by_finding():
            out.append(f"FAILED  {f.ref}: {f.what}" if f else "FAILED  (no listed finding: the shared contract)")
            out += [f"          {o.test}: {o.outcome}: {_first_line(o.message)}" for o in tests]
        for feature, tests in self.by_feature():
            out.append(f"ABSENT  {_heading(feature)}")
            out += [f"          {o.test}" for o in tests]
        return out

    def markdown(self) -> str:
        """The findings table and the absent features as markdown."""
        rows = [f"# rtp-ref check-{self.suite}: {self.impl}", "", self.summary() + self.run_settings, "",
                "| finding | what it is | failing tests |", "|---|---|---|"]
        for f, tests in self.by_finding():
            names = "<br>".join(f"`{o.test}`" for o in tests)
            rows.append(f"| {f.ref if f else '(none)'} | {f.what if f else 'the shared contract'} | {names} |")
        if self.absent:
            rows += ["", "Absent: features the implementation lacks (their tests neither pass nor fail).", "",
                     "| feature | what it is | asked for by | absent tests |", "|---|---|---|---|"]
            for feature, tests in self.by_feature():
                names = "<br>".join(f"`{o.test}`" for o in tests)
                rows.append(f"| {feature.name} | {feature.what} | {feature.asked_by or ''} | {names} |")
        return "\n".join(rows) + "\n"


def _first_line(message: str) -> str:
    return message.splitlines()[0][:160] if message else ""


def _heading(feature: Feature) -> str:
    asked = f" (asked for by {feature.asked_by})" if feature.asked_by else ""
    return f"{feature.name}: {feature.what}{asked}"


def write_report(verdict: Verdict, junit: Path, out: Path) -> None:
    """Write ``check-<suite>.json``, ``check-<suite>.md`` and ``junit.xml`` into ``out`` (created)."""
    out.mkdir(parents=True, exist_ok=True)
    stem = f"check-{verdict.suite}"
    (out / f"{stem}.json").write_text(json.dumps(verdict.as_json(), indent=1) + "\n")
    (out / f"{stem}.md").write_text(verdict.markdown())
    shutil.copyfile(junit, out / "junit.xml")

