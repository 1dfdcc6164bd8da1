"""The behaviour tests can fail: against the emulation of rtp-llm, exactly the bug tests fail.

``FINDINGS`` (rtp_ref.suites.findings) maps every bug of docs/sources.md (rtp-llm sections) and every review
finding about args and plugins (docs/sources.md#rtp-llm-plugin-pr-review) to the behaviour tests that cover it.
The meta-test runs the shipped suites (rtp_ref/suites) through ``rtp-ref check-args`` and ``check-plugins``, real
processes, with the emulation as the implementation (rtp_ref/suites/args/legacy_rtp_llm.py and
rtp_ref/suites/plugins/legacy_rtp_llm_plugins.py, through their adapters legacy_adapter.py and
legacy_plugins_adapter.py, the generator a real command) and checks that

* the failing tests are exactly the ``failing`` tests of all findings (no more: the emulation is
  faithful to the sound part of the contract; no fewer: every bug test can fail),
* each fails by an assertion (``assert``, ``pytest.fail``, "DID NOT RAISE"), not by an accident of
  the emulation, except where ``OTHER_FAILURE`` says what the missing feature raises,
* the ``coverage`` tests (review findings about missing tests, not about behaviour) pass there too,
* the commands print every finding with its failing tests.

The same commands without ``--impl`` run the suites against the reference: every test passes, and nothing is
written where they run.

docs/args-and-plugins.md shows the same table; ``test_docs_show_the_same_mapping`` keeps them equal.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from rtp_ref.suites.findings import FINDINGS, P
from rtp_ref.suites.run import SUITES, junit_outcomes
from tests.processes import child_env
from tests.zygote import shared_zygote

LEGACY_KITS = {
    "args": "rtp_ref.suites.args.legacy_adapter:legacy_args_kit",
    "plugins": "rtp_ref.suites.plugins.legacy_plugins_adapter:legacy_plugins_kit",
}
DOCS = Path(__file__).resolve().parents[2] / "docs" / "args-and-plugins.md"


#: Failures that are not assertions: the emulation lacks the feature, and says so this way.
OTHER_FAILURE = {f"{P}::test_loader_takes_an_injected_importer": "TypeError: load_external_model_packages()"}
_ASSERTION = ("AssertionError", "assert ", "Failed: ")


def _expected_failing() -> set[str]:
    return {test for finding in FINDINGS for test in finding.failing}


def _check(suite: str, impl: str | None, cwd: Path, report: Path | None = None) -> tuple[int, str]:
    """``rtp-ref check-SUITE [--impl IMPL] [--report REPORT]`` as a real process in ``cwd``: (exit, stdout)."""
    argv = [f"check-{suite}", *(["--impl", impl] if impl else []), *(["--report", str(report)] if report else [])]
    run = shared_zygote().run(argv, child_env(), cwd, timeout=900)
    return run.returncode, run.stdout


def test_the_reference_passes_both_shipped_suites_and_writes_nothing_where_it_runs(tmp_path: Path) -> None:
    """Also with the reference's generator run as a command (``python -m rtp_ref.args``): the positive control of
    the command form the emulation's generator takes."""
    command_kit = "rtp_ref.suites.args.reference_command:reference_command_kit"
    runs = [(suite, None) for suite in SUITES] + [("args", command_kit)]
    for suite, impl in runs:
        code, out = _check(suite, impl, tmp_path)
        assert code == 0, out[-3000:]
        assert re.search(r"^\d+ passed, 0 failed$", out, flags=re.MULTILINE), out[-500:]
    assert list(tmp_path.iterdir()) == []  # no .hypothesis, no .pytest_cache, nothing


def test_legacy_emulation_fails_exactly_the_bug_tests(tmp_path: Path) -> None:
    outcomes: dict[str, tuple[str, str]] = {}
    printed = ""
    for suite, impl in LEGACY_KITS.items():
        code, out = _check(suite, impl, tmp_path, tmp_path / suite)
        assert code == 1, out[-3000:]
        printed += out
        outcomes.update({o.test: (o.outcome, o.message) for o in junit_outcomes(tmp_path / suite / "junit.xml")})
        assert json.loads((tmp_path / suite / f"check-{suite}.json").read_text())["ok"] is False
    broken = {test: outcome for test, (outcome, _) in outcomes.items() if outcome in ("error", "skipped")}
    assert not broken, broken
    failed = {test for test, (outcome, _) in outcomes.items() if outcome == "failure"}
    expected = _expected_failing()
    assert failed == expected, {
        "fail on the emulation but are not mapped to a finding": sorted(failed - expected),
        "mapped but pass on the emulation": sorted(expected - failed),
    }
    wrong_kind = {
        test: outcomes[test][1][:200]
        for test in expected
        if not outcomes[test][1].startswith(OTHER_FAILURE.get(test, _ASSERTION))
    }
    assert not wrong_kind, wrong_kind
    coverage = {test for finding in FINDINGS for test in finding.coverage}
    assert coverage <= outcomes.keys() and not coverage & failed
    # the commands print every finding that has a failing test, with its tests under it
    assert all(f"FAILED  {f.ref}: {f.what}" in printed for f in FINDINGS if f.failing)
    assert all(f"          {test}: failure" in printed for test in expected)


def _base_name(test_id: str) -> str:
    return test_id.split("::", 1)[1].split("[", 1)[0]


def test_docs_show_the_same_mapping() -> None:
    text = DOCS.read_text(encoding="utf-8")
    section = text[text.index("## Bug -> test mapping") :]
    table = "\n".join(line for line in section.splitlines() if line.startswith("| "))
    in_docs = set(re.findall(r"`(test_\w+)`", table))
    mapped = {_base_name(t) for finding in FINDINGS for t in (*finding.failing, *finding.coverage)}
    assert in_docs == mapped, {
        "only in the docs": sorted(in_docs - mapped),
        "not in the docs": sorted(mapped - in_docs),
    }
    for finding in FINDINGS:
        assert finding.ref in table, f"{finding.ref} is not in the docs table"
