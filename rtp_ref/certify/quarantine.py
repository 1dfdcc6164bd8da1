"""Stop paying for a kernel that crashes or hangs: after a few worker deaths on one (kernel, layout)
pair, that pair's remaining cases fail at once, while its other layouts still run.

The xdist controller sees each death (xdist reports the case a worker died in with ``when="???"``),
maps the case to its pair through the collection index, counts crashes and hangs per pair, and
writes the pairs that reached the limit to ``.quarantine.json`` in the report directory before it
starts the replacement worker. Workers read that file before each case. Without the limit a kernel
that hangs on every call costs the case timeout once per case.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from rtp_ref.cases.input_checks import HARDENING_KINDS
from rtp_ref.certify.faults import Fault, peek_faults

QUARANTINE_FILE = ".quarantine.json"
#: ``TestReport.when`` of the report xdist makes up for the case a worker died in
XDIST_CRASH_WHEN = "???"
#: deaths of one pair's cases after which its remaining cases are not run (``--crash-limit``)
DEFAULT_CRASH_LIMIT = 2


def pair_key(kernel: str, layout: str) -> str:
    """How a (kernel, layout) pair is named in the quarantine file and in messages."""
    return f"{kernel}/{layout}"


def _times(n: int, what: str) -> str:
    return f"{what} {n} time{'s' if n != 1 else ''}"


class Quarantine:
    """Controller-side plugin: counts worker deaths per pair and quarantines a pair at ``limit``.

    ``case_identity`` maps a nodeid to its case record (kernel, layout...) from the collection index.
    """

    def __init__(self, out_dir: Path, limit: int,
                 case_identity: Callable[[str], Mapping[str, Any] | None]) -> None:
        self.out_dir = out_dir
        self.limit = limit
        self.case_identity = case_identity
        self.deaths: dict[str, list[tuple[str, Fault | None]]] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if str(report.when) != XDIST_CRASH_WHEN:
            return
        case = self.case_identity(report.nodeid)
        # a crash on an out-of-range slot or on the empty call is hardening, reported apart: it says nothing of the
        # write
        if not case or not case.get("kernel") or not case.get("layout") or case.get("kind") in HARDENING_KINDS:
            return
        key = pair_key(str(case["kernel"]), str(case["layout"]))
        self.deaths.setdefault(key, []).append((report.nodeid, peek_faults(self.out_dir).get(report.nodeid)))
        if len(self.deaths[key]) >= self.limit:
            self._write()

    def reason(self, key: str) -> str:
        """The sentence a quarantined pair's remaining cases fail with."""
        deaths = self.deaths[key]
        hangs = sum(1 for _, fault in deaths if fault is not None and fault.hung)
        parts = [_times(len(deaths) - hangs, "crashed")] if len(deaths) > hangs else []
        parts += [_times(hangs, "hung")] if hangs else []
        return (f"not run: {key} {' and '.join(parts)} (limit {self.limit}, --crash-limit); "
                f"first in {deaths[0][0].rsplit('[', 1)[-1].rstrip(']')}")

    def _write(self) -> None:
        quarantined = {key: self.reason(key) for key, deaths in self.deaths.items() if len(deaths) >= self.limit}
        tmp = self.out_dir / f".{QUARANTINE_FILE}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(quarantined))
        tmp.replace(self.out_dir / QUARANTINE_FILE)  # atomic: a worker never reads half a file


def quarantine_reason(out_dir: Path, kernel: str, layout: str) -> str | None:
    """Why a case of (kernel, layout) must not run (its pair is quarantined), or None."""
    try:
        quarantined = json.loads((out_dir / QUARANTINE_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    reason = quarantined.get(pair_key(kernel, layout)) if isinstance(quarantined, dict) else None
    return str(reason) if reason else None
