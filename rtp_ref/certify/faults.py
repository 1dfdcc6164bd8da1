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
import threading
from collections.abc import Callable
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


def _reason(tag_line: str, following: list[str]) -> str:
    tag, _, text = tag_line.partition(" ")
    if tag == "TIMEOUT":
        return f"hang: the case exceeded the {text}s case timeout and its worker was ended"
    if tag == "DEVICE_FAULT":
        return f"device fault: {text}; the worker was replaced"
    detail = next((ln.strip() for ln in following if ln.strip()), "")
    return f"the worker process died: {tag_line.strip()}{' — ' + detail if detail else ''}"


def read_fault_reasons(out_dir: Path) -> dict[str, str]:
    """nodeid -> why its process died, from every fault log in ``out_dir`` (logs are removed)."""
    reasons: dict[str, str] = {}
    for path in sorted(out_dir.glob(LOG_GLOB)):
        lines = path.read_text(errors="replace").splitlines()
        current = None
        for i, line in enumerate(lines):
            if line.startswith("CASE "):
                current = line[5:]
            elif current and (line.startswith(("TIMEOUT ", "DEVICE_FAULT ", "Fatal Python error"))):
                reasons.setdefault(current, _reason(line, lines[i + 1: i + 3]))
        path.unlink(missing_ok=True)
    return reasons
