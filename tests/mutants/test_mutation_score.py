"""Every mutant must be caught, by the check that names its fault, in a real certify run.

The mutants are loaded through ``RTP_REF_KERNELS`` and certified by ``rtp-ref certify`` in a
subprocess, exactly as a vendor kernel would be; the test then reads report.json. The mutation
score is printed in the run summary and must be 100%.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.mutants.kernels import EXPECTED

# One worker runs the whole module, so the two certify runs behind `reports` happen once.
pytestmark = pytest.mark.xdist_group("mutation-score")

REPO = Path(__file__).resolve().parents[2]
PLATFORMS = sorted({platform for platform, _ in EXPECTED.values()})


def certify(platform: str, kernels: list[str], out: Path, extra: list[str] | None = None,
            kernels_env: str = "tests.mutants.kernels:mutants", timeout: float = 600) -> dict[str, object]:
    """Run ``rtp-ref certify`` in a fresh process and return its report."""
    # A fresh process, not an xdist worker of this run: drop pytest's own variables.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "RTP_REF_"))}
    env.update(RTP_REF_KERNELS=kernels_env, PYTHONPATH=str(REPO))
    argv = [sys.executable, "-m", "rtp_ref.cli", "certify", "--platform", platform, "--report", str(out)]
    for k in kernels:
        argv += ["--kernel", k]
    proc = subprocess.run([*argv, *(extra or [])], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)
    report_file = out / "report.json"
    assert report_file.exists(), f"certify wrote no report (exit {proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
    report: dict[str, object] = json.loads(report_file.read_text())
    report["_exit_code"] = proc.returncode
    return report


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, object]]:
    out = {}
    for platform in PLATFORMS:
        names = [cls.name for cls, (p, _) in EXPECTED.items() if p == platform]
        out[platform] = certify(platform, names, tmp_path_factory.mktemp(platform), extra=["--", "-q"])
    return out


def _failed_checks(report: dict[str, object], kernel: str) -> set[str]:
    cases = report["cases"]
    assert isinstance(cases, list)
    return {name for c in cases if c.get("kernel") == kernel for name in c.get("failed_checks", [])}


@pytest.mark.parametrize("mutant", list(EXPECTED), ids=lambda cls: cls.name)
def test_mutant_is_caught_by_its_check(mutant: type, reports: dict[str, dict[str, object]]) -> None:
    platform, check = EXPECTED[mutant]
    report = reports[platform]
    assert report["_exit_code"] == 1, "certify must exit 1 when a claimed layout fails"
    caught = _failed_checks(report, mutant.name)
    assert check in caught, f"{mutant.name} was not caught by {check}; failed checks: {sorted(caught)}"
    rows = [r for r in report["summary"]["by_kernel_layout"] if r["kernel"] == mutant.name]  # type: ignore[index]
    assert any(r["verdict"] == "failed" for r in rows), rows


def test_mutation_score_is_100_percent(reports: dict[str, dict[str, object]], survey: list[str]) -> None:
    caught = [cls.name for cls, (platform, check) in EXPECTED.items()
              if check in _failed_checks(reports[platform], cls.name)]
    survey.append(f"mutation score: {len(caught)}/{len(EXPECTED)} mutants caught by their named check "
                  f"({100 * len(caught) // len(EXPECTED)}%)")
    assert len(caught) == len(EXPECTED) >= 12
