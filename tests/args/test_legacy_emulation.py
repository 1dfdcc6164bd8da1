"""The behaviour suites judge what an implementation has: against each emulation of rtp-llm, exactly the bug tests
it can run fail, and the tests of the features it lacks end absent.

``FINDINGS`` (rtp_ref.suites.findings) maps every bug of docs/sources.md (rtp-llm sections) and every review
finding about args and plugins (docs/sources.md#rtp-llm-plugin-pr-review) to the behaviour tests that cover it;
``FEATURES`` (rtp_ref.suites.features) lists what an implementation may lack and the tests that need each. The
meta-tests run the shipped suites (rtp_ref/suites) through ``rtp-ref check-args`` and ``check-plugins``, real
processes, with the emulations as the implementation, and check for each that

* the failing tests are exactly the ``failing`` tests of all findings that are not absent there (no more: the
  emulation is faithful to the sound part of the contract and no failure is a false positive; no fewer: every
  bug test it can run fails),
* the absent tests are exactly the tests of the features it lacks (rtp-llm main: ``enable_env``, the flag,
  package loading, override registration; PR #1266: the injected importer, override registration), none of them
  printed under a finding,
* each failure is an assertion (``assert``, ``pytest.fail``, "DID NOT RAISE"), not an accident of the emulation,
* the ``coverage`` tests (review findings about missing tests, not about behaviour) do not fail there,
* the commands print every finding with its failing tests, every absent feature with its tests, and the summary.

The same commands without ``--impl`` run the suites against the reference: every test passes, and nothing is
written where they run. Each run is a test of its own, so xdist spreads them.

docs/args-and-plugins.md shows the same tables and each emulation's summary line; the tests here keep them equal.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from rtp_ref.suites.features import FEATURES, suite_features
from rtp_ref.suites.findings import FINDINGS
from rtp_ref.suites.run import ABSENT, SUITES, junit_outcomes
from tests.processes import child_env
from tests.zygote import shared_zygote

DOCS = Path(__file__).resolve().parents[2] / "docs" / "args-and-plugins.md"


@dataclass(frozen=True)
class Emulation:
    """One shipped emulation of rtp-llm as one suite's implementation, and the features it lacks."""

    suite: str
    impl: str
    lacks: frozenset[str]


EMULATIONS = {
    "pr1266-args": Emulation("args", "rtp_ref.suites.args.legacy_adapter:legacy_args_kit", frozenset()),
    "pr1266-plugins": Emulation("plugins", "rtp_ref.suites.plugins.legacy_plugins_adapter:legacy_plugins_kit",
                                frozenset({"loader_importer", "override_registration"})),
    "main-args": Emulation("args", "rtp_ref.suites.args.rtp_llm_main_adapter:rtp_llm_main_args_kit",
                           frozenset({"enable_env"})),
    "main-plugins": Emulation("plugins", "rtp_ref.suites.plugins.rtp_llm_main_plugins_adapter:"
                              "rtp_llm_main_plugins_kit",
                              frozenset({"package_list", "package_loading", "loader_importer",
                                         "override_registration"})),
}
#: the reference, and the reference with its generator run as a command (the positive control of that form: a
#: process per example, so 10 examples a property test, as a user of a command generator would run it, not 60)
REFERENCE_RUNS: dict[str, tuple[str, str | None, tuple[str, ...]]] = {
    "args": ("args", None, ()), "plugins": ("plugins", None, ()),
    "args-command": ("args", "rtp_ref.suites.args.reference_command:reference_command_kit", ("--examples", "10")),
}
_ASSERTION = ("AssertionError", "assert ", "Failed: ")


def _in_suite(suite: str, test: str) -> bool:
    return test.split("::", 1)[0] in {Path(m).stem for m in SUITES[suite].modules}


def _check(suite: str, impl: str | None, cwd: Path, report: Path | None = None,
           extra: tuple[str, ...] = ()) -> tuple[int, str]:
    """``rtp-ref check-SUITE [--impl IMPL] [--report REPORT] EXTRA`` as a real process in ``cwd``: (exit, stdout)."""
    argv = [f"check-{suite}", *(["--impl", impl] if impl else []), *(["--report", str(report)] if report else []),
            *extra]
    run = shared_zygote().run(argv, child_env(), cwd, timeout=900)
    return run.returncode, run.stdout


@pytest.mark.parametrize("run", REFERENCE_RUNS)
def test_the_reference_passes_the_shipped_suites_and_writes_nothing_where_it_runs(run: str,
                                                                                   tmp_path: Path) -> None:
    suite, impl, extra = REFERENCE_RUNS[run]
    code, out = _check(suite, impl, tmp_path, extra=extra)
    assert code == 0, out[-3000:]
    # the first line names what was checked, and a run with fewer examples says so there
    checked = impl or "reference"
    settings = f" ({extra[1]} hypothesis examples per property test)" if extra else ""
    assert out.splitlines()[0].endswith(f" against {checked}{settings}"), out.splitlines()[0]
    assert re.search(r"^\d+ passed, 0 failed$", out, flags=re.MULTILINE), out[-500:]
    assert list(tmp_path.iterdir()) == []  # no .hypothesis, no .pytest_cache, nothing


