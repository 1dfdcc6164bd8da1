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

from rtp_ref.certify.checks import grade_below
from rtp_ref.certify.device_errors import describe_error
from rtp_ref.certify.family_cases import STRIDED_FAMILY_KINDS, FamilyCase, build_family_case, family_specs
from rtp_ref.certify.family_grading import grade_family_write
from rtp_ref.certify.grading import Check, Grading
from rtp_ref.kernels.protocol import broken_requirements, declared_limit

from .conftest import FamilyCaseParam
from .matrix import DeviationOccurred, KernelUnderTest, suite
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
    not_covered = "" if family_case.deviation is None else \
        f"the deviation for {s.platform.deviations[family_case.deviation].check} does not cover this: "
    if result.device_error is not None:
        record_case(**base, grade="none", failed_checks=["support.device_error"],
                    checks={"support.device_error": result.device_error})
        pytest.fail(f"{not_covered}{k.name} left a device error on this case: {result.device_error}", pytrace=False)
    after = case.storage.cpu()
    if result.error is not None:
        broken = broken_requirements(getattr(k.kernel, "input_requirements", ()), *case.value_inputs())
        refusal = ", ".join(broken) or declared_limit(k.kernel, case.layout)
        if refusal and torch.equal(before, after):
            record_case(**base, refused=refusal, failed_checks=[],
                        checks={"refused": describe_error(result.error)})
            return  # refused as declared: a limit of the kernel, never a pass of the write
        record_case(**base, grade="none", failed_checks=["support.kernel_raised"],
                    checks={"support.kernel_raised": describe_error(result.error)})
        pytest.fail(f"{not_covered}{k.name} raised on a claimed variant: {describe_error(result.error)}",
                    pytrace=False)
    grading = grade_family_write(case, before, after, s.platform.numerics_max_ulp)
    if result.calls != 1:
        grading = Grading([*grading.checks, Check("support.kernel_ran", False, f"called {result.calls} times")],
                          "none", grading.stats)
    failed = {c.name: c.detail for c in grading.checks if not c.passed}
    record_case(**base, grade=grading.grade, failed_checks=sorted(failed), checks=failed, error_stats=grading.stats)
    if not grading.reaches(s.platform.required_grade):
        lines = "\n".join(f"  {name}: {detail}" for name, detail in failed.items())
        message = (f"{k.name} reached grade {grading.grade!r}, platform {s.platform.name} requires "
                   f"{s.platform.required_grade!r}; failed checks:\n{lines}")
        if family_case.deviation is None:
            pytest.fail(message, pytrace=False)
        check = s.platform.deviations[family_case.deviation].check
        if grading.reaches(grade_below(check)):  # the grade a deviation for check must still reach
            raise DeviationOccurred(message)  # the excused shortfall: a strict xfail
        pytest.fail(f"the deviation for {check} does not cover grade {grading.grade!r}: {message}", pytrace=False)


def test_family_unclaimed_variant_raises(unclaimed_family_pair: tuple[KernelUnderTest, str],
                                         pytestconfig: pytest.Config, record_case: Callable[..., None]) -> None:
    """A variant the kernel does not claim must raise, and leave the caches untouched."""
    k, variant = unclaimed_family_pair
    spec = next(s for s in family_specs(k.op, variant) if s.tokens > 1)
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
