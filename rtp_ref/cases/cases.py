"""Conformance cases: the inputs and the canary-filled cache a kernel is run on.

A case's cache is a view into a larger byte buffer ("storage"): guard bytes before and after it,
and optionally one padding row per block (FlashMLA's tests allocate ``block_size + 1`` rows and
slice the last off), so any stray write — past the cache, into a padding row, between entries —
lands in bytes the grader compares.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from rtp_ref.cases.non_finite_cases import NON_FINITE_KINDS, with_class
from rtp_ref.cases.padding_cases import NAN_PADDING_KIND, engine_slots, input_rows, padding_rows, poison
from rtp_ref.kv.fields import Source
from rtp_ref.kv.layouts import MlaLayout
from rtp_ref.kv.padding import NEGATIVE, first_real_slot, reserved_slot
from rtp_ref.kv.validate import SLOT_DTYPES

GUARD_BYTES = 256
CANARY = 0xA5
#: a second canary, so a byte that the kernel happens to write with CANARY's value still shows up
ALT_CANARY = 0x5A
#: the input dtypes of the cases, by the names case ids use
DTYPE_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16"}
#: the kind of the write cases that call ``auto`` with a cache of the other 16-bit dtype (rtp_ref.cases.invalid_calls)
MISMATCHED_CACHE_KIND = "mismatched_cache"

# The kinds of case (``rtp_ref.platform.CASE_KINDS``) are described in docs/conformance.md.


@dataclass(frozen=True)
class CaseSpec:
    """One conformance case: which layout and shapes, and how inputs are drawn (``seed``). ``slot_dtype``: the
    slot mapping's dtype (``int32`` names the same slots as ``int64``); ``scale``: the MLA write's scale as ``[1]``
    (``tensor``) or 0-D (``0d``)."""

    layout: str
    kind: str
    tokens: int
    block_size: int
    num_blocks: int
    input_dtype: torch.dtype
    seed: int
    slot_dtype: str = "int64"
    scale: str = "tensor"

    @property
    def case_id(self) -> str:
        """Readable id used in test names: ``random-t37-b16-bf16``, with ``-i32`` for an int32 slot mapping and
        ``-0d`` for a 0-D scale."""
        return (f"{self.kind}-t{self.tokens}-b{self.block_size}-{DTYPE_NAMES[self.input_dtype]}"
                f"{'-i32' if self.slot_dtype == 'int32' else ''}{'-0d' if self.scale == '0d' else ''}")

    @property
    def cache_input_dtype(self) -> torch.dtype:
        """The 16-bit dtype the cache is made for: the inputs', or the other one for ``MISMATCHED_CACHE_KIND``."""
        if self.kind != MISMATCHED_CACHE_KIND:
            return self.input_dtype
        return torch.float16 if self.input_dtype == torch.bfloat16 else torch.bfloat16


@dataclass
class CaseInputs:
    """The kernel's arguments (on the test device) and the storage the cache is a view of."""

    kv_c: torch.Tensor
    k_pe: torch.Tensor
    slot_mapping: torch.Tensor
    scale: torch.Tensor
    storage: torch.Tensor
    kv_cache: torch.Tensor
    padded_rows: int
    #: the slot mapping the kernel is given where it is not ``slot_mapping`` (the graded one, padding as -1): the
    #: engine's padding sentinel in its place (rtp_ref.cases.padding_cases.engine_slots); None: the same tensor
    engine_slot_mapping: torch.Tensor | None = None
    #: the engine's reserved padding slot (rtp_ref.kv.padding.reserved_slot), named in failure examples
    reserved_slot: int | None = None

    @property
    def call_slots(self) -> torch.Tensor:
        """The slot mapping the kernel is called with."""
        return self.slot_mapping if self.engine_slot_mapping is None else self.engine_slot_mapping


def _values(g: torch.Generator, rows: int, width: int, dtype: torch.dtype) -> torch.Tensor:
    """Normal values with a per-row magnitude spread of 2^-6..2^6 (tile amaxes differ a lot)."""
    x = torch.randn(rows, width, generator=g)
    spread = torch.exp2(torch.randint(-6, 7, (rows, 1), generator=g).to(torch.float32))
    return (x * spread).to(dtype)


#: float32 values after a 0-D scale in its buffer, each 4x the one before: a kernel that reads a 0-D scale as an array
#: (one value per head, say) reads these instead of the scale, and its values come out 4x, 16x ... too small
ZERO_DIM_TAIL = 16


def scale_tensor(value: float, form: str, device: torch.device | str) -> torch.Tensor:
    """The float32 scale ``value`` on ``device`` in ``form``: ``tensor`` (shape [1]) or ``0d`` (shape [], as vLLM's
    attention layer holds its scales), a 0-D view of the first element of a buffer whose next ``ZERO_DIM_TAIL``
    elements hold other scales, so that a kernel reading past it reads wrong values rather than free memory."""
    if form == "tensor":
        return torch.tensor([value], dtype=torch.float32, device=device)
    tail = torch.tensor(value, dtype=torch.float32).double() * 4.0 ** torch.arange(ZERO_DIM_TAIL + 1)
    return tail.to(torch.float32).to(device)[0]


