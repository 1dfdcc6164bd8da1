"""Hypothesis strategies for kernel tests, in one module (as array-api-tests keeps its strategies).

``write_specs()`` draws one ``concat_and_cache_mla`` call: a platform table and layout-flag overrides,
a layout and the dimensions it allows, the input dtype, 0..64 tokens, a block size and block count, a
slot map (distinct slots, negative entries anywhere) and how the values are made. A ``WriteSpec`` is
small and prints readably in a falsifying example; ``WriteSpec.case()`` expands it into tensors (a
seeded generator fills the bulk of the values) and the reference's image of the cache.

Values: each token row has a magnitude class — ``normal`` (a random power-of-two spread), ``zero``
(all +-0: every tile scale falls to the floor), ``subnormal`` (the input dtype's subnormals) or
``huge`` (near the input dtype's maximum: per-tensor fp8 overflows and must saturate) — and some
rows get whole zero 64-value tiles. NaN, -NaN and +-inf go only where the contract defines them: the
per-tensor fp8 fields and the 16-bit fields copied verbatim (``rtp_ref.cases.cases`` does the same).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from hypothesis import strategies as st

from rtp_ref.contract import WriteContract
from rtp_ref.kv.cache import reference_write
from rtp_ref.kv.fields import ELEMENT_INPUT16, Source
from rtp_ref.kv.layout_records import layout_record
from rtp_ref.kv.layouts import MlaLayout
from rtp_ref.platform import MLA_LAYOUT_NAMES, platform_names
from tests.kernels.cases import DTYPES, WriteCase, contract, copy_to

#: input dtypes by name (hypothesis prints the name)
ROW_KINDS = ("normal", "zero", "subnormal", "huge")
#: NaN with the sign bit set is what torch's own float32 -> bfloat16 cast makes of any NaN on the CPU
SPECIALS = ("nan", "-nan", "inf", "-inf")
#: layout-flag overrides a draw may apply: the values the bundled platform tables use, and a cache kept in
#: either e4m3 format whatever the platform's
FLAG_CHOICES = {
    "cache_fp8_format": ("platform", "e4m3fn", "e4m3fnuz"),
    "ds_mla_scale_rule": ("amax_div", "pow2_ceil"),
    "fp8_max_divisor": ("224", "448"),
    "ds_mla_scale_floor": ("1e-4", "1.1754943508222875e-38"),
    "model1_scale_floor": ("1e-4", "1.1754943508222875e-38"),
}


@dataclass(frozen=True)
class ValuePlan:
    """How a call's values are made: a seed for the bulk, and the shape of the interesting parts."""

    seed: int
    #: magnitude class of each token row (kv_c and k_pe alike), see the module doc
    rows: tuple[str, ...]
    #: power-of-two exponent of each ``normal`` row's spread
    exponents: tuple[int, ...]
    #: (row, 64-value tile of kv_c) set to zero
    zero_tiles: tuple[tuple[int, int], ...]
    #: (tensor, row, column, special) placed where the contract defines non-finite values
    specials: tuple[tuple[str, int, int, str], ...]
    #: per-tensor scale as a factor of ``amax / fp8 max`` (1: no overflow; below 1: overflow)
    scale_factor: float


@functools.cache
def _contract(platform: str, overrides: tuple[tuple[str, str], ...]) -> WriteContract:
    return contract(platform, **dict(overrides))


def spec_layout(platform: str, overrides: dict[str, str], layout: str, dims: tuple[int, int]) -> MlaLayout:
    """The reference layout of a call under a platform table's contract with ``overrides``."""
    return _contract(platform, tuple(sorted(overrides.items()))).layout(layout, *dims)


