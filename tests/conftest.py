"""Fixtures shared by the unit tests of rtp_ref."""

from __future__ import annotations

import pytest
import torch

DEVICES = [
    pytest.param("cpu", id="cpu"),
    pytest.param("cuda", id="cuda", marks=pytest.mark.gpu),
]


@pytest.fixture(params=DEVICES)
def device(request: pytest.FixtureRequest) -> torch.device:
    """Each test taking ``device`` runs on the CPU and, where torch sees one, on the GPU."""
    return torch.device(request.param)


SURVEY_KEY = pytest.StashKey[list[str]]()


@pytest.fixture
def survey(request: pytest.FixtureRequest) -> list[str]:
    """Lines a test wants shown in the run summary (e.g. how this torch build casts fp8)."""
    return request.config.stash.setdefault(SURVEY_KEY, [])


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    lines = config.stash.get(SURVEY_KEY, [])
    if lines:
        terminalreporter.section("rtp-ref survey of this build")
        for line in lines:
            terminalreporter.write_line(line)
