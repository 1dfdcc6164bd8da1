"""The stream tier in a real certify run (GPU only): the built-in triton and cuda writers of every op follow the
caller's stream, and a wrong-stream writer of each op (tests/mutants/stream_mutants.py) fails the tier with value
checks (on the regular tier, called on the default stream, they write what the reference writes)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.mutants.test_mutation_score import certify

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="the stream tier needs a CUDA device")]
BUILTINS = ["triton", "cuda", "triton-mha", "cuda-mha", "triton-indexer", "cuda-indexer"]
MUTANTS = ["wrong-stream-triton", "wrong-stream-triton-mha", "wrong-stream-triton-indexer"]


def test_the_stream_tier_passes_the_builtins_and_fails_each_wrong_stream_writer(tmp_path: Path) -> None:
    report = certify("cuda-sm90", [*BUILTINS, *MUTANTS], tmp_path,
                     ["--tier", "stream", "--layout", "fp8", "--layout", "auto", "--layout", "ue8m0", "-n", "1"],
                     kernels_env="tests.mutants.stream_mutants:stream_mutants")
    rows = {(r["kernel"], r["layout"]): r for r in report["summary"]["by_kernel_layout"]}  # type: ignore[index]
    builtins = {key: r["tiers"] for key, r in rows.items() if key[0] in BUILTINS}
    assert builtins and all(t.get("stream") == "certified" for t in builtins.values()), builtins
    for name in MUTANTS:
        mine = {key: r["tiers"] for key, r in rows.items() if key[0] == name}
        assert mine and all(t["stream"] == "failed" for t in mine.values()), mine
        failed = {c for case in report["cases"] if case.get("kernel") == name  # type: ignore[attr-defined]
                  and case.get("tier") == "stream" for c in case.get("failed_checks", [])}
        assert any(c.startswith("values.") or c.startswith("bit_exact") for c in failed), failed
    assert report["_exit_code"] == 1
