"""Args suite checks that rtp-llm's emulations pass, or that no emulation exercises, fail on a kit that breaks
what they check (tests.args.broken_kits), in the suite's own pytest process."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.args.suite_runs import outcomes_of

A, AP = "test_args_behaviour", "test_args_properties"


def test_the_generator_writes_defaults_when_run_without_its_own_only_env_vars(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The test that passes on rtp-llm's generator with ``--only-env-vars`` fails without the flag: it was that
    flag, not the test, that separated the false positive from the bug."""
    test = f"{A}::test_generator_leaves_unset_variables_out"
    found = outcomes_of("args", "tests.args.broken_kits:defaults_generator_kit", [test], tmp_path, monkeypatch)
    assert found[test].outcome == "failure" and "first extra item: '--tp_size'" in found[test].message, found[test]


def test_the_separate_token_property_breaks_on_a_parser_that_sees_no_flag(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The contract property every emulation passes, labelled by itself when it breaks."""
    tests = [f"{AP}::test_command_line_beats_env_beats_default[separate-token]",
             f"{A}::test_separate_token_flag_beats_env[list]"]
    found = outcomes_of("args", "tests.args.broken_kits:blind_parser_kit", tests, tmp_path, monkeypatch)
    assert {t: o.outcome for t, o in found.items()} == {t: "failure" for t in tests}
    assert "property 'separate-token' broke" in found[tests[0]].message, found[tests[0]].message
