"""The zygote (tests/zygote.py) gives what a freshly spawned ``python -m rtp_ref.cli`` gives."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes import child_env
from tests.zygote import CliZygote

#: a result, an error of the argument parser and an error of a command (each spawn costs an import of torch)
ARGVS = [
    ("fp8", "encode", "--format", "e4m3fn", "1000", "nan"),
    ("fp8", "encode", "--format", "e4m3", "1"),
    ("certify", "--platform", "cpu", "--layout", "nope"),
]


@pytest.mark.parametrize("argv", ARGVS, ids=" ".join)
def test_a_forked_run_is_what_a_spawned_run_is(argv: tuple[str, ...], cli_zygote: CliZygote,
                                                tmp_path: Path) -> None:
    env = child_env()
    spawned = subprocess.run([sys.executable, "-m", "rtp_ref.cli", *argv], capture_output=True, text=True,
                             env=env, cwd=tmp_path, check=False, timeout=120)
    forked = cli_zygote.run(argv, env, tmp_path)
    assert (forked.returncode, forked.stdout, forked.stderr) == (spawned.returncode, spawned.stdout,
                                                                  spawned.stderr)


def test_a_run_sees_its_own_environment_path_and_directory(cli_zygote: CliZygote, tmp_path: Path) -> None:
    """A ``PYTHONPATH`` stand-in replaces an installed module, as it would in a fresh interpreter; an
    uncaught exception is a traceback and exit 1, as the interpreter gives."""
    shadow = tmp_path / "shadow" / "rtp_ref"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("")
    (shadow / "cli.py").write_text("import os, sys\nprint(os.getcwd(), os.environ['MARK'])\n"
                                   "raise ValueError('from the stand-in')\n")
    run = cli_zygote.run([], child_env(tmp_path / "shadow", MARK="m1"), tmp_path)
    assert run.stdout == f"{tmp_path} m1\n"
    assert run.returncode == 1 and run.stderr.startswith("Traceback") and "ValueError: from the stand-in" in run.stderr
    again = cli_zygote.run(["--version"], child_env(), tmp_path)
    assert again.returncode == 0 and again.stdout.startswith("rtp-ref "), "a run must not leak into the next"


def test_a_run_killed_by_a_signal_reports_it(cli_zygote: CliZygote, tmp_path: Path) -> None:
    shadow = tmp_path / "shadow" / "rtp_ref"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("")
    (shadow / "cli.py").write_text("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    assert cli_zygote.run([], child_env(tmp_path / "shadow"), tmp_path).returncode == -9
