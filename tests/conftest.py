"""Fixtures shared by the unit tests of rtp_ref."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import torch

from rtp_ref.certify.cores import THREADS_VARIABLE
from rtp_ref.pytest_plugin import activate
from tests.scheduling import long_tests_apart

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


#: the tests that each take 20 s to 2 minutes on a 16-core GPU host (real certify runs, a CUDA build, pip installs,
#: torch.compile's first compile), longest first, as tox -e cuda measured them on an H100 on 2026-12-06. Collected
#: last, they started after a minute or more and held the run's end. Collected first and together, xdist's ``load``
#: scheduling (3.x) gave them all to one worker: it deals the first tests out in runs of consecutive ones (a quarter
#: of a worker's share each), and an H100 run on 2026-12-07 spent 280 s on that worker's first three (103 + 80 + 68 s)
#: while the other fifteen stood idle. So each goes first in its own pair (``long_tests_apart``), and tox -e cuda
#: passes ``--maxschedchunk 1``, under which ``load`` deals the first tests out two to each worker.
RUN_FIRST = (
    "tests/mutants/test_mutation_score.py::test_every_mutant_is_caught_by_its_check",
    "tests/vendor/test_cuda_example_package.py::test_cuda_kernels_are_certified_on_an_h200",
    "tests/certify/test_cache_format.py::test_every_op_certifies_a_cache_kept_in_another_format",
    "tests/bench/test_bench.py::test_compiled_baseline_writes_what_torch_eager_writes",
    "tests/mutants/test_fault_isolation.py::test_kernels_that_fault_on_every_call_cost_a_bounded_time",
    "tests/platforms/test_add_a_platform.py::test_a_platform_written_from_scratch_is_detected_and_certified",
    "tests/kv/test_v41_layouts.py::test_certified_on_a_table_that_lists_them",
    "tests/certify/test_conventions.py::test_a_real_certify_run_names_the_convention_in_its_report",
    "tests/args/test_legacy_emulation.py::test_the_reference_passes_the_shipped_suites_and_writes_nothing_where_it_runs",
    "tests/cli/test_hardening.py::test_a_report_lists_the_kernels_that_could_not_run",
    "tests/kv/test_nvfp4_mla.py::test_certify_the_writers_and_fail_each_mutant",
    "tests/certify/test_report.py::test_a_selection_of_one_op_has_no_row_for_the_others",
    "tests/mutants/test_fault_isolation.py::test_faulty_kernels_fail_their_case_and_the_report_is_complete",
    "tests/cli/test_hardening.py::test_ctrl_c_during_certify_all_writes_the_scoreboard_of_what_finished",
    "tests/certify/test_large_tier.py::test_32_bit_offset_mutants_pass_the_regular_tier",
    "tests/certify/test_certify_isolation.py::test_certify_from_a_wheel_in_a_venv_inside_a_hostile_project",
)


def first_rank(nodeid: str) -> int:
    """Where a test goes in the collection: its place in RUN_FIRST (a node id or the id of its parametrized
    function), after them every other test, in pytest's order."""
    function = nodeid.split("[", 1)[0]
    return RUN_FIRST.index(function) if function in RUN_FIRST else len(RUN_FIRST)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items[:] = long_tests_apart(items, lambda item: first_rank(item.nodeid), len(RUN_FIRST))


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

    They leave the test on its report (``user_properties``): under xdist (``tox -e py`` runs ``-n 3``) the
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
