"""Fixtures of the args tests: the implementation under test, a clean environment, parse helpers."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from rtp_ref.suites.args.helpers import PREFIX, Parse
from rtp_ref.suites.args.kit import ArgsKit, load_args_kit


@pytest.fixture(scope="session")
def args_kit() -> ArgsKit:
    """The parser implementation under test: ``$RTP_REF_ARGS_IMPL``, else the reference."""
    return load_args_kit()


@pytest.fixture(autouse=True)
def _clean_environment(args_kit: ArgsKit, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No ``RTPT_*`` variable from outside the test, and no state left by an earlier test."""
    args_kit.reset()
    for name in list(os.environ):
        if name.startswith(f"{PREFIX}_"):
            monkeypatch.delenv(name)
    yield
    args_kit.reset()


@pytest.fixture(params=["argv", "list"])
def parse(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Parse:
    """Each test taking ``parse`` runs through both entry points (see ``Parse``)."""
    return Parse(request.param, monkeypatch, capsys)
