"""The implementation the args behaviour tests run against: a "kit" of parser factory and generator.

The behaviour tests (test_args_behaviour.py, test_args_properties.py) touch an implementation only
through a kit. By default it is the reference (``rtp_ref.args``); ``RTP_REF_ARGS_IMPL=module:callable``
names a callable returning another kit, e.g. ``rtp_ref.suites.args.legacy_adapter:legacy_args_kit`` (the
emulation of rtp-llm that must fail every bug test, adapted as an engine's code would be) or an adapter around
rtp-llm's real parser. docs/args-and-plugins.md describes the protocol and how to write an adapter.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any, Protocol, cast

from rtp_ref.args import EnvArgumentParser, env_to_cli, str2bool, write_command_line
from rtp_ref.args.objects import call_named
from rtp_ref.suites.args.generator import CommandGenerator, FunctionGenerator, Generator, parser_from_environment

KIT_ENV = "RTP_REF_ARGS_IMPL"


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
    #: (rtp_ref/suites/args/generator.py)
    generator: Generator

    def reset(self) -> None:
        """Forget state kept between parsers, as the implementation's own tests do before each test."""


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


def reference_parser_from_environment() -> EnvArgumentParser:
    """The factory ``python -m rtp_ref.args`` is given when the reference's generator runs as a command."""
    parser: EnvArgumentParser = parser_from_environment(ReferenceArgsKit())
    return parser


class ReferenceCommandArgsKit(ReferenceArgsKit):
    """The reference with its generator run as the command ``python -m rtp_ref.args``: the suite's positive
    control for generators given as commands."""

    name = "reference, generator as a command"
    generator: Generator = CommandGenerator(
        (sys.executable, "-m", "rtp_ref.args", "rtp_ref.suites.args.kit:reference_parser_from_environment")
    )


def reference_command_kit() -> ReferenceCommandArgsKit:
    """Factory for ``--impl rtp_ref.suites.args.kit:reference_command_kit``."""
    return ReferenceCommandArgsKit()


def load_args_kit() -> ArgsKit:
    """The kit named by ``$RTP_REF_ARGS_IMPL`` (a ``module:callable`` returning one), else the reference."""
    spec = os.environ.get(KIT_ENV)
    if not spec:
        return ReferenceArgsKit()
    return cast(ArgsKit, call_named(spec))
