"""What the MHA paged write's and the indexer write's conformance cases share: a case of
rtp_ref.cases.mha_indexer_cases, built on the device, graded by rtp_ref.cases.mha_indexer_grading."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from rtp_ref.cases.cases import CANARY, GUARD_BYTES
from rtp_ref.cases.grading import Grading
from rtp_ref.cases.mha_diagnosis import diagnose_codes, diagnose_flags
from rtp_ref.cases.mha_indexer_cases import (
    STRIDED_MHA_INDEXER_KINDS,
    MhaCase,
    MhaIndexerSpec,
    build_mha_indexer_case,
    slot_values,
)
from rtp_ref.cases.mha_indexer_grading import footprint, grade_mha_indexer_write
from rtp_ref.cases.op_cases import PastCapacity
from rtp_ref.cases.scale_diagnosis import diagnose_mxfp4, diagnose_scales
from rtp_ref.contract import WriteContract
from rtp_ref.kv.mha_paged import mha_layout


class MhaIndexerWriteCase:
    """One MHA or indexer write case on a device (rtp_ref.cases.op_cases.BuiltCase), ``guard`` canary bytes
    before, between and after its caches."""

    def __init__(self, key: MhaIndexerSpec, contract: WriteContract, device: str, guard: int = GUARD_BYTES) -> None:
        self.key = key
        self.case = build_mha_indexer_case(key, contract, device, guard)
        self.nan = contract.nan_policy
        self.layout: object = self.case.layout

    def check_as_built(self, device: str) -> None:
        """The inputs and caches are on the device under test, the strided kinds strided there."""
        case = self.case
        assert case.storage.device.type == device, f"suite error: the case storage is not on {device}"
        assert all(t.device.type == device for t in case.value_inputs()), f"suite error: inputs are not on {device}"
        if self.key.kind in STRIDED_MHA_INDEXER_KINDS:
            assert not any(t.is_contiguous() for t in case.value_inputs()), \
                f"suite error: the {self.key.kind} case's inputs are contiguous on {device}"

    def snapshot(self) -> torch.Tensor:
        return self.case.storage.cpu().clone()

    def call(self, kernel: Callable[..., None]) -> None:
        self.case.call(kernel)

    def value_inputs(self) -> tuple[torch.Tensor, ...]:
        return self.case.value_inputs()

    def grade(self, before: torch.Tensor, after: torch.Tensor, max_ulp: float) -> Grading:
        return grade_mha_indexer_write(self.case, before, after, max_ulp, self.nan)

    def diagnose(self, after: torch.Tensor, contract: WriteContract) -> str | None:
        """Which contract the written tokens' bytes follow instead: the indexer's scale rule (``mxfp4``'s rules and
        rounding: rtp_ref.cases.scale_diagnosis), the MHA write's fp8 conversion (rtp_ref.cases.mha_diagnosis)."""
        case = self.case
        slots = slot_values(case.slot_mapping)
        keep = slots >= 0
        if not bool(keep.any()):
            return None
        if isinstance(case, MhaCase):
            return self._diagnose_mha(case, after, slots, keep, contract)
        places = case.storage_map()
        x = case.k.cpu()[: slots.numel()][keep]
        if case.layout.fp4 is not None:
            written = slots[keep]
            return diagnose_mxfp4(x, places.field("scale").bytes_in(after)[written],
                                  places.field("k").bytes_in(after)[written])
        stored = places.field("scale").bytes_in(after)[slots[keep]].contiguous().view(torch.float32)
        return diagnose_scales(x, case.layout.quant_block_size, stored, case.layout.scale_divisor,
                               self.key.layout == "ue8m0")

    def _diagnose_mha(self, case: MhaCase, after: torch.Tensor, slots: torch.Tensor, keep: torch.Tensor,
                      contract: WriteContract) -> str | None:
        if case.layout.fp4 is not None:  # the bytes follow layout flags: each other value of each that matters
            spec = self.key

            def storage_under(alternative: WriteContract) -> torch.Tensor:
                other = build_mha_indexer_case(spec, alternative, "cpu", case.guard)
                storage = torch.full_like(after, CANARY)
                other.reference_on(storage)
                return storage

            return diagnose_flags(contract, lambda c: mha_layout(c, spec.layout, spec.heads, spec.width),
                                  storage_under, after)
        fmt = case.layout.element_format
        if fmt is None:  # auto: the bits are copied, no conversion to search
            return None
        tokens, block_size = slots.numel(), self.key.block_size
        blocks, rows = slots[keep] // block_size, slots[keep] % block_size
        got_k, got_v = (c[blocks, rows] for c in case.caches(after))
        written = [(x.cpu()[:tokens][keep], s.cpu(), got)
                   for x, s, got in ((case.key, case.k_scale, got_k), (case.value, case.v_scale, got_v))]
        return diagnose_codes(written, fmt, case.layout.conversion_mode)

    def record_fields(self) -> Mapping[str, Any]:
        return {}


def past_capacity(key: MhaIndexerSpec, contract: WriteContract, device: str) -> PastCapacity:
    """``key``'s case with a guard of a whole block (and more) after each cache, so that a write to slot ==
    capacity lands in bytes the suite owns, and its last slot set to capacity."""
    block = build_mha_indexer_case(key, contract, "cpu").cache_bytes // key.num_blocks
    built = MhaIndexerWriteCase(key, contract, device, GUARD_BYTES + block)
    case = built.case
    valid = footprint(case)  # before the bad slot: the bytes the valid tokens may write
    case.slot_mapping[-1] = key.num_blocks * key.block_size
    g, size = case.guard, case.cache_bytes
    names = ("key_cache", "value_cache") if isinstance(case, MhaCase) else ("kv_cache",)
    guards = tuple((name, (i + 1) * g + (i + 1) * size, (i + 2) * g + (i + 1) * size) for i, name in enumerate(names))
    return PastCapacity(built, valid, guards)
