"""``--examples N`` (``rtp-ref check-args``, run_suite): each property test of the suite runs N examples, counted
in the suite's own process by a kit whose generator counts its calls (tests.args.counting_kit)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rtp_ref.suites.run import SUITES, run_suite
from tests.args.counting_kit import CALLS_ENV
from tests.args.suite_runs import kits_on_path

ROUND_TRIP = "test_args_properties::test_generated_command_line_round_trips[numbers]"


@pytest.mark.parametrize("examples", [None, 4])
def test_each_property_test_runs_the_examples_asked_for(examples: int | None, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    kits_on_path(tmp_path, monkeypatch)
    calls = tmp_path / "calls"
    calls.touch()
    monkeypatch.setenv(CALLS_ENV, str(calls))
    outcomes = run_suite(SUITES["args"], "tests.args.counting_kit:counting_kit", tmp_path / "junit.xml",
                         tests=[ROUND_TRIP], examples=examples)
    assert [o.outcome for o in outcomes] == ["passed"], outcomes
    # an example may call the generator more than once (62 calls for the profile's 60 examples here), never less
    calls_made = len(calls.read_text().splitlines())
    assert calls_made >= 60 if examples is None else examples <= calls_made < 2 * examples, calls_made
