"""Args kits that break one thing each, to show the suite's checks fail on it (tests/args/test_suite_checks_fail.py):
the emulation of rtp-llm's main branch, its generator run without its own ``--only-env-vars``, or its parser
blind to every flag on the command line."""

from __future__ import annotations

import sys
from typing import ClassVar

from rtp_ref.suites.args import rtp_llm_main as engine
from rtp_ref.suites.args.kit import CommandGenerator, Generator
from rtp_ref.suites.args.rtp_llm_main_adapter import RtpLlmMainArgsKit


class DefaultsGeneratorKit(RtpLlmMainArgsKit):
    """The generator run as an adapter that forgot ``--only-env-vars`` would: every unset default written."""

    generator: Generator = CommandGenerator((sys.executable, "-m", "rtp_ref.suites.args.rtp_llm_main_adapter",
                                             "--quiet"))


class BlindParser(engine.EnvArgumentParser):
    """Sees no flag as given: every set variable overwrites the command line."""

    def _scan_provided(self, argv: list[str]) -> set[str]:
        return set()


class BlindParserKit(RtpLlmMainArgsKit):
    parser_class: ClassVar[type[engine.EnvArgumentParser]] = BlindParser


def defaults_generator_kit() -> DefaultsGeneratorKit:
    return DefaultsGeneratorKit()


def blind_parser_kit() -> BlindParserKit:
    return BlindParserKit()
