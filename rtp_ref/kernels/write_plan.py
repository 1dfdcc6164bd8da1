"""A layout reduced to what a compiled write kernel needs, and the call path those kernels share.

``WritePlan`` turns one ``rtp_ref.kv`` layout into the handful of numbers a GPU kernel needs (field
offsets, value modes, tile-scale rule, fp8 format traits). The kernels never hard-code a layout's
byte map: the reference field table is the only source of offsets, so a kernel and the reference
writer cannot silently disagree on where a byte goes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection
from dataclasses import dataclass
from enum import IntEnum

import torch

from rtp_ref.contract import DeviceContracts, WriteContract, check_call
from rtp_ref.errors import RtpRefError, UnsupportedLayoutError
from rtp_ref.fp8.scales import ScaleRule
from rtp_ref.kernels.call_signature import Launch, LaunchCache, call_signature
from rtp_ref.kernels.format_traits import FormatTraits
from rtp_ref.kernels.input_flags import InputFlags, Validation, check_validation
from rtp_ref.kv.fields import (
    ELEMENT_E2M1,
    ELEMENT_FP32,
    ELEMENT_INPUT16,
    ELEMENT_UE8M0,
    Field,
    Placement,
    Source,
    TileScale,
    is_fp8_element,
)
from rtp_ref.kv.layout_records import ELEMENT_FP8, MLA_LAYOUTS, UNSCALED, FieldRecord, LayoutRecord
from rtp_ref.kv.layouts import MlaLayout
from rtp_ref.kv.padding import as_negative
from rtp_ref.kv.validate import accepted_slot_dtypes, validate_write_args


class ValueMode(IntEnum):
    """How a value field (nope or rope) is stored; the integer is the kernels' constexpr selector."""

    #: the input's 16-bit bits copied verbatim
    COPY16 = 0
    #: fp8 of ``x / scale`` with the external per-tensor scale
    PER_TENSOR = 1
    #: fp8 of ``x / s_i`` with a scale per tile computed from the tile's amax
    TILED = 2
    #: E2M1 codes of ``x / s_i`` under the tile scale's FP4 conventions (rtp_ref.fp4)
    FP4 = 3
    #: fp8 of ``x`` itself: no scale (an ``unscaled`` field)
    UNSCALED = 4


@dataclass(frozen=True)
class PlanLimits:
    """What a kernel's plan may hold beyond per-token 16-bit and fp8 fields with an external or nope tile scale:
    a tile-scaled rope (its scales beside the nope's, the same tile rule), E2M1 value fields, fp8 values with no
    scale, scales stored in another order than their tiles', a per-token ``zero`` field (padding written as 0), and
    fp8 tile scales formed by reciprocal multiplies (rtp_ref.kv.records.TileRule ``reciprocal_mul``)."""

    tiled_rope: bool = False
    fp4: bool = False
    unscaled: bool = False
    scale_order: bool = False
    zero_pad: bool = False
    reciprocal: bool = False


#: the CUDA C++ kernels and the compiled readers: the nope alone tile-scaled, no E2M1
COMPILED_LIMITS = PlanLimits()
#: the Triton writer: every mode (DeepSeek V4.1's V41 and V41_FP4, FlashMLA's NVFP4 record)
TRITON_LIMITS = PlanLimits(tiled_rope=True, fp4=True, unscaled=True, scale_order=True, zero_pad=True)


