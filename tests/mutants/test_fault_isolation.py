"""A kernel that raises, hangs or kills its process fails its own case; the run and report go on."""

from __future__ import annotations

import re
import time
from pathlib import Path

from tests.mutants.test_mutation_score import REPO, certify

TRIGGER = "auto-random-t1-b16-bf16"
FAULTS = {
    "fault-raises": "RuntimeError: fault-raises: simulated kernel launch failure",
    "fault-hangs": "hang: the case exceeded the 4s case timeout",
    "fault-kills-process": "Segmentation fault",
}


def test_faulty_kernels_fail_their_case_and_the_report_is_complete(tmp_path: Path) -> None:
    report = certify(
        "cpu",
        [*FAULTS, "reference"],
        tmp_path,
        extra=["--layout", "auto", "--case-timeout", "4", "-n", "2"],  # the always-faulting test runs at 3
        kernels_env="tests.mutants.faults:kernels",
        timeout=900,
    )
    assert report["complete"] is True
    assert report["_exit_code"] == 1
    cases = {c["nodeid"]: c for c in report["cases"]}  # type: ignore[union-attr]
    for kernel, reason in FAULTS.items():
        bad = [c for c in cases.values() if c.get("kernel") == kernel and c["outcome"] in ("failed", "error")]
        assert [c["nodeid"].rsplit("[", 1)[1] for c in bad] == [f"{kernel}-{TRIGGER}]"], bad
        assert reason in bad[0]["reason"], bad[0]["reason"]
        others = [c for c in cases.values() if c.get("kernel") == kernel and c not in bad]
        assert others and all(c["outcome"] == "passed" for c in others)
    rows = {(r["kernel"], r["layout"]): r["verdict"] for r in report["summary"]["by_kernel_layout"]}  # type: ignore[index]
    assert rows[("reference", "auto")] == "certified"
    assert all(rows[(k, "auto")] == "failed" for k in FAULTS)


ALWAYS = {  # kernel -> the named check its first deaths get, the word the quarantined cases use, its layouts
    "fault-always-hangs": ("support.hang", "hung", ("auto",)),
    "fault-always-kills-process": ("support.worker_died", "crashed", ("auto", "fp8")),
}


def test_kernels_that_fault_on_every_call_cost_a_bounded_time(tmp_path: Path) -> None:
    """A kernel that hangs or crashes on every call costs at most --crash-limit deaths per layout (1 here: each
    death costs a worker's start, about 2.5 s of CPU): then the pair's other cases fail at once as "not run", while
    its other layouts still run; the report is complete."""
    started = time.monotonic()
    report = certify(
        "cpu",
        ["reference", "fault-always-raises", *ALWAYS],
        tmp_path,
        extra=["--layout", "auto", "--layout", "fp8", "--case-timeout", "3", "--crash-limit", "1", "-n", "2"],
        kernels_env="tests.mutants.faults:kernels",
        timeout=600,
    )
    elapsed = time.monotonic() - started
    assert report["complete"] is True and report["_exit_code"] == 1
    assert elapsed < 150, f"certify took {elapsed:.0f} s"
    cases = report["cases"]
    assert isinstance(cases, list)
    rows = {(r["kernel"], r["layout"]): r["verdict"] for r in report["summary"]["by_kernel_layout"]}  # type: ignore[index]
    inputs = {(r["kernel"], r["layout"]): (r["input_checks"], r["hardening"])
              for r in report["summary"]["by_kernel_layout"]}  # type: ignore[index]
    assert rows[("reference", "auto")] == rows[("reference", "fp8")] == "certified"
    raised = [c for c in cases if c.get("kernel") == "fault-always-raises" and "::test_case[" in c["nodeid"]]
    # every write case fails but the auto cache of another dtype, which a kernel must refuse (raising passes it);
    # the empty calls are hardening: they raised, which the hardening column says
    assert raised and all(c["outcome"] == "failed" for c in raised
                          if c.get("kind") not in ("empty", "mismatched_cache"))
    assert [c["outcome"] for c in raised if c.get("kind") == "mismatched_cache"] == ["passed"]
    assert {c.get("hardening") for c in raised if c.get("kind") == "empty"} == {"raised"}
    for kernel, (check, word, layouts) in ALWAYS.items():
        for layout in layouts:
            mine = [c for c in cases if c.get("kernel") == kernel and c.get("layout") == layout]
            hardening = [c for c in mine if c.get("kind") in ("bad_input", "empty")]
            died = [c for c in mine if check in c.get("failed_checks", []) and c not in hardening]
            quarantined = rf"not run: {kernel}/{layout} {word} [12] times? \(limit 1, --crash-limit\)"
            skipped = [c for c in mine if re.match(quarantined, c.get("reason", ""))]
            # the limit, plus one for a case the other worker had already started when the limit was reached
            assert 1 <= len(died) <= 2, [(c["nodeid"], c.get("reason")) for c in mine]
            assert len(skipped) == len(mine) - len(died) - len(hardening) > 10
            assert all(c["outcome"] == "failed" and c["failed_checks"] == ["support.not_run"] for c in skipped)
            assert rows[(kernel, layout)] == "failed"
            # the out-of-range slot and the empty calls are hardening: they still run (and die) after the pair is
            # quarantined, and their deaths do not count towards it
            assert len(hardening) == 3 and not any(c.get("reason", "").startswith("not run") for c in hardening)
            assert inputs[(kernel, layout)] == ("crashed", "crashed")


EXCUSE_EDGE = """
[[deviations]]
kernel = "fault-raises-on-edge"
layouts = ["auto"]
cases = ["edge"]
check = "bit_exact"
reason = "a test's deviation: excuses bytes that differ on edge cases, nothing more"
source = "tests/mutants/test_fault_isolation.py"
"""


def test_a_deviation_excuses_only_the_grade_it_names(tmp_path: Path) -> None:
    """A bit_exact deviation for edge cases must not turn a kernel that raises on them into "certified with
    deviations": the case fell further than the deviation says."""
    table = tmp_path / "cpu-excused.toml"
    table.write_text((REPO / "platforms" / "cpu.toml").read_text().replace('name = "cpu"', 'name = "cpu-excused"')
                     + EXCUSE_EDGE)
    report = certify(str(table), ["fault-raises-on-edge"], tmp_path / "out", extra=["--layout", "auto"],
                     kernels_env="tests.mutants.faults:kernels")
    rows = {(r["kernel"], r["layout"]): r["verdict"] for r in report["summary"]["by_kernel_layout"]}  # type: ignore[index]
    assert rows[("fault-raises-on-edge", "auto")] == "failed"
    edge = [c for c in report["cases"] if c.get("kind") == "edge"]  # type: ignore[union-attr]
    assert len(edge) == 2 and all(c["outcome"] == "failed" for c in edge), edge
    assert all("the deviation for bit_exact does not cover this: fault-raises-on-edge raised" in c["reason"]
               for c in edge), edge