@dataclass(frozen=True)
class WriteSpec:
    """One drawn ``concat_and_cache_mla`` call (see the module doc)."""

    platform: str
    overrides: dict[str, str]
    layout: str
    dims: tuple[int, int]
    dtype: str
    block_size: int
    num_blocks: int
    #: extra rows of each block's storage after ``block_size`` (a padded block stride)
    block_pad: int
    #: rows of kv_c / k_pe after the tokens (vLLM pads them), and the column the slices start at
    extra_rows: int
    column_offset: int
    slots: tuple[int, ...]
    values: ValuePlan

    @property
    def contract(self) -> WriteContract:
        """The contract a kernel is bound to for this call."""
        return _contract(self.platform, tuple(sorted(self.overrides.items())))

    def case(self) -> WriteCase:
        """Tensors on the CPU: strided inputs, a padded canary cache, and the reference's image of it."""
        layout, kv_c, k_pe, cache, slots, scale = self.arguments()
        expected = copy_to(cache, str(cache.device))
        reference_write(layout, kv_c, k_pe, expected, slots, scale)
        return WriteCase(layout, kv_c, k_pe, cache, slots, scale, expected)

    def arguments(self) -> tuple[MlaLayout, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(layout, kv_c, k_pe, kv_cache, slot_mapping, scale) on the CPU, without the reference's write
        (for calls the contract refuses)."""
        layout = spec_layout(self.platform, self.overrides, self.layout, self.dims)
        dtype = DTYPES[self.dtype]
        g = torch.Generator().manual_seed(self.values.seed)
        tokens = len(self.slots)
        rows = tokens + self.extra_rows
        r, p = self.dims
        start = self.column_offset
        kv_c = _rows(g, self.values, rows, start + r + 3, dtype)[:, start:start + r]
        k_pe = _rows(g, self.values, rows, start + p, dtype)[:, start:]
        for row, tile in self.values.zero_tiles:
            kv_c[row, 64 * tile:64 * (tile + 1)] = 0
        for name, row, column, special in self.values.specials:
            (kv_c if name == "kv_c" else k_pe)[row, column] = _special(special, dtype)
        raw = torch.randint(0, 256, (self.num_blocks, self.block_size + self.block_pad, layout.bytes_per_token),
                            generator=g, dtype=torch.uint8)
        cache = raw.view(layout.cache_dtype(dtype))[:, :self.block_size]
        scale = _scale(layout, kv_c[:tokens], k_pe[:tokens], self.values.scale_factor)
        return layout, kv_c, k_pe, cache, torch.tensor(self.slots, dtype=torch.int64), scale


def _rows(g: torch.Generator, values: ValuePlan, rows: int, width: int, dtype: torch.dtype) -> torch.Tensor:
    """``rows`` rows of values, each by its magnitude class (rows past the plan's are ``normal``)."""
    finfo = torch.finfo(dtype)
    x = torch.randn(rows, width, generator=g)
    for i in range(rows):
        kind = values.rows[i] if i < len(values.rows) else "normal"
        if kind == "normal":
            x[i] *= 2.0 ** values.exponents[i % len(values.exponents)]
        elif kind == "zero":
            x[i] = torch.where(x[i] < 0, -0.0, 0.0)
        elif kind == "subnormal":
            x[i] = x[i].clamp(-4, 4) / 4 * finfo.smallest_normal
        else:
            x[i] = x[i].clamp(-4, 4) / 4 * finfo.max
    return x.to(dtype)


#: bit patterns of the specials: built from bits, because torch's own casts do not keep a NaN's sign
_SPECIAL_BITS = {
    torch.bfloat16: {"nan": 0x7FC0, "-nan": 0xFFC0, "inf": 0x7F80, "-inf": 0xFF80},
    torch.float16: {"nan": 0x7E00, "-nan": 0xFE00, "inf": 0x7C00, "-inf": 0xFC00},
}


def _special(name: str, dtype: torch.dtype) -> torch.Tensor:
    bits = _SPECIAL_BITS[dtype][name]
    return torch.tensor([bits - (1 << 16) if bits >= 1 << 15 else bits], dtype=torch.int16).view(dtype)[0]


def _scale(layout: MlaLayout, kv_c: torch.Tensor, k_pe: torch.Tensor, factor: float) -> torch.Tensor:
    """The per-tensor scale: ``factor * amax / fp8 max`` over the finite inputs (1.0 when that is 0)."""
    values = torch.cat([kv_c.float().flatten(), k_pe.float().flatten()])
    finite = values[values.isfinite()]
    amax = float(finite.abs().max()) if finite.numel() else 0.0
    scale = factor * amax / layout.element_format.max_value
    return torch.tensor([scale if 0 < scale < float("inf") else 1.0], dtype=torch.float32)


def _special_columns(layout: MlaLayout) -> dict[str, int]:
    """Per input tensor, how many columns may hold NaN/inf: those of per-tensor fp8 or 16-bit fields."""
    out = {}
    for name, source in (("kv_c", Source.KV_C), ("k_pe", Source.K_PE)):
        f = layout.value_field(source)
        scale = layout.field(f.scale_field) if f.scale_field else None
        if f.element == ELEMENT_INPUT16 or (scale is not None and scale.tile_scale is None):
            out[name] = f.count
    return out


def layout_dims(layout: str, lora_alignment: str, max_dim: int) -> st.SearchStrategy[tuple[int, int]]:
    """(kv_lora_rank, rope_dim) pairs ``layout`` accepts, from its record: only its dims when they are fixed
    (fp8_model1_mla's 448/64); multiples of its scale tile under ``lora_alignment=strict`` when it has one
    (fp8_ds_mla's 128); any rank otherwise. Rope dims up to max_dim / 4."""
    record = layout_record(layout)
    rope = st.integers(1, max(1, max_dim // 4))
    if record.fixed_dims:
        return st.just(record.default_dims)
    if record.tile_rule is not None and lora_alignment == "strict":
        tile = record.tile_rule.tile
        return st.tuples(st.sampled_from([tile * k for k in range(1, max(1, max_dim // tile) + 1)]), rope)
    return st.tuples(st.integers(1, max_dim), rope)


@st.composite
def slot_maps(draw: st.DrawFn, tokens: int, capacity: int, duplicate: bool = False) -> tuple[int, ...]:
    """``tokens`` slots of a ``capacity``-slot cache: distinct slots and negative ones (write nothing),
    in any order. With ``duplicate`` (``tokens >= 2``) one written slot appears twice."""
    extra = int(duplicate)
    written = draw(st.integers(extra, min(tokens - extra, capacity)))
    slots = draw(st.lists(st.integers(0, capacity - 1), min_size=written, max_size=written, unique=True))
    skipped = draw(st.lists(st.one_of(st.just(-1), st.integers(-(2**63), -1)), min_size=tokens - written - extra,
                            max_size=tokens - written - extra))
    repeated = [draw(st.sampled_from(slots))] if duplicate else []
    return tuple(draw(st.permutations(slots + skipped + repeated)))


@st.composite
def value_plans(draw: st.DrawFn, tokens: int, layout: MlaLayout, row_kinds: tuple[str, ...] = ROW_KINDS
                ) -> ValuePlan:
    """How the values of ``tokens`` token rows are made (see ``ValuePlan``); rows of ``row_kinds``."""
    rows = tuple(draw(st.lists(st.sampled_from(row_kinds), min_size=tokens, max_size=tokens)))
    exponents = tuple(draw(st.lists(st.integers(-12, 12), min_size=1, max_size=4)))
    zero_tiles: tuple[tuple[int, int], ...] = ()
    specials: tuple[tuple[str, int, int, str], ...] = ()
    columns = _special_columns(layout)
    if tokens:
        tiles = st.integers(0, -(-layout.kv_lora_rank // 64) - 1)
        zero_tiles = tuple(draw(st.lists(st.tuples(st.integers(0, tokens - 1), tiles), max_size=3)))
    if tokens and columns:
        special = st.sampled_from(sorted(columns)).flatmap(lambda name: st.tuples(
            st.just(name), st.integers(0, tokens - 1), st.integers(0, columns[name] - 1), st.sampled_from(SPECIALS)))
        specials = tuple(draw(st.lists(special, max_size=4)))
    return ValuePlan(draw(st.integers(0, 2**32 - 1)), rows, exponents, zero_tiles, specials,
                     draw(st.sampled_from([1.0, 0.5, 2.0**-6, 3.0])))


@st.composite
def write_specs(draw: st.DrawFn, *, layouts: tuple[str, ...] = MLA_LAYOUT_NAMES, max_tokens: int = 64,
                max_dim: int = 320, duplicate: bool = False, bf16_subnormals: bool = True) -> WriteSpec:
    """One ``concat_and_cache_mla`` call (``WriteSpec``) on any bundled platform table.

    ``layouts``, ``max_tokens`` and ``max_dim`` (largest kv_lora_rank, where the layout allows a choice)
    narrow the draw; ``duplicate`` makes the slot map hold one slot twice (a call the contract refuses);
    ``bf16_subnormals=False`` leaves out subnormal rows of bf16 inputs.
    """
    platform = draw(st.sampled_from(platform_names()))
    layout = draw(st.sampled_from(layouts))
    overrides = draw(st.fixed_dictionaries({}, optional={k: st.sampled_from(v) for k, v in FLAG_CHOICES.items()}))
    lora_alignment = draw(st.sampled_from(["strict", "round_up"]))
    if lora_alignment == "round_up":
        overrides = {**overrides, "lora_alignment": "round_up"}
    dims = draw(layout_dims(layout, lora_alignment, max_dim))
    block_size = draw(st.one_of(st.integers(1, 16), st.just(64)))
    num_blocks = draw(st.integers(1, 6))
    tokens = draw(st.integers(2 if duplicate else 0, max(max_tokens, 2)))
    slots = draw(slot_maps(tokens, block_size * num_blocks, duplicate))
    dtype = draw(st.sampled_from(list(DTYPES)))
    kinds = ROW_KINDS if bf16_subnormals or dtype != "bf16" else tuple(k for k in ROW_KINDS if k != "subnormal")
    values = draw(value_plans(tokens, spec_layout(platform, overrides, layout, dims), kinds))
    return WriteSpec(platform, overrides, layout, dims, dtype, block_size, num_blocks,
                     block_pad=draw(st.integers(0, 1)), extra_rows=draw(st.integers(0, 3)),
                     column_offset=draw(st.integers(0, 8)), slots=slots, values=values)
