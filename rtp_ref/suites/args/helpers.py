"""Shared by the args tests: variable names, config classes for bindings, a custom type, ``Parse``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from rtp_ref.args import EnvArgumentParser

#: Every variable the args tests set starts with this prefix (conftest clears them before each test),
#: so a real variable of the machine running the tests can never leak in.
PREFIX = "RTPT"


def env_var(name: str) -> str:
    """The variable a flag ``--name`` reads under ``PREFIX``."""
    return f"{PREFIX}_{name.upper()}"


@dataclass
class ModelConfig:
    max_seq_len: int | None = 4096
    tp_size: int = 1
    model_type: str = ""


@dataclass
class RootConfig:
    model: ModelConfig = field(default_factory=ModelConfig)


def optional_int(text: str) -> int | None:
    """An int, or None for ``none``: a value a user can set to None explicitly."""
    return None if text.strip().lower() == "none" else int(text)


class Parse:
    """Parses through one of the two entry points rtp-llm treated differently.

    ``argv``: the arguments in ``sys.argv`` and ``parse_args()`` with no list (rtp-llm's "env mode"
    when there are none); ``list``: ``parse_args(list)`` (its "CLI mode", even for ``[]``).
    """

    def __init__(self, how: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
        self.how = how
        self._monkeypatch = monkeypatch
        self._capsys = capsys

    def _run(self, parser: Any, args: Sequence[str]) -> argparse.Namespace:
        if self.how == "argv":
            self._monkeypatch.setattr(sys, "argv", ["prog", *args])
            parsed: argparse.Namespace = parser.parse_args()
        else:
            parsed = parser.parse_args(list(args))
        return parsed

    def __call__(self, parser: Any, args: Sequence[str] = ()) -> argparse.Namespace:
        """The namespace; an exit of the parser fails the test with its message."""
        try:
            return self._run(parser, args)
        except SystemExit as exc:
            captured = self._capsys.readouterr()
            pytest.fail(f"parser exited with {exc.code}: {(captured.err or captured.out).strip()}")

    def exit(self, parser: Any, args: Sequence[str] = ()) -> tuple[Any, str]:
        """The exit code and stderr of a parse that must exit; fails the test if it does not."""
        try:
            namespace = self._run(parser, args)
        except SystemExit as exc:
            return exc.code, self._capsys.readouterr().err
        pytest.fail(f"parser did not exit; it returned {namespace}")


def demo_parser() -> EnvArgumentParser:
    """The parser ``python -m rtp_ref.args rtp_ref.suites.args.helpers:demo_parser`` translates."""
    parser = EnvArgumentParser(prog="demo", env_prefix=PREFIX)
    parser.add_argument("--model_type")
    parser.add_argument("--tp_size", type=int)
    return parser
