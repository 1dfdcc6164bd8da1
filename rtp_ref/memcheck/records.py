"""The outcome of a memcheck run: one record per case, and its table, JSON and Markdown forms."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

#: how a case's call ended: returned, raised, its process died (crashed), it was ended after
#: --case-timeout (hung), or it never started because its sanitizer process never reached a case
Outcome = Literal["returned", "raised", "crashed", "hung", "not_run"]
#: a case's status in the table: sanitizer errors first, then how the call ended
Status = Literal["clean", "errors", "raised", "crashed", "hung", "not_run"]
STATUSES: tuple[Status, ...] = ("clean", "errors", "raised", "crashed", "hung", "not_run")
#: statuses that fail the run (a kernel that raises is the conformance suite's business, not memcheck's)
FAILING: tuple[Status, ...] = ("errors", "crashed", "hung", "not_run")
#: how the summary line names each status
STATUS_WORDS = {"clean": "clean", "errors": "with errors", "raised": "raised", "crashed": "crashed", "hung": "hung",
                "not_run": "not run"}
#: output lines printed under a crashed, hung or not-run row (the records keep more)
SHOWN_OUTPUT = 10


@dataclass(frozen=True)
class CaseRecord:
    """One case's call under the sanitizer."""

    kernel: str
    layout: str
    case: str
    outcome: Outcome
    #: which sanitizer process ran it, counting from 1 per kernel (None: not run)
    process: int | None
    #: sanitizer reports printed while the case was the last one started
    errors: int = 0
    #: the first report's headline and its lines as printed
    first_error: str | None = None
    first_report: tuple[str, ...] = ()
    #: the kernel's exception, ``Type: message`` (outcome ``raised``)
    raised: str | None = None
    #: what happened to the process, in words (crashed, hung, not run, CUDA context lost)
    detail: str | None = None
    #: crashed or hung: the case's own output after its marker (sanitizer reports aside: a crash's
    #: message and stack); not run: the last lines its process printed
    output: tuple[str, ...] = ()

    @property
    def status(self) -> Status:
        """``errors`` when the sanitizer reported any, else how the call ended (``returned`` is ``clean``)."""
        if self.errors:
            return "errors"
        return "clean" if self.outcome == "returned" else self.outcome

    def result(self) -> str:
        """The table's result column: ``clean``, ``N errors (first: ...)``, ``raised: Type: msg``, ``crashed (...)``."""
        parts = []
        if self.errors:
            parts.append(f"{self.errors} error{'' if self.errors == 1 else 's'} (first: {self.first_error})")
        if self.outcome == "raised":
            parts.append(f"raised: {self.raised}" + (f" ({self.detail})" if self.detail else ""))
        elif self.outcome in ("crashed", "hung", "not_run"):
            parts.append(self.outcome.replace("_", " ") + (f" ({self.detail})" if self.detail else ""))
        return "; ".join(parts) or "clean"

    def row(self, widths: tuple[int, int, int]) -> str:
        """One table line, ``kernel layout case  result``, the first three columns ``widths`` wide."""
        return f"{self.kernel:<{widths[0]}}  {self.layout:<{widths[1]}}  {self.case:<{widths[2]}}  {self.result()}"

    def as_json(self) -> dict[str, Any]:
        """The record as a JSON object (with its status)."""
        return {**asdict(self), "status": self.status}


@dataclass
class MemcheckRun:
    """Every record of a run, with what it ran under."""

    tool: str
    sanitizer: str
    platform: str
    device: str
    case_timeout: float
    records: list[CaseRecord] = field(default_factory=list)
    #: sanitizer reports that came before any case marker (they fail the run: no case can own them)
    errors_outside_cases: list[str] = field(default_factory=list)
    #: facts worth knowing that fail nothing (a print limit reached, a process slow to exit)
    notes: list[str] = field(default_factory=list)
    processes: int = 0

    @property
    def ok(self) -> bool:
        """True when every case ran clean or raised, and no report fell outside the cases."""
        return bool(self.records) and not self.errors_outside_cases and all(
            r.status not in FAILING for r in self.records)

    def counts(self) -> dict[str, int]:
        """Cases per status, every status present."""
        found = Counter(r.status for r in self.records)
        return {status: found[status] for status in STATUSES}

    def summary_line(self) -> str:
        """The closing line: counts, processes and the verdict."""
        counts = ", ".join(f"{n} {STATUS_WORDS[status]}" for status, n in self.counts().items() if n)
        outside = len(self.errors_outside_cases)
        extra = f", {outside} error(s) outside any case" if outside else ""
        verdict = "every case ran clean" if self.ok else "FAILED"
        cpu = "; --device cpu: no memory was checked (a test of the runner)" if self.device == "cpu" else ""
        return (f"rtp-ref: {self.tool} of {len(self.records)} case(s): {counts}{extra} "
                f"in {self.processes} sanitizer process(es): {verdict}{cpu}")

    def as_json(self) -> dict[str, Any]:
        """The run as one JSON document."""
        return {"tool": self.tool, "sanitizer": self.sanitizer, "platform": self.platform, "device": self.device,
                "case_timeout": self.case_timeout, "ok": self.ok,
                "summary": {"cases": len(self.records), **self.counts(), "processes": self.processes},
                "errors_outside_cases": self.errors_outside_cases, "notes": self.notes,
                "cases": [r.as_json() for r in self.records]}


def text_lines(record: CaseRecord, widths: tuple[int, int, int]) -> list[str]:
    """The record's table row, then the first lines of its ``output`` (when its process died or hung)."""
    return [record.row(widths), *(f"    | {line}" for line in record.output[:SHOWN_OUTPUT])]


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render_markdown(run: MemcheckRun) -> str:
    """memcheck.md: the table of cases, the run's facts and its summary."""
    lines = [f"# rtp-ref memcheck: {run.tool} on {run.platform} ({run.device})", "",
             f"Sanitizer `{run.sanitizer}`, case timeout {run.case_timeout:g} s.", "",
             "| kernel | layout | case | status | result |", "|---|---|---|---|---|"]
    lines += [f"| {r.kernel} | {r.layout} | {r.case} | {r.status} | {_cell(r.result())} |" for r in run.records]
    lines += ["", *(f"- error outside any case: {_cell(e)}" for e in run.errors_outside_cases),
              *(f"- note: {_cell(n)}" for n in run.notes), "", run.summary_line().removeprefix("rtp-ref: "), ""]
    return "\n".join(lines)


def write_report(run: MemcheckRun, out: Path) -> list[Path]:
    """memcheck.json and memcheck.md into ``out`` (created if missing); returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "memcheck.json", out / "memcheck.md"]
    paths[0].write_text(json.dumps(run.as_json(), indent=1) + "\n")
    paths[1].write_text(render_markdown(run))
    return paths
