"""The ``survey`` fixture of tests/conftest.py: its lines reach the run summary, under xdist too (``tox -e py``
runs ``pytest -n 2``, and the mutation score README promises is such a line)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

TESTS_CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"
#: the torch-free module of the test tree that tests/conftest.py imports (how long tests are dealt out)
SCHEDULING = TESTS_CONFTEST.with_name("scheduling.py")

SURVEYING_TESTS = """
import pytest
@pytest.mark.parametrize("n", range(3))
def test_surveys(survey, n):
    survey.append(f"survey line {n}")
def test_says_nothing(survey):
    pass
"""


@pytest.mark.parametrize("xdist", [["-n", "2"], []], ids=["xdist", "plain"])
def test_survey_lines_reach_the_terminal_summary(pytester: pytest.Pytester, xdist: list[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A real inner run of tests/conftest.py as it is, with workers (subprocesses of their own) or without.
    GPUs are hidden from it: two workers on a one-GPU host would (rightly) be refused a GPU each."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    pytester.makeconftest(TESTS_CONFTEST.read_text())
    pytester.mkpydir("tests").joinpath("scheduling.py").write_text(SCHEDULING.read_text())
    pytester.makepyfile(SURVEYING_TESTS)
    result = pytester.runpytest_subprocess(*xdist, "-p", "no:cacheprovider", timeout=300)
    result.assert_outcomes(passed=4)
    out = result.stdout.str()
    assert "rtp-ref survey of this build" in out
    assert sorted(line for line in out.splitlines() if line.startswith("survey line")) == [
        "survey line 0", "survey line 1", "survey line 2"
    ]
