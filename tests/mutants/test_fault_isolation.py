"""A kernel that raises, hangs or kills its process fails its own case; the run and report go on."""

from __future__ import annotations

from pathlib import Path

from tests.mutants.test_mutation_score import certify

TRIGGER = "auto-random-t1-b16-bf16"
FAULTS = {
    "fault-raises": "RuntimeError: fault-raises: simulated kernel launch failure",
    "fault-hangs": "hang: the case exceeded the 8s case timeout",
    "fault-kills-process": "Segmentation fault",
}


def test_faulty_kernels_fail_their_case_and_the_report_is_complete(tmp_path: Path) -> None:
    report = certify(
        "cpu",
        [*FAULTS, "reference"],
        tmp_path,
        extra=["--layout", "auto", "--case-timeout", "8", "-n", "2"],
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
