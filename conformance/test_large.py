"""The large-address tier (``--rtp-tier large``, ``rtp-ref certify --tier large``): each kernel's write of
each claimed layout into a cache past 4 GiB, a strided layer of a pool (rtp_ref.certify.large_cases says how
the case is built and checked without a second copy of the cache)."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from rtp_ref.certify.calls import call_once
from rtp_ref.certify.device_errors import describe_error
from rtp_ref.certify.engine import with_ran_check
from rtp_ref.certify.large_cases import LargeCase, buffer_bytes, memory_shortfall
from rtp_ref.certify.large_grading import grade_large
from rtp_ref.certify.verdict import judge

from .conftest import LargeCaseParam, show
from .matrix import suite


def test_large_addresses(large_case: LargeCaseParam, record_case: Callable[..., None],
                         pytestconfig: pytest.Config) -> None:
    s = suite(pytestconfig)
    k, spec = large_case.kut, large_case.spec
    base = dict(op=spec.op, kernel=k.name, layout=spec.layout, platform=s.platform.name, case=spec.case_id,
                kind=spec.kind, seed=spec.seed, device=k.device, execution=k.execution, tier="large",
                required_grade=s.platform.required_grade, worker=os.environ.get("PYTEST_XDIST_WORKER"),
                visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"))
    shortfall = memory_shortfall(k.device, buffer_bytes(spec, s.contract))
    if shortfall:
        pytest.skip(shortfall)
    case = LargeCase(spec, s.contract, k.device)
    try:
        result = call_once(k.kernel, lambda: case.call(k.kernel), spec.layout, k.device)
        for check, problem in (("support.device_error", result.device_error),
                               ("support.kernel_raised", result.error and describe_error(result.error))):
            if problem:
                record_case(**base, grade="none", failed_checks=[check], checks={check: problem})
                pytest.fail(f"{k.name} on the large-address case: {problem}", pytrace=False)
        grading = with_ran_check(grade_large(case), result, expect_launch=True)
    finally:
        case.release()
    failed = {c.name: c.detail for c in grading.checks if not c.passed}
    judgement = judge(grading.grade, grading.checks, k.name, s.platform, None)
    record_case(**base, grade=grading.grade, failed_checks=sorted(failed), checks=failed, outcome=judgement.outcome)
    show(judgement)
