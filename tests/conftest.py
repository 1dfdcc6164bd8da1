"""Fixtures shared by the unit tests of rtp_ref."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import torch

from rtp_ref.certify.cores import THREADS_VARIABLE
from rtp_ref.pytest_plugin import activate

DEVICES = [
    pytest.param("cpu", id="cpu"),
    pytest.param("cuda", id="cuda", marks=pytest.mark.gpu),
]


def pytest_configure(config: pytest.Config) -> None:
    # rtp-ref's own suite: its markers, hypothesis profiles and one GPU per xdist worker (the plugin is inert
    # in every other project)
    activate(config)
    if hasattr(config, "workerinput"):
        _one_thread_per_worker()
    if not hasattr(config, "workerinput"):  # the controller, or a run without xdist: it prints the summary
        config.pluginmanager.register(SurveySummary(), "rtp_ref_survey_summary")


def _one_thread_per_worker() -> None:
    """An xdist worker shares the cores with the others: one torch thread for it and the processes its tests start
    (certify runs), unless the run sets OMP_NUM_THREADS. A thread per core in each of 16 workers made the tests 20
    times slower on a 16-core GPU host; tox sets no thread count, so certify, run alone, grades on every core."""
    if THREADS_VARIABLE not in os.environ:
        os.environ[THREADS_VARIABLE] = "1"
        torch.set_num_threads(1)


@pytest.fixture(params=DEVICES)
def device(request: pytest.FixtureRequest) -> torch.device:
    """Each test taking ``device`` runs on the CPU and, where torch sees one, on the GPU."""
    return torch.device(request.param)


#: ``user_properties`` name under which a test's survey lines travel on its teardown report
SURVEY_PROPERTY = "rtp_ref_survey"


@pytest.fixture
def survey(request: pytest.FixtureRequest) -> Iterator[list[str]]:
    """Lines a test wants shown in the run summary (e.g. how this torch build casts fp8).

    They leave the test on its report (``user_properties``): under xdist (``tox -e py`` runs ``-n 2``) the
    test runs in a worker, whose terminal is never shown, and only reports reach the controller.
    """
    lines: list[str] = []
    yield lines
    if lines:
        request.node.user_properties.append((SURVEY_PROPERTY, lines))


class SurveySummary:
    """Collects the survey lines of every test's report and shows them in the terminal summary."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "teardown":  # the fixture adds its lines while tearing down
            return
        for name, value in report.user_properties:
            if name == SURVEY_PROPERTY and isinstance(value, list):
                self.lines += map(str, value)

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if self.lines:
            terminalreporter.section("rtp-ref survey of this build")
            for line in self.lines:
                terminalreporter.write_line(line)
