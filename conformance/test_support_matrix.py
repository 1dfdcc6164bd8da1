"""The support matrix, tested in both directions, and the kernel's behaviour on bad input.

A layout a kernel does not claim must raise, and leave the cache untouched (never write garbage);
a claimed layout given an out-of-range slot must raise before writing a byte; a claimed layout
written twice from the same inputs must give the same bytes.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from rtp_ref.certify.cases import CaseInputs, CaseSpec, build_case, num_blocks_for
from rtp_ref.kv.layouts import default_dims

from .matrix import KernelUnderTest, suite
from .runner import call_kernel, describe_error


def _case(layout: str, kind: str = "random", tokens: int = 9, seed: int = 7) -> CaseSpec:
    return CaseSpec(layout, kind, tokens, 16, num_blocks_for(tokens, 16), torch.bfloat16, seed)


def _call_expecting_refusal(k: KernelUnderTest, layout_name: str, inputs: CaseInputs, record_case: Callable[..., None],
                            kind: str, case: str, check: str) -> tuple[BaseException | None, bool]:
    """Call the kernel on inputs it must refuse; record the case (``check`` failed unless it raised and
    left the cache untouched) and return (its error, whether the cache is untouched)."""
    before = inputs.storage.cpu().clone()
    result = call_kernel(k.kernel, inputs, layout_name, k.device)
    untouched = torch.equal(before, inputs.storage.cpu())
    ok = result.error is not None and untouched
    record_case(kernel=k.name, layout=layout_name, kind=kind, case=case, execution=k.execution,
                failed_checks=[] if ok else [check])
    return result.error, untouched


def test_unclaimed_layout_raises(unclaimed_pair: tuple[KernelUnderTest, str], pytestconfig: pytest.Config,
                                 record_case: Callable[..., None]) -> None:
    k, layout_name = unclaimed_pair
    layout = suite(pytestconfig).contract.layout(layout_name, *default_dims(layout_name))
    inputs = build_case(_case(layout_name), layout, k.device)
    error, untouched = _call_expecting_refusal(k, layout_name, inputs, record_case, "unclaimed", "unclaimed-layout",
                                               "support.unclaimed_layout_raises")
    assert error is not None, f"{k.name} does not claim {layout_name} but accepted it without an error"
    assert untouched, f"{k.name} raised for unclaimed {layout_name} but had already written to the cache"


def test_out_of_range_slot_raises_before_writing(claimed_pair: tuple[KernelUnderTest, str],
                                                 pytestconfig: pytest.Config,
                                                 record_case: Callable[..., None]) -> None:
    k, layout_name = claimed_pair
    layout = suite(pytestconfig).contract.layout(layout_name, *default_dims(layout_name))
    inputs = build_case(_case(layout_name), layout, k.device)
    capacity = inputs.kv_cache.shape[0] * inputs.kv_cache.shape[1]
    inputs.slot_mapping[-1] = capacity  # one past the end
    error, untouched = _call_expecting_refusal(k, layout_name, inputs, record_case, "bad_input", "slot-out-of-range",
                                               "support.rejects_bad_input")
    assert error is not None, f"{k.name} accepted slot {capacity} in a cache of {capacity} slots"
    assert untouched, (f"{k.name} raised ({describe_error(error)}) but only after writing to the cache; "
                       "validate before touching memory")


def test_deterministic(claimed_pair: tuple[KernelUnderTest, str], pytestconfig: pytest.Config,
                       record_case: Callable[..., None]) -> None:
    k, layout_name = claimed_pair
    layout = suite(pytestconfig).contract.layout(layout_name, *default_dims(layout_name))
    images = []
    for _ in range(2):
        inputs = build_case(_case(layout_name, tokens=37), layout, k.device)
        result = call_kernel(k.kernel, inputs, layout_name, k.device)
        assert result.error is None, describe_error(result.error)
        images.append(inputs.storage.cpu())
    same = torch.equal(images[0], images[1])
    record_case(kernel=k.name, layout=layout_name, kind="determinism", case="twice-same-inputs",
                execution=k.execution, failed_checks=[] if same else ["support.deterministic"])
    assert same, f"{k.name} wrote different bytes for identical inputs ({int((images[0] != images[1]).sum())} bytes)"


def test_the_suite_generates_cases(pytestconfig: pytest.Config, record_case: Callable[..., None]) -> None:
    """Zero cases is a failure, never a pass: the platform and selection must yield runnable cases."""
    from .conftest import write_case_params

    record_case(kernel="(suite)", layout="(all)", kind="sanity", case="cases-generated")
    runnable = [p for p in write_case_params(pytestconfig) if not any(m.name == "skip" for m in p.marks)]
    assert runnable, ("no runnable conformance case for this platform and selection "
                      f"(kernels: {[k.name for k in suite(pytestconfig).kernels]}, "
                      f"layouts: {suite(pytestconfig).layouts})")