@dataclass(frozen=True)
class WritePlan:
    """A layout reduced to what a write kernel needs; built by ``WritePlan.of``.

    Byte offsets: token t of a block starts at ``t * data_bytes`` of the block; its block-trailing
    bytes at ``block_size * data_bytes + t * trailing_bytes``. ``scale_offset`` is within the token's
    data area (``scale_trailing`` False) or within its trailing group (True).
    """

    layout: MlaLayout
    kv_lora_rank: int
    rope_dim: int
    nope_mode: ValueMode
    rope_mode: ValueMode
    nope_offset: int
    rope_offset: int
    data_bytes: int
    trailing_bytes: int
    #: tile-scale parameters (meaningful when nope_mode is TILED; a TILED rope shares them, its scales at
    #: ``rope_scale_offset`` beside the nope's)
    tile: int
    n_tiles: int
    pow2_scale: bool
    divisor: float
    floor: float
    scale_ue8m0: bool
    scale_trailing: bool
    scale_offset: int
    traits: FormatTraits
    #: a TILED or FP4 rope's tile scales where they sit beside the nope's (same element and placement): how many,
    #: and their offset in that area (0 and 0 otherwise: ``rope_beside_nope`` False)
    rope_n_tiles: int = 0
    rope_scale_offset: int = 0
    #: the nope's tile scale when it holds E2M1 codes (its FP4 conventions and non-finite tile policy), else None
    fp4_tile: TileScale | None = None
    #: the nope scale field's stored order (``Field.order``: rows x cols transposed), or None: tile i at element i
    scale_order: tuple[int, int] | None = None
    #: the token's ``zero`` field (padding the writer sets to 0) in its data area: offset and bytes (0: none)
    zero_offset: int = 0
    zero_bytes: int = 0

    @property
    def rope_beside_nope(self) -> bool:
        """Whether a tile-scaled (or FP4) rope's scales sit in the nope's scale area, so that one base address and
        one store pattern serve both (what the Triton writer needs)."""
        return self.rope_n_tiles > 0

    @classmethod
    def of(cls, layout: MlaLayout, limits: PlanLimits = COMPILED_LIMITS) -> WritePlan:
        """The plan of ``layout``; a field table no built-in kernel handles raises UnsupportedLayoutError, and so
        does one outside ``limits`` (what the kernel asking writes; the CUDA C++ kernels' by default): a tile-scaled
        rope or an FP4 value field. Where those modes are allowed the plan names them, and a kernel writing FP4
        reads its fields from ``layout`` (torch-eager)."""
        nope = layout.value_field(Source.KV_C)
        rope = layout.value_field(Source.K_PE)
        nope_mode, nope_scale = _mode_of(layout, nope)
        rope_mode, rope_scale = _mode_of(layout, rope)
        if not limits.tiled_rope and rope_mode is ValueMode.TILED:
            raise UnsupportedLayoutError(
                f"layout {layout.name}: this built-in kernel does not handle tile-scaled rope"
            )
        if not limits.fp4 and ValueMode.FP4 in (nope_mode, rope_mode):
            raise UnsupportedLayoutError(f"layout {layout.name}: this built-in kernel does not write E2M1")
        if not limits.unscaled and ValueMode.UNSCALED in (nope_mode, rope_mode):
            raise UnsupportedLayoutError(f"layout {layout.name}: this built-in kernel does not write unscaled fp8")
        if not limits.scale_order and nope_scale is not None and nope_scale.order is not None:
            raise UnsupportedLayoutError(f"layout {layout.name}: this built-in kernel stores scales in tile order")
        reciprocal = [f.name for f in (nope_scale, rope_scale) if f is not None and f.tile_scale is not None
                      and (f.tile_scale.reciprocal_amax or f.tile_scale.reciprocal_payload)]
        if reciprocal and not limits.reciprocal:
            raise UnsupportedLayoutError(f"layout {layout.name}: this built-in kernel divides; {reciprocal[0]} is "
                                         "computed with reciprocal multiplies")
        zero = _zero_field(layout, limits)
        beside = rope_scale is not None and rope_mode in (ValueMode.TILED, ValueMode.FP4) \
            and _shares_area(nope_mode, rope_mode, nope_scale, rope_scale)
        tile = n_tiles = scale_offset = 0
        pow2 = ue8m0 = trailing = False
        divisor = floor = 1.0
        if nope_scale is not None and nope_scale.tile_scale is not None:
            spec = nope_scale.tile_scale
            tile, n_tiles, scale_offset = spec.tile, nope_scale.count, nope_scale.offset
            pow2 = spec.rule is ScaleRule.POW2_CEIL
            divisor, floor = spec.divisor, spec.floor
            ue8m0 = nope_scale.element == ELEMENT_UE8M0
            trailing = nope_scale.placement is Placement.BLOCK_TRAILING
        return cls(
            layout=layout,
            kv_lora_rank=layout.kv_lora_rank,
            rope_dim=layout.rope_dim,
            nope_mode=nope_mode,
            rope_mode=rope_mode,
            nope_offset=nope.offset,
            rope_offset=rope.offset,
            data_bytes=layout.data_bytes_per_token,
            trailing_bytes=layout.trailing_bytes_per_token,
            tile=tile,
            n_tiles=n_tiles,
            pow2_scale=pow2,
            divisor=divisor,
            floor=floor,
            scale_ue8m0=ue8m0,
            scale_trailing=trailing,
            scale_offset=scale_offset,
            traits=FormatTraits.of(layout.element_format, layout.conversion_mode),
            rope_n_tiles=rope_scale.count if beside and rope_scale else 0,
            rope_scale_offset=rope_scale.offset if beside and rope_scale else 0,
            fp4_tile=nope_scale.tile_scale if nope_mode is ValueMode.FP4 and nope_scale else None,
            scale_order=nope_scale.order if nope_scale else None,
            zero_offset=zero.offset if zero else 0,
            zero_bytes=zero.size if zero else 0,
        )

    def wide_fields_aligned(self, kv_cache: torch.Tensor) -> bool:
        """Whether every 16-bit and fp32 field of every slot is naturally aligned in this cache.

        False (e.g. an odd kv_lora_rank under lora_alignment=round_up, or an odd block stride) makes
        the kernels store those fields byte by byte: a misaligned wide store faults on a GPU.
        """
        # (byte offset within the block of the field for token 0, per-token step, element size)
        wide: list[tuple[int, int, int]] = []
        for mode, offset in ((self.nope_mode, self.nope_offset), (self.rope_mode, self.rope_offset)):
            if mode is ValueMode.COPY16:
                wide.append((offset, self.data_bytes, 2))
        if self.nope_mode is ValueMode.TILED and not self.scale_ue8m0:
            if self.scale_trailing:
                wide.append((kv_cache.shape[1] * self.data_bytes + self.scale_offset, self.trailing_bytes, 4))
            else:
                wide.append((self.scale_offset, self.data_bytes, 4))
        block_bytes = kv_cache.stride(0) * kv_cache.element_size()
        return all(
            (kv_cache.data_ptr() + offset) % size == 0 and step % size == 0 and block_bytes % size == 0
            for offset, step, size in wide
        )


