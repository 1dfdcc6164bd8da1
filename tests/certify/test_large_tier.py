"""The large-address tier on the CPU: the reference of every op certifies on caches past 4 GiB, and the
32-bit-offset mutants (tests/mutants/large_mutants.py), which the regular tier certifies, fail it by
``layout.offset_width``. Marked ``large`` (about a minute and 6.7 GB): the README's test command leaves it
out, CI runs it as a step of its own (`pytest -m large`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rtp_ref.certify.large_cases import memory_shortfall
from tests.mutants.large_mutants import LARGE_EXPECTED
from tests.mutants.test_mutation_score import certify, gpu_host_workers

REFERENCES = ["reference", "reference-mha", "reference-indexer"]
MUTANTS = {cls.name: check for cls, check in LARGE_EXPECTED.items()}
LARGE_MUTANTS = "tests.mutants.large_mutants:large_mutants"


def _rows(report: dict[str, object]) -> dict[tuple[str, str], tuple[str, str | None]]:
    return {(r["kernel"], r["layout"]): (r["verdict"], r["min_grade"])
            for r in report["summary"]["by_kernel_layout"]  # type: ignore[index]
            if r["kernel"] != "(suite)"}


@pytest.mark.large
def test_every_ops_reference_certifies_past_4_gib(tmp_path: Path) -> None:
    report = certify("cpu", REFERENCES, tmp_path / "report", ["--tier", "large", "-n", "1"], kernels_env="",
                     timeout=300)
    assert report["_exit_code"] == 0
    rows = _rows(report)
    # ten MLA layouts on the cpu table (five fp8/16-bit, V41, V41_FP4, nvfp4_fp8_ds_mla, nvfp4_ds_mla_bf16rope,
    # nvfp4_ds_mla_fp8rope), four MHA variants (auto, fp8, fp8_e5m2, nvfp4), three indexer scale formats (none, ue8m0,
    # mxfp4)
    assert len(rows) == 17
    assert set(rows.values()) == {("certified", "bit_exact")}


def test_32_bit_offset_mutants_pass_the_regular_tier(tmp_path: Path) -> None:
    """As the real bugs did: a small cache never wraps. Not marked ``large``: it runs with the suite, so CI's
    large step holds only the two large runs."""
    regular = certify("cpu", list(MUTANTS), tmp_path / "regular", gpu_host_workers(1), kernels_env=LARGE_MUTANTS)
    # every claimed layout certified (the unclaimed fp8_model1_mla raises)
    verdicts = {v for v in _rows(regular).values() if v[0] != "raises as required"}
    assert verdicts == {("certified", "bit_exact")}


@pytest.mark.large
def test_32_bit_offset_mutants_fail_the_large_tier(tmp_path: Path) -> None:
    large = certify("cpu", list(MUTANTS), tmp_path / "large", ["--tier", "large", "-n", "1"],
                    kernels_env=LARGE_MUTANTS, timeout=300)
    assert large["_exit_code"] == 1
    cases = [c for c in large["cases"] if c["kernel"] in MUTANTS]  # type: ignore[union-attr]
    assert len(cases) == 7  # four MLA layouts, two indexer scale formats, the Triton one's auto
    for case in cases:
        assert case["grade"] == "none", case
        assert {MUTANTS[case["kernel"]], "layout.untouched_bytes"} <= set(case["failed_checks"]), case


def test_a_device_too_small_for_the_case_is_named_with_what_it_needs() -> None:
    reason = memory_shortfall("cpu", 1 << 50)
    assert reason is not None and reason.startswith("the large-address case needs 1048576.0 GiB on cpu, ")
    assert memory_shortfall("cpu", 1) is None
