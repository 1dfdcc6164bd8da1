"""The MLA write's conformance cases (``concat_and_cache_mla``): rtp_ref.cases.case_matrix's cases of each
layout at each certified (R, P), built by rtp_ref.cases.cases, graded by rtp_ref.cases.grading, and when the
bytes are wrong, the contract they follow instead found by rtp_ref.cases.diagnosis. rtp_ref/ops/concat_and_cache_mla.py
puts them together as the op's ``OpCases``."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

import torch

from rtp_ref.cases.case_matrix import case_specs
from rtp_ref.cases.cases import DTYPE_NAMES, GUARD_BYTES, STRIDED_KINDS, CaseSpec, build_case
from rtp_ref.cases.diagnosis import diagnose_contract
from rtp_ref.cases.domain import BLOCK_SIZE, INPUT_DTYPE, SLOT_MAPPING, ZERO_DIM_SOURCE, Dimension, Value
from rtp_ref.cases.grading import Grading, grade_write, mla_storage_map, reference_image
from rtp_ref.cases.launch_size import LAUNCH_BLOCK_SIZE, LAUNCH_KIND, LAUNCH_SEED, launch_blocks, launch_tokens
from rtp_ref.cases.non_finite_cases import NON_FINITE_KINDS, NonFiniteCase
from rtp_ref.cases.op_cases import PastCapacity
from rtp_ref.cases.storage import kernel_text
from rtp_ref.contract import WriteContract
from rtp_ref.kv.fields import Source
from rtp_ref.kv.layouts import default_dims

#: the arguments of the MLA write a kernel may narrow (``input_domain``: rtp_ref.cases.domain)
MLA_DOMAIN = (INPUT_DTYPE, SLOT_MAPPING, BLOCK_SIZE, Dimension("kv_lora_rank", "the width of kv_c"),
              Dimension("rope_dim", "the width of k_pe"),
              Dimension("scale", "the shape of the float32 scale: [1] (tensor) or 0-D (0d)", ("tensor", "0d"),
                        ("tensor", "0d"), ZERO_DIM_SOURCE))


@dataclass(frozen=True)
class MlaCaseKey:
    """A case of the MLA write: its spec at the layout's (R, P) ``dims``."""

    spec: CaseSpec
    dims: tuple[int, int]

    @property
    def layout(self) -> str:
        return self.spec.layout

    @property
    def kind(self) -> str:
        return self.spec.kind

    @property
    def tokens(self) -> int:
        return self.spec.tokens

    @property
    def seed(self) -> int:
        return self.spec.seed

    @property
    def arguments(self) -> dict[str, Value]:
        """The case's value of each of ``MLA_DOMAIN``."""
        return {"input": DTYPE_NAMES[self.spec.input_dtype], "slot_mapping": self.spec.slot_dtype,
                "block_size": self.spec.block_size, "kv_lora_rank": self.dims[0], "rope_dim": self.dims[1],
                "scale": self.spec.scale}

    @property
    def case_id(self) -> str:
        """``random-t37-b16-bf16``, with ``-r256p64`` where the dims are not the layout's default."""
        suffix = "" if self.dims == default_dims(self.layout) else f"-r{self.dims[0]}p{self.dims[1]}"
        return f"{self.spec.case_id}{suffix}"


