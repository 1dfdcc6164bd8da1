"""The reference with its generator run as the command ``python -m rtp_ref.args``: the args suite's positive control
for generators given as commands (``--impl rtp_ref.suites.args.reference_command:reference_command_kit``)."""

from __future__ import annotations

import sys

from rtp_ref.args import EnvArgumentParser
from rtp_ref.suites.args.generator import parser_from_environment
from rtp_ref.suites.args.kit import CommandGenerator, Generator, ReferenceArgsKit


def reference_parser_from_environment() -> EnvArgumentParser:
    """The factory ``python -m rtp_ref.args`` is given: the parser the test described, built by the reference."""
    parser: EnvArgumentParser = parser_from_environment(ReferenceArgsKit())
    return parser


class ReferenceCommandArgsKit(ReferenceArgsKit):
    """The reference kit, its generator the reference's command in a process of its own."""

    name = "reference, generator as a command"
    generator: Generator = CommandGenerator((sys.executable, "-m", "rtp_ref.args",
                                             f"{__name__}:reference_parser_from_environment"))


def reference_command_kit() -> ReferenceCommandArgsKit:
    """Factory for ``--impl rtp_ref.suites.args.reference_command:reference_command_kit``."""
    return ReferenceCommandArgsKit()
