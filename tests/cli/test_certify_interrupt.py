"""A terminal's Ctrl-C during ``rtp-ref certify``: the SIGINT reaches the whole process group (the command and its
xdist workers), and the run leaves no file of its own in the report directory, only reports; a report it wrote says
why it stopped."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.processes import child_env

REPO = Path(__file__).resolve().parents[2]


def _as_from_a_terminal() -> None:
    # SIGINT's default action, as a terminal's foreground job has it: a process started in the background of a
    # non-interactive shell (`cmd &`, as some CI runners and scripts run the suite) inherits SIGINT ignored, and
    # Python then installs no KeyboardInterrupt handler: the Ctrl-C would never arrive
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_leaves_no_run_files_and_a_report_names_the_interrupt(tmp_path: Path) -> None:
    report = tmp_path / "rep"
    proc = subprocess.Popen([sys.executable, "-m", "rtp_ref.cli", "certify", "--platform", "cpu", "--kernel",
                             "reference", "--report", str(report)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=child_env(REPO), cwd=tmp_path, start_new_session=True,
                            preexec_fn=_as_from_a_terminal)
    try:
        deadline = time.monotonic() + 120
        # the run is under way once a worker has written its case list (after its fault log): both are files an
        # interrupt must not leave behind. The signal goes at once: the whole run takes a few seconds, and a
        # signal after its last case would meet a complete run
        while not list(report.glob(".cases-*.json")) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.02)
        assert list(report.glob(".cases-*.json")), "no worker started its cases"
        assert list(report.glob(".worker-*.log")), "a worker runs without its fault log"
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: every process of the group
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert "Traceback" not in stderr, stderr
    assert proc.returncode in (1, 130), proc.returncode
    left = sorted(p.name for p in report.iterdir() if p.name.startswith("."))
    assert left == [], left
    if (report / "report.json").exists():
        written = json.loads((report / "report.json").read_text())
        assert written["complete"] is False and written["stop_reason"], written["stop_reason"]


def test_a_ctrl_c_as_the_run_ends_still_leaves_a_report_that_says_so(tmp_path: Path) -> None:
    report = tmp_path / "rep"
    done = subprocess.run([sys.executable, "-m", "rtp_ref.cli", "certify", "--platform", "cpu", "--kernel",
                           "reference", "--layout", "fp8", "--report", str(report), "--",
                           "-p", "tests.cli.interrupt_at_end"], capture_output=True, text=True, timeout=300,
                          env=child_env(REPO), cwd=REPO, check=False)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode in (1, 130), (done.returncode, done.stderr[-2000:])
    written = json.loads((report / "report.json").read_text())
    assert written["complete"] is False
    assert written["stop_reason"] == "interrupted (Ctrl-C, SIGINT)"
    assert sorted(p.name for p in report.iterdir() if p.name.startswith(".")) == []
