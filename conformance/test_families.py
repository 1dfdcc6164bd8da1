"""The other cache families' certification: each kernel's MHA paged write (``reshape_and_cache_flash``) and
indexer write (``indexer_k_quant_and_cache``) of each case, graded against the reference.

The same grades, canaries, support checks and deviations as the MLA write (test_write.py); the checks of
these ops are rtp_ref.certify.family_grading's. Every record carries its ``op``.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest
import torch

from rtp_ref.certify.family_cases import STRIDED_FAMILY_KINDS, FamilyCase, build_family_case
from rtp_ref.certify.family_grading import grade_family_write
from rtp_ref.ops import op_cases

from .conftest import FamilyCaseParam
from .matrix import KernelUnderTest, suite
from .outcome import judge, not_covered, settle_call, with_ran_check
from .runner import call_family_kernel


def _check_inputs_as_built(case: FamilyCase, device: str) -> None:
    """The suite's own guarantee: inputs and caches on the device under test, strided kinds strided there."""
    assert case.storage.device.type == device, f"suite error: the case storage is not on {device}"
    assert all(t.device.type == device for t in case.value_inputs()), f"suite error: inputs are not on {device}"
    if case.spec.kind in STRIDED_FAMILY_KINDS:
        assert not any(t.is_contiguous() for t in case.value_inputs()), \
            f"suite error: the {case.spec.kind} case's inputs are contiguous on {device}"


def test_family_write_conforms(family_case: FamilyCaseParam, record_case: Callable[..., None],
                               pytestconfig: pytest.Config) -> None:
    s = suite(pytestconfig)
    k, spec = family_case.kut, family_case.spec
    case = build_family_case(spec, s.contract, k.device)
    _check_inputs_as_built(case, k.device)
    before = case.storage.cpu().clone()
    result = call_family_kernel(k.kernel, case, k.device)
    base = dict(op=spec.op, kernel=k.name, layout=spec.layout, platform=s.platform.name, case=spec.case_id,
                kind=spec.kind, seed=spec.seed, device=k.device, execution=k.execution,
                required_grade=s.platform.required_grade, deviation=family_case.deviation,
                worker=os.environ.get("PYTEST_XDIST_WORKER"), visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"))
    after = case.storage.cpu()
    if settle_call(k.kernel, k.name, result, before, after, case.layout, case.value_inputs(),
                   not_covered(s.platform, family_case.deviation), base, record_case):
        return
    grading = grade_family_write(case, before, after, s.platform.numerics_max_ulp)
    grading = with_ran_check(grading, result.calls, result.launched, expect_launch=spec.tokens > 0)
    failed = {c.name: c.detail for c in grading.checks if not c.passed}
    record_case(**base, grade=grading.grade, failed_checks=sorted(failed), checks=failed, error_stats=grading.stats)
    judge(grading, k.name, s.platform, family_case.deviation)

def test_family_unclaimed_variant_raises(unclaimed_family_pair: tuple[KernelUnderTest, str],
                                         pytestconfig: pytest.Config, record_case: Callable[..., None]) -> None:
    """A variant the kernel does not claim must raise, and leave the caches untouched."""
    k, variant = unclaimed_family_pair
    spec = next(s for s in op_cases(k.op)(variant) if s.tokens > 1)
    case = build_family_case(spec, suite(pytestconfig).contract, k.device)
    before = case.storage.cpu().clone()
    result = call_family_kernel(k.kernel, case, k.device)
    untouched = torch.equal(before, case.storage.cpu())
    ok = result.device_error is None and result.error is not None and untouched
    record_case(op=k.op, kernel=k.name, layout=variant, kind="unclaimed", case="unclaimed-layout",
                execution=k.execution, failed_checks=[] if ok else ["support.unclaimed_layout_raises"])
    assert result.device_error is None, f"{k.name} left a device error: {result.device_error}"
    assert result.error is not None, f"{k.name} does not claim {variant} but accepted it without an error"
    assert untouched, f"{k.name} raised for unclaimed {variant} but had already written to the caches"
