"""``rtp-ref memcheck``: the transcript parser, the restart loop and the command, through real processes.

The command runs under a stand-in sanitizer (``FAKE_SANITIZER``, a Python script written by the
``fake_sanitizer`` fixture): like compute-sanitizer it runs the command line after its options and
passes the output through, and, as its environment says, it adds compute-sanitizer-style error reports
after a chosen case's marker, kills itself when a chosen case starts, or fails before running anything.
The driver runs on the CPU (the hidden ``--device cpu``), which checks no memory at all: these tests
prove the runner (attribution, crashes, hangs, restarts, exit codes), not a kernel. The bad-input
tests here run in-process (they need no process of their own); the rows for layouts, --case and
--report are in test_hardening.py's table, through a real process.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from rtp_ref.cli import main
from rtp_ref.memcheck.transcript import Transcript
from tests.processes import alive, child_env, interruptible, left_running, run_marker
from tests.zygote import CliRun, shared_zygote

REPO = Path(__file__).resolve().parents[2]
FAULTS = {"RTP_REF_KERNELS": "tests.mutants.faults:kernels"}
#: three cases of layout auto, in the suite's order; the faults' trigger case is the middle one
CASES = ("--layout", "auto", "--case", "t1-b1-bf16", "--case", "t1-b16-bf16", "--case", "t1-b64-bf16")
TRIGGER = "auto/random-t1-b16-bf16"

FAKE_SANITIZER = '''#!{python}
"""A stand-in for compute-sanitizer (see tests/cli/test_memcheck.py)."""
import os, signal, subprocess, sys

REPORT = """========= Invalid __global__ write of size 4 bytes
=========     at mla_cache_write+0x1f0
=========     by thread (3,0,0) in block (0,0,0)
=========     Address 0x7f3a00000410 is out of bounds
=========
"""
args = sys.argv[1:]
while args and args[0].startswith("--"):  # every option rtp-ref passes is --name value
    args = args[2:]
print("========= COMPUTE-SANITIZER", flush=True)
if os.environ.get("FAKE_FAIL_START"):
    print("========= Error: Device not supported", flush=True)
    sys.exit(1)
proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
errors = 0
for line in proc.stdout:
    sys.stdout.write(line)
    sys.stdout.flush()
    key = line.split()[1] if line.startswith("RTP_REF_CASE ") else None
    if key is not None and key == os.environ.get("FAKE_PIDS_AT"):
        with open(os.environ["FAKE_PIDS_FILE"], "w") as f:
            f.write(f"{{os.getpid()}} {{proc.pid}}")
    if key is not None and key == os.environ.get("FAKE_DIE_AT"):
        os.kill(os.getpid(), signal.SIGKILL)
    if key is not None and key == os.environ.get("FAKE_REPORT_AT"):
        errors += 2
        sys.stdout.write(REPORT + REPORT)
        sys.stdout.flush()
code = proc.wait()
print(f"========= ERROR SUMMARY: {{errors}} errors", flush=True)
sys.exit(9 if errors else code)
'''


@pytest.fixture(scope="module")
def fake_sanitizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sanitizer") / "fake-sanitizer"
    path.write_text(FAKE_SANITIZER.format(python=sys.executable))
    path.chmod(0o755)
    return path


def _argv(sanitizer: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "rtp_ref.cli", "memcheck", "--sanitizer", str(sanitizer), "--device", "cpu",
            *args]


def _memcheck(sanitizer: Path, *args: str, **env: str) -> CliRun:
    return shared_zygote().run(_argv(sanitizer, *args)[3:], child_env(REPO, **env), REPO, timeout=240)


def _cases(done: CliRun) -> list[dict[str, Any]]:
    assert "Traceback" not in done.stdout + done.stderr, done.stdout + done.stderr
    cases: list[dict[str, Any]] = json.loads(done.stdout)["cases"]
    return cases


def _brief(cases: list[dict[str, Any]]) -> list[tuple[str, str, int | None]]:
    return [(c["case"], c["status"], c["process"]) for c in cases]


def test_transcript_gives_each_report_to_the_case_whose_marker_precedes_it() -> None:
    t = Transcript()
    for line in [
        "========= COMPUTE-SANITIZER",
        "========= Program hit cudaErrorInvalidValue (error 1) on CUDA API call to cudaGetDevice.",
        "=========     Saved host backtrace up to driver entry point",
        "RTP_REF_CASE fp8/a",
        "RTP_REF_END fp8/a ok",
        "RTP_REF_CASE fp8/b",
        "========= Invalid __global__ write of size 4 bytes",
        "=========     at mla_cache_write+0x1f0",
        "=========     Address 0x10 is out of bounds",
        "=========",
        "kernel output that is not the sanitizer's",
        "========= Invalid __global__ read of size 2 bytes",
        "RTP_REF_END fp8/b raised RuntimeError: CUDA error: unspecified launch failure",
        "========= Error: Race reported between Write access at 0x1 and Read access at 0x2",
        "RTP_REF_CASE fp8/c",
        "========= ERROR SUMMARY: 4 errors",
    ]:
        t.feed(line)
    assert t.outside == ["Program hit cudaErrorInvalidValue (error 1) on CUDA API call to cudaGetDevice."]
    a, b, c = t.cases.values()
    assert (a.errors, a.ended, a.raised) == (0, True, None)
    # the report after b's end marker still belongs to b: nothing else ran since its marker
    assert (b.errors, b.ended, b.raised) == (3, True, "RuntimeError: CUDA error: unspecified launch failure")
    assert b.first_report == ["========= Invalid __global__ write of size 4 bytes",
                              "=========     at mla_cache_write+0x1f0", "=========     Address 0x10 is out of bounds"]
    assert b.output == ["kernel output that is not the sanitizer's"]
    assert (c.errors, c.ended) == (0, False)
    assert t.open_case is c
    assert (t.summary_errors, t.printed_errors) == (4, 4)


def test_reports_are_attributed_to_the_case_they_follow(fake_sanitizer: Path) -> None:
    done = _memcheck(fake_sanitizer, "--kernel", "reference", *CASES, "--json", FAKE_REPORT_AT=TRIGGER)
    cases = _cases(done)
    assert done.returncode == 1, done.stderr
    assert _brief(cases) == [("random-t1-b1-bf16", "clean", 1), ("random-t1-b16-bf16", "errors", 1),
                             ("random-t1-b64-bf16", "clean", 1)]
    assert cases[1]["errors"] == 2
    assert cases[1]["first_error"] == "Invalid __global__ write of size 4 bytes"
    assert cases[1]["first_report"][1:] == ["=========     at mla_cache_write+0x1f0",
                                            "=========     by thread (3,0,0) in block (0,0,0)",
                                            "=========     Address 0x7f3a00000410 is out of bounds"]


def test_a_sanitizer_that_dies_at_a_case_is_replaced_for_the_rest(fake_sanitizer: Path, tmp_path: Path) -> None:
    done = _memcheck(fake_sanitizer, "--kernel", "reference", *CASES, "--report", str(tmp_path / "rep"),
                     FAKE_DIE_AT=TRIGGER)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    rows = [line.split() for line in done.stdout.splitlines() if line.startswith("reference ")]
    assert [row[2:4] for row in rows] == [["random-t1-b1-bf16", "clean"], ["random-t1-b16-bf16", "crashed"],
                                          ["random-t1-b64-bf16", "clean"]]
    assert "killed by SIGKILL" in done.stdout
    report = json.loads((tmp_path / "rep" / "memcheck.json").read_text())
    assert _brief(report["cases"]) == [("random-t1-b1-bf16", "clean", 1), ("random-t1-b16-bf16", "crashed", 1),
                                       ("random-t1-b64-bf16", "clean", 2)]
    assert report["summary"]["processes"] == 2 and report["ok"] is False
    assert "| reference | auto | random-t1-b16-bf16 | crashed |" in (tmp_path / "rep" / "memcheck.md").read_text()


def test_a_hung_case_is_ended_after_the_case_timeout_and_the_rest_still_runs(fake_sanitizer: Path) -> None:
    start = time.monotonic()
    done = _memcheck(fake_sanitizer, "--kernel", "fault-hangs", *CASES[:2], "--case", "t1-b16-bf16",
                     "--case", "t1-b64-bf16", "--case-timeout", "5", "--json", **FAULTS)
    elapsed = time.monotonic() - start
    cases = _cases(done)
    assert done.returncode == 1, done.stderr
    assert _brief(cases) == [("random-t1-b16-bf16", "hung", 1), ("random-t1-b64-bf16", "clean", 2)]
    assert cases[0]["detail"] == "no end marker within --case-timeout 5s; its sanitizer process was ended"
    assert cases[0]["output"] == []
    assert elapsed < 60, f"a 5 s case timeout took {elapsed:.0f} s in all"


def test_a_clean_run_exits_0_and_writes_its_report(fake_sanitizer: Path, tmp_path: Path) -> None:
    done = _memcheck(fake_sanitizer, "--kernel", "reference", *CASES[:2], "--case", "t1-b64",
                     "--report", str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == (
        "rtp-ref: memcheck of 2 case(s): 2 clean in 1 sanitizer process(es): every case ran clean; "
        "--device cpu: no memory was checked (a test of the runner)")
    report = json.loads((tmp_path / "memcheck.json").read_text())
    assert report["ok"] is True and _brief(report["cases"]) == [("random-t1-b64-bf16", "clean", 1),
                                                                ("random-t1-b64-fp16", "clean", 1)]
    assert "| reference | auto | random-t1-b64-fp16 | clean | clean |" in (tmp_path / "memcheck.md").read_text()


def test_a_sanitizer_that_never_reaches_a_case_ends_the_run(fake_sanitizer: Path) -> None:
    done = _memcheck(fake_sanitizer, "--kernel", "reference", *CASES, "--json", FAKE_FAIL_START="1")
    assert done.returncode == 1, done.stderr
    doc = json.loads(done.stdout)
    assert [c["status"] for c in doc["cases"]] == ["not_run"] * 3
    assert doc["summary"]["processes"] == 1, "a start that fails is not retried for every case"
    assert doc["cases"][0]["detail"] == "the sanitizer process ended before its first case, exit status 1"
    assert doc["errors_outside_cases"] == ["reference, sanitizer process 1: Error: Device not supported"]


def test_ctrl_c_ends_the_sanitizer_and_its_driver_and_exits_130(fake_sanitizer: Path, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    marker = run_marker()
    proc = subprocess.Popen(_argv(fake_sanitizer, "--kernel", "fault-hangs", *CASES[:2], "--case", "t1-b16-bf16"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                            env=child_env(REPO, **FAULTS, **marker, FAKE_PIDS_AT=TRIGGER, FAKE_PIDS_FILE=str(pids)),
                            preexec_fn=interruptible)
    deadline = time.monotonic() + 120
    while not (pids.exists() and pids.read_text()) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stdout + stderr
    assert stderr == "rtp-ref: interrupted: no sanitizer process is left running and no report was written\n"
    sanitizer, driver = map(int, pids.read_text().split())
    assert not alive(sanitizer) and not alive(driver)
    assert left_running(marker) == [], "a process of the run was left running"


@pytest.mark.skipif(torch.cuda.is_available(), reason="a host with a CUDA GPU is not CPU-only")
def test_a_cpu_only_host_is_refused(fake_sanitizer: Path) -> None:
    argv = _argv(fake_sanitizer, "--kernel", "reference")
    argv.remove("--device")
    argv.remove("cpu")
    done = subprocess.run(argv, capture_output=True, text=True, env=child_env(REPO), timeout=120, check=False)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == ("rtp-ref: error: torch sees no CUDA GPU on this host (CPU only); memcheck runs each "
                           "kernel on an NVIDIA GPU under compute-sanitizer; valid: a CUDA host\n")


@pytest.mark.parametrize(("args", "path", "line"), [
    pytest.param(("--kernel", "tritonn", "--sanitizer", sys.executable), None,
                 "rtp-ref: error: unknown kernel(s) 'tritonn'; known kernels: reference, torch-eager", id="kernel"),
    pytest.param(("--kernel", "reference"), "/nonexistent",
                 "rtp-ref: error: compute-sanitizer not found on PATH; valid: a CUDA host with the CUDA toolkit, "
                 "or --sanitizer PATH", id="sanitizer-not-on-path"),
    pytest.param(("--kernel", "reference", "--sanitizer", "/nonexistent/compute-sanitizer"), None,
                 "rtp-ref: error: --sanitizer '/nonexistent/compute-sanitizer': no such executable; valid: the "
                 "path of compute-sanitizer (or a command on PATH)", id="sanitizer-path"),
    pytest.param(("--kernel", "reference", "--tool", "leakcheck"), None,
                 "rtp-ref memcheck: error: argument --tool: invalid choice: 'leakcheck' (choose from ", id="tool"),
    pytest.param(("--kernel", "reference", "--case-timeout", "0"), None,
                 "rtp-ref memcheck: error: argument --case-timeout: '0' must be a positive number of seconds",
                 id="case-timeout"),
])
def test_bad_input_exits_2_with_one_line(args: tuple[str, ...], path: str | None, line: str,
                                         monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("RTP_REF_KERNELS", raising=False)
    if path is not None:
        monkeypatch.setenv("PATH", path)
    code = main(["memcheck", *args])  # argparse's own errors too
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.splitlines()[-1].startswith(line), err
    assert all(ln.startswith(("usage: ", " ")) for ln in err.splitlines()[:-1]), err
