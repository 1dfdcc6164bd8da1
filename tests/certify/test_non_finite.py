"""Non-finite policies (rtp_ref.kv.non_finite, docs/conformance.md#non-finite-policies): every dynamic-scale layout
states one; each class is a case of its own; a class the policy leaves undefined is neither a pass nor a failure
(what the kernel stored is reported) unless the kernel writes outside the tokens' entries; a defined class is graded
like any case, and the report's non-finite column shows each class."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from rtp_ref.cases.mla_write import MlaCaseKey, mla_keys
from rtp_ref.cases.non_finite_cases import NON_FINITE_KINDS
from rtp_ref.certify.engine import CaseResult, Subject, run_case
from rtp_ref.certify.report import summarise
from rtp_ref.certify.verdict import FAILED, PASSED, UNDEFINED
from rtp_ref.contract import WriteContract
from rtp_ref.kernels.reference import ReferenceKernel
from rtp_ref.kv.layout_records import MLA_LAYOUTS
from rtp_ref.platform import load_platform
from tests.mutants.kernels import BytePastEntry, NoScaleFloor

PLATFORM = load_platform("cpu")
CONTRACT = WriteContract.for_platform(PLATFORM)


def _key(layout: str, kind: str) -> MlaCaseKey:
    return next(k for k in mla_keys(layout) if k.kind == kind)


def _run(kernel: Any, layout: str, kind: str) -> CaseResult:
    subject = Subject(getattr(kernel, "name", "k"), kernel.bind(CONTRACT), "concat_and_cache_mla", "cpu", "native")
    return run_case(subject, _key(layout, kind), CONTRACT, PLATFORM, None)


@pytest.mark.parametrize("record", MLA_LAYOUTS, ids=lambda r: r.name)
def test_a_layout_states_a_policy_exactly_when_it_computes_scales(record: Any) -> None:
    assert (record.non_finite is None) == (record.tile_rule is None)
    kinds = {k.kind for k in mla_keys(record.name)} & set(NON_FINITE_KINDS)
    assert kinds == (set() if record.tile_rule is None else set(NON_FINITE_KINDS))


def test_an_undefined_class_is_reported_with_what_the_kernel_stored() -> None:
    result = _run(ReferenceKernel(), "fp8_ds_mla", "nonfinite_nan")
    assert result.judgement.outcome == UNDEFINED
    assert result.record["non_finite"] == "nan: undefined"
    stored = result.record["non_finite_stored"]
    assert stored.startswith("token 0 nope[5] nan") and "its tile's scale" in stored, stored


def test_an_undefined_class_still_fails_a_write_outside_the_entries() -> None:
    result = _run(BytePastEntry(), "fp8_ds_mla", "nonfinite_inf")
    assert result.judgement.outcome == FAILED
    assert result.record["non_finite"] == "inf: failed"
    assert "layout.entry_bounds" in result.record["failed_checks"]


class DropsNaN(ReferenceKernel):
    """The reference, reading a NaN input as 0 (a writer that sanitises instead of following the policy)."""

    name = "drops-nan"

    def bind(self, contract: WriteContract) -> DropsNaN:
        return DropsNaN(contract)

    def __call__(self, kv_c: torch.Tensor, k_pe: torch.Tensor, *args: Any) -> None:
        super().__call__(torch.nan_to_num(kv_c, nan=0.0), torch.nan_to_num(k_pe, nan=0.0), *args)


def test_a_defined_class_is_graded() -> None:
    passed = _run(ReferenceKernel(), "V41_FP4", "nonfinite_nan")
    assert (passed.judgement.outcome, passed.record["non_finite"]) == (PASSED, "nan: exact")
    dropped = _run(DropsNaN(), "V41_FP4", "nonfinite_nan")
    assert (dropped.judgement.outcome, dropped.record["non_finite"]) == (FAILED, "nan: failed")
    assert "numerics.scale_value" in dropped.record["failed_checks"]
    failed = _run(NoScaleFloor(), "fp8_ds_mla", "zero_tile")
    assert (failed.judgement.outcome, failed.record["non_finite"]) == (FAILED, "zero_tile: failed")
    assert "numerics.scale_positive" in failed.record["failed_checks"]


def test_the_report_has_a_non_finite_cell_per_pair() -> None:
    records = [{**_run(ReferenceKernel(), "fp8_ds_mla", kind).record, "nodeid": kind} for kind in NON_FINITE_KINDS]
    (row,) = summarise(records)["by_kernel_layout"]
    assert row["non_finite"] == "nan undefined, inf undefined, zero_tile exact"
    assert row["verdict"] == "certified"
