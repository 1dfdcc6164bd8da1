"""Running the driver under the sanitizer: one child per run of cases, a new child after one died.

The sanitizer and everything it starts run in a process group of their own, so a hung case is ended
with all of it (``killpg``), and a terminal's Ctrl-C reaches only the parent, which ends the group.
A child is ended when it prints no marker for ``case_timeout`` seconds (a hung case), or no first
marker for ``START_S`` seconds if that is longer (a start that never reaches a case). When a child
ends before its last case — it died, hung, or lost its CUDA context — the case it was running is
recorded ``crashed`` or ``hung`` and a new child runs the rest. Each new child follows one that
settled at least one case; a child that settled none (its start failed) ends the run, with the
remaining cases ``not_run``: a new one would fail the same way.
"""

from __future__ import annotations

import contextlib
import math
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO

from rtp_ref.memcheck.plan import PlannedCase
from rtp_ref.memcheck.records import CaseRecord, MemcheckRun, Outcome
from rtp_ref.memcheck.transcript import CaseTrace, Transcript

#: errors the sanitizer prints per process; a case's count is what was printed (a note says when the
#: sanitizer's own summary counted more)
PRINT_LIMIT = 10_000
#: how often the parent looks at the child while no output comes
POLL_S = 0.2
#: how long the parent waits for the output pipe to close after ending a child
DRAIN_S = 10.0
#: the least time a child gets to print its first case marker (Python, torch and the sanitizer start
#: in it, slowly on a busy host), whatever the case timeout
START_S = 120.0


@dataclass(frozen=True)
class Settings:
    """What every child of a run shares."""

    #: the sanitizer executable (compute-sanitizer, or a stand-in in the runner's tests)
    sanitizer: str
    tool: str
    #: the platform the driver loads: a bundled name or a .toml path
    platform: str
    #: ``cuda``; ``cpu`` runs the driver on the CPU to test the runner (no memory is checked)
    device: str
    case_timeout: float


def sanitizer_argv(settings: Settings, kernel: str, keys: Sequence[str]) -> list[str]:
    """The child's command line: the sanitizer's options, then the driver for ``keys``.

    Every sanitizer option is ``--name value``. ``--destroy-on-device-error kernel`` keeps the CUDA
    context after a memory error, so the next case runs in the same process; ``--launch-timeout``
    lets a slow Python start connect; ``--target-processes application-only`` leaves the build tools a
    kernel may start (nvcc, ninja) unsanitized.
    """
    return [settings.sanitizer, "--tool", settings.tool, "--print-limit", str(PRINT_LIMIT),
            "--error-exitcode", "9", "--launch-timeout", str(math.ceil(max(settings.case_timeout, START_S))),
            "--destroy-on-device-error", "kernel", "--target-processes", "application-only",
            sys.executable, "-m", "rtp_ref.memcheck.driver", "--kernel", kernel, "--platform", settings.platform,
            "--device", settings.device, *keys]


def child_environment() -> dict[str, str]:
    """The child's environment: this one, with PyTorch's CUDA caching allocator off, so every tensor is
    its own allocation and memcheck sees a write past a tensor (inside a cached block it would not);
    and Python's faulthandler on, so a crash prints its Python stack into the case's output."""
    return {**os.environ, "PYTORCH_NO_CUDA_MEMORY_CACHING": "1", "PYTHONFAULTHANDLER": "1"}


@dataclass
class ChildResult:
    """How one child went: its output read, its exit status, and whether the parent ended it as hung."""

    transcript: Transcript
    returncode: int
    hung: bool


def _pump(stream: IO[str], lines: queue.Queue[str | None]) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


def _end_group(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the whole group is gone already
        os.killpg(proc.pid, signal.SIGKILL)


def _follow(proc: subprocess.Popen[str], lines: queue.Queue[str | None], transcript: Transcript,
            timeout: float, on_case: Callable[[Transcript], None]) -> bool:
    """Feed the child's output to ``transcript`` until it ends, calling ``on_case`` at each case marker;
    True when the child was ended as hung (``timeout`` seconds without a marker; START_S at least
    before the first)."""
    deadline = time.monotonic() + max(timeout, START_S)
    while True:
        if time.monotonic() > deadline:  # checked before each line: a hung case may still print
            return True
        try:
            line = lines.get(timeout=POLL_S)
        except queue.Empty:
            # The sanitizer may be gone while what it started still holds the pipe open.
            if proc.poll() is not None:
                return False
            continue
        if line is None:
            return False
        marker = transcript.feed(line)
        if marker is not None:
            deadline = time.monotonic() + timeout
            if marker.kind == "case":
                on_case(transcript)


def run_child(argv: Sequence[str], env: dict[str, str], timeout: float,
              on_case: Callable[[Transcript], None]) -> ChildResult:
    """Run one child to its end (or end it as hung, see ``_follow``) and read its output;
    ``on_case`` sees the transcript each time a case starts (every earlier case is complete by then).

    The child's whole process group is ended afterwards in every case (Ctrl-C included), so nothing
    it started outlives it.
    """
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env=env, text=True, errors="replace", start_new_session=True)
    assert proc.stdout is not None  # stdout=PIPE
    lines: queue.Queue[str | None] = queue.Queue()
    reader = threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True)
    reader.start()
    transcript = Transcript()
    try:
        hung = _follow(proc, lines, transcript, timeout, on_case)
    finally:
        _end_group(proc)
        proc.wait()
    reader.join(DRAIN_S)
    while True:  # what the child printed before it ended
        try:
            line = lines.get_nowait()
        except queue.Empty:
            break
        if line is not None:
            transcript.feed(line)
    return ChildResult(transcript, proc.returncode, hung)


