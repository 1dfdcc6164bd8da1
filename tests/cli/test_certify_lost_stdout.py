"""A certify run whose stdout cannot be written still certifies: its exit status is its verdict, never 0 because
printing failed; its reports are written; stderr gets one line saying stdout could not be written, no traceback.

Each test starts ``rtp-ref`` as a real process whose stdout is a pipe nobody reads any more (``| true``, a CI log
closed early), /dev/full, or closed (``>&-``), and certifies a kernel that fails. The subprocess module gives the
child SIGPIPE's default action, as a shell does: were Python not to ignore it, a write to the closed pipe would kill
the run (exit -13) instead of failing with EPIPE.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path

import pytest

from rtp_ref.certify.platform_runs import run_platforms
from rtp_ref.certify.session import TYPED_COMMAND_ENV
from tests.processes import child_env

REPO = Path(__file__).resolve().parents[2]
#: the rtp-ref script of this environment, as a user runs it
RTP_REF = Path(sys.executable).with_name("rtp-ref")
#: a failing kernel of the cpu table and one layout it claims: a short run
FAILING = ("--platform", "cpu", "--kernel", "mutant-wrong-slot", "--layout", "auto")
MUTANTS = {"RTP_REF_KERNELS": "tests.mutants.kernels:mutants"}
REPORTS = ("report.json", "report.md", "junit.xml")


@contextmanager
def _closed_pipe() -> Iterator[int]:
    """The write end of a pipe whose read end is closed: every write fails with EPIPE."""
    read, write = os.pipe()
    os.close(read)
    try:
        yield write
    finally:
        os.close(write)


@contextmanager
def _dev_full() -> Iterator[int]:
    """/dev/full: every write fails with ENOSPC."""
    descriptor = os.open("/dev/full", os.O_WRONLY)
    try:
        yield descriptor
    finally:
        os.close(descriptor)


def _close_stdout() -> None:
    os.close(1)


#: per case: what opens the child's stdout (None: it is closed in the child), and the reason its line names
STDOUTS: dict[str, tuple[Callable[[], AbstractContextManager[int]] | None, str]] = {
    "closed-pipe": (_closed_pipe, "Broken pipe"),
    "dev-full": (_dev_full, "No space left on device"),
    "closed": (None, "closed when the command started"),
}


def _run(argv: list[str], stdout: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``argv`` run with the stdout named by ``stdout`` (a key of STDOUTS); stderr captured."""
    opener, _ = STDOUTS[stdout]
    with opener() if opener is not None else nullcontext(None) as descriptor:
        return subprocess.run(argv, stdout=descriptor, stderr=subprocess.PIPE, text=True, cwd=cwd,
                              env=child_env(REPO, **env), timeout=300,
                              preexec_fn=_close_stdout if descriptor is None else None)


def _one_line(stderr: str, reason: str) -> None:
    assert "Traceback" not in stderr, stderr
    assert stderr.splitlines() == [f"rtp-ref: stdout could not be written ({reason}); the output after that was "
                                   "dropped"], stderr


@pytest.mark.parametrize("stdout", list(STDOUTS))
def test_a_failing_certification_with_a_lost_stdout_still_fails_and_writes_its_reports(stdout: str,
                                                                                      tmp_path: Path) -> None:
    report = tmp_path / "rep"
    # the closed pipe with certify's workers (the default), the others in certify's own process (-n 0: the
    # session's own terminal output is what hits the lost stdout), which saves each two workers' torch imports
    workers = () if stdout == "closed-pipe" else ("-n", "0")
    done = _run([sys.executable, "-m", "rtp_ref.cli", "certify", *FAILING, *workers, "--report", str(report)], stdout,
                tmp_path, **MUTANTS)
    assert done.returncode == 1, f"exit {done.returncode}\n{done.stderr}"
    _one_line(done.stderr, STDOUTS[stdout][1])
    assert all((report / name).is_file() for name in REPORTS), sorted(os.listdir(report))
    rows = json.loads((report / "report.json").read_text())["summary"]["by_kernel_layout"]
    assert {(r["kernel"], r["layout"], r["verdict"]) for r in rows} >= {("mutant-wrong-slot", "auto", "failed")}