def _shares_area(nope_mode: ValueMode, rope_mode: ValueMode, nope_scale: Field | None, rope_scale: Field) -> bool:
    """Whether a tile-scaled rope's scales sit where the plan's one scale area is: beside the nope's, of the same
    mode, element and placement (so one base address and one store pattern serve both)."""
    return (nope_mode is rope_mode and nope_scale is not None
            and (nope_scale.element, nope_scale.placement) == (rope_scale.element, rope_scale.placement))


def _zero_problem(fields: Collection[Field] | Collection[FieldRecord], limits: PlanLimits) -> str | None:
    """Why a plan under ``limits`` cannot write the ``zero`` fields among ``fields`` (a layout's or its record's),
    or None: a kernel without ``limits.zero_pad`` writes none, the others one, in the token's data area."""
    zeros = [f for f in fields if f.source is Source.ZERO]
    if not zeros:
        return None
    if not limits.zero_pad:
        return "this built-in kernel does not write zero padding"
    if len(zeros) > 1 or zeros[0].placement is not Placement.PER_TOKEN:
        return "the built-in kernels write one zero field, per token"
    return None


def _zero_field(layout: MlaLayout, limits: PlanLimits) -> Field | None:
    """The layout's ``zero`` field (None: it has none); UnsupportedLayoutError where the kernel cannot write it
    (``_zero_problem``)."""
    problem = _zero_problem(layout.fields, limits)
    if problem is not None:
        raise UnsupportedLayoutError(f"layout {layout.name}: {problem}")
    return next((f for f in layout.fields if f.source is Source.ZERO), None)


