"""``certify --platform all`` runs platforms at once (rtp_ref.certify.platform_runs), with real processes."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from rtp_ref.certify import platform_runs
from rtp_ref.certify.cores import share_cores
from rtp_ref.certify.platform_runs import default_jobs, run_platforms

#: a child that prints a line, sleeps, prints another and exits with the status it is given
CHILD = "import sys, time; print(sys.argv[1], 'starts', flush=True); time.sleep(float(sys.argv[2])); " \
        "print(sys.argv[1], 'ends', flush=True); sys.exit(int(sys.argv[3]))"


def _run(name: str, seconds: float, code: int) -> tuple[str, list[str]]:
    return name, [sys.executable, "-c", CHILD, name, str(seconds), str(code)]


#: a child that announces itself with a file, then waits (up to 60 s) for its partner's file: two such
#: children finish only if they run at the same time (exit 0), one at a time the first gives up (exit 7)
MEET = ("import pathlib, sys, time; here = pathlib.Path(sys.argv[1]); here.touch(); other = pathlib.Path(sys.argv[2]); "
        "deadline = time.monotonic() + float(sys.argv[3])\n"
        "while not other.exists():\n"
        "    time.sleep(0.02)\n"
        "    if time.monotonic() > deadline: sys.exit(7)\n"
        "print(here.name, 'met', other.name, flush=True)")


def _meet(tmp_path: Path, me: str, other: str, patience: float) -> tuple[str, list[str]]:
    return me, [sys.executable, "-c", MEET, str(tmp_path / me), str(tmp_path / other), str(patience)]


def test_two_jobs_run_at_once_and_each_output_is_printed_whole(tmp_path: Path,
                                                               capfd: pytest.CaptureFixture[str]) -> None:
    codes: dict[str, int] = {}
    run_platforms([_meet(tmp_path, "a", "b", 60), _meet(tmp_path, "b", "a", 60), _run("c", 0.1, 3)], jobs=2,
                  workers=1, codes=codes)
    assert codes == {"a": 0, "b": 0, "c": 3}, "a and b can only meet when they run at the same time"
    lines = [line for line in capfd.readouterr().out.splitlines() if not line.startswith("rtp-ref: ")]
    # each run's lines stay together, whatever order the runs finish in
    assert sorted(lines[:2]) == ["a met b", "b met a"] and lines[2:] == ["c starts", "c ends"]


def test_one_job_runs_one_at_a_time(tmp_path: Path) -> None:
    codes: dict[str, int] = {}
    run_platforms([_meet(tmp_path, "a", "b", 1), _meet(tmp_path, "b", "a", 1)], jobs=1, workers=1, codes=codes)
    assert codes == {"a": 7, "b": 0}, "one at a time, the first waits for a partner that has not started"


def test_an_interrupt_kills_every_running_group(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """KeyboardInterrupt while waiting: the running children are killed (none outlives the call), and the
    platforms that had finished are in ``codes``."""
    marker = tmp_path / "late"
    # each "late" platform starts a process of its own (as pytest starts workers) that would write the marker:
    # only killing the whole group stops it
    grandchild = f"import time, pathlib; time.sleep(3); pathlib.Path({str(marker)!r}).touch()"
    late = [sys.executable, "-c", f"import subprocess, sys; subprocess.run([sys.executable, '-c', {grandchild!r}])"]
    codes: dict[str, int] = {}
    real_sleep = time.sleep

    def interrupt_once_quick_finished(seconds: float) -> None:
        if "quick" in codes:  # the "late" ones (3 s) still run: this is what Ctrl-C meets
            raise KeyboardInterrupt
        real_sleep(seconds)

    monkeypatch.setattr(platform_runs, "time", SimpleNamespace(sleep=interrupt_once_quick_finished,
                                                               monotonic=time.monotonic))
    with pytest.raises(KeyboardInterrupt):
        run_platforms([_run("quick", 0.1, 0), ("late1", late), ("late2", late)], jobs=3, workers=1, codes=codes)
    assert codes == {"quick": 0}
    real_sleep(3.5)
    assert not marker.exists(), "a platform process outlived the interrupt"


def test_default_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: 8)
    assert (default_jobs(gpus_visible=1), default_jobs(gpus_visible=0)) == (1, 8)
    monkeypatch.setattr("os.cpu_count", lambda: None)
    assert default_jobs(gpus_visible=0) == 1


def test_processes_side_by_side_share_the_cores_unless_the_user_said(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: 8)
    assert share_cores({"A": "1"}, 2) == {"A": "1", "OMP_NUM_THREADS": "4"}
    assert share_cores({}, 16) == {"OMP_NUM_THREADS": "1"}
    assert share_cores({"OMP_NUM_THREADS": "3"}, 2) == {"OMP_NUM_THREADS": "3"}
    assert share_cores({}, 1) == {}


def test_platform_processes_get_their_share(tmp_path: Path, capfd: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr("os.cpu_count", lambda: 4)
    show = [sys.executable, "-c", "import os; print('threads', os.environ.get('OMP_NUM_THREADS'))"]
    run_platforms([("a", show), ("b", show)], jobs=2, workers=1, codes={})
    assert capfd.readouterr().out.count("threads 2\n") == 2
    # two platforms of two workers each: four processes share the four cores; more jobs than platforms
    # do not thin the share
    run_platforms([("a", show), ("b", show)], jobs=8, workers=2, codes={})
    assert capfd.readouterr().out.count("threads 1\n") == 2
