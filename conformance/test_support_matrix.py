"""The support matrix, tested in both directions, the kernel's declared domain, and its behaviour on bad input.

Written once over every op (its cases: rtp_ref.ops). A variant a kernel does not claim must raise, and
leave every byte untouched (never write garbage); a claimed variant run twice on the same inputs must give the same
bytes. A declared input domain is recorded for the report, and fails where it leaves out what engines pass. What a
kernel does with an out-of-range slot is input hardening, reported in its own column
(``validated``/``flagged``/``unchecked``/``crashed``) and required only where the platform table or
``--require-input-checks`` says so.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from rtp_ref.cases.domain import DOMAIN_KIND, left_out
from rtp_ref.cases.input_checks import BAD_INPUT_KIND, CRASHED, REFUSING, classify_bad_slot
from rtp_ref.certify.calls import CallResult, call_once
from rtp_ref.certify.device_errors import describe_error
from rtp_ref.certify.session import execution_mode
from rtp_ref.certify.verdict import judge_hardening
from rtp_ref.kernels.protocol import declared_domain, domain_text
from rtp_ref.ops import op_spec

from .matrix import KernelUnderTest, suite


def _device_error_fails(k: KernelUnderTest, layout_name: str, result: CallResult, record_case: Callable[..., None],
                        kind: str, case: str) -> None:
    """A device error the call left fails this case under ``support.device_error`` (never the next case's)."""
    if result.device_error is not None:
        record_case(op=k.op, kernel=k.name, layout=layout_name, kind=kind, case=case, execution=k.execution,
                    failed_checks=["support.device_error"], checks={"support.device_error": result.device_error})
        pytest.fail(f"{k.name} left a device error: {result.device_error}", pytrace=False)


def test_unclaimed_layout_raises(unclaimed_pair: tuple[KernelUnderTest, str], pytestconfig: pytest.Config,
                                 record_case: Callable[..., None]) -> None:
    """A variant of its op the kernel does not claim must raise, and leave every byte untouched (never write garbage
    and then complain)."""
    k, variant = unclaimed_pair
    cases = op_spec(k.op).cases
    case = cases.build(cases.sample(variant), suite(pytestconfig).contract, k.device)
    before = case.snapshot()
    _fresh_flags(k)  # what earlier cases left is not this case's
    result = call_once(k.kernel, lambda: case.call(k.kernel), variant, k.device)
    _device_error_fails(k, variant, result, record_case, "unclaimed", "unclaimed-layout")
    untouched = torch.equal(before, case.snapshot())
    ok = result.error is not None and untouched
    record_case(op=k.op, kernel=k.name, layout=variant, kind="unclaimed", case="unclaimed-layout",
                execution=k.execution, failed_checks=[] if ok else ["support.unclaimed_layout_raises"])
    assert result.error is not None, f"{k.name} does not claim {variant} but accepted it without an error"
    assert untouched, f"{k.name} raised for unclaimed {variant} but had already written"


def _fresh_flags(k: KernelUnderTest) -> Callable[[], list[object]] | None:
    """The kernel's ``take_input_errors``, emptied of what earlier cases left (None: it has none)."""
    take_flags = getattr(k.kernel, "take_input_errors", None)
    if not callable(take_flags):
        return None
    take_flags()
    return take_flags  # type: ignore[no-any-return]


def test_out_of_range_slot(slotted_pair: tuple[KernelUnderTest, str], pytestconfig: pytest.Config,
                           record_case: Callable[..., None]) -> None:
    """Input hardening, reported apart from the write (rtp_ref.cases.input_checks): ``validated`` (raised
    before writing), ``flagged`` (skipped on the device and reported by ``take_input_errors``), ``unchecked``
    (the guard canaries say where the write went) or ``crashed``. It fails the case only where the platform
    table or ``--require-input-checks`` asks for ``validated`` or ``flagged``. Every op that writes through a slot
    mapping has it."""
    k, variant = slotted_pair
    s = suite(pytestconfig)
    cases = op_spec(k.op).cases
    assert cases.past_capacity is not None  # the pairs are those of ops with slots
    bad = cases.past_capacity(cases.sample_in(variant, declared_domain(k.kernel)), s.contract, k.device)
    before = bad.case.snapshot()
    take_flags = _fresh_flags(k)
    result = call_once(k.kernel, lambda: bad.case.call(k.kernel), variant, k.device)
    required = s.input_checks_required
    base = dict(op=k.op, kernel=k.name, layout=variant, kind=BAD_INPUT_KIND, case="slot-out-of-range",
                execution=k.execution, input_checks_required=required)
    if result.device_error is not None:
        value, detail = CRASHED, f"slot == capacity left a device error: {result.device_error}"
    else:
        error = describe_error(result.error) if result.error is not None else None
        flagged = [str(f) for f in take_flags()] if take_flags is not None else None
        value, detail = classify_bad_slot(before, bad.case.snapshot(), bad.valid_footprint, error, bad.guards, flagged)
    judgement = judge_hardening("input.rejects_bad_slot", k.name, value, detail, value in REFUSING, required)
    record_case(**base, input_check=value, input_check_detail=detail,
                failed_checks=["input.rejects_bad_slot"] if judgement.failed else [])
    if judgement.failed:
        pytest.fail(judgement.message, pytrace=False)


def test_deterministic(claimed_pair: tuple[KernelUnderTest, str], pytestconfig: pytest.Config,
                       record_case: Callable[..., None]) -> None:
    """The same case built and called twice leaves the same bytes (every op)."""
    k, variant = claimed_pair
    cases = op_spec(k.op).cases
    key = cases.sample_in(variant, declared_domain(k.kernel))
    images = []
    for _ in range(2):
        case = cases.build(key, suite(pytestconfig).contract, k.device)
        result = call_once(k.kernel, lambda case=case: case.call(k.kernel), variant, k.device)  # type: ignore[misc]
        _device_error_fails(k, variant, result, record_case, "determinism", "twice-same-inputs")
        assert result.error is None, describe_error(result.error)
        images.append(case.snapshot())
    same = torch.equal(images[0], images[1])
    record_case(op=k.op, kernel=k.name, layout=variant, kind="determinism", case="twice-same-inputs",
                execution=k.execution, failed_checks=[] if same else ["support.deterministic"])
    assert same, f"{k.name} wrote different bytes for identical inputs ({int((images[0] != images[1]).sum())} bytes)"


def test_declared_domain(domain_pair: tuple[KernelUnderTest, str], record_case: Callable[..., None]) -> None:
    """A kernel's declared domain (``input_domain``, ``input_requirements``) is recorded, for the report to list
    beside the verdict; one that leaves out a value engines pass (``Dimension.required``) fails, saying which."""
    k, variant = domain_pair
    missing = left_out(declared_domain(k.kernel), op_spec(k.op).cases.domain)
    detail = f"{k.name}'s input_domain leaves out what engines pass: {'; '.join(missing)}" if missing else ""
    record_case(op=k.op, kernel=k.name, layout=variant, kind=DOMAIN_KIND, case="declared-domain",
                execution=k.execution, domain=domain_text(k.kernel, k.op),
                failed_checks=["support.declared_domain"] if missing else [],
                checks={"support.declared_domain": detail} if missing else {})
    if missing:
        pytest.fail(detail, pytrace=False)


def test_the_suite_generates_cases(pytestconfig: pytest.Config, record_case: Callable[..., None]) -> None:
    """Zero cases is a failure, never a pass: the platform and selection must yield runnable cases (of any op)."""
    from .conftest import case_params, graph_case_params, large_case_params

    record_case(kernel="(suite)", layout="(all)", kind="sanity", case="cases-generated",
                execution=execution_mode(suite(pytestconfig).platform))
    params = [*case_params(pytestconfig), *large_case_params(pytestconfig), *graph_case_params(pytestconfig)]
    runnable = [p for p in params if not any(m.name == "skip" for m in p.marks)]
    assert runnable, ("no runnable conformance case for this platform and selection "
                      f"(kernels: {[k.name for k in suite(pytestconfig).kernels]}, "
                      f"layouts: {suite(pytestconfig).layouts_by_op})")
