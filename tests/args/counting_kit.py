"""The reference kit with a generator that counts its calls: each call appends a line to the file named by
``$RTP_REF_TEST_GENERATOR_CALLS``, so a test sees how many examples a property test of the suite ran."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from rtp_ref.args.env_to_cli import env_to_cli, write_command_line
from rtp_ref.suites.args.kit import FunctionGenerator, Generator, ReferenceArgsKit

CALLS_ENV = "RTP_REF_TEST_GENERATOR_CALLS"


def _counted_tokens(parser: Any, environ: Mapping[str, str]) -> list[str]:
    with open(os.environ[CALLS_ENV], "a", encoding="utf-8") as calls:
        calls.write("call\n")
    return env_to_cli(parser, environ)


class CountingArgsKit(ReferenceArgsKit):
    """The reference, its generator's calls counted."""

    name = "reference, generator calls counted"
    generator: Generator = FunctionGenerator(_counted_tokens, write_command_line)


def counting_kit() -> CountingArgsKit:
    """Factory for ``--impl tests.args.counting_kit:counting_kit``."""
    return CountingArgsKit()
