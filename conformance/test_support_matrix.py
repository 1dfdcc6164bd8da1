"""The support matrix, tested in both directions, and the kernel's behaviour on bad input.

A layout a kernel does not claim must raise, and leave the cache untouched (never write garbage); a
claimed layout written twice from the same inputs must give the same bytes. What a kernel does with an
out-of-range slot is input hardening, reported in its own column (``validated``/``unchecked``/``crashed``)
and required only where the platform table or ``--require-input-checks`` says so.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch

from rtp_ref.certify.calls import CallResult, call_once
from rtp_ref.certify.cases import GUARD_BYTES, CaseInputs, CaseSpec, build_case, num_blocks_for
from rtp_ref.certify.device_errors import describe_error
from rtp_ref.certify.grading import reference_image
from rtp_ref.certify.input_checks import BAD_INPUT_KIND, CRASHED, REFUSING, classify_bad_slot
from rtp_ref.certify.opcases import op_cases_of
from rtp_ref.certify.session import execution_mode
from rtp_ref.kv.layouts import default_dims

from .matrix import KernelUnderTest, suite


def _case(layout: str, kind: str = "random", tokens: int = 9, seed: int = 7) -> CaseSpec:
    return CaseSpec(layout, kind, tokens, 16, num_blocks_for(tokens, 16), torch.bfloat16, seed)


def _call_mla(k: KernelUnderTest, inputs: CaseInputs, layout_name: str) -> CallResult:
    return call_once(k.kernel, lambda: k.kernel(inputs.kv_c, inputs.k_pe, inputs.kv_cache, inputs.slot_mapping,
                                                layout_name, inputs.scale), layout_name, k.device)


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
    cases = op_cases_of(k.op)
    key = cases.unclaimed_key(variant)
    assert key is not None  # the pairs are those whose op names the variant in its call
    case = cases.build(key, suite(pytestconfig).contract, k.device)
    before = case.snapshot()
    take_flags = getattr(k.kernel, "take_input_errors", None)
    if callable(take_flags):
        take_flags()  # what earlier cases left is not this case's
    result = call_once(k.kernel, lambda: case.call(k.kernel), variant, k.device)
    _device_error_fails(k, variant, result, record_case, "unclaimed", "unclaimed-layout")
    untouched = torch.equal(before, case.snapshot())
    ok = result.error is not None and untouched
    record_case(op=k.op, kernel=k.name, layout=variant, kind="unclaimed", case="unclaimed-layout",
                execution=k.execution, failed_checks=[] if ok else ["support.unclaimed_layout_raises"])
    assert result.error is not None, f"{k.name} does not claim {variant} but accepted it without an error"
    assert untouched, f"{k.name} raised for unclaimed {variant} but had already written"


def test_out_of_range_slot(claimed_pair: tuple[KernelUnderTest, str], pytestconfig: pytest.Config,
                           record_case: Callable[..., None]) -> None:
    """Input hardening, reported apart from the write (rtp_ref.certify.input_checks): ``validated`` (raised
    before writing), ``flagged`` (skipped on the device and reported by ``take_input_errors``), ``unchecked``
    (the guard canaries say where the write went) or ``crashed``. It fails the case only where the platform
    table or ``--require-input-checks`` asks for ``validated`` or ``flagged``."""
    k, layout_name = claimed_pair
    s = suite(pytestconfig)
    layout = s.contract.layout(layout_name, *default_dims(layout_name))
    spec = _case(layout_name)
    # a whole block of guard after the cache: a write to slot == capacity lands in bytes the suite owns
    block_bytes = spec.block_size * layout.bytes_per_token
    inputs = build_case(spec, layout, k.device, trailing_guard=GUARD_BYTES + block_bytes)
    capacity = inputs.kv_cache.shape[0] * inputs.kv_cache.shape[1]
    inputs.slot_mapping[-1] = capacity  # one past the end
    before = inputs.storage.cpu().clone()
    take_flags = getattr(k.kernel, "take_input_errors", None)
    if callable(take_flags):
        take_flags()  # what earlier cases left is not this case's
    result = _call_mla(k, inputs, layout_name)
    required = s.platform.require_input_checks or bool(pytestconfig.getoption("rtp_require_input_checks"))
    base = dict(kernel=k.name, layout=layout_name, kind=BAD_INPUT_KIND, case="slot-out-of-range",
                execution=k.execution, input_checks_required=required)
    if result.device_error is not None:
        value, detail = CRASHED, f"slot == capacity left a device error: {result.device_error}"
    else:
        error = describe_error(result.error) if result.error is not None else None
        cache_end = inputs.storage.numel() - GUARD_BYTES - block_bytes
        valid = copy.copy(inputs)
        valid.slot_mapping = inputs.slot_mapping.clone()
        valid.slot_mapping[-1] = -1  # the footprint the valid tokens may write
        footprint = reference_image(layout, valid).footprint
        flagged = [str(f) for f in take_flags()] if callable(take_flags) else None
        value, detail = classify_bad_slot(before, inputs.storage.cpu(), footprint, error, cache_end, flagged)
    failed = required and value not in REFUSING
    record_case(**base, input_check=value, input_check_detail=detail,
                failed_checks=["input.rejects_bad_slot"] if failed else [])
    if failed:
        pytest.fail(f"input checks are required and {k.name} is {value}: {detail}", pytrace=False)


def test_deterministic(claimed_pair: tuple[KernelUnderTest, str], pytestconfig: pytest.Config,
                       record_case: Callable[..., None]) -> None:
    k, layout_name = claimed_pair
    layout = suite(pytestconfig).contract.layout(layout_name, *default_dims(layout_name))
    images = []
    for _ in range(2):
        inputs = build_case(_case(layout_name, tokens=37), layout, k.device)
        result = _call_mla(k, inputs, layout_name)
        _device_error_fails(k, layout_name, result, record_case, "determinism", "twice-same-inputs")
        assert result.error is None, describe_error(result.error)
        images.append(inputs.storage.cpu())
    same = torch.equal(images[0], images[1])
    record_case(kernel=k.name, layout=layout_name, kind="determinism", case="twice-same-inputs",
                execution=k.execution, failed_checks=[] if same else ["support.deterministic"])
    assert same, f"{k.name} wrote different bytes for identical inputs ({int((images[0] != images[1]).sum())} bytes)"


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