def slot_tensor(slots: torch.Tensor, slot_dtype: str, device: torch.device | str) -> torch.Tensor:
    """The slot values ``slots`` as the ``slot_dtype`` (``int32``, ``int64``) slot mapping a kernel gets on
    ``device``: the same slots either way."""
    return slots.to(SLOT_DTYPES[slot_dtype]).to(device)


#: edge cases put their special rows (0-3 below) first: those tokens are always written
EDGE_ROWS = 4


def _edge_values(x: torch.Tensor, layout: MlaLayout, scale: float, source: Source) -> torch.Tensor:
    """Overwrite parts of ``x`` with the edge values the layout's contract defines."""
    if x.shape[0] == 0:
        return x
    finfo = torch.finfo(x.dtype)
    x = x.clone()
    x[0] = 0.0  # an all-zero row: zero tiles must get the floor scale, never NaN
    if x.shape[0] > 1:
        x[1, : x.shape[1] // 2] = -0.0
        x[1, x.shape[1] // 2:] = finfo.smallest_normal / 4  # input-dtype subnormals
    f = layout.value_field(source)
    scale_field = layout.field(f.scale_field) if f.scale_field else None
    # an unscaled fp8 field is converted as it is: its edge values are a per-tensor field's at scale 1
    per_tensor = (scale_field is not None and scale_field.tile_scale is None) or f.unscaled
    scale = 1.0 if f.unscaled else scale
    if per_tensor and x.shape[0] > 2:
        fp8_max = layout.element_format.max_value
        row = torch.linspace(-4 * fp8_max * scale, 4 * fp8_max * scale, x.shape[1])
        x[2] = row.clamp(finfo.min, finfo.max).to(x.dtype)  # beyond +-max after / scale: saturation
    if (per_tensor or f.element == "bf16/fp16") and x.shape[0] > 3:
        x[3, 1], x[3, 2] = float("inf"), float("-inf")
        # NaN of both signs, set by bits: assigning float("nan") gives whichever sign torch's cast picks
        bits = x.view(torch.int16)
        quiet = 0x7FC0 if x.dtype == torch.bfloat16 else 0x7E00
        bits[3, 0], bits[3, 3] = quiet, (quiet | 0x8000) - 0x10000  # +NaN; -NaN (sign bit set) as an int16
    return x


def _slots(g: torch.Generator, spec: CaseSpec, first: int = 0) -> torch.Tensor:
    """Distinct slots from ``first`` (the engine's first real slot: rtp_ref.kv.padding), about a fifth of them -1
    (padding) from three tokens on; ``edge``: the edge rows written; ``nan_padding``: token 0 real, token 1 padding."""
    capacity = spec.num_blocks * spec.block_size
    slots = (torch.randperm(capacity - first, generator=g)[: spec.tokens] + first).to(torch.int64)
    if spec.kind == "padding_only":
        return torch.full((spec.tokens,), -1, dtype=torch.int64)
    if spec.tokens > 2:
        padding = torch.rand(spec.tokens, generator=g) < 0.2
        if spec.kind == "edge" or spec.kind in NON_FINITE_KINDS:
            padding[:EDGE_ROWS] = False
        if spec.kind == NAN_PADDING_KIND:
            padding[0], padding[1] = False, True
        slots[padding] = -1
    return slots


def _calibrated_scale(g: torch.Generator, kv_c: torch.Tensor, k_pe: torch.Tensor, fp8_max: float) -> float:
    """A per-tensor scale as a serving stack calibrates it: amax / fp8_max, times 1..2 for headroom,
    so random cases stay in range (the edge case tests overflow on purpose)."""
    amax = max([float(t.float().abs().max()) for t in (kv_c, k_pe) if t.numel()] + [1.0])
    return amax / fp8_max * (1.0 + float(torch.rand(1, generator=g)))


def num_blocks_for(tokens: int, block_size: int) -> int:
    """Enough blocks that random slots leave most of the cache untouched (strays stay visible)."""
    return max(2, math.ceil(2 * max(tokens, 1) / block_size))


#: the width of the fused projection ``fused`` cases slice: DeepSeek's q_lora_rank (1536) before kv_c and k_pe,
#: as in a fused ``qkv_a_proj`` output ``[T, 1536 + R + P]`` split into q, kv_c and k_pe views
FUSED_Q_WIDTH = 1536


def _strided_inputs(spec: CaseSpec, g: torch.Generator, r: int, p: int,
                    device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    """kv_c and k_pe as production hands them to a kernel, built ON ``device`` (values drawn on the CPU, so a
    case is the same everywhere): a slice made on the CPU and then copied would arrive contiguous.

    ``noncontig``: row strides of 3R and 3P + 5 elements, k_pe starting 5 elements in (10 bytes: no vector
    alignment); ``fused``: both views of one projection output ``[T, 1536 + R + P]`` (16-byte aligned,
    strided); ``elem_aligned``: a contiguous kv_c and a k_pe aligned to its element only (2 bytes: start 1
    element in, row stride P + 1); every other kind: contiguous.
    """
    t, dtype = input_rows(spec.kind, spec.tokens), spec.input_dtype
    if spec.kind == "fused":
        out = _values(g, t, FUSED_Q_WIDTH + r + p, dtype).to(device)
        return out[:, FUSED_Q_WIDTH: FUSED_Q_WIDTH + r], out[:, FUSED_Q_WIDTH + r:]
    if spec.kind == "noncontig":
        kv_c_wide = _values(g, t, 3 * r, dtype).to(device)
        k_pe_wide = _values(g, t, 3 * p + 5, dtype).to(device)
        return kv_c_wide[:, r: 2 * r], k_pe_wide[:, 5: 5 + p]
    kv_c = _values(g, t, r, dtype).to(device)
    if spec.kind == "elem_aligned":
        return kv_c, _values(g, t, p + 1, dtype).to(device)[:, 1:]
    return kv_c, _values(g, t, p, dtype).to(device)


#: case kinds whose inputs must not be contiguous (the suite checks they are not, before calling the kernel)
STRIDED_KINDS = ("noncontig", "fused", "elem_aligned")


def build_case(spec: CaseSpec, layout: MlaLayout, device: torch.device | str, trailing_guard: int = GUARD_BYTES,
               padding_slot: str = NEGATIVE) -> CaseInputs:
    """Inputs and a canary-filled cache for ``spec`` on ``device``; identical for identical specs (seeded on
    the CPU); strided kinds are strided on the device itself; the slot mapping of the spec's dtype, the scale of its
    form, the cache made for the other input dtype in a ``MISMATCHED_CACHE_KIND`` case. ``trailing_guard``: bytes
    after the cache; ``padding_slot``: the engine's padding convention (rtp_ref.kv.padding: real slots from its
    first, a ``nan_padding`` case's padding given as its sentinel)."""
    g = torch.Generator().manual_seed(spec.seed)
    r, p = layout.kv_lora_rank, layout.rope_dim
    kv_c, k_pe = _strided_inputs(spec, g, r, p, device)
    if spec.kind == "edge":
        scale_value = float(torch.exp2(torch.randint(-4, 2, (1,), generator=g).float()).item()) * 1.25
        kv_c = _edge_values(kv_c.cpu(), layout, scale_value, Source.KV_C).to(device)
        k_pe = _edge_values(k_pe.cpu(), layout, scale_value, Source.K_PE).to(device)
    else:
        scale_value = _calibrated_scale(g, kv_c, k_pe, layout.element_format.max_value)
    padded_rows = 1 if spec.kind == "padded" else 0
    storage, kv_cache = make_cache(layout, spec.num_blocks, spec.block_size, spec.cache_input_dtype, padded_rows,
                                   device, trailing_guard=trailing_guard)
    slots = _slots(g, spec, first_real_slot(padding_slot))
    if spec.kind == NAN_PADDING_KIND:  # after the scale was calibrated on the values
        for x in (kv_c, k_pe):
            poison(x, padding_rows(slots, x.shape[0]))
    if spec.kind in NON_FINITE_KINDS:  # the same
        for x in (kv_c, k_pe):
            with_class(x, spec.kind)
    engine = engine_slots(spec.kind, slots, padding_slot)
    return CaseInputs(
        kv_c=kv_c,
        k_pe=k_pe,
        slot_mapping=slot_tensor(slots, spec.slot_dtype, device),
        scale=scale_tensor(scale_value, spec.scale, device),
        storage=storage,
        kv_cache=kv_cache,
        padded_rows=padded_rows,
        engine_slot_mapping=None if engine is None else slot_tensor(engine, spec.slot_dtype, device),
        reserved_slot=reserved_slot(padding_slot),
    )


def make_cache(layout: MlaLayout, num_blocks: int, block_size: int, input_dtype: torch.dtype, padded_rows: int,
               device: torch.device | str, canary: int = CANARY, trailing_guard: int = GUARD_BYTES
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """A canary-filled byte storage with guard zones (``GUARD_BYTES`` before the cache, ``trailing_guard``
    after it), and the ``kv_cache`` view the kernel gets.

    The view has the layout's cache shape and dtype; its block stride covers ``block_size +
    padded_rows`` rows.
    """
    entry_bytes = layout.bytes_per_token
    block_bytes = (block_size + padded_rows) * entry_bytes
    size = GUARD_BYTES + num_blocks * block_bytes + trailing_guard
    storage = torch.full((size,), canary, dtype=torch.uint8, device=device)
    return storage, cache_view(layout, storage, num_blocks, block_size, input_dtype, padded_rows)


def cache_view(layout: MlaLayout, storage: torch.Tensor, num_blocks: int, block_size: int,
               input_dtype: torch.dtype, padded_rows: int) -> torch.Tensor:
    """The ``kv_cache`` tensor over ``storage`` (see ``make_cache``); reusable on a copy of the storage."""
    rows = block_size + padded_rows
    inner = storage[GUARD_BYTES: GUARD_BYTES + num_blocks * rows * layout.bytes_per_token]
    return inner.view(layout.cache_dtype(input_dtype)).view(num_blocks, rows, layout.cache_entry)[:, :block_size, :]