def block_shift_of(block_size: int) -> int:
    """log2 of a power-of-two ``block_size`` (the kernels then shift instead of dividing), else -1."""
    return block_size.bit_length() - 1 if block_size > 0 and block_size & (block_size - 1) == 0 else -1


def _mode_of(layout: MlaLayout, f: Field) -> tuple[ValueMode, Field | None]:
    if f.placement is not Placement.PER_TOKEN:
        raise UnsupportedLayoutError(f"layout {layout.name}: field {f.name!r} is not stored per token")
    if f.element == ELEMENT_INPUT16:
        return ValueMode.COPY16, None
    if f.element == ELEMENT_E2M1:
        scale = layout.field(f.scale_field or "")
        return ValueMode.FP4, scale
    if f.unscaled:
        return ValueMode.UNSCALED, None
    if not is_fp8_element(f.element):
        raise UnsupportedLayoutError(
            f"layout {layout.name}: field {f.name!r} holds {f.element}, neither fp8 nor 16-bit"
        )
    scale = layout.field(f.scale_field or "")
    if scale.placement is Placement.EXTERNAL:
        return ValueMode.PER_TENSOR, scale
    if scale.tile_scale is None or scale.element not in (ELEMENT_FP32, ELEMENT_UE8M0):
        raise UnsupportedLayoutError(f"layout {layout.name}: scale field {scale.name!r} is not a tile scale")
    return ValueMode.TILED, scale


def compiled_record(record: LayoutRecord, limits: PlanLimits = COMPILED_LIMITS) -> bool:
    """Whether a plan under ``limits`` (``WritePlan.of``) takes layout ``record``, read from its field records:
    every value field per token, 16-bit, fp8 scaled by the external scale or by an fp32 or ue8m0 tile scale of an
    fp8 tile rule that divides, or (under ``limits.fp4``) E2M1 of an FP4 tile rule, one rule for every scale field; a
    tile-scaled rope only under
    ``limits.tiled_rope``, its scales placed as the nope's; a ``zero`` field only under ``limits.zero_pad``, one
    per token."""
    by_name = {f.name: f for f in record.fields}
    if _zero_problem(record.fields, limits) is not None:
        return False
    rules = [r for r in (record.tile_rule, *(f.tile_rule for f in record.fields)) if r is not None]
    if any(f.tile_rule is not None for f in record.fields) or any(
            r.fp4 is None and "reciprocal_mul" in (r.amax_division, r.payload) for r in rules):
        return False  # a scale field with a rule of its own, or reciprocal multiplies: the kernels divide
    for f in record.fields:
        if f.source not in (Source.KV_C, Source.K_PE) or f.element == ELEMENT_INPUT16:
            continue
        if f.scale == UNSCALED and f.placement is Placement.PER_TOKEN and limits.unscaled and is_fp8_record(f):
            continue
        scale = by_name.get(f.scale or "")
        if f.placement is not Placement.PER_TOKEN or scale is None or (scale.order and not limits.scale_order):
            return False
        tiled = scale.placement is not Placement.EXTERNAL
        fp4_rule = record.tile_rule is not None and record.tile_rule.fp4 is not None
        if f.element == ELEMENT_E2M1:
            kind_ok = limits.fp4 and tiled and fp4_rule
        elif is_fp8_record(f):
            kind_ok = not tiled or (record.tile_rule is not None and not fp4_rule
                                    and scale.element in (ELEMENT_FP32, ELEMENT_UE8M0))
        else:
            kind_ok = False
        if not kind_ok or (tiled and f.source is Source.K_PE and not _rope_beside_nope(record, limits, scale)):
            return False
    return True


