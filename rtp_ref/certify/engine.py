"""One case of any op, end to end, in plain Python: build it on the device under test, check the inputs as built, call
the kernel once, settle how the call ended (a device error, a refusal the kernel declared, a raise), grade it,
diagnose wrong bytes, and judge it (rtp_ref.certify.verdict). A write that falls short of the required grade under the
table's contract is graded again, bytes as written (the kernel is not called again), against each writer convention
the table accepts for the op (``[[conventions]]``: the same inputs, the reference under the convention's flags); the
first that reaches the grade passes the case and is named in its record. The empty call (no tokens) is hardening, not
a write: it is classified (rtp_ref.cases.input_checks) and never graded. A call the contract says a kernel must refuse
(rtp_ref.cases.invalid_calls: under ``auto``, a cache of another dtype than the inputs') passes only by raising before
writing, judged as any write case is. The result is the case's report record and its outcome; pytest only runs this
in an isolated worker, with a timeout, and shows the outcome.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from rtp_ref.cases.checks import Check, grade_reached, reaches
from rtp_ref.cases.grading import Grading
from rtp_ref.cases.input_checks import EMPTY_CALL_KIND, HARDENED, classify_empty_call
from rtp_ref.cases.invalid_calls import MUST_RAISE_KINDS, refused_before_writing
from rtp_ref.cases.non_finite_cases import NonFiniteCase, placement_only
from rtp_ref.cases.op_cases import BuiltCase, CaseKey, arguments_of
from rtp_ref.certify.calls import CallResult, call_once
from rtp_ref.certify.device_errors import describe_error
from rtp_ref.certify.verdict import FAILED, PASSED, REFUSED, UNDEFINED, Judgement, judge, judge_hardening, not_covered
from rtp_ref.contract import WriteContract
from rtp_ref.kernels.protocol import declared_refusal
from rtp_ref.kv.non_finite import CLASS_TEXT
from rtp_ref.ops import op_spec
from rtp_ref.platform import Convention, Platform


@dataclass(frozen=True)
class Subject:
    """The kernel under test as a case sees it: its name, the bound kernel, its op, where it runs and how
    (``native`` or ``emulated``)."""

    name: str
    kernel: Any
    op: str
    device: str
    execution: str


@dataclass(frozen=True)
class CaseResult:
    """What a case came to: its report record (every field the report reads) and its judgement."""

    record: dict[str, Any]
    judgement: Judgement


def with_ran_check(grading: Grading, call: CallResult, expect_launch: bool) -> Grading:
    """Add ``support.kernel_ran``: when the kernel counts its launches and had something to do, its own launch path
    ran (the suite calls it exactly once: rtp_ref.certify.calls)."""
    ok = call.launched is not False or not expect_launch
    checks = [*grading.checks, Check("support.kernel_ran", ok, "" if ok else
                                     "the kernel's launch counter did not move: it fell back instead of launching")]
    return Grading(checks, grading.grade if ok else "none", grading.stats)


def _settled(subject: Subject, case: BuiltCase, call: CallResult, before: torch.Tensor, after: torch.Tensor,
             prefix: str) -> tuple[dict[str, Any], Judgement] | None:
    """How a call that did not write normally ends: a device error or an undeclared raise fails the case; a
    refusal the kernel declared (the case outside its ``input_domain``, a broken ``input_requirements``, a
    ``supports`` limit) that wrote nothing is ``refused``, a limit of the kernel and never a pass of the write or a
    failure. None: the call returned; grade it."""
    if call.device_error is not None:
        fields = {"grade": "none", "failed_checks": ["support.device_error"],
                  "checks": {"support.device_error": call.device_error}}
        return fields, Judgement(FAILED, f"{prefix}{subject.name} left a device error on this case: "
                                         f"{call.device_error}")
    if call.error is None:
        return None
    refusal = declared_refusal(subject.kernel, arguments_of(case.key), case.value_inputs(), case.layout)
    if refusal and torch.equal(before, after):
        return ({"refused": refusal, "failed_checks": [], "checks": {"refused": describe_error(call.error)}},
                Judgement(REFUSED, f"refused as declared: {refusal}"))
    fields = {"grade": "none", "failed_checks": ["support.kernel_raised"],
              "checks": {"support.kernel_raised": describe_error(call.error)}}
    return fields, Judgement(FAILED, f"{prefix}{subject.name} raised on a claimed layout: {describe_error(call.error)}")


def _empty_call(subject: Subject, case: BuiltCase, call: CallResult, before: torch.Tensor, after: torch.Tensor,
                required: bool) -> tuple[dict[str, Any], Judgement]:
    """The hardening record of a call with no tokens (module doc), failed under ``input.empty_call`` only where
    hardening is ``required``."""
    error = describe_error(call.error) if call.error is not None else None
    declared = declared_refusal(subject.kernel, arguments_of(case.key), case.value_inputs(), case.layout)
    value, detail = classify_empty_call(before, after, error, call.device_error, declared)
    judgement = judge_hardening("input.empty_call", subject.name, value, detail, value in HARDENED, required)
    return ({"hardening": value, "hardening_detail": detail, "hardening_required": required,
             "failed_checks": ["input.empty_call"] if judgement.failed else [], "outcome": judgement.outcome},
            judgement)


def _convention_grading(subject: Subject, key: CaseKey, contract: WriteContract, platform: Platform,
                        call: CallResult, before: torch.Tensor,
                        after: torch.Tensor) -> tuple[Convention, Grading] | None:
    """The first convention the table accepts for the op against whose reference, on the case's own inputs (same
    key, same seed), the bytes the kernel wrote reach the required grade, with that grading; None when none does."""
    for convention in platform.conventions_for(subject.op):
        case = op_spec(subject.op).cases.build(key, contract.under(convention.flags), subject.device)
        grading = with_ran_check(case.grade(before, after, platform.numerics_max_ulp), call,
                                 expect_launch=key.tokens > 0)
        if reaches(grading.grade, platform.required_grade):
            return convention, grading
    return None


def _not_a_convention(platform: Platform, op: str) -> str:
    """What a diagnosis adds where the table accepts other conventions for ``op`` and none explains the bytes."""
    accepted = platform.conventions_for(op)
    if not accepted:
        return ""
    return (f"; this table also accepts {', '.join(c.text() for c in accepted)}, which the bytes do not follow "
            f"either")


def run_case(subject: Subject, key: CaseKey, contract: WriteContract, platform: Platform,
             deviation: int | None, hardening_required: bool = False,
             invoke_with: Callable[[BuiltCase, Callable[[], None]], None] | None = None) -> CaseResult:
    """Run one case of ``subject``'s op (module doc). ``deviation``: the index of the platform's known deviation
    that covers the case (rtp_ref.certify.verdict.matching_deviation), or None; ``hardening_required``: the empty
    call must be clean; ``invoke_with(case, call)``: how the call is made (the stream tier's late producer:
    rtp_ref.certify.stream_cases), by default directly. A suite error (inputs not built as the case says) raises
    AssertionError: it is not the kernel's finding."""
    case = op_spec(subject.op).cases.build(key, contract, subject.device)
    case.check_as_built(torch.device(subject.device).type)  # "cuda:1" (the stream tier) is on "cuda"
    record: dict[str, Any] = {
        "op": subject.op, "kernel": subject.name, "layout": key.layout, "platform": platform.name,
        "case": key.case_id, "kind": key.kind, "seed": key.seed, **case.record_fields(), "device": subject.device,
        "execution": subject.execution, "required_grade": platform.required_grade, "deviation": deviation,
        "worker": os.environ.get("PYTEST_XDIST_WORKER"), "visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }
    before = case.snapshot()
    def invoke() -> None:
        case.call(subject.kernel)

    call = call_once(subject.kernel, invoke if invoke_with is None else lambda: invoke_with(case, invoke),
                     f"{key.layout} {key.case_id}", subject.device)
    after = case.snapshot()
    if key.kind == EMPTY_CALL_KIND:
        fields, judgement = _empty_call(subject, case, call, before, after, hardening_required)
        return CaseResult({**record, **fields}, judgement)
    if key.kind in MUST_RAISE_KINDS and call.device_error is None:
        error = describe_error(call.error) if call.error is not None else None
        refusal = graded([refused_before_writing(before, after, error)])
        judgement = judge(refusal.grade, refusal.checks, subject.name, platform, deviation)
        record.update(grade=refusal.grade, failed_checks=refusal.failed,
                      checks={c.name: c.detail for c in refusal.checks if not c.passed}, outcome=judgement.outcome)
        return CaseResult(record, judgement)
    # a case of a non-finite kind says so (rtp_ref.cases.non_finite_cases); the other cases have no such attribute
    non_finite: NonFiniteCase | None = getattr(case, "non_finite", None)
    if non_finite is not None and not non_finite.defined and call.error is not None and call.device_error is None \
            and torch.equal(before, after):
        return _refused_undefined(subject, non_finite, describe_error(call.error), record)
    settled = _settled(subject, case, call, before, after, not_covered(platform, deviation))
    if settled is not None:
        fields, judgement = settled
        # a refusal is no outcome of the write: the case's outcome is what its test shows (a pass), beside ``refused``
        outcome = {} if judgement.outcome == REFUSED else {"outcome": judgement.outcome}
        return CaseResult({**record, **fields, **outcome}, judgement)
    grading = with_ran_check(case.grade(before, after, platform.numerics_max_ulp), call,
                             expect_launch=key.tokens > 0)
    if non_finite is not None and not non_finite.defined:
        return _undefined_class(subject, non_finite, grading, before, after, platform, deviation, record)
    convention = None
    if not reaches(grading.grade, platform.required_grade):
        found = _convention_grading(subject, key, contract, platform, call, before, after)
        if found is not None:
            convention, grading = found
    failed = {c.name: c.detail for c in grading.checks if not c.passed}
    # a case a convention passed has nothing to diagnose under the table's own contract
    diagnosis = case.diagnose(after, contract) if failed and convention is None and grading.reaches("layout") \
        else None
    if diagnosis is not None:
        diagnosis += _not_a_convention(platform, subject.op)
    judgement = judge(grading.grade, grading.checks, subject.name, platform, deviation,
                      f"\n  diagnosis: {diagnosis}" if diagnosis else "")
    record.update(grade=grading.grade, failed_checks=sorted(failed), checks=failed, error_stats=grading.stats,
                  outcome=judgement.outcome)
    if diagnosis is not None:
        record["diagnosis"] = diagnosis
    if convention is not None:
        record["convention"] = convention.name
    if non_finite is not None:
        record["non_finite"] = f"{non_finite.cls}: {'exact' if judgement.outcome == PASSED else judgement.outcome}"
    return CaseResult(record, judgement)


def _undefined_class(subject: Subject, non_finite: NonFiniteCase, grading: Grading, before: torch.Tensor,
                     after: torch.Tensor, platform: Platform, deviation: int | None,
                     record: dict[str, Any]) -> CaseResult:
    """A case of a non-finite class the layout's policy leaves undefined: a write outside the tokens' entries fails
    it (``PLACEMENT_CHECKS``); otherwise it is ``undefined``, with what the kernel stored."""
    cls, policy = non_finite.cls, non_finite.policy
    kept = graded(placement_only(grading.checks))
    if kept.failed:
        judgement = judge(kept.grade, kept.checks, subject.name, platform, deviation)
        record.update(grade=kept.grade, failed_checks=sorted(kept.failed), outcome=judgement.outcome,
                      checks={c.name: c.detail for c in kept.checks if not c.passed}, non_finite=f"{cls}: failed")
        return CaseResult(record, judgement)
    stored = non_finite.stored(before, after)
    message = (f"{CLASS_TEXT[cls]}: undefined by the layout's non-finite policy ({policy.source}); nothing was "
               f"written outside the tokens' entries; {subject.name} stored: {stored}")
    record.update(outcome="skipped", reason=message, non_finite=f"{cls}: undefined", non_finite_stored=stored)
    return CaseResult(record, Judgement(UNDEFINED, message))


def _refused_undefined(subject: Subject, non_finite: NonFiniteCase, error: str, record: dict[str, Any]) -> CaseResult:
    """A kernel that raised, writing nothing, on a non-finite class its layout leaves undefined: a clean refusal of
    an input no contract defines, so the case is ``undefined`` (never a failure), with the kernel's words."""
    cls = non_finite.cls
    stored = f"nothing (it raised before writing: {error})"
    message = (f"{CLASS_TEXT[cls]}: undefined by the layout's non-finite policy ({non_finite.policy.source}); "
               f"{subject.name} stored: {stored}")
    record.update(outcome="skipped", reason=message, non_finite=f"{cls}: undefined", non_finite_stored=stored)
    return CaseResult(record, Judgement(UNDEFINED, message))


def graded(checks: list[Check], stats: dict[str, Any] | None = None) -> Grading:
    """A grading of ``checks`` alone (the grade their failures leave)."""
    return Grading(checks, grade_reached([c.name for c in checks if not c.passed]), stats or {})
