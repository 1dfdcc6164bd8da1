"""``certify --platform all`` runs platforms at once (rtp_ref.certify.platform_runs), with real processes."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from rtp_ref.certify.cores import share_cores
from rtp_ref.certify.platform_runs import default_jobs, run_platforms

#: a child that prints a line, sleeps, prints another and exits with the status it is given
CHILD = "import sys, time; print(sys.argv[1], 'starts', flush=True); time.sleep(float(sys.argv[2])); " \
        "print(sys.argv[1], 'ends', flush=True); sys.exit(int(sys.argv[3]))"


def _run(name: str, seconds: float, code: int) -> tuple[str, list[str]]:
    return name, [sys.executable, "-c", CHILD, name, str(seconds), str(code)]


def test_two_jobs_run_at_once_and_each_output_is_printed_whole(capfd: pytest.CaptureFixture[str]) -> None:
    codes: dict[str, int] = {}
    started = time.monotonic()
    run_platforms([_run("a", 1.5, 0), _run("b", 1.5, 3), _run("c", 0.1, 0)], jobs=2, codes=codes)
    elapsed = time.monotonic() - started
    assert codes == {"a": 0, "b": 3, "c": 0}
    assert elapsed < 2.9, f"two 1.5 s runs at once took {elapsed:.1f} s"
    lines = [line for line in capfd.readouterr().out.splitlines() if not line.startswith("rtp-ref: certifying")]
    # each run's two lines stay together, whatever order the runs finish in
    pairs = [lines[i:i + 2] for i in range(0, len(lines), 2)]
    assert sorted(pairs) == [[f"{n} starts", f"{n} ends"] for n in "abc"]


def test_one_job_runs_one_at_a_time() -> None:
    codes: dict[str, int] = {}
    started = time.monotonic()
    run_platforms([_run("a", 0.6, 0), _run("b", 0.6, 0)], jobs=1, codes=codes)
    assert time.monotonic() - started >= 1.2 and codes == {"a": 0, "b": 0}


def test_an_interrupt_kills_every_running_group(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """KeyboardInterrupt while waiting: the running children are killed (none outlives the call), and the
    platforms that had finished are in ``codes``."""
    marker = tmp_path / "late"
    late = [sys.executable, "-c", f"import time, pathlib; time.sleep(3); pathlib.Path({str(marker)!r}).touch()"]
    calls = {"n": 0}
    real_sleep = time.sleep

    def interrupt_later(seconds: float) -> None:
        calls["n"] += 1
        if calls["n"] == 40:  # about 2 s in: "quick" has finished, the "late" ones still run
            raise KeyboardInterrupt
        real_sleep(seconds)

    monkeypatch.setattr("rtp_ref.certify.platform_runs.time.sleep", interrupt_later)
    codes: dict[str, int] = {}
    with pytest.raises(KeyboardInterrupt):
        run_platforms([_run("quick", 0.1, 0), ("late1", late), ("late2", late)], jobs=3, codes=codes)
    assert codes == {"quick": 0}
    real_sleep(3.5)
    assert not marker.exists(), "a platform process outlived the interrupt"


def test_default_jobs() -> None:
    assert default_jobs(gpus_visible=1) == 1
    assert default_jobs(gpus_visible=0) >= 1


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
    run_platforms([("a", show), ("b", show)], jobs=2, codes={})
    assert capfd.readouterr().out.count("threads 2\n") == 2
