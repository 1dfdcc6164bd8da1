"""``rtp-ref`` run as a real process without paying torch's import for every run.

Most of a fresh ``python -m rtp_ref.cli`` on a small machine is ``import torch`` (about 3 s of 4 on two cores), and
the bad-input tables start dozens of them. A *zygote* is one child Python started once per test process that
imports torch (and numpy, pytest and triton, most of what a certify run imports besides rtp_ref: a bad-input
certify run took 0.62 s with torch alone, 0.27 s so) and then only waits: for each run it forks, and the fork sets
the run's environment, working directory, ``sys.path`` additions and file-size limit, points fds 0-2 at /dev/null
and two files, and executes ``rtp_ref.cli`` as ``__main__`` the way ``python -m`` does. Each run is therefore a
process of its own with its own exit status and output; only those modules are already imported. rtp_ref is not
(``PYTHONPATH`` stand-ins such as a package that fails to import still take effect), nor is hypothesis (it takes
its default storage directory from the working directory at import), nor is xdist (its plugin freezes ``sys.path``
at import for the workers it starts, and pytest warns that it cannot rewrite it), and the zygote never runs a torch
operation, so no thread pool exists at the fork (an OpenMP pool in the parent would hang the child).

Each run leads a process group of its own, so a run that outlives its timeout is ended with everything it
started (a certify run's xdist workers). One zygote serves a whole test process (``shared_zygote``).

A run whose environment must be read by torch at import time cannot use this: spawn those as usual; nor can
a run whose Python hash seed must differ from another's (a fork keeps its parent's).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.processes import child_env

#: the zygote's program: import torch, then fork one ``python -m rtp_ref.cli`` per request line
ZYGOTE = r"""
import json, os, resource, runpy, sys, traceback
import torch  # noqa: F401 (the point: imported once, before any fork)
import numpy, pytest  # noqa: F401 (with triton, certify's own imports besides rtp_ref: 0.2 s of each run)
try:
    import triton  # noqa: F401
except ImportError:  # an environment without the triton extra
    pass

def run(request):
    os.setpgid(0, 0)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.path[:0] = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    if request["file_size_limit"] is not None:
        limit = request["file_size_limit"]
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    null = os.open(os.devnull, os.O_RDONLY)
    out = os.open(request["stdout"], os.O_WRONLY | os.O_TRUNC)
    err = os.open(request["stderr"], os.O_WRONLY | os.O_TRUNC)
    for source, target in ((null, 0), (out, 1), (err, 2)):
        os.dup2(source, target)
    sys.stdin = open(0, closefd=False)
    sys.stdout = open(1, "w", closefd=False)
    sys.stderr = open(2, "w", closefd=False)
    sys.argv = ["rtp-ref", *request["argv"]]
    code = 0
    try:
        runpy.run_module("rtp_ref.cli", run_name="__main__", alter_sys=True)
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        if not isinstance(stop.code, (int, type(None))):
            print(stop.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

for line in sys.stdin:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
        run(request)
    print(json.dumps(pid), flush=True)
    _, status = os.waitpid(pid, 0)
    print(json.dumps(os.waitstatus_to_exitcode(status)), flush=True)
"""


@dataclass(frozen=True)
class CliRun:
    """What one ``rtp-ref`` process did."""

    returncode: int
    stdout: str
    stderr: str


class CliZygote:
    """A started zygote; :meth:`run` executes one ``rtp-ref ARGV`` as its own forked process."""

    def __init__(self) -> None:
        self._process = subprocess.Popen(
            # unbuffered bytes: a line already read into a buffer would be invisible to select()
            [sys.executable, "-c", ZYGOTE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0,
            env=child_env(),
        )
        self._scratch = Path(tempfile.mkdtemp(prefix="rtp-ref-zygote-"))

    def run(self, argv: Sequence[str], env: Mapping[str, str], cwd: Path,
            file_size_limit: int | None = None, timeout: float = 600) -> CliRun:
        """Run ``rtp-ref ARGV`` with exactly ``env`` in ``cwd``; returns its exit status (negative: killed by
        that signal, as subprocess reports it) and what it wrote to stdout and stderr. A run still going after
        ``timeout`` seconds is killed with its process group and raises ``subprocess.TimeoutExpired``."""
        stdout, stderr = self._scratch / "stdout", self._scratch / "stderr"
        stdout.write_bytes(b"")
        stderr.write_bytes(b"")
        request = {"argv": list(argv), "env": dict(env), "cwd": str(cwd), "file_size_limit": file_size_limit,
                   "stdout": str(stdout), "stderr": str(stderr)}
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.write((json.dumps(request) + "\n").encode())
        pid = int(json.loads(self._answer()))
        if not select.select([self._process.stdout], [], [], timeout)[0]:
            with contextlib.suppress(ProcessLookupError):  # it ended just now
                os.killpg(pid, signal.SIGKILL)
            self._answer()
            raise subprocess.TimeoutExpired(["rtp-ref", *argv], timeout, stdout.read_text(), stderr.read_text())
        return CliRun(int(json.loads(self._answer())), stdout.read_text(), stderr.read_text())

    def _answer(self) -> str:
        """The zygote's next line, read a byte at a time so that nothing after it leaves the pipe."""
        assert self._process.stdout is not None
        line = b""
        while not line.endswith(b"\n"):
            byte = os.read(self._process.stdout.fileno(), 1)
            assert byte, f"the zygote died (exit {self._process.poll()})"
            line += byte
        return line.decode()

    def close(self) -> None:
        """End the zygote and remove its scratch files."""
        assert self._process.stdin is not None
        self._process.stdin.close()
        self._process.wait(timeout=30)
        for name in ("stdout", "stderr"):
            (self._scratch / name).unlink(missing_ok=True)
        self._scratch.rmdir()


_shared: list[CliZygote] = []


def shared_zygote() -> CliZygote:
    """This test process's zygote (each xdist worker has its own), started on first use, ended at exit."""
    if not _shared:
        _shared.append(CliZygote())
        atexit.register(_shared[0].close)
    return _shared[0]


@pytest.fixture(scope="session")
def cli_zygote() -> Iterator[CliZygote]:
    """``shared_zygote()`` as a fixture."""
    yield shared_zygote()
