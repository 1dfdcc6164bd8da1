"""A cache keeps its own fp8 format (layout flag ``cache_fp8_format``): on rocm-gfx942, whose format is
e4m3fnuz, a cache kept in OCP e4m3fn is certified for every op with the built-in kernels following it. The
same run shows the triton kernel's device-side slot check reported as ``flagged``."""

from __future__ import annotations

from pathlib import Path

from tests.mutants.test_mutation_score import certify, gpu_host_workers

KERNELS = ["reference", "triton", "reference-mha", "triton-mha", "reference-indexer", "triton-indexer"]


def test_every_op_certifies_a_cache_kept_in_another_format(tmp_path: Path) -> None:
    report = certify("rocm-gfx942", KERNELS, tmp_path / "report",
                     ["--layout-flag", "cache_fp8_format=e4m3fn", "--layout", "fp8_ds_mla", "--layout", "fp8",
                      "--layout", "none", *gpu_host_workers(1)], kernels_env="")
    assert report["_exit_code"] == 0
    assert report["layout_flags"]["cache_fp8_format"] == "e4m3fn"  # type: ignore[index]
    # (the layouts triton does not claim, DeepSeek V4.1's, only raise: rows of their own)
    rows = {(r["kernel"], r["layout"]): (r["verdict"], r["min_grade"])
            for r in report["summary"]["by_kernel_layout"]  # type: ignore[index]
            if r["kernel"] in KERNELS and not r["layout"].endswith("(unclaimed)")}
    assert rows == {(k, layout): ("certified", "bit_exact") for k, layout in (
        ("reference", "fp8_ds_mla"), ("reference", "fp8"), ("triton", "fp8_ds_mla"), ("triton", "fp8"),
        ("reference-mha", "fp8"), ("triton-mha", "fp8"), ("reference-indexer", "none"),
        ("triton-indexer", "none"))}
    # input checks (MLA op): the reference refuses the bad slot on the host, the triton kernel on the device
    checks = {r["layout"]: r["input_checks"] for r in report["summary"]["by_kernel_layout"]  # type: ignore[index]
              if r["kernel"] == "triton" and not r["layout"].endswith("(unclaimed)")}
    assert checks == {"fp8_ds_mla": "flagged", "fp8": "flagged"}, checks