def _exit_text(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}"


def _record(case: PlannedCase, trace: CaseTrace, process: int, child: ChildResult | None,
            timeout: float) -> CaseRecord:
    """The record of a case; ``child`` (how its process ended) is needed only for a call that did not return."""
    outcome: Outcome
    detail = None
    if trace.ended:
        outcome = "raised" if trace.raised is not None else "returned"
        if trace.device_lost:
            detail = "the call left the CUDA context unusable; later cases ran in a new sanitizer process"
    else:
        assert child is not None, "a call that did not return is settled only once its process has ended"
        if child.hung:
            outcome = "hung"
            detail = f"no end marker within --case-timeout {timeout:g}s; its sanitizer process was ended"
        else:
            outcome = "crashed"
            detail = f"its sanitizer process ended during the call, {_exit_text(child.returncode)}"
    return CaseRecord(case.kernel, case.layout, case.case, outcome, process, trace.errors,
                      trace.first_report[0].removeprefix("=========").strip() if trace.first_report else None,
                      tuple(trace.first_report), trace.raised, detail,
                      () if trace.ended else tuple(trace.output))


def _not_run(pending: Sequence[PlannedCase], child: ChildResult, timeout: float) -> list[CaseRecord]:
    how = (f"printed no case marker within {max(timeout, START_S):g}s and was ended" if child.hung
           else f"ended before its first case, {_exit_text(child.returncode)}")
    last = tuple(child.transcript.tail)
    return [CaseRecord(c.kernel, c.layout, c.case, "not_run", None,
                       detail=f"the sanitizer process {how}" + ("" if i == 0 else "; see the first such case"),
                       output=last if i == 0 else ()) for i, c in enumerate(pending)]


def _run_once(settings: Settings, kernel: str, pending: Sequence[PlannedCase], process: int, env: dict[str, str],
              run: MemcheckRun, emit: Callable[[CaseRecord], None]) -> list[PlannedCase]:
    """One child over ``pending``: emits the record of every case it settles, as soon as it is settled;
    returns the cases still to run (none after a child that ran no case: a new one would fail alike)."""
    emitted: set[str] = set()

    def emit_finished(t: Transcript) -> None:
        # A case is settled once the next one starts: reports after its end marker are still its own.
        for c in pending:
            trace = t.cases.get(c.key)
            if trace is not None and trace.ended and trace is not t.current and c.key not in emitted:
                emitted.add(c.key)
                emit(_record(c, trace, process, None, settings.case_timeout))

    child = run_child(sanitizer_argv(settings, kernel, [c.key for c in pending]), env, settings.case_timeout,
                      emit_finished)
    t = child.transcript
    where = f"{kernel}, sanitizer process {process}"
    run.errors_outside_cases += [f"{where}: {headline}" for headline in t.outside]
    if t.summary_errors is not None and t.summary_errors > t.printed_errors:
        run.notes.append(f"{where}: the sanitizer counted {t.summary_errors} errors and {t.printed_errors} "
                         f"were printed (print limit {PRINT_LIMIT}); the cases' counts are what was printed")
    done = [c for c in pending if c.key in t.cases]
    if not done:
        for record in _not_run(pending, child, settings.case_timeout):
            emit(record)
        return []
    for c in done:
        if c.key not in emitted:
            emit(_record(c, t.cases[c.key], process, child, settings.case_timeout))
    if child.hung and t.open_case is None and len(done) == len(pending):
        run.notes.append(f"{where}: did not exit within {settings.case_timeout:g}s after its last case and was ended")
    return [c for c in pending if c.key not in t.cases]


def run_kernel(settings: Settings, kernel: str, cases: Sequence[PlannedCase], run: MemcheckRun,
               on_record: Callable[[CaseRecord], None]) -> None:
    """Check ``cases`` of ``kernel`` (in order), appending each record to ``run`` and passing it to
    ``on_record`` as soon as it is settled; starts a new child after each one that died or hung."""

    def emit(record: CaseRecord) -> None:
        run.records.append(record)
        on_record(record)

    env = child_environment()
    pending, process = list(cases), 0
    while pending:  # each pass settles at least one case, or ends the loop
        process += 1
        run.processes += 1
        pending = _run_once(settings, kernel, pending, process, env, run, emit)
