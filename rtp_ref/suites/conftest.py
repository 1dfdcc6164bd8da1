"""The shipped suites' run: rtp-ref's pytest plugin active (its hypothesis profiles, and hypothesis's storage
under rtp-ref's cache, never in the directory the suite runs in), and ``--rtp-examples N``: N hypothesis examples
per property test in place of the profile's (``rtp-ref check-args --examples``)."""

from __future__ import annotations

import pytest

from rtp_ref.pytest_plugin import activate


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--rtp-examples", type=int, default=None, metavar="N",
                     help="hypothesis examples per property test (default: the hypothesis profile's)")


def pytest_configure(config: pytest.Config) -> None:
    activate(config)
    examples = config.getoption("rtp_examples")
    if examples is not None:
        from hypothesis import settings

        # the loaded profile with only its example count changed; the suites' own settings objects, made when
        # their modules are collected (after this), inherit it
        settings.register_profile("rtp-examples", parent=settings.default, max_examples=examples)
        settings.load_profile("rtp-examples")
