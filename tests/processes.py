"""The environment of the tests' real child processes (rtp-ref commands, pytest runs, vendor imports), and
how a test finds every process a child started (``run_marker``, ``left_running``)."""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Mapping
from pathlib import Path

#: the environment variable whose value (``run_marker``) marks one child and every process it starts
RUN_MARKER = "RTP_REF_TEST_RUN"


def child_env(*paths: Path | str, **extra: str) -> dict[str, str]:
    """This process's environment for a fresh child: without pytest's and rtp-ref's own variables (an
    xdist worker's ``PYTEST_*`` or an outer ``RTP_REF_KERNELS`` must not reach it), ``paths`` put before
    any ``PYTHONPATH``, then ``extra`` set."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "RTP_REF_"))}
    if paths:
        env["PYTHONPATH"] = os.pathsep.join([*map(str, paths), *filter(None, [os.environ.get("PYTHONPATH")])])
    env.update(extra)
    return env


def interruptible() -> None:
    """``preexec_fn`` of a child a test will interrupt: SIGINT does what a terminal's Ctrl-C does (Python's
    KeyboardInterrupt), even when this test run was started in the background. A non-interactive shell
    starts background jobs with SIGINT ignored, children inherit that, and Python then never installs its
    handler: the child would run to its end and the test would blame the command."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_marker() -> dict[str, str]:
    """A fresh ``{RUN_MARKER: unique value}`` for ``child_env(**marker)``: the child and everything it starts
    inherit it, xdist workers and a sanitizer's driver included, whose command lines name nothing of the run."""
    return {RUN_MARKER: uuid.uuid4().hex}


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists and has not ended (a zombie, ended but not yet reaped, has)."""
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):  # no such process, or it ended meanwhile
        return False
    return state not in ("Z", "X")


def marked_processes(marker: Mapping[str, str]) -> list[int]:
    """The live processes whose environment holds ``marker`` (one ``run_marker``), read from /proc/PID/environ:
    the environment a process was started with, which nothing it does later can hide."""
    ((name, value),) = marker.items()
    wanted = f"{name}={value}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:  # another user's process, or it ended meanwhile
            continue
        if wanted in environ and alive(int(proc.name)):
            found.append(int(proc.name))
    return found


def left_running(marker: Mapping[str, str], grace_s: float = 10.0) -> list[int]:
    """The processes of the run ``marker`` marks still alive after up to ``grace_s`` seconds ([] as soon as
    none is): a process killed a moment ago may take a moment to end."""
    deadline = time.monotonic() + grace_s
    while (found := marked_processes(marker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return found
