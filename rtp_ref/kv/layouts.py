"""Every MLA KV-cache layout as data: a field table from which every byte count is derived.

Sources for each table: docs/sources.md#mla-layouts-and-their-byte-maps (vLLM ``concat_and_cache_mla`` /
``concat_and_cache_ds_mla_kernel``, FlashMLA ``tests/quant.py``, rtp-llm ``mla_quant_kernel.cu`` and
``MLAKVCacheSpec.h``, AITER ``mla_decode_fwd``). A layout is built for one ``kv_lora_rank`` R and
rope dim P with the platform's fp8 element format and the layout flags; nothing depends on the
machine, so every layout can be built and exercised anywhere.

Cache tensor contract (all layouts): ``kv_cache`` is ``[num_blocks, block_size, entry]`` with
``stride(2) == 1`` and ``stride(1) == entry``; ``stride(0)`` may exceed ``block_size * entry`` (padded
blocks). ``entry`` is ``R + P`` elements of the input dtype for ``auto`` and ``bytes_per_token`` uint8
for the fp8 layouts. For ``fp8_model1_mla`` the ``[block_size, entry]`` rows are a view of the block's
bytes, not one token each: token t's data sits at ``t * 576`` and its 8 scale bytes at
``block_size * 576 + t * 8`` (rtp-llm's kernel takes exactly this tensor; FlashMLA views the same bytes
as ``[num_blocks, block_size, 1, 584]``). A page-segmented layout (``Placement.PAGE_SEGMENT``: AITER's DeepSeek
V3.2 cache) is viewed the same way: each field's segment holds that field for every token of the block
(``MlaLayout.page_map``).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from rtp_ref.errors import RtpRefError
from rtp_ref.fp4.e2m1 import E2M1_MAX, NegativeZero
from rtp_ref.fp4.quantize import Fp4Conventions, PayloadDivision
from rtp_ref.fp4.scales import AmaxDivision, ScaleElement, ScaleRounding, ScaleTraits
from rtp_ref.fp8.formats import ConversionMode, Fp8Format
from rtp_ref.fp8.scales import ScaleRule
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
    value_bits,
)
from rtp_ref.kv.flags import FLAG_SPECS, LayoutFlags, LoraAlignment, resolve_flags
from rtp_ref.kv.layout_records import MLA_LAYOUTS, FieldRecord, LayoutRecord, TileRule, layout_record
from rtp_ref.kv.non_finite import NonFinitePolicy
from rtp_ref.kv.place_fields import place_fields
from rtp_ref.kv.records import NON_FINITE_TILES

if TYPE_CHECKING:
    from collections.abc import Mapping

    from rtp_ref.kv.platform_table import PlatformTable

@dataclass(frozen=True)
class MlaLayout:
    """One MLA layout built for ``kv_lora_rank`` R and ``rope_dim`` P; every size is derived from ``fields``.

    Invariants checked on construction (a table breaking one raises RtpRefError): field names are
    unique; per-token fields and block-trailing fields each tile their area from byte 0 without gap
    or overlap, sizes whole elements; exactly one kv_c field of R values and one k_pe field of P
    values; every fp8 value field names a declared scale field (inline, block-trailing or external);
    every computed scale field covers exactly one value field with ceil(count / tile) scales; every E2M1
    value field names a computed scale field with FP4 conventions, in the element those conventions state.
    """

    name: str
    kv_lora_rank: int
    rope_dim: int
    fields: tuple[Field, ...]
    element_format: Fp8Format
    conversion_mode: ConversionMode
    flags: LayoutFlags
    summary: str
    #: whether ``k + v == block`` holds for this layout, and why (a sentence stating it)
    kv_split: str
    sources: str
    #: what the writer makes of NaN, +-inf and an all-zero tile, as the sources state it (the record's; None: the
    #: layout has no computed scale)
    non_finite: NonFinitePolicy | None = None

    def __post_init__(self) -> None:
        _check_fields(self)

    # ---- field access --------------------------------------------------------------------------------
    def field(self, name: str) -> Field:
        """The field called ``name``."""
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"layout {self.name} has no field {name!r}; fields: {', '.join(f.name for f in self.fields)}")

    def value_field(self, source: Source) -> Field:
        """The field holding the kv_c (``Source.KV_C``) or k_pe (``Source.K_PE``) values."""
        return next(f for f in self.fields if f.source is source)

    def stores_non_finite(self, source: Source) -> bool:
        """Whether the reference writer defines bytes for NaN and +-inf among ``source``'s values: every field but an
        E2M1 one whose tile rule leaves a tile holding them undefined (``rtp_ref.kv.entries`` raises there) and an
        fp8 one whose tile rule multiplies by reciprocals (b12x's rope: its writer drops a NaN from the amax and
        states nothing of the rest, so the record's policy leaves them undefined)."""
        f = self.value_field(source)
        spec = self.field(f.scale_field).tile_scale if f.scale_field else None
        if spec is None:
            return True
        if spec.fp4 is None:
            return not spec.reciprocal_payload
        return spec.non_finite_tile != "undefined"

    def placed(self, placement: Placement) -> tuple[Field, ...]:
        """Fields with this placement, by offset."""
        return tuple(sorted((f for f in self.fields if f.placement is placement), key=lambda f: f.offset))

    @property
    def entry_fields(self) -> tuple[Field, ...]:
        """The fields stored in the cache, in entry order: per-token fields, then block-trailing ones, then
        page segments."""
        return tuple(f for placement in _IN_CACHE for f in self.placed(placement))

    def entry_offset(self, f: Field) -> int:
        """Byte of field ``f`` within a token's entry (per-token bytes first, then its trailing bytes, then its
        bytes of each page segment)."""
        if f.placement is Placement.EXTERNAL:
            raise ValueError(f"field {f.name!r} is external: it has no bytes in the cache")
        before = {Placement.PER_TOKEN: 0, Placement.BLOCK_TRAILING: self.data_bytes_per_token,
                  Placement.PAGE_SEGMENT: self.data_bytes_per_token + self.trailing_bytes_per_token}
        return before[f.placement] + f.offset

    def page_map(self, block_size: int) -> tuple[PagePosition, ...]:
        """Where each cache field of token t sits in its block of ``block_size`` tokens: at
        ``start + t * per_token`` (per-token fields: start = offset, step = the token's data bytes; block-trailing:
        after every token's data; a page segment: after every earlier area, step = its own size)."""
        data, trailing = self.data_bytes_per_token, self.trailing_bytes_per_token
        positions = []
        for f in self.entry_fields:
            if f.placement is Placement.PER_TOKEN:
                start, step = f.offset, data
            elif f.placement is Placement.BLOCK_TRAILING:
                start, step = block_size * data + f.offset, trailing
            else:
                start, step = block_size * self.entry_offset(f), f.size
            positions.append(PagePosition(f, start, step))
        return tuple(positions)

    @property
    def external_scale(self) -> Field | None:
        """The external per-tensor scale field, when the layout uses the ``scale`` argument."""
        return next((f for f in self.fields if f.placement is Placement.EXTERNAL), None)

    # ---- derived sizes -------------------------------------------------------------------------------
    def _bytes(self, placements: tuple[Placement, ...], sources: tuple[Source, ...]) -> int:
        return sum(f.size for f in self.fields if f.placement in placements and f.source in sources)

    @property
    def data_bytes_per_token(self) -> int:
        """Bytes of a token's per-token area (its entry stride inside the block)."""
        return self._bytes((Placement.PER_TOKEN,), tuple(Source))

    @property
    def trailing_bytes_per_token(self) -> int:
        """Bytes a token owns in the block-trailing area (0 unless the layout has one)."""
        return self._bytes((Placement.BLOCK_TRAILING,), tuple(Source))

    @property
    def segment_bytes_per_token(self) -> int:
        """Bytes a token owns in the page segments (0 unless the layout has any)."""
        return self._bytes((Placement.PAGE_SEGMENT,), tuple(Source))

    @property
    def bytes_per_token(self) -> int:
        """Cache bytes per token: per-token, block-trailing and page-segment bytes."""
        return self.data_bytes_per_token + self.trailing_bytes_per_token + self.segment_bytes_per_token

    def bytes_per_block(self, block_size: int) -> int:
        """Cache bytes of a block of ``block_size`` tokens, unpadded."""
        return block_size * self.bytes_per_token

    @property
    def k_bytes_per_token(self) -> int:
        """Cache bytes of the latent (kv_c) values: the k partition."""
        return self._bytes(_IN_CACHE, (Source.KV_C,))

    @property
    def v_bytes_per_token(self) -> int:
        """Cache bytes of the rope (k_pe) values: the v partition."""
        return self._bytes(_IN_CACHE, (Source.K_PE,))

    @property
    def scale_bytes_per_token(self) -> int:
        """Cache bytes of inline and block-trailing scales (an external scale takes none)."""
        return self._bytes(_IN_CACHE, (Source.SCALE,))

    @property
    def pad_bytes_per_token(self) -> int:
        """Cache bytes that are padding: never read; never written, or written as 0 (a ``zero`` field)."""
        return self._bytes(_IN_CACHE, (Source.PAD, Source.ZERO))

    @property
    def written_bytes_per_token(self) -> int:
        """Cache bytes a writer stores per token: all but the padding it never writes."""
        return self.bytes_per_token - self._bytes(_IN_CACHE, (Source.PAD,))

    @property
    def k_plus_v_equals_block(self) -> bool:
        """Whether the k and v partitions cover the whole block (no scale or pad bytes inside it)."""
        return self.k_bytes_per_token + self.v_bytes_per_token == self.bytes_per_token

    # ---- the cache tensor ----------------------------------------------------------------------------
    @property
    def stores_input_dtype(self) -> bool:
        """True when the cache holds the inputs' 16-bit type itself (``auto``) rather than bytes."""
        return all(f.element == ELEMENT_INPUT16 for f in self.entry_fields)

    def cache_dtype(self, input_dtype: torch.dtype) -> torch.dtype:
        """dtype of the cache tensor: the input dtype for ``auto``, uint8 for the fp8 layouts."""
        return input_dtype if self.stores_input_dtype else torch.uint8

    @property
    def cache_entry(self) -> int:
        """Size of the cache tensor's last dimension, in its own elements."""
        return self.bytes_per_token // (2 if self.stores_input_dtype else 1)

    def cache_shape(self, num_blocks: int, block_size: int) -> tuple[int, int, int]:
        """Shape of the cache tensor: ``(num_blocks, block_size, cache_entry)``."""
        return (num_blocks, block_size, self.cache_entry)


@dataclass(frozen=True)
class PagePosition:
    """Where a cache field sits in a block: token t's bytes of ``field`` start at ``start + t * per_token``."""

    field: Field
    start: int
    per_token: int


_IN_CACHE = (Placement.PER_TOKEN, Placement.BLOCK_TRAILING, Placement.PAGE_SEGMENT)


def _check_fields(layout: MlaLayout) -> None:
    where = f"layout {layout.name}"
    names = [f.name for f in layout.fields]
    if len(set(names)) != len(names):
        raise RtpRefError(f"{where}: field names repeat: {names}")
    for f in layout.fields:
        if f.size <= 0 or 8 * f.size % value_bits(f.element) != 0:
            raise RtpRefError(f"{where}: field {f.name!r} has {f.size} bytes, not a whole number of {f.element}")
    for placement in _IN_CACHE:
        end = 0
        for f in layout.placed(placement):
            if f.offset != end:
                raise RtpRefError(
                    f"{where}: {placement.value} field {f.name!r} starts at byte {f.offset}, "
                    f"expected {end} (fields must tile the area without gap or overlap)"
                )
            end = f.end
    for source, count in ((Source.KV_C, layout.kv_lora_rank), (Source.K_PE, layout.rope_dim)):
        held = [f for f in layout.fields if f.source is source]
        if len(held) != 1 or held[0].count != count:
            raise RtpRefError(f"{where}: needs exactly one {source.value} field of {count} values")
    by_name = {f.name: f for f in layout.fields}
    for f in layout.fields:
        if is_fp8_element(f.element) and f.source in (Source.KV_C, Source.K_PE) and not f.unscaled:
            scale = by_name.get(f.scale_field or "")
            if scale is None or scale.source is not Source.SCALE:
                raise RtpRefError(
                    f"{where}: fp8 field {f.name!r} declares no scale field, so nothing says where its scale "
                    "lives; declare one (per token, block-trailing, or external per-tensor)"
                )
        if f.tile_scale is not None:
            covered = [v for v in layout.fields if v.scale_field == f.name]
            if len(covered) != 1 or f.count != math.ceil(covered[0].count / f.tile_scale.tile):
                raise RtpRefError(
                    f"{where}: scale field {f.name!r} must cover one value field with ceil(count / tile) scales"
                )
        if f.order is not None and (f.source is not Source.SCALE or value_bits(f.element) != 8
                                    or f.order[0] * f.order[1] != f.count):
            raise RtpRefError(f"{where}: field {f.name!r} has order {f.order}; valid: on a scale field of one-byte "
                              f"elements, rows x cols = its {f.count} scales")
        if f.tile_scale is not None and f.tile_scale.fp4 is None and f.element not in (ELEMENT_FP32, ELEMENT_UE8M0):
            raise RtpRefError(f"{where}: scale field {f.name!r} holds {f.element}; an fp8 tile scale is fp32 or ue8m0 "
                              "(a tile rule with fp4 states other scale elements)")
        if f.element == ELEMENT_E2M1:
            scale = by_name.get(f.scale_field or "")
            spec = scale.tile_scale if scale is not None else None
            if scale is None or spec is None or spec.fp4 is None or scale.element != spec.fp4.scale.element.value:
                raise RtpRefError(
                    f"{where}: E2M1 field {f.name!r} needs a computed scale field with FP4 conventions (a tile rule "
                    "with fp4) in the element they state"
                )


def _setting(value: str, flags: LayoutFlags) -> str:
    """A record's setting: the value itself, or the value of the layout flag it names."""
    return str(getattr(flags, value)) if value in FLAG_SPECS else value


def _fp4_conventions(record: LayoutRecord, rule: TileRule, scale_element: str, floor: float,
                     flags: LayoutFlags) -> Fp4Conventions:
    """The FP4 conventions of the record's tile rule under ``flags`` (its settings read from the flags they name);
    a rule rtp_ref.fp4 cannot state raises RtpRefError naming the layout."""
    fp4 = rule.fp4
    assert fp4 is not None, "only a tile rule with fp4 has FP4 conventions"
    try:
        traits = ScaleTraits(ScaleElement(scale_element), rule.tile, ScaleRounding(fp4.rounding),
                             AmaxDivision(_setting(fp4.amax_division, flags)), (floor, fp4.ceiling))
        return Fp4Conventions(record.name, traits, PayloadDivision(_setting(fp4.payload, flags)),
                              NegativeZero(_setting(fp4.negative_zero, flags)), record.sources)
    except ValueError as exc:
        raise RtpRefError(f"layout {record.name}: its FP4 tile rule cannot be built: {exc}") from None


def _rule_of(record: LayoutRecord, scale: FieldRecord) -> TileRule:
    """The tile rule computing scale field ``scale``: its own, else the record's."""
    rule = scale.tile_rule or record.tile_rule
    assert rule is not None, "only a record with a tile rule has tile scales"
    return rule


def _tile_scale(record: LayoutRecord, scale: FieldRecord, flags: LayoutFlags) -> TileScale:
    """The tile rule of scale field ``scale`` (its own, else the record's), with the layout flags it names read
    from ``flags``."""
    rule = _rule_of(record, scale)
    scale_rule = rule.rule if isinstance(rule.rule, ScaleRule) else ScaleRule(getattr(flags, rule.rule))

    def number(value: float | str) -> float:
        return float(getattr(flags, value) if isinstance(value, str) else value)

    divisor, floor = number(rule.divisor), number(rule.floor)
    if rule.fp4 is None:
        try:
            reciprocal = [PayloadDivision(d) is PayloadDivision.RECIPROCAL_MUL for d in (rule.amax_division,
                                                                                        rule.payload)]
        except ValueError as exc:
            raise RtpRefError(f"layout {record.name}: its tile rule cannot be built: {exc}") from None
        return TileScale(rule.tile, scale_rule, divisor, floor, reciprocal_amax=reciprocal[0],
                         reciprocal_payload=reciprocal[1])
    if divisor != E2M1_MAX:
        raise RtpRefError(f"layout {record.name}: an FP4 tile rule divides amax by {E2M1_MAX:g} (E2M1's largest "
                          f"value), not {divisor:g}")
    if rule.fp4.non_finite_tile not in NON_FINITE_TILES:
        raise RtpRefError(f"layout {record.name}: non_finite_tile {rule.fp4.non_finite_tile!r}; valid: "
                          f"{', '.join(NON_FINITE_TILES)}")
    return TileScale(rule.tile, scale_rule, divisor, floor, _fp4_conventions(record, rule, scale.element, floor, flags),
                     rule.fp4.non_finite_tile)


def _tile_counts(record: LayoutRecord, r: int, p: int, flags: LayoutFlags, fmt: Fp8Format) -> dict[str, int]:
    """Each tile-counted scale field's number of scales: ``count / tile`` of the value field it scales (the tile
    of the scale field's rule), or under ``lora_alignment=round_up`` ``ceil(count / tile)``. A count that is not a
    multiple under ``strict`` raises RtpRefError saying what to change."""
    dims = {"R": r, "P": p}
    counts: dict[str, int] = {}
    for v in record.fields:
        scale = next((f for f in record.fields if f.name == v.scale and f.count == "tiles"), None)
        if scale is None:
            continue
        tile = _rule_of(record, scale).tile
        n = dims[v.count] if isinstance(v.count, str) else v.count
        if n % tile and flags.lora_alignment is LoraAlignment.STRICT:
            raise _misaligned(record, (r, p), v, n, tile, flags, fmt)
        counts[scale.name] = math.ceil(n / tile)
    return counts


def _misaligned(record: LayoutRecord, dims: tuple[int, int], v: FieldRecord, n: int, tile: int,
                flags: LayoutFlags, fmt: Fp8Format) -> RtpRefError:
    """The error of a value field whose count is not a multiple of its ``tile`` under ``lora_alignment=strict``."""
    r, p = dims
    tiles = math.ceil(n / tile)
    if v.source is not Source.KV_C:
        return RtpRefError(
            f"{v.name} of layout {record.name} holds {n} values, not a multiple of its {tile}-value tile (layout flag "
            f"lora_alignment=strict); set --layout-flag lora_alignment=round_up to allocate ceil({n}/{tile}) = "
            f"{tiles} scale(s)")
    rounded = dataclasses.replace(flags, lora_alignment=LoraAlignment.ROUND_UP)
    size = sum(f.size for f in _fields(record, r, p, rounded, fmt) if f.placement is not Placement.EXTERNAL)
    per_tensor = [rec.name for rec in MLA_LAYOUTS if any(f.placement is Placement.EXTERNAL for f in rec.fields)]
    return RtpRefError(
        f"kv_lora_rank={r} is not a multiple of {tile}, so {record.name} cannot give each {tile}-value "
        "tile its own scale (layout flag lora_alignment=strict). To run this model, either: use a bf16/fp16 KV "
        f"cache (layout 'auto'); or set --layout-flag lora_alignment=round_up, which allocates "
        f"ceil({r}/{tile}) = {tiles} scale(s), {size} bytes per token at rope_dim {p}; or use "
        f"{' or '.join(repr(n) for n in per_tensor)} (any rank, one per-tensor scale)"
    )


def _fields(record: LayoutRecord, r: int, p: int, flags: LayoutFlags, fmt: Fp8Format) -> tuple[Field, ...]:
    """The record's field table at (R, P); each tile-counted scale field sized for the value field it scales and
    computed by the record's tile rule."""
    counts = _tile_counts(record, r, p, flags, fmt)
    fields = tuple(dataclasses.replace(f, count=counts[f.name]) if f.name in counts else f for f in record.fields)
    tile_scales = {f.name: _tile_scale(record, f, flags) for f in record.fields if f.name in counts}
    return place_fields(fields, {"R": r, "P": p}, fmt, tile_scales)


def default_dims(name: str) -> tuple[int, int]:
    """Default (kv_lora_rank, rope_dim) of a layout, from its record: 448/64 for fp8_model1_mla, else 512/64."""
    return layout_record(name).default_dims


def _check_dims(name: str, kv_lora_rank: int, rope_dim: int) -> None:
    for arg, value in (("kv_lora_rank", kv_lora_rank), ("rope_dim", rope_dim)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise RtpRefError(f"{arg}={value!r} is not valid for layout {name}; valid: an integer >= 1")
    record = layout_record(name)
    if record.fixed_dims and (kv_lora_rank, rope_dim) != record.default_dims:
        r, p = record.default_dims
        raise RtpRefError(
            f"layout {name} supports only kv_lora_rank={r} and rope_dim={p} ({record.summary}; its kernels fix "
            f"them), got kv_lora_rank={kv_lora_rank}, rope_dim={rope_dim}"
        )


def build_layout(
    name: str,
    *,
    kv_lora_rank: int,
    rope_dim: int,
    flags: LayoutFlags,
    element_format: Fp8Format,
    conversion_mode: ConversionMode,
) -> MlaLayout:
    """Build layout ``name`` for rank R = ``kv_lora_rank`` and rope dim P = ``rope_dim``.

    ``element_format`` / ``conversion_mode`` are the platform's fp8 encoding (the writer's numerics),
    ``flags`` the resolved layout flags. Raises RtpRefError for an unknown name or an R/P the layout
    does not support (fp8_model1_mla: only 448/64; fp8_ds_mla: R % 128 == 0 unless lora_alignment=round_up).
    """
    record = layout_record(name)
    _check_dims(name, kv_lora_rank, rope_dim)
    fields = _fields(record, kv_lora_rank, rope_dim, flags, element_format)
    return MlaLayout(name, kv_lora_rank, rope_dim, fields, element_format, conversion_mode, flags, record.summary,
                     record.kv_split, record.sources, record.non_finite)


def layout_for_platform(
    platform: PlatformTable,
    name: str,
    *,
    kv_lora_rank: int | None = None,
    rope_dim: int | None = None,
    overrides: Mapping[str, str] | None = None,
) -> MlaLayout:
    """``build_layout`` with the platform's fp8 format, conversion mode and flags (plus ``overrides``).

    R and P default to ``default_dims(name)``. Works for every layout on every platform: whether a
    platform's kernels *support* the layout is ``platform.supported_layouts``, a separate question.
    """
    default_r, default_p = default_dims(name)
    flags = resolve_flags(platform, overrides)
    return build_layout(
        name,
        kv_lora_rank=default_r if kv_lora_rank is None else kv_lora_rank,
        rope_dim=default_p if rope_dim is None else rope_dim,
        flags=flags,
        element_format=flags.cache_format(platform.element_format),
        conversion_mode=platform.conversion_mode,
    )


def check_layout_bytes(platform: PlatformTable) -> None:
    """Check a platform table's hand-written ``[layout_bytes]`` against the reference layouts.

    Bundled tables are checked by the test suite; an out-of-tree table (``--platform path.toml``) only here,
    so a wrong value can never be certified. Raises RtpRefError naming the file, the key, both values.
    """
    for name, stated in platform.layout_bytes.items():
        derived = layout_for_platform(platform, name).bytes_per_token
        if stated != derived:
            r, p = default_dims(name)
            raise RtpRefError(
                f"{platform.source} [layout_bytes]: {name} = {stated}, but the reference layout {name} has {derived} "
                f"bytes per token at kv_lora_rank {r}, rope_dim {p}; valid: {name} = {derived}"
            )
