"""One certify run of an FP4 MLA record on the cpu table: the built-in writers and the reference gather must get the
cpu table's verdict, and each mutant must fail by the check named for it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.deviations import cpu_table_verdict
from tests.mutants.kernels import Mutant
from tests.processes import child_env
from tests.zygote import shared_zygote

REPO = Path(__file__).resolve().parents[2]
#: the built-in kernels that write or read the FP4 MLA records on the cpu table
BUILTINS = ("reference", "torch-eager", "triton", "reference-gather")


def certify_record_and_mutants(layout: str, entry_point: str, expected: dict[type[Mutant], str],
                               tmp_path: Path, builtins: tuple[str, ...] = BUILTINS,
                               unclaimed: tuple[str, ...] = ()) -> dict[str, Any]:
    """Certify ``layout`` on the cpu table with ``builtins``, the built-ins that do not claim it (``unclaimed``: they
    must raise as required) and the mutants of ``entry_point`` (``RTP_REF_KERNELS``); assert the built-ins' verdicts
    and each mutant failing by its check in ``expected``; return the report."""
    env = child_env(REPO, RTP_REF_KERNELS=entry_point)
    argv = ["certify", "--platform", "cpu", "--report", str(tmp_path / "report"), "--layout", layout, "-n", "0"]
    for kernel in (*builtins, *unclaimed, *(cls.name for cls in expected)):
        argv += ["--kernel", kernel]
    done = shared_zygote().run([*argv, "--", "-q"], env, tmp_path, timeout=600)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    report: dict[str, Any] = json.loads((tmp_path / "report" / "report.json").read_text())
    rows = {r["kernel"]: r["verdict"] for r in report["summary"]["by_kernel_layout"] if r["layout"] == layout}
    assert {k: rows[k] for k in builtins} == {k: cpu_table_verdict(k, layout) for k in builtins}, rows
    refusals = {r["kernel"]: r["verdict"] for r in report["summary"]["by_kernel_layout"]
                if r["layout"] == f"{layout} (unclaimed)"}
    assert {k: refusals.get(k) for k in unclaimed} == {k: "raises as required" for k in unclaimed}, refusals
    for cls, check in expected.items():
        assert rows[cls.name] == "failed", (cls.name, rows)
        mine = [c for c in report["cases"] if c.get("kernel") == cls.name]
        assert any(check in c.get("failed_checks", []) for c in mine), (cls.name, check)
    return report
