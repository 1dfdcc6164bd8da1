"""The implementation the args behaviour tests run against: a "kit" of parser factory and generator.

The behaviour tests (test_args_behaviour.py, test_args_properties.py) touch an implementation only
through a kit. By default it is the reference (``rtp_ref.args``); ``RTP_REF_ARGS_IMPL=module:callable``
names a callable returning another kit, e.g. ``rtp_ref.suites.args.rtp_llm_main_adapter:rtp_llm_main_args_kit``
(the emulation of rtp-llm's main branch, adapted as an engine's code would be; it fails every bug test it can run
and its missing ``enable_env`` makes those tests absent) or an adapter around
rtp-llm's real parser. docs/args-and-plugins.md describes the protocol and how to write an adapter.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TextIO, cast

from rtp_ref.args import EnvArgumentParser, env_to_cli, str2bool, write_command_line
from rtp_ref.args.objects import call_named
from rtp_ref.suites.features import declared_absent

KIT_ENV = "RTP_REF_ARGS_IMPL"


@dataclass(frozen=True)
class FunctionGenerator:
    """A generator called in the suite's process: ``tokens(parser, environ)`` returns the command-line tokens
    (raising on a malformed value), ``main(parser, environ, stdout, stderr)`` is its command and returns the
    exit code."""

    tokens: Callable[[Any, Mapping[str, str]], list[str]]
    main: Callable[[Any, Mapping[str, str], TextIO, TextIO], int]


@dataclass(frozen=True)
class CommandGenerator:
    """A generator run as a command: ``argv`` is started with the suite's environment, the test's variables
    and ``$RTP_REF_SUITE_PARSER``; it prints the command line (shell words) on stdout and exits non-zero on
    error. Its modules must import in the environment the suite runs in."""

    argv: tuple[str, ...]
    timeout_s: float = 60.0

    def __post_init__(self) -> None:
        if not self.argv:
            raise ValueError("CommandGenerator.argv is empty; give the command and its arguments")


Generator = FunctionGenerator | CommandGenerator


class ArgsKit(Protocol):
    """What the behaviour tests need from a parser implementation.

    The parser must offer argparse's ``add_argument`` (with the keywords ``env_name``,
    ``enable_env`` and ``bind_to``), ``add_argument_group``, ``add_mutually_exclusive_group``,
    ``parse_args``, ``parse_known_args`` and ``get_env_mappings()`` (dest -> variable name).
    """

    name: str

    def new_parser(
        self, *, env_prefix: str = "", config_root: object | None = None, version: str | None = None
    ) -> Any:
        """A fresh parser named ``prog``; ``version`` adds ``--version``; bindings go to ``config_root``."""

    #: the implementation's boolean argument type, its own object (a generator that compares ``type is
    #: str2bool`` must see it; a wrapper would silently send it down another branch)
    str2bool: Callable[..., bool]

    #: the env -> CLI generator: a function of ``(parser, environ)``, or a command run with the environment
    #: (its parser given as a recipe: rtp_ref/suites/args/generator.py)
    generator: Generator

    def reset(self) -> None:
        """Forget state kept between parsers, as the implementation's own tests do before each test."""

    # Optional: ``absent_features``, the features of rtp_ref/suites/features.py (suite "args") the implementation
    # lacks; their tests end absent. A keyword the implementation refuses (``enable_env``) is detected without it.


class ReferenceArgsKit:
    """The kit of ``rtp_ref.args``."""

    name = "reference"

    def new_parser(
        self, *, env_prefix: str = "", config_root: object | None = None, version: str | None = None
    ) -> EnvArgumentParser:
        parser = EnvArgumentParser(prog="prog", env_prefix=env_prefix, config_root=config_root)
        if version is not None:
            parser.add_argument("--version", action="version", version=version)
        return parser

    str2bool = staticmethod(str2bool)

    generator: Generator = FunctionGenerator(env_to_cli, write_command_line)

    def reset(self) -> None:
        """Nothing to forget: each parser owns its state."""


def load_args_kit() -> ArgsKit:
    """The kit named by ``$RTP_REF_ARGS_IMPL`` (a ``module:callable`` returning one), else the reference.
    RtpRefError when its ``absent_features`` names something that is not a feature of the args suite."""
    spec = os.environ.get(KIT_ENV)
    if not spec:
        return ReferenceArgsKit()
    kit = cast(ArgsKit, call_named(spec))
    declared_absent(kit, "args")
    return kit
