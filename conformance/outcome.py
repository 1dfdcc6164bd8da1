"""How a write case of any op ends, once its kernel was called: a device error, a refusal as declared, a raise,
then the grade against the platform's requirement and its known deviation. test_write.py (the MLA write) and
test_families.py (the other ops) share it, so every op's verdict follows one rule."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

import pytest
import torch

from rtp_ref.certify.checks import Check, grade_below
from rtp_ref.certify.device_errors import describe_error
from rtp_ref.certify.grading import Grading
from rtp_ref.kernels.protocol import broken_requirements, declared_limit
from rtp_ref.platform import Platform

from .runner import CallResult


def not_covered(platform: Platform, deviation: int | None) -> str:
    """The prefix of a failure that a known deviation of the case does not excuse ("" without one)."""
    if deviation is None:
        return ""
    return f"the deviation for {platform.deviations[deviation].check} does not cover this: "


def settle_call(kernel: Any, name: str, result: CallResult, before: torch.Tensor, after: torch.Tensor,
                layout: object, inputs: Collection[torch.Tensor], prefix: str, base: Mapping[str, Any],
                record_case: Callable[..., None]) -> bool:
    """Record and fail a call that left a device error or raised; returns True when the kernel refused the case
    as declared (a broken ``input_requirements`` of ``inputs``, or a ``supports`` limit of ``layout``) and
    wrote nothing: a limit of the kernel, never a pass of the write. False: the call wrote, grade it."""
    if result.device_error is not None:
        record_case(**base, grade="none", failed_checks=["support.device_error"],
                    checks={"support.device_error": result.device_error})
        pytest.fail(f"{prefix}{name} left a device error on this case: {result.device_error}", pytrace=False)
    if result.error is None:
        return False
    refusal = ", ".join(broken_requirements(getattr(kernel, "input_requirements", ()), *inputs)) \
        or declared_limit(kernel, layout)
    if refusal and torch.equal(before, after):
        record_case(**base, refused=refusal, failed_checks=[], checks={"refused": describe_error(result.error)})
        return True
    record_case(**base, grade="none", failed_checks=["support.kernel_raised"],
                checks={"support.kernel_raised": describe_error(result.error)})
    pytest.fail(f"{prefix}{name} raised on a claimed layout: {describe_error(result.error)}", pytrace=False)


def with_ran_check(grading: Grading, calls: int, launched: bool | None, expect_launch: bool) -> Grading:
    """Add ``support.kernel_ran``: called exactly once and, when it counts launches and had tokens to
    write, launched."""
    ok = calls == 1 and (launched is not False or not expect_launch)
    detail = "the kernel's launch counter did not move: it fell back instead of launching" if launched is False \
        else f"called {calls} times"
    checks = [*grading.checks, Check("support.kernel_ran", ok, detail)]
    return Grading(checks, grading.grade if ok else "none", grading.stats)


class DeviationOccurred(AssertionError):
    """A case fell short of the required grade exactly as its known deviation says (a strict xfail raises=)."""


def judge(grading: Grading, name: str, platform: Platform, deviation: int | None, told: str = "") -> None:
    """Pass a case that reached the platform's required grade; else fail it, unless its known deviation
    excuses exactly this shortfall (it still reaches the grade below the deviation's check): then raise
    ``DeviationOccurred``, the strict xfail. ``told``: a line to add (the diagnosis)."""
    if grading.reaches(platform.required_grade):
        return
    failed = {c.name: c.detail for c in grading.checks if not c.passed}
    lines = "\n".join(f"  {check}: {detail}" for check, detail in failed.items())
    message = (f"{name} reached grade {grading.grade!r}, platform {platform.name} requires "
               f"{platform.required_grade!r}; failed checks:\n{lines}{told}")
    if deviation is None:
        pytest.fail(message, pytrace=False)
    check = platform.deviations[deviation].check
    if grading.reaches(grade_below(check)):  # the grade a deviation for check must still reach
        raise DeviationOccurred(message)
    pytest.fail(f"the deviation for {check} does not cover grade {grading.grade!r}: {message}", pytrace=False)