class MlaWriteCase:
    """One MLA write case on a device (rtp_ref.cases.op_cases.BuiltCase); ``trailing_guard`` canary bytes
    after the cache."""

    def __init__(self, key: MlaCaseKey, contract: WriteContract, device: str,
                 trailing_guard: int = GUARD_BYTES) -> None:
        self.key = key
        self.layout = contract.layout(key.layout, *key.dims)
        self.nan = contract.nan_policy
        self.inputs = build_case(key.spec, self.layout, device, trailing_guard=trailing_guard,
                                 padding_slot=contract.flags.padding_slot)

    def check_as_built(self, device: str) -> None:
        """The inputs are on the device under test, and the strided kinds strided THERE (a CPU slice copied to a
        GPU arrives contiguous, which once hid misaligned vector loads from the suite)."""
        i = self.inputs
        assert all(t.device.type == device for t in (i.kv_c, i.k_pe, i.kv_cache, i.slot_mapping, i.scale)), \
            f"suite error: inputs are not all on {device}"
        if self.key.kind in STRIDED_KINDS:
            assert not (i.kv_c.is_contiguous() and i.k_pe.is_contiguous()), \
                f"suite error: the {self.key.kind} case's inputs are contiguous on {device}"
        if self.key.kind == "elem_aligned":
            assert i.k_pe.data_ptr() % 4, "suite error: the elem_aligned k_pe is aligned beyond its element"

    def snapshot(self) -> torch.Tensor:
        return self.inputs.storage.cpu().clone()

    def call(self, kernel: Callable[..., None]) -> None:
        i = self.inputs
        kernel(i.kv_c, i.k_pe, i.kv_cache, i.call_slots, self.key.layout, i.scale)

    def value_inputs(self) -> tuple[torch.Tensor, ...]:
        return self.inputs.kv_c, self.inputs.k_pe

    def grade(self, before: torch.Tensor, after: torch.Tensor, max_ulp: float) -> Grading:
        """Grade the call; a non-finite class the layout leaves undefined against the reference of the inputs with
        its values zeroed, for the placement checks the engine keeps of it (no reference bytes exist for it)."""
        inputs = self.inputs
        if self.non_finite is not None and not self.non_finite.defined:
            inputs = replace(inputs, kv_c=torch.nan_to_num(inputs.kv_c, 0.0, 0.0, 0.0),
                             k_pe=torch.nan_to_num(inputs.k_pe, 0.0, 0.0, 0.0))
        return grade_write(self.layout, self.key.kind, inputs, before, after, reference_image(self.layout, inputs),
                           max_ulp, self.nan)

    @property
    def non_finite(self) -> NonFiniteCase | None:
        """The non-finite class of the case (rtp_ref.cases.non_finite_cases), the layout's policy and what the
        kernel stored; None for a case of another kind."""
        cls = NON_FINITE_KINDS.get(self.key.kind)
        if cls is None or self.layout.non_finite is None:
            return None
        return NonFiniteCase(cls, self.layout.non_finite, self._stored)

    def _stored(self, before: torch.Tensor, after: torch.Tensor) -> str:
        """What the kernel stored for the non-finite values of tokens 0 and 1 of a non-finite case: the nope element
        that held each, and its tile's scale."""
        nope = self.layout.value_field(Source.KV_C)
        scale = self.layout.field(nope.scale_field or "")
        tile = scale.tile_scale.tile if scale.tile_scale is not None else nope.count
        places = mla_storage_map(self.layout, self.inputs)
        slots = self.inputs.slot_mapping.cpu().tolist()
        per_unit = places.field(nope.name).element.per_unit
        parts = []
        for row, index in ((0, 5 % nope.count), (1, nope.count - 1)):
            value = kernel_text(places.at(nope.name, slots[row], index // per_unit), after, before)
            tile_scale = kernel_text(places.at(scale.name, slots[row], scale.stored_index(index // tile)), after,
                                     before)
            parts.append(f"token {row} {nope.name}[{index}] {value}, its tile's scale {tile_scale}")
        return "; ".join(parts)

    def diagnose(self, after: torch.Tensor, contract: WriteContract) -> str | None:
        return diagnose_contract(self.key.layout, self.key.dims, contract, self.inputs, after).summary

    def record_fields(self) -> Mapping[str, Any]:
        return {"kv_lora_rank": self.layout.kv_lora_rank, "rope_dim": self.layout.rope_dim}


def mla_keys(variant: str) -> Iterator[MlaCaseKey]:
    """Every case key of one MLA layout (rtp_ref.cases.case_matrix's specs at each certified (R, P))."""
    return (MlaCaseKey(spec, dims) for spec, dims in case_specs(variant))


def mla_sample(variant: str) -> MlaCaseKey:
    """A random case of 37 tokens in blocks of 16 at the layout's default dims."""
    return next(k for k in mla_keys(variant) if k.kind == "random" and k.tokens > 1 and k.spec.block_size == 16)


def mla_launch(variant: str, device: str) -> MlaCaseKey:
    """The launch-size case of one MLA layout for a kernel on ``device`` (rtp_ref.cases.launch_size), at the
    layout's default dims."""
    tokens = launch_tokens(device)
    spec = CaseSpec(variant, LAUNCH_KIND, tokens, LAUNCH_BLOCK_SIZE, launch_blocks(tokens),
                    torch.bfloat16, LAUNCH_SEED)
    return MlaCaseKey(spec, default_dims(variant))


def mla_past_capacity(key: MlaCaseKey, contract: WriteContract, device: str) -> PastCapacity:
    """``key``'s case with a whole block of guard after the cache (a write to slot == capacity lands in bytes the
    suite owns) and its last slot set to capacity."""
    layout = contract.layout(key.layout, *key.dims)
    block_bytes = key.spec.block_size * layout.bytes_per_token
    case = MlaWriteCase(key, contract, device, trailing_guard=GUARD_BYTES + block_bytes)
    valid = copy.copy(case.inputs)
    valid.slot_mapping = case.inputs.slot_mapping.clone()
    valid.slot_mapping[-1] = -1  # the footprint the valid tokens may write
    footprint = reference_image(case.layout, valid).footprint
    capacity = case.inputs.kv_cache.shape[0] * case.inputs.kv_cache.shape[1]
    case.inputs.slot_mapping[-1] = capacity
    end = case.inputs.storage.numel() - GUARD_BYTES - block_bytes
    return PastCapacity(case, footprint, (("kv_cache", end, end + block_bytes + GUARD_BYTES),))