def test_every_platform_with_a_closed_pipe_still_fails_writes_the_scoreboard_and_names_the_typed_command(
        tmp_path: Path) -> None:
    """--platform all: the parent loses its stdout first and hands its children /dev/null instead; the child's
    report records the command the user typed, not its own."""
    report = tmp_path / "all rep"
    argv = ["certify", "--platform", "all", "--kernel", "unbindable-cpu-no-write", "--layout", "auto", "--jobs", "1",
            "--report", str(report)]
    done = _run([str(RTP_REF), *argv], "closed-pipe", tmp_path,
                RTP_REF_KERNELS="tests.cli.unbindable_kernels:kernels")
    assert done.returncode == 1, f"exit {done.returncode}\n{done.stderr}"
    _one_line(done.stderr, "Broken pipe")
    assert sorted(os.listdir(report)) == ["cpu", "scoreboard.json", "scoreboard.md"]  # the other tables left out
    assert all((report / "cpu" / name).is_file() for name in REPORTS)
    run = json.loads((report / "cpu" / "report.json").read_text())["run"]
    assert run["command"] == f"rtp-ref certify --platform all --kernel unbindable-cpu-no-write --layout auto " \
                             f"--jobs 1 --report '{report}'"


CHILD_PRINTS_IT = [sys.executable, "-c", f"import os; print(os.environ[{TYPED_COMMAND_ENV!r}])"]


def test_each_platform_process_is_told_the_typed_command(monkeypatch: pytest.MonkeyPatch,
                                                        capfd: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv(TYPED_COMMAND_ENV, raising=False)
    monkeypatch.setattr(sys, "argv", ["/opt/venv/bin/rtp-ref", "certify", "--platform", "all", "--report", "a b"])
    codes: dict[str, int] = {}
    run_platforms([("one", CHILD_PRINTS_IT), ("two", CHILD_PRINTS_IT)], jobs=1, workers=1, codes=codes)
    assert codes == {"one": 0, "two": 0}
    lines = capfd.readouterr().out.splitlines()
    assert lines.count("rtp-ref certify --platform all --report 'a b'") == 2, lines


def test_a_typed_command_already_set_is_handed_on_unchanged(monkeypatch: pytest.MonkeyPatch,
                                                           capfd: pytest.CaptureFixture[str]) -> None:
    """A certify run started by another tool that set the variable keeps that tool's command line."""
    monkeypatch.setenv(TYPED_COMMAND_ENV, "make certify")
    codes: dict[str, int] = {}
    run_platforms([("one", CHILD_PRINTS_IT)], jobs=1, workers=1, codes=codes)
    assert codes == {"one": 0}
    assert "make certify" in capfd.readouterr().out.splitlines()


def test_a_data_command_read_in_part_succeeds_quietly(tmp_path: Path) -> None:
    """``rtp-ref layouts | head``: the reader had what it wanted; nothing to say."""
    done = _run([sys.executable, "-m", "rtp_ref.cli", "layouts", "--platform", "cpu"], "closed-pipe", tmp_path)
    assert (done.returncode, done.stderr) == (0, "")


@pytest.mark.parametrize("argv", [["layouts", "--platform", "cpu"], ["--help"], ["fp8", "--help"]],
                         ids=" ".join)
def test_a_data_command_whose_output_is_lost_to_a_full_disk_fails(tmp_path: Path, argv: list[str]) -> None:
    """``rtp-ref layouts > /dev/full``: the output was wanted and not delivered, so the command failed; so did
    ``--help`` (argparse prints it and exits 0 before the loss is seen)."""
    done = _run([sys.executable, "-m", "rtp_ref.cli", *argv], "dev-full", tmp_path)
    assert done.returncode == 1
    _one_line(done.stderr, "No space left on device")
