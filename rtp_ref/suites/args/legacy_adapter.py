"""The args kit over the emulation of rtp-llm with PR #1266 applied (legacy_rtp_llm.py).

The PR changes only ``add_argument``'s keywords (``enable_env``), so this kit is the main branch's
(rtp_llm_main_adapter.py, where each step of the adapter recipe is shown) with the PR's parser class. The PR does
not change the generator, so the generator command is the main branch's too.
"""

from __future__ import annotations

from typing import ClassVar

from rtp_ref.suites.args import legacy_rtp_llm as engine
from rtp_ref.suites.args.rtp_llm_main import EnvArgumentParser
from rtp_ref.suites.args.rtp_llm_main_adapter import RtpLlmMainArgsKit


class LegacyArgsKit(RtpLlmMainArgsKit):
    """The behaviour tests' kit (rtp_ref/suites/args/kit.py) over the emulation of rtp-llm with PR #1266."""

    name = "legacy rtp-llm emulation (PR #1266)"
    parser_class: ClassVar[type[EnvArgumentParser]] = engine.LegacyEnvArgumentParser


def legacy_args_kit() -> LegacyArgsKit:
    """Factory for ``--impl rtp_ref.suites.args.legacy_adapter:legacy_args_kit``."""
    return LegacyArgsKit()
