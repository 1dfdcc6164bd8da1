"""A pytest plugin that writes each test's CPU time, its own and that of every process it started, one line per
test: where a CPU-bound suite's time goes (docs/testing.md, "Where the quick start's time goes").

Usage, from the repository root (each xdist worker appends to its own file under ``$CPU_PER_TEST_DIR``, default
``/tmp/cpu-per-test``)::

    PYTHONPATH=scripts pytest -p cpu_per_test -n 2 -m "not large" tests conformance
    cat /tmp/cpu-per-test/*.log | sort -rn | head -40

A test's CPU is its process's, plus every child it waited for (``RUSAGE_CHILDREN``: subprocesses and their
waited descendants), plus the CPU the test process's CLI zygote (tests/zygote.py) and the runs it forked used
meanwhile (read from ``/proc``: the zygote reaps its forks, so their time is the zygote's children's time).
A process a test starts and does not wait for is not counted.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Generator
from pathlib import Path

import pytest

OUT_DIR = Path(os.environ.get("CPU_PER_TEST_DIR", "/tmp/cpu-per-test"))


def _zygote_cpu() -> float:
    """CPU seconds of this process's CLI zygote and the runs it reaped (0 before it starts, or without /proc)."""
    try:
        from tests.zygote import _shared
    except ImportError:
        return 0.0
    if not _shared:
        return 0.0
    try:
        stat = Path(f"/proc/{_shared[0]._process.pid}/stat").read_text()
    except OSError:
        return 0.0
    # fields 14-17 (utime, stime, cutime, cstime) in clock ticks, counted after the command's closing parenthesis
    fields = stat.rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def _cpu_now() -> float:
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime + _zygote_cpu()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, None, None]:
    """Time the test's setup, call and teardown; append ``SECONDS NODEID`` to this process's file."""
    start = _cpu_now()
    yield
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    with open(OUT_DIR / f"{os.getpid()}.log", "a", encoding="utf-8") as out:
        out.write(f"{_cpu_now() - start:.2f} {item.nodeid}\n")
