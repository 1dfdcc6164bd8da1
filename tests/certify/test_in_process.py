"""``rtp-ref certify -n 0``: the cases run in certify's own process (for a debugger's breakpoints, and for the test
suite's runs of kernels that cannot crash), and the report is the one a run with a worker writes."""

from __future__ import annotations

from pathlib import Path

from tests.mutants.test_mutation_score import certify

KERNELS = ["reference", "mutant-wrong-slot", "mutant-divisor-224", "mutant-mha-kv-swapped"]


def _outcomes(report: dict[str, object]) -> dict[str, tuple[str, tuple[str, ...]]]:
    cases = report["cases"]
    assert isinstance(cases, list)
    return {c["nodeid"]: (c["outcome"], tuple(c.get("failed_checks", []))) for c in cases}


def test_an_in_process_run_reports_what_a_run_with_a_worker_reports(tmp_path: Path) -> None:
    runs = {workers: certify("cpu", KERNELS, tmp_path / workers, extra=["--layout", "auto", "--layout", "fp8",
                                                                      "-n", workers])
            for workers in ("0", "1")}
    in_process, with_worker = runs["0"], runs["1"]
    assert in_process["_exit_code"] == with_worker["_exit_code"] == 1
    assert in_process["complete"] is with_worker["complete"] is True
    assert in_process["summary"] == with_worker["summary"]
    outcomes = _outcomes(in_process)
    assert outcomes == _outcomes(with_worker)
    # failures and passes both, named by their checks: the comparison above is not of two empty runs
    assert {outcome for outcome, _ in outcomes.values()} >= {"passed", "failed"}
    assert any("layout.slot_mapping" in checks for _, checks in outcomes.values())
    workers = {c.get("worker") for c in in_process["cases"] if "::test_case[" in c["nodeid"]}  # type: ignore[union-attr]
    assert workers == {None}
