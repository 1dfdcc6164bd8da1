"""``certify --platform all``: one certify process per platform, up to ``jobs`` at a time.

Each process runs in a session of its own with everything it starts (pytest's xdist workers), so a
terminal's Ctrl-C reaches only this process, and every group still running is ended on the way out: on
Ctrl-C nothing of the run is left behind, and a finished platform leaves no stray worker. With more than
one job the processes' output is held and printed whole when each finishes, under a line naming its platform, so
two platforms' lines never interleave; meanwhile a progress line every ``PROGRESS_S`` seconds says how far each
running platform is (cases done of its total, failures so far), read from its held output. The CPU cores are
shared among them (rtp_ref.certify.cores). Each process is told the command line the user typed
(``$RTP_REF_TYPED_COMMAND``, rtp_ref.certify.session), which its report records in place of its own.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import IO

from rtp_ref.certify.cores import share_cores
from rtp_ref.certify.session import TYPED_COMMAND_ENV, run_command
from rtp_ref.certify.signals import interrupts_held

#: how often the running processes are polled (seconds)
POLL_S = 0.05
#: how often a progress line is printed while platforms run with their output held (seconds)
PROGRESS_S = 15.0
#: pytest's collection line ("4 workers [480 items]", "collected 480 items") and its progress lines (one character
#: per case: . F E s x X, then "[ 57%]")
_TOTAL = re.compile(rb"(?:workers? \[|collected )(\d+) items?")
_PROGRESS_LINE = re.compile(rb"^([.FEsxX]+) *(?:\[ *\d+%\])?$", re.MULTILINE)


@dataclass
class _Running:
    process: subprocess.Popen[bytes]
    #: the held output (None: the process writes to this terminal directly)
    output: IO[bytes] | None


def default_jobs(gpus_visible: int) -> int:
    """How many platforms to certify at once when not told: one on a GPU host (every platform's workers use
    the same GPUs), else one per CPU core, at least one."""
    return 1 if gpus_visible else max(1, os.cpu_count() or 1)


def run_platforms(runs: list[tuple[str, list[str]]], jobs: int, workers: int, codes: dict[str, int]) -> None:
    """Run each ``(platform, argv)`` to its end, at most ``jobs`` at once, in order of the list; each
    finished platform's exit status goes into ``codes`` as it finishes (so that a caller interrupted by
    Ctrl-C, which propagates as KeyboardInterrupt after every running group is killed, knows which
    platforms finished). Each platform process runs ``workers`` pytest workers: the cores are shared
    among all the processes that run at once. Each gets ``$RTP_REF_TYPED_COMMAND``: the one already set, else
    this process's command line (``run_command``)."""
    jobs = max(1, min(jobs, len(runs)))
    env = share_cores(dict(os.environ), jobs * workers)
    env[TYPED_COMMAND_ENV] = run_command()
    pending = list(runs)
    running: dict[str, _Running] = {}
    hold = jobs > 1
    next_progress = time.monotonic() + PROGRESS_S
    try:
        while pending or running:
            while pending and len(running) < jobs:
                name, argv = pending.pop(0)
                print(f"rtp-ref: certifying platform {name}" + (" (its output follows when it ends)" if hold else ""),
                      flush=True)
                # A Ctrl-C while the child starts waits until it is in ``running`` (else it would run on, orphaned).
                with interrupts_held():
                    running[name] = _start(argv, env, hold_output=hold)
            for name, run in list(running.items()):
                if run.process.poll() is None:
                    continue
                del running[name]
                if hold:
                    print(f"rtp-ref: platform {name} ended (exit {run.process.returncode}); its output:", flush=True)
                _end(run)
                codes[name] = run.process.returncode
            if hold and running and time.monotonic() >= next_progress:
                print("rtp-ref: progress: " + "; ".join(f"{name} {progress(run)}" for name, run in running.items()),
                      flush=True)
                next_progress = time.monotonic() + PROGRESS_S
            time.sleep(POLL_S)
    finally:
        for run in running.values():
            _end(run, show=False)


def progress_of(output: bytes) -> str:
    """How far a certify process is, from its output so far: ``120/480 cases`` with ``, 2 failed`` when some
    failed (or errored), ``starting`` before pytest has collected."""
    total = _TOTAL.search(output)
    if total is None:
        return "starting"
    marks = b"".join(m.group(1) for m in _PROGRESS_LINE.finditer(output, total.end()))
    failed = marks.count(b"F") + marks.count(b"E")
    return f"{len(marks)}/{int(total.group(1))} cases" + (f", {failed} failed" if failed else "")


def progress(run: _Running) -> str:
    """``progress_of`` the run's held output."""
    if run.output is None:
        return "running"
    fd = run.output.fileno()
    return progress_of(os.pread(fd, os.fstat(fd).st_size, 0))


def _start(argv: list[str], env: dict[str, str], hold_output: bool) -> _Running:
    output = tempfile.TemporaryFile() if hold_output else None  # noqa: SIM115 (closed by _end)
    process = subprocess.Popen(argv, env=env, start_new_session=True, stdout=output,
                               stderr=subprocess.STDOUT if output else None)
    return _Running(process, output)


def _end(run: _Running, show: bool = True) -> None:
    """Kill what is left of the run's process group, reap it, and print its held output."""
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the whole group is gone already
        os.killpg(run.process.pid, signal.SIGKILL)
    run.process.wait()
    if run.output is None:
        return
    if show:
        run.output.seek(0)
        sys.stdout.flush()
        sys.stdout.buffer.write(run.output.read())
        sys.stdout.flush()
    run.output.close()