def is_fp8_record(f: FieldRecord) -> bool:
    """Whether field record ``f`` holds fp8 values: the cache's format (``fp8``) or a named one."""
    return f.element == ELEMENT_FP8 or is_fp8_element(f.element)


def _rope_beside_nope(record: LayoutRecord, limits: PlanLimits, rope_scale: FieldRecord) -> bool:
    """Whether ``limits`` take a tile-scaled rope whose scale field is ``rope_scale``: the nope tile-scaled too, of
    the same element, its scales of the same element and placement."""
    by_name = {f.name: f for f in record.fields}
    nope = next(f for f in record.fields if f.source is Source.KV_C)
    rope = next(f for f in record.fields if f.source is Source.K_PE)
    nope_scale = by_name.get(nope.scale or "")
    return (limits.tiled_rope and nope_scale is not None and nope_scale.placement is not Placement.EXTERNAL
            and nope.element == rope.element
            and (nope_scale.element, nope_scale.placement) == (rope_scale.element, rope_scale.placement))


#: the MLA layouts the CUDA C++ writer and the compiled readers (triton, cuda) claim, in the records' order
COMPILED_LAYOUT_NAMES: tuple[str, ...] = tuple(r.name for r in MLA_LAYOUTS if compiled_record(r))
#: the MLA layouts the Triton writer claims: those, and the ones with a tile-scaled rope or E2M1 values (V41, V41_FP4)
TRITON_LAYOUT_NAMES: tuple[str, ...] = tuple(r.name for r in MLA_LAYOUTS if compiled_record(r, TRITON_LIMITS))


