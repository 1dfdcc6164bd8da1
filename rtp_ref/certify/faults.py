"""Why a worker died: a per-process fault log that survives the process.

Each process running cases (an xdist worker, or the main pytest process) appends to its own
``.worker-<pid>.log`` in the report directory: ``CASE <nodeid>`` before each case, then, if the
process dies, what killed it — Python's faulthandler writes ``Fatal Python error: Segmentation
fault`` on a fatal signal, our case timer writes ``TIMEOUT <seconds>`` before ending a hung
process, and a lost CUDA context writes ``DEVICE_FAULT <what>``. The report collector reads the
logs afterwards and gives each crashed case its real reason instead of "worker crashed".
"""

from __future__ import annotations

import faulthandler
import os
import sysconfig
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

LOG_GLOB = ".worker-*.log"


class FaultLog:
    """The current process's fault log (see the module doc)."""

    def __init__(self, out_dir: Path) -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        self.path = out_dir / f".worker-{os.getpid()}.log"
        self._file: IO[str] = self.path.open("a", buffering=1)
        self._timer: threading.Timer | None = None

    def collecting(self) -> None:
        """Mark the start of collection: a process that dies here died of its environment (an import
        that crashes, say), and ``collection_deaths`` finds the fatal error and where it happened."""
        faulthandler.enable(file=self._file, all_threads=False)
        self._file.write("COLLECT\n")
        self._file.flush()

    def case(self, nodeid: str) -> None:
        """Mark the start of a case (and point faulthandler back here: pytest's own faulthandler
        plugin redirects it to stderr when it configures, after we do)."""
        faulthandler.enable(file=self._file, all_threads=False)
        self._file.write(f"CASE {nodeid}\n")
        self._file.flush()

    def fatal(self, tag: str, text: str) -> None:
        """Record why this process is about to end (``TIMEOUT``, ``DEVICE_FAULT``)."""
        self._file.write(f"{tag} {text}\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def start_timer(self, seconds: float, on_expiry: Callable[[], None]) -> None:
        """End the process after ``seconds`` unless ``cancel_timer`` runs first (a hung case)."""

        def expire() -> None:
            self.fatal("TIMEOUT", f"{seconds:g}")
            faulthandler.dump_traceback(file=self._file, all_threads=True)
            on_expiry()

        self.cancel_timer()
        self._timer = threading.Timer(seconds, expire)
        self._timer.daemon = True
        self._timer.start()

    def cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


#: what ended a case's process, by the fault log's tag: the named check a report gives it
FAULT_CHECKS = {"TIMEOUT": "support.hang", "DEVICE_FAULT": "support.device_fault", "Fatal": "support.worker_died"}


@dataclass(frozen=True)
class Fault:
    """Why a case's process ended: the named check (``support.hang``...) and a sentence for the report."""

    check: str
    reason: str

    @property
    def hung(self) -> bool:
        """True for a case that exceeded its timeout (rather than crashing)."""
        return self.check == "support.hang"


def _fault(tag_line: str, following: list[str]) -> Fault:
    tag, _, text = tag_line.partition(" ")
    if tag == "TIMEOUT":
        return Fault(FAULT_CHECKS[tag], f"hang: the case exceeded the {text}s case timeout and its worker was ended")
    if tag == "DEVICE_FAULT":
        return Fault(FAULT_CHECKS[tag], f"device fault: {text}; the worker was replaced")
    detail = next((ln.strip() for ln in following if ln.strip()), "")
    return Fault(FAULT_CHECKS["Fatal"],
                 f"the worker process died: {tag_line.strip()}{' — ' + detail if detail else ''}")


def peek_faults(out_dir: Path) -> dict[str, Fault]:
    """nodeid -> why its process died, from every fault log in ``out_dir`` (the logs stay)."""
    faults: dict[str, Fault] = {}
    for path in sorted(out_dir.glob(LOG_GLOB)):
        try:
            lines = path.read_text(errors="replace").splitlines()
        except OSError:  # a log removed between glob and read: nothing to learn from it
            continue
        current = None
        for i, line in enumerate(lines):
            if line.startswith("CASE "):
                current = line[5:]
            elif current and (line.startswith(("TIMEOUT ", "DEVICE_FAULT ", "Fatal Python error"))):
                faults.setdefault(current, _fault(line, lines[i + 1: i + 3]))
    return faults


def _where_fatal(lines: list[str]) -> str:
    """`` at file:line in function``: the innermost frame of faulthandler's traceback of the failing thread
    that is not in Python's standard library (``ctypes`` is where a bad pointer dies, not where it came from)."""
    stdlib = sysconfig.get_paths()["stdlib"]
    for line in lines:
        text = line.strip()
        if text.startswith("File \"") and ", line " in text:
            path, _, rest = text[6:].partition('", line ')
            if not path.startswith((stdlib, "<frozen")):
                return f" at {path}:{rest}"
        elif text and not text.startswith(("File", "Current thread", "Stack")):
            break  # the end of that thread's traceback
    return ""


def collection_deaths(out_dir: Path) -> list[str]:
    """The fatal errors of processes that died while collecting (before any case): one line each."""
    deaths = []
    for path in sorted(out_dir.glob(LOG_GLOB)):
        try:
            lines = path.read_text(errors="replace").splitlines()
        except OSError:
            continue
        collecting = False
        for i, line in enumerate(lines):
            if line == "COLLECT":
                collecting = True
            elif line.startswith("CASE "):
                collecting = False
            elif collecting and line.startswith("Fatal Python error"):
                deaths.append(f"{line.strip()}{_where_fatal(lines[i + 1:])} (while collecting the suite)")
                break
    return deaths


def read_faults(out_dir: Path) -> dict[str, Fault]:
    """``peek_faults``, then remove the logs (the report has taken what they hold)."""
    faults = peek_faults(out_dir)
    for path in out_dir.glob(LOG_GLOB):
        path.unlink(missing_ok=True)
    return faults
