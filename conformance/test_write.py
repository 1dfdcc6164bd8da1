"""The core certification: each kernel's write of each case, graded against the reference.

A case passes when it reaches the platform's required grade (``bit_exact`` on every bundled
table). Its record carries the grade reached, every failed check with what was found, error
statistics and the seed, for report.json.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest
import torch

from rtp_ref.certify.cases import STRIDED_KINDS, CaseInputs, CaseSpec, build_case
from rtp_ref.certify.checks import grade_below
from rtp_ref.certify.device_errors import describe_error
from rtp_ref.certify.diagnosis import diagnose_contract
from rtp_ref.certify.grading import Check, Grading, grade_write, reference_image
from rtp_ref.kernels.protocol import broken_requirements, declared_limit

from .conftest import WriteCase
from .matrix import DeviationOccurred, Suite, suite
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
    if result.device_error is not None:
        record_case(**base, grade="none", failed_checks=["support.device_error"],
                    checks={"support.device_error": result.device_error})
        pytest.fail(f"{_not_covered(s, write_case)}{k.name} left a device error on this case: {result.device_error}",
                    pytrace=False)
    after = inputs.storage.cpu()
    if result.error is not None:
        broken = broken_requirements(getattr(k.kernel, "input_requirements", ()), inputs.kv_c, inputs.k_pe)
        refusal = ", ".join(broken) or declared_limit(k.kernel, layout)
        if refusal and torch.equal(before, after):
            record_case(**base, refused=refusal, failed_checks=[],
                        checks={"refused": describe_error(result.error)})
            return  # refused as declared: reported as a limit of the kernel, never as a pass of the write
        record_case(**base, grade="none", failed_checks=["support.kernel_raised"],
                    checks={"support.kernel_raised": describe_error(result.error)})
        pytest.fail(f"{_not_covered(s, write_case)}{k.name} raised on a claimed layout: {describe_error(result.error)}",
                    pytrace=False)
    grading = grade_write(layout, spec.kind, inputs, before, after, reference_image(layout, inputs),
                          s.platform.numerics_max_ulp)
    grading = _with_ran_check(grading, result.calls, result.launched, expect_launch=spec.tokens > 0)
    failed = {c.name: c.detail for c in grading.checks if not c.passed}
    diagnosis = None
    if grading.reaches("layout") and failed:
        # which known contract the bytes follow instead (scale rule, floor, divisor, format, input reading)
        diagnosis = diagnose_contract(spec.layout, write_case.dims, s.contract, inputs, after).summary
    record_case(**base, grade=grading.grade, failed_checks=sorted(failed), checks=failed, error_stats=grading.stats,
                diagnosis=diagnosis)
    if not grading.reaches(s.platform.required_grade):
        lines = "\n".join(f"  {name}: {detail}" for name, detail in failed.items())
        told = f"\n  diagnosis: {diagnosis}" if diagnosis else ""
        message = (f"{k.name} reached grade {grading.grade!r}, platform {s.platform.name} requires "
                   f"{s.platform.required_grade!r}; failed checks:\n{lines}{told}")
        if write_case.deviation is None:
            pytest.fail(message, pytrace=False)
        check = s.platform.deviations[write_case.deviation].check
        if grading.reaches(grade_below(check)):  # the grade a deviation for check must still reach
            raise DeviationOccurred(message)  # the excused shortfall: a strict xfail
        pytest.fail(f"the deviation for {check} does not cover grade {grading.grade!r}: {message}", pytrace=False)


def _not_covered(s: Suite, write_case: WriteCase) -> str:
    """The prefix of a failure that a known deviation of the case does not excuse ("" without one)."""
    if write_case.deviation is None:
        return ""
    return f"the deviation for {s.platform.deviations[write_case.deviation].check} does not cover this: "


def _with_ran_check(grading: Grading, calls: int, launched: bool | None, expect_launch: bool) -> Grading:
    """Add ``support.kernel_ran``: called exactly once and, when it counts launches and had tokens to
    write, launched."""
    ok = calls == 1 and (launched is not False or not expect_launch)
    detail = "the kernel's launch counter did not move: it fell back instead of launching" if launched is False \
        else f"called {calls} times"
    checks = [*grading.checks, Check("support.kernel_ran", ok, detail)]
    grade = grading.grade if ok else "none"
    return Grading(checks, grade, grading.stats)