@pytest.mark.parametrize("name", EMULATIONS)
def test_emulation_fails_exactly_its_bug_tests_and_reports_the_rest_absent(name: str, tmp_path: Path) -> None:
    emulation = EMULATIONS[name]
    code, printed = _check(emulation.suite, emulation.impl, tmp_path, tmp_path / "report")
    assert code == 1, printed[-3000:]
    assert json.loads((tmp_path / "report" / f"check-{emulation.suite}.json").read_text())["ok"] is False
    outcomes = {o.test: o for o in junit_outcomes(tmp_path / "report" / "junit.xml")}
    broken = {test: o.outcome for test, o in outcomes.items() if o.outcome in ("error", "skipped")}
    assert not broken, broken

    features = suite_features(emulation.suite)
    lacked = {f for f in features if f in emulation.lacks}
    expected_absent = {test for f in lacked for test in features[f].tests}
    absent = {test for test, o in outcomes.items() if o.outcome == ABSENT}
    assert absent == expected_absent, {"absent, not expected": sorted(absent - expected_absent),
                                       "expected absent, ran": sorted(expected_absent - absent)}
    wrong_feature = {test: o.feature for test, o in outcomes.items()
                     if o.outcome == ABSENT and (o.feature not in lacked or test not in features[o.feature].tests)}
    assert not wrong_feature, wrong_feature

    mapped = {test for f in FINDINGS for test in f.failing if _in_suite(emulation.suite, test)}
    expected = mapped - expected_absent
    failed = {test for test, o in outcomes.items() if o.outcome == "failure"}
    assert failed == expected, {
        "fail on the emulation but are not mapped to a finding (false positives)": sorted(failed - expected),
        "mapped, not absent, but pass on the emulation": sorted(expected - failed),
    }
    wrong_kind = {test: outcomes[test].message[:200] for test in expected
                  if not outcomes[test].message.startswith(_ASSERTION)}
    assert not wrong_kind, wrong_kind
    coverage = {test for f in FINDINGS for test in f.coverage if _in_suite(emulation.suite, test)}
    assert coverage <= outcomes.keys() and not coverage & failed

    findings = [f for f in FINDINGS if set(f.failing) & expected]
    assert all(f"FAILED  {f.ref}: {f.what}" in printed for f in findings)
    assert all(f"          {test}: failure" in printed for test in expected)
    shown = {outcomes[test].feature for test in absent}
    assert all(f"ABSENT  {f}: {features[f].what}" in printed for f in shown)
    assert all(f"          {test}\n" in printed for test in absent)
    assert not any(line.startswith(f"          {test}:") for test in absent for line in printed.splitlines())
    summary = (f"{len(outcomes) - len(failed) - len(absent)} passed, {len(failed)} failed"
               + (f", {len(absent)} absent ({len(shown)} feature(s))" if absent else "")
               + f", on {len(findings)} finding(s)")
    assert summary in printed.splitlines(), printed[-500:]
    assert _docs_summary(emulation.impl) == summary, "docs/args-and-plugins.md shows another summary"


def _docs_summary(impl: str) -> str:
    """The last line the docs' console example shows for ``$ rtp-ref check-* --impl impl``: its summary."""
    lines = DOCS.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("$ rtp-ref check-") and
                 line.endswith(f" --impl {impl}"))
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("$ ") or lines[i] == "```")
    return lines[end - 1]


def _base_name(test_id: str) -> str:
    return test_id.split("::", 1)[1].split("[", 1)[0]


def _table(section: str) -> str:
    text = DOCS.read_text(encoding="utf-8")
    part = text[text.index(section):]
    end = part.find("\n## ", 1)
    return "\n".join(line for line in part[: end if end > 0 else None].splitlines() if line.startswith("| "))


def test_docs_show_the_same_mapping() -> None:
    table = _table("## Bug -> test mapping")
    in_docs = set(re.findall(r"`(test_\w+)`", table))
    mapped = {_base_name(t) for finding in FINDINGS for t in (*finding.failing, *finding.coverage)}
    assert in_docs == mapped, {
        "only in the docs": sorted(in_docs - mapped),
        "not in the docs": sorted(mapped - in_docs),
    }
    for finding in FINDINGS:
        assert finding.ref in table, f"{finding.ref} is not in the docs table"


def test_docs_show_the_same_features() -> None:
    table = _table("## Absent features")
    for feature in FEATURES:
        row = next((line for line in table.splitlines() if line.startswith(f"| `{feature.name}` |")), "")
        assert row, f"{feature.name} is not in the docs' feature table"
        assert set(re.findall(r"`(test_\w+)`", row)) == {_base_name(t) for t in feature.tests}, feature.name
