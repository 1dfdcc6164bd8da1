"""report.md explains a failed pair: the failed checks with example values and the contract the kernel follows."""

from __future__ import annotations

from pathlib import Path

from tests.mutants.test_mutation_score import certify


def test_an_amax_div_ds_mla_kernel_on_a_pow2_table_is_named(tmp_path: Path) -> None:
    report = certify("cpu", ["contract-amax-div-flt-min"], tmp_path, extra=["--layout", "fp8_ds_mla"],
                     kernels_env="tests.mutants.contracts:kernels")
    assert report["_exit_code"] == 1
    md = (tmp_path / "report.md").read_text()
    section = md.split("### contract-amax-div-flt-min / fp8_ds_mla: failed", 1)[1].split("\n## ", 1)[0]
    # cases without an all-zero tile cannot tell the floor: only the diagnosis that names it is shown
    contracts = [line for line in section.splitlines() if line.startswith("- contract: ")]
    assert contracts == ["- contract: the kernel follows ds_mla_scale_rule=amax_div, ds_mla_scale_floor=FLT_MIN; "
                         "this table requires ds_mla_scale_rule=pow2_ceil, ds_mla_scale_floor=0.0001"], section
    # the most specific check first, with an example a vendor can act on: token, slot, field, both values
    first = next(line for line in section.splitlines() if line.startswith("- `"))
    assert first.startswith("- `numerics.scale_form`") and "e.g. token" in first and " vs " in first, section
