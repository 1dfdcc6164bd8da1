"""tox.ini's environments as README describes them: pip's output on a person's terminal (scripts/pip_on_terminal.py,
the install command), and a lint environment with the linters alone (no second torch), equal to the ``lint`` extra."""

from __future__ import annotations

import configparser
import fcntl
import os
import pty
import select
import subprocess
import sys
import termios
from pathlib import Path

from rtp_ref.platform import tomllib

REPO = Path(__file__).resolve().parents[1]
WRAPPER = REPO / "scripts" / "pip_on_terminal.py"


def _tox() -> configparser.ConfigParser:
    config = configparser.ConfigParser(interpolation=None)
    config.read(REPO / "tox.ini")
    return config


def test_lint_installs_the_lint_extra_and_no_package() -> None:
    lint = _tox()["testenv:lint"]
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["lint"]
    assert lint["skip_install"].strip() == "true"  # the package (and its torch) is not installed twice
    assert sorted(lint["deps"].split()) == sorted(extra)
    assert "--python-executable" in lint["commands"]


def test_every_environment_installs_through_the_wrapper() -> None:
    assert "pip_on_terminal.py" in _tox()["testenv"]["install_command"]


def test_without_a_terminal_pip_writes_where_it_is_told() -> None:
    # a new session has no controlling terminal: CI's case, whose logs stay as they were
    done = subprocess.run([sys.executable, str(WRAPPER), "--help"], capture_output=True, text=True, timeout=120,
                          start_new_session=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "pip install [options]" in done.stdout


def _on_terminal(slave: int) -> None:
    os.setsid()
    fcntl.ioctl(slave, termios.TIOCSCTTY, 0)


def test_on_a_terminal_pip_writes_there() -> None:
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen([sys.executable, str(WRAPPER), "--help"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, preexec_fn=lambda: _on_terminal(slave), pass_fds=(slave,))
        seen = b""
        while proc.poll() is None or select.select([master], [], [], 0.2)[0]:
            if select.select([master], [], [], 0.2)[0]:
                try:
                    seen += os.read(master, 65536)
                except OSError:  # EIO: the terminal's last writer has gone
                    break
        out, err = proc.communicate(timeout=120)
    finally:
        os.close(slave)
        os.close(master)
    assert proc.returncode == 0, err
    assert b"pip install [options]" in seen
    assert out == b"" and err == b""  # tox's capture gets nothing: the person saw it
