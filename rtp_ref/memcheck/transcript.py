"""Reading one sanitizer child's output: each sanitizer report goes to the case whose marker precedes it.

compute-sanitizer prints every line with a ``=========`` prefix. A report starts with an unindented
line (``========= Invalid __global__ write of size 4 bytes``, ``========= Program hit cudaErrorLaunchFailure
...``, ``========= Error: Race reported between ...``) and continues with indented ones
(``=========     at 0x70 in kernel``); a bare ``=========`` separates reports. The driver synchronises
each call before its end marker, so a call's reports come out after its case marker and before the
next case marker; a report between an end marker and the next case marker still belongs to the case
before it. Any unindented line counts as a report except the few known not to be one (the banner, the
summaries, the notes on how the target ended): an unknown kind of report is counted, never dropped.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field

from rtp_ref.memcheck.markers import Marker, parse_marker

PREFIX = "========="
#: unindented sanitizer lines that start no report: the banner, the summaries, and the notes on a
#: target that exited non-zero or died (the runner records a death itself, with the case's output)
NOT_REPORTS = (
    "COMPUTE-SANITIZER",
    "ERROR SUMMARY:",
    "LEAK SUMMARY:",
    "RACECHECK SUMMARY:",
    "Target application returned an error",
    "Error: process didn't terminate successfully",
)
#: how many lines of a case's first report are kept (its location, thread, address, backtrace start)
FIRST_REPORT_LINES = 40
#: how many lines of a case's own output are kept (for a case whose process died or hung under it),
#: and how many of the child's last lines (for a child that never reached a case)
OUTPUT_LINES = 30
_SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) error")


def report_headline(line: str) -> str | None:
    """The text of ``line`` when it starts a sanitizer report, else None (continuations, separators,
    banner and summaries, and every line that is not the sanitizer's)."""
    if not line.startswith(PREFIX + " ") or line[len(PREFIX) + 1: len(PREFIX) + 2].isspace():
        return None
    text = line[len(PREFIX):].strip()
    if not text or text.startswith(NOT_REPORTS):
        return None
    return text


def _continues_report(line: str) -> bool:
    return line.startswith(PREFIX + "  ")


@dataclass
class CaseTrace:
    """What one child's output says about one case."""

    key: str
    #: sanitizer reports attributed to the case
    errors: int = 0
    #: the lines of its first report, as printed (at most FIRST_REPORT_LINES)
    first_report: list[str] = field(default_factory=list)
    #: the end marker came: the call returned (normally or by raising)
    ended: bool = False
    #: the kernel's exception, ``Type: message``
    raised: str | None = None
    #: the call left the CUDA context unusable and the driver ended itself
    device_lost: bool = False
    #: the first lines printed after its case marker that are neither markers nor the sanitizer's
    #: (a crash's message and stack, a kernel's own prints)
    output: list[str] = field(default_factory=list)


class Transcript:
    """The running interpretation of one child's output, fed line by line."""

    def __init__(self) -> None:
        #: every case whose marker came, in order
        self.cases: dict[str, CaseTrace] = {}
        #: headlines of reports printed before the first case marker (they belong to no case)
        self.outside: list[str] = []
        #: the count in the sanitizer's ``ERROR SUMMARY`` line, when it printed one
        self.summary_errors: int | None = None
        #: the child's last output lines, whatever they are
        self.tail: deque[str] = deque(maxlen=OUTPUT_LINES)
        self._current: CaseTrace | None = None
        self._collecting = False

    @property
    def current(self) -> CaseTrace | None:
        """The case whose marker came last (reports now belong to it), None before the first."""
        return self._current

    @property
    def open_case(self) -> CaseTrace | None:
        """The case whose call started and has not returned (the one running if the child dies now)."""
        return self._current if self._current is not None and not self._current.ended else None

    @property
    def printed_errors(self) -> int:
        """Reports counted in this output, attributed to a case or not."""
        return len(self.outside) + sum(c.errors for c in self.cases.values())

    def feed(self, line: str) -> Marker | None:
        """Take one output line (newline optional); returns its marker when it is one."""
        line = line.rstrip("\r\n")
        self.tail.append(line)
        marker = parse_marker(line)
        if marker is not None:
            self._collecting = False
            self._on_marker(marker)
            return marker
        current = self._current
        if self._collecting and current is not None and _continues_report(line):
            if len(current.first_report) < FIRST_REPORT_LINES:
                current.first_report.append(line)
            return None
        self._collecting = False
        summary = _SUMMARY.search(line) if line.startswith(PREFIX) else None
        if summary is not None:
            self.summary_errors = int(summary.group(1))
        if current is not None and not line.startswith(PREFIX) and len(current.output) < OUTPUT_LINES:
            current.output.append(line)
        headline = report_headline(line)
        if headline is None:
            return None
        if current is None:
            self.outside.append(headline)
            return None
        current.errors += 1
        if current.errors == 1:
            current.first_report.append(line)
            self._collecting = True
        return None

    def _on_marker(self, marker: Marker) -> None:
        if marker.kind == "case":
            self._current = self.cases.setdefault(marker.key, CaseTrace(marker.key))
            return
        trace = self.cases.setdefault(marker.key, CaseTrace(marker.key))
        if marker.kind == "end":
            trace.ended, trace.raised = True, marker.raised
        else:
            trace.device_lost = True
