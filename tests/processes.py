"""The environment of the tests' real child processes (rtp-ref commands, pytest runs, vendor imports)."""

from __future__ import annotations

import os
import signal
from pathlib import Path


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
