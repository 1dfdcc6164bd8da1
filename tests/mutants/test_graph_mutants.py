"""The CUDA-graph tier in a real certify run (GPU only): the built-in triton and cuda kernels of every op are
graph-safe, and each graph mutant (tests/mutants/graph_mutants.py), which claims to be, fails the tier with the
check that names its bug."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.mutants.graph_mutants import GRAPH_EXPECTED
from tests.mutants.test_mutation_score import certify

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="the graph tier needs a CUDA device")]
BUILTINS = ["triton", "cuda", "triton-mha", "cuda-mha", "triton-indexer", "cuda-indexer"]


def test_the_graph_tier_passes_the_builtins_and_names_each_mutant(tmp_path: Path) -> None:
    mutants = {cls.name: checks for cls, checks in GRAPH_EXPECTED.items()}
    report = certify("cuda-sm90", [*BUILTINS, *mutants], tmp_path,
                     ["--tier", "graph", "--layout", "fp8", "--layout", "fp8_ds_mla", "--layout", "auto",
                      "--layout", "none", "--layout", "ue8m0", "-n", "1"],
                     kernels_env="tests.mutants.graph_mutants:graph_mutants")
    rows = {(r["kernel"], r["layout"]): r for r in report["summary"]["by_kernel_layout"]}  # type: ignore[index]
    safe = {key: (r["verdict"], r["graph_safe"]) for key, r in rows.items() if key[0] in BUILTINS}
    assert safe and all(v == ("certified", "yes") for v in safe.values()), safe
    assert {k for k, _ in safe} == set(BUILTINS)
    for name, checks in mutants.items():
        row = rows[(name, "fp8")]
        found = {c for case in report["cases"] if case.get("kernel") == name  # type: ignore[attr-defined]
                 and case.get("layout") == "fp8" for c in case.get("failed_checks", [])}
        assert row["verdict"] == "failed" and checks <= found, (name, row["graph_safe"], found)
    assert report["_exit_code"] == 1
