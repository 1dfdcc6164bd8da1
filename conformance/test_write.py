"""The core certification: each kernel's write of each case, graded against the reference.

A case passes when it reaches the platform's required grade (``bit_exact`` on every bundled
table). Its record carries the grade reached, every failed check with what was found, error
statistics and the seed, for report.json.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from rtp_ref.certify.cases import STRIDED_KINDS, CaseInputs, CaseSpec, build_case
from rtp_ref.certify.diagnosis import diagnose_contract
from rtp_ref.certify.grading import grade_write, reference_image

from .conftest import WriteCase
from .matrix import suite
from .outcome import judge, not_covered, settle_call, with_ran_check
from .runner import call_kernel


def _check_inputs_as_built(spec: CaseSpec, inputs: CaseInputs, device: str) -> None:
    """The suite's own guarantee, checked before every call so it cannot regress silently: the inputs are on
    the device under test, and the strided kinds are strided THERE (a CPU slice copied to a GPU arrives
    contiguous, which once hid misaligned vector loads from the suite)."""
    tensors = (inputs.kv_c, inputs.k_pe, inputs.kv_cache, inputs.slot_mapping, inputs.scale)
    assert all(t.device.type == device for t in tensors), f"suite error: inputs are not all on {device}"
    if spec.kind in STRIDED_KINDS:
        assert not (inputs.kv_c.is_contiguous() and inputs.k_pe.is_contiguous()), \
            f"suite error: the {spec.kind} case's inputs are contiguous on {device}"
    if spec.kind == "elem_aligned":
        assert inputs.k_pe.data_ptr() % 4, "suite error: the elem_aligned k_pe is aligned beyond its element"


def test_write_conforms(write_case: WriteCase, record_case: Callable[..., None], pytestconfig: pytest.Config) -> None:
    s = suite(pytestconfig)
    k, spec = write_case.kut, write_case.spec
    layout = s.contract.layout(spec.layout, *write_case.dims)
    inputs = build_case(spec, layout, k.device)
    _check_inputs_as_built(spec, inputs, k.device)
    before = inputs.storage.cpu().clone()
    result = call_kernel(k.kernel, inputs, spec.layout, k.device)
    base = dict(kernel=k.name, layout=spec.layout, platform=s.platform.name, case=spec.case_id,
                kind=spec.kind, seed=spec.seed, kv_lora_rank=layout.kv_lora_rank, rope_dim=layout.rope_dim,
                device=k.device, execution=k.execution, required_grade=s.platform.required_grade,
                deviation=write_case.deviation, worker=os.environ.get("PYTEST_XDIST_WORKER"),
                visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"))
    after = inputs.storage.cpu()
    if settle_call(k.kernel, k.name, result, before, after, layout, (inputs.kv_c, inputs.k_pe),
                   not_covered(s.platform, write_case.deviation), base, record_case):
        return
    grading = grade_write(layout, spec.kind, inputs, before, after, reference_image(layout, inputs),
                          s.platform.numerics_max_ulp)
    grading = with_ran_check(grading, result.calls, result.launched, expect_launch=spec.tokens > 0)
    failed = {c.name: c.detail for c in grading.checks if not c.passed}
    diagnosis = None
    if grading.reaches("layout") and failed:
        # which known contract the bytes follow instead (scale rule, floor, divisor, format, input reading)
        diagnosis = diagnose_contract(spec.layout, write_case.dims, s.contract, inputs, after).summary
    record_case(**base, grade=grading.grade, failed_checks=sorted(failed), checks=failed, error_stats=grading.stats,
                diagnosis=diagnosis)
    judge(grading, k.name, s.platform, write_case.deviation, f"\n  diagnosis: {diagnosis}" if diagnosis else "")
