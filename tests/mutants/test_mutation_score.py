"""Every mutant must be caught, by the check that names its fault, in a real certify run.

The mutants are loaded through ``RTP_REF_KERNELS`` and certified by ``rtp-ref certify`` in a
process of its own (forked from the test process's zygote, tests/zygote.py), exactly as a vendor kernel
would be; the test then reads report.json. The mutation
score is printed in the run summary and must be 100%.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from tests.mutants.gather_mutants import GATHER_EXPECTED
from tests.mutants.kernels import EXPECTED as MLA_EXPECTED
from tests.mutants.mha_indexer_mutants import MHA_INDEXER_EXPECTED
from tests.processes import child_env
from tests.zygote import shared_zygote

REPO = Path(__file__).resolve().parents[2]
#: every mutant of every op -> (platform, the check that must catch it)
EXPECTED: dict[type, tuple[str, str]] = {**MLA_EXPECTED, **MHA_INDEXER_EXPECTED, **GATHER_EXPECTED}
PLATFORMS = sorted({platform for platform, _ in EXPECTED.values()})


def gpu_host_workers(n: int) -> list[str]:
    """``-n N`` for a certify run on a GPU host (its cores are free, and a device error stays in a worker), nothing
    on a CPU host, where ``certify`` then runs the cases in its own process (the cores are busy with the suite)."""
    return ["-n", str(n)] if torch.cuda.is_available() else []


def certify(
    platform: str,
    kernels: list[str],
    out: Path,
    extra: list[str] | None = None,
    kernels_env: str = "tests.mutants.kernels:mutants",
    timeout: float = 600,
) -> dict[str, object]:
    """Run ``rtp-ref certify`` in a process of its own and return its report.

    Unless ``extra`` names its workers (``-n``), the cases run in certify's own process (``-n 0``): these kernels
    raise at worst, and a fresh worker would cost each run a second torch import (about 2.5 s of 3.5 for a small
    run). The tests whose subject is a crash, a hang or a worker name theirs."""
    # A fresh process, not an xdist worker of this run: drop pytest's own variables.
    env = child_env(REPO, RTP_REF_KERNELS=kernels_env)
    extra = extra or []
    options = extra[:extra.index("--")] if "--" in extra else extra  # certify's own, not pytest's after "--"
    argv = ["certify", "--platform", platform, "--report", str(out), *([] if "-n" in options else ["-n", "0"])]
    for k in kernels:
        argv += ["--kernel", k]
    proc = shared_zygote().run([*argv, *extra], env, REPO, timeout=timeout)
    report_file = out / "report.json"
    assert report_file.exists(), (
        f"certify wrote no report (exit {proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
    )
    report: dict[str, object] = json.loads(report_file.read_text())
    report["_exit_code"] = proc.returncode
    return report


def _failed_checks(report: dict[str, object], kernel: str) -> set[str]:
    cases = report["cases"]
    assert isinstance(cases, list)
    return {name for c in cases if c.get("kernel") == kernel for name in c.get("failed_checks", [])}


def test_every_mutant_is_caught_by_its_check(tmp_path: Path, survey: list[str]) -> None:
    """One certify run per platform for all of its mutants; then each mutant's verdict and checks.

    (One test rather than one per mutant, so the certify runs happen once whatever xdist does.)
    """
    missed = []
    for platform in PLATFORMS:
        mutants = [cls for cls, (p, _) in EXPECTED.items() if p == platform]
        # the cpu table's run, most of the mutants: on a GPU host on two workers (with one it was the gate's longest
        # test, 119 s on an H100, while cores stood idle), on a CPU host in certify's own process (the cores are busy)
        workers = gpu_host_workers(2) if platform == "cpu" else []
        report = certify(platform, [cls.name for cls in mutants], tmp_path / platform, extra=[*workers, "--", "-q"])
        assert report["_exit_code"] == 1, "certify must exit 1 when a claimed layout fails"
        rows = report["summary"]["by_kernel_layout"]  # type: ignore[index]
        ops = {c.get("kernel"): c.get("op") for c in report["cases"]}  # type: ignore[attr-defined, index]
        for cls in mutants:
            assert ops.get(cls.name) == getattr(cls, "op", "concat_and_cache_mla"), f"{cls.name}'s records lack its op"
            check = EXPECTED[cls][1]
            caught = _failed_checks(report, cls.name)
            verdicts = {r["layout"]: r["verdict"] for r in rows if r["kernel"] == cls.name}
            if check not in caught or "failed" not in verdicts.values():
                missed.append(
                    f"{cls.name} on {platform}: expected {check}; failed checks {sorted(caught)}, verdicts {verdicts}"
                )
    score = len(EXPECTED) - len(missed)
    survey.append(
        f"mutation score: {score}/{len(EXPECTED)} mutants caught by their named check ({100 * score // len(EXPECTED)}%)"
    )
    assert not missed, "\n".join(missed)
    assert len(EXPECTED) >= 12