def check_value_inputs(kernel_name: str, kv_c: object, k_pe: object) -> None:
    """RtpRefError unless kv_c and k_pe are 2-dim tensors (their widths then name the layout's dims)."""
    for arg, x in (("kv_c", kv_c), ("k_pe", k_pe)):
        if not isinstance(x, torch.Tensor) or x.dim() != 2:
            shown = list(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise RtpRefError(f"{kernel_name}: {arg}: {shown} is not a 2-dim tensor; valid: [tokens, dim]")


class PlannedKernel(ABC):
    """The call path shared by the compiled kernels (triton, cuda): check the layout and device, check the
    arguments before writing (rtp_ref.kernels.input_flags: metadata on the host, slot values on the device by
    default; a slot_mapping dtype outside a declared ``input_domain`` is refused), reduce the layout to a
    ``WritePlan`` (once per contract, layout and dims), launch.

    With ``validation="device"`` a call makes no device sync and no host work that grows with the tensors,
    so it can be captured in a CUDA graph (``graph_safe``)."""

    name: str
    kv_cache_dtypes: Collection[str]
    devices: Collection[str]
    contract: WriteContract | None
    validation: Validation = "device"
    #: device launches made by this object (the conformance suite's proof that the kernel itself ran)
    launch_count: int = 0
    #: what this kernel's plan may hold (``WritePlan.of``); a kernel writing every per-token field table from its
    #: layout (torch-eager) takes every mode
    plan_limits: PlanLimits = COMPILED_LIMITS

    def _init_call_path(self, validation: str) -> None:
        self.validation = check_validation(validation)
        self.input_flags = InputFlags()
        self._plans: dict[tuple[WriteContract, str, int, int], tuple[WritePlan, str | None]] = {}
        self._device_contracts = DeviceContracts()
        self._launches = LaunchCache()

    @property
    def graph_safe(self) -> bool:
        """Whether a call can be captured in a CUDA graph and replayed with new input values (no host sync)."""
        return self.validation == "device"

    def __call__(self, kv_c: torch.Tensor, k_pe: torch.Tensor, kv_cache: torch.Tensor,
                 slot_mapping: torch.Tensor, kv_cache_dtype: str, scale: torch.Tensor) -> None:
        """Write the tokens (see ``rtp_ref.kernels.protocol``); checks everything it checks before writing (a call
        with the metadata of an earlier checked one reuses its checked launch: rtp_ref.kernels.call_signature)."""
        # the engine's padding convention (rtp_ref.kv.padding): the kernel writes in the negative one
        slot_mapping = as_negative(slot_mapping, self._device_contracts.padding_slot(self.contract, slot_mapping))
        host = self.validation == "host"
        signature = None if host else call_signature(kv_cache_dtype, kv_c, k_pe, kv_cache, slot_mapping, scale)
        launch = self._launches.get(signature)
        if launch is None:
            plan, contract = self._checked(kv_c, k_pe, kv_cache, slot_mapping, kv_cache_dtype, scale, host)
            launch = self._prepare(plan, contract, kv_c, k_pe, kv_cache, slot_mapping, scale,
                                   self.input_flags.word(kv_cache.device))
            self._launches.put(signature, launch)
        launch(kv_c, k_pe, kv_cache, slot_mapping, scale)

    def _checked(self, kv_c: torch.Tensor, k_pe: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
                 kv_cache_dtype: str, scale: torch.Tensor, host: bool) -> tuple[WritePlan, WriteContract]:
        """Check a call (the layout and device claimed, the arguments; the slot values on the host for ``host``)
        and return its plan and contract; raises what the checks raise."""
        check_call(self.name, self.kv_cache_dtypes, self.devices, kv_cache_dtype, kv_cache)
        check_value_inputs(self.name, kv_c, k_pe)
        contract = self.contract or self._device_contracts.of(kv_cache.device)
        plan, limit = self._plan(contract, kv_cache_dtype, kv_c.shape[1], k_pe.shape[1])
        validate_write_args(plan.layout, kv_c, k_pe, kv_cache, slot_mapping, scale, values=host,
                            slot_dtypes=accepted_slot_dtypes(getattr(self, "input_domain", {})))
        if limit:
            raise UnsupportedLayoutError(f"kernel {self.name}: {limit}")
        return plan, contract

    def take_input_errors(self) -> list[str]:
        """What the device-side checks flagged since the last take (one sync per device), and clear it."""
        return self.input_flags.take()

    def _plan(self, contract: WriteContract, kv_cache_dtype: str, kv_lora_rank: int,
              rope_dim: int) -> tuple[WritePlan, str | None]:
        """The plan of a call and this kernel's limit for it, worked out once per key (a layout's build and
        its field table are milliseconds of Python; a decode-size write is microseconds)."""
        key = (contract, kv_cache_dtype, kv_lora_rank, rope_dim)
        found = self._plans.get(key)
        if found is None:
            layout = contract.layout(kv_cache_dtype, kv_lora_rank, rope_dim)
            found = self._plans[key] = (WritePlan.of(layout, self.plan_limits), self.supports(layout))
        return found

    def supports(self, layout: MlaLayout) -> str | None:
        """None when this kernel writes ``layout`` at its dims; else its limit, as a reason (the protocol's
        optional ``supports``: the suite reports such cases as refused). Every layout, by default."""
        return None

    @abstractmethod
    def _prepare(self, plan: WritePlan, contract: WriteContract, kv_c: torch.Tensor, k_pe: torch.Tensor,
                 kv_cache: torch.Tensor, slot_mapping: torch.Tensor, scale: torch.Tensor,
                 flags: torch.Tensor) -> Launch:
        """The launch for checked arguments: everything worked out from their metadata, done once, so that the
        returned ``launch(kv_c, k_pe, kv_cache, slot_mapping, scale)`` only reads the tensors' addresses and
        launches (it counts ``launch_count``); slots at or past the capacity set ``flags``."""
