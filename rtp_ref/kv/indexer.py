"""The DeepSeek V3.2 indexer cache as data, and its reference writer: ``indexer_k_quant_and_cache``.

Sources: docs/sources.md#the-deepseek-indexer-cache (vLLM ``csrc/cache_kernels.cu``
``indexer_k_quant_and_cache_kernel``; sglang ``NSATokenToKVPool``; rtp-llm ``SingleConfigCreator.cc``, whose
spec gives ``(indexer_dim + indexer_dim / 128 * 4) * S`` bytes a block).

Contract: ``k`` is ``[T, head_dim]``; ``kv_cache`` is uint8 ``[num_blocks, block_size, bytes_per_token]``
whose rows are a view of the block's bytes, not one token each (as ``fp8_model1_mla``): a block holds
``block_size * head_dim`` fp8 values, token ``t`` at ``t * head_dim``, then ``block_size * head_dim /
quant_block_size`` fp32 scales, token ``t``'s ``j``-th at ``block_size * head_dim + (t * n + j) * 4``
(``n = head_dim / quant_block_size``). Each ``quant_block_size`` slice of a row has the scale
``max(amax, 1e-4) / divisor`` in fp32 (amax over the slice's non-NaN values, as ``fmaxf`` folds), raised
to the smallest power of two at or above it when ``scale_fmt`` is ``ue8m0``; the values are
``encode(x / scale)``, or ``encode(x * r)`` with ``r = 1 / scale`` rounded to fp32 under the layout flag
``indexer_scale_apply = "reciprocal_multiply"`` (AMD AITER's arithmetic: the two differ in the last bit of some
quotients, so in some codes, unless the scale is a power of two). The divisor follows the cache's format: for the
platform's own format it is the platform's ``fp8_max_divisor`` flag (448; 224 on gfx942, as the MLA writers there),
for a cache kept in another format that format's largest value.
A negative slot writes nothing; ``slot_mapping`` is int64, or int32 naming the same slots.

``scale_fmt = "mxfp4"`` (vLLM's MXFP4 indexer cache, 68 bytes a token at head_dim 128 against 132) stores E2M1 codes
and ue8m0 scales in the same two parts of a block: every token's ``head_dim / 2`` code bytes at ``t * head_dim / 2``
(two codes a byte, value ``2i`` in the low nibble of byte ``i``), then every token's ``head_dim / 32`` scale bytes at
``block_size * head_dim / 2 + t * head_dim / 32``; its quant block is 32, fixed (another ``quant_block_size`` is
refused). Per block of 32 values: ``amax`` over ``|x|`` with NaN left out (as above), ``q = max(amax, 6 * 2**-126) *
(1/6)`` in float32 (the float32 1/6, ``rtp_ref.fp4.scales.ONE_SIXTH_F32``), ``e = ceil(log2(q))`` taken exactly from
q's bits (DeepGEMM's ``ceil_to_ue8m0``), clamped to [-127, 127], stored as the byte ``e + 127``; each value as
``e2m1(x * 2**-e)`` (exact: a power of two), to nearest, ties to even, saturating at 6, a -0.0 as 0x8 (the PTX
``cvt.rn.satfinite.e2m1x2.f32`` of vLLM's newer writer). Non-finite inputs (the sources state no code for a NaN): a
NaN is stored as 0x7 (+6, where the older writer's and DeepGEMM's bucket thresholds put it), +-inf as 0x7 / 0xF
(saturating), and a block holding +-inf gets ``e = 127`` (byte 254: the clamp, as both ``ceil_to_ue8m0`` and a
clamped float ``log2`` give). vLLM's quantizers take ``e`` through a float32 ``log2``, which lands one binade low
just above ``6 * 2**k`` for a float32 amax (0x42C00001: 2**4 for the exact 2**5); on this op's bf16 and fp16 inputs
no amax lies in that window (tests/kv/test_mxfp4_indexer.py checks every one), so no writer of this op can differ
there and it is not a flag. Sources: vLLM's fused DeepSeek-V4 MXFP4 indexer writer
(vllm-project/vllm@e8f3d1e27521:vllm/models/deepseek_v4/common/ops/fused_compress_quant_cache.py), vLLM PR #48558
(open: the unfused ``indexer_k_quant_and_cache`` with ``scale_fmt == "mxfp4"``), DeepGEMM's ``ceil_to_ue8m0``
(deepseek-ai/DeepGEMM@38939a4c494c:deep_gemm/utils/math.py).
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from rtp_ref.errors import RtpRefError
from rtp_ref.fp4.e2m1 import E2M1_MAX, NegativeZero, NonFinitePolicy, pack
from rtp_ref.fp4.e2m1 import encode as encode_e2m1
from rtp_ref.fp4.quantize import Fp4Conventions, PayloadDivision, payload_quotient
from rtp_ref.fp4.scales import F32_MIN_NORMAL, AmaxDivision, ScaleElement, ScaleRounding, ScaleTraits, decode_scales
from rtp_ref.fp4.scales import scale_codes as fp4_scale_codes
from rtp_ref.fp8.codec import encode
from rtp_ref.fp8.formats import ConversionMode, FormatSource, Fp8Format
from rtp_ref.fp8.rules import Pow2Rule, ScaleRule
from rtp_ref.fp8.ue8m0 import decode_ue8m0, encode_ue8m0
from rtp_ref.kv.fields import ELEMENT_E2M1, Field, Placement, Source
from rtp_ref.kv.flags import IndexerScaleApply, LayoutFlags, resolve_flags
from rtp_ref.kv.mha_indexer_records import INDEXER_VARIANTS, MXFP4_QUANT_BLOCK, VariantRecord, variant_record
from rtp_ref.kv.place_fields import place_fields
from rtp_ref.kv.validate import (
    SLOT_DTYPES,
    check_input_dtype,
    check_rows,
    check_slot_mapping,
    check_tensor,
    dtype_name,
)

if TYPE_CHECKING:
    from rtp_ref.kv.platform_table import PlatformTable

#: ``scale_fmt``: fp8 values with fp32 scales as computed or raised to powers of two, or E2M1 values with ue8m0
#: scales: the names of the variant records
SCALE_FORMATS = tuple(r.name for r in INDEXER_VARIANTS)
#: the variants that store fp8 values and fp32 scales (their layouts are one: only the scales' rule differs)
FP8_SCALE_FORMATS = tuple(r.name for r in INDEXER_VARIANTS if r.element != ELEMENT_E2M1)
#: the amax floor of a slice (an all-zero slice still gets a positive scale)
AMAX_FLOOR = 1e-4
#: DeepSeek V3.2's indexer: 128 dims, one scale per 128 values
DEFAULT_HEAD_DIM = 128
DEFAULT_QUANT_BLOCK = 128
#: the scale byte of a block holding +-inf under ``mxfp4``: exponent 127, the clamp (module doc)
MXFP4_INF_SCALE_BYTE = 254
#: what ``mxfp4`` stores for NaN and +-inf (module doc): NaN as 0x7, +-inf saturating
MXFP4_NON_FINITE = NonFinitePolicy.saturate(0x7)
#: vLLM's MXFP4 indexer writer as rtp_ref.fp4 conventions (module doc): ue8m0 per 32, ``ceil(log2(q))`` from q's
#: bits of ``q = max(amax * (1/6), 2**-126)`` (the same as flooring amax at ``6 * 2**-126`` first: float32
#: rounding is monotone and ``fl(6 * 2**-126 * (1/6))`` is ``2**-126``), ``x / 2**e`` (a power of two: ``x * 2**-e``,
#: exactly), -0.0 kept
MXFP4_INDEXER = Fp4Conventions(
    "mxfp4_indexer",
    ScaleTraits(ScaleElement.UE8M0, MXFP4_QUANT_BLOCK, ScaleRounding.CEIL_LOG2_EXACT, AmaxDivision.MUL_ONE_SIXTH,
                (F32_MIN_NORMAL, math.inf)),
    PayloadDivision.IEEE_DIV,
    NegativeZero.KEEP,
    "vLLM's MXFP4 indexer writer (vllm-project/vllm@e8f3d1e27521), DeepGEMM's ceil_to_ue8m0 (@38939a4c494c)",
)


@dataclass(frozen=True)
class IndexerLayout:
    """The indexer cache of ``head_dim`` fp8 values a token, one fp32 scale per ``quant_block_size`` (the layout of
    ``none`` and ``ue8m0`` alike), or under ``fp4`` (``mxfp4``'s conventions) ``head_dim`` E2M1 codes and one ue8m0
    scale byte per 32; ``fields`` is the variant record's field table placed for them
    (rtp_ref.kv.mha_indexer_records). ``scale_divisor``: what a slice's amax is divided by (6 under ``fp4``)."""

    head_dim: int
    quant_block_size: int
    element_format: Fp8Format
    conversion_mode: ConversionMode
    scale_divisor: float
    fields: tuple[Field, ...]
    #: how the scale is applied to the values (flag ``indexer_scale_apply``; under ``fp4`` a power of two, so both
    #: ways are the same exact product)
    scale_apply: IndexerScaleApply = IndexerScaleApply.DIVIDE
    #: the E2M1 conventions of ``mxfp4``'s layout; None for the fp8 variants'
    fp4: Fp4Conventions | None = None

    @property
    def scales_per_token(self) -> int:
        return self.head_dim // self.quant_block_size

    @property
    def variants(self) -> tuple[str, ...]:
        """The ``scale_fmt`` values this layout stores: ``mxfp4``, or the fp8 ones."""
        return tuple(r.name for r in INDEXER_VARIANTS if (r.element == ELEMENT_E2M1) == (self.fp4 is not None))

    def _bytes(self, placement: Placement) -> int:
        return sum(f.size for f in self.fields if f.placement is placement)

    @property
    def data_bytes_per_token(self) -> int:
        """A token's bytes in the block's first part (its values)."""
        return self._bytes(Placement.PER_TOKEN)

    @property
    def trailing_bytes_per_token(self) -> int:
        """A token's bytes after the block's data (its scales)."""
        return self._bytes(Placement.BLOCK_TRAILING)

    @property
    def bytes_per_token(self) -> int:
        """Values plus scales: 132 at head_dim 128, quant block 128 (fp8 and fp32); 68 under ``mxfp4``."""
        return self.data_bytes_per_token + self.trailing_bytes_per_token

    def field(self, source: Source) -> Field:
        """The field holding ``source`` (KEY: the values, SCALE: their scales)."""
        return next(f for f in self.fields if f.source is source)



def indexer_layout(platform: PlatformTable, head_dim: int = DEFAULT_HEAD_DIM,
                   quant_block_size: int | None = None, element_format: Fp8Format | None = None,
                   flags: LayoutFlags | None = None, scale_fmt: str = "none") -> IndexerLayout:
    """The indexer layout of ``scale_fmt`` on ``platform`` (the cache's fp8 format, flag ``cache_fp8_format``, unless
    ``element_format`` says otherwise; ``flags``: the resolved layout flags, the platform's defaults when None; the
    quant block the variant's default when None: ``quant_block_for``)."""
    return indexer_layout_for(platform, flags or resolve_flags(platform), head_dim,
                              quant_block_for(scale_fmt, quant_block_size), element_format, scale_fmt=scale_fmt)


def quant_block_for(scale_fmt: str, quant_block_size: int | None = None) -> int:
    """The quant block of a ``scale_fmt`` call: ``quant_block_size`` when given, else the variant's fixed one
    (``mxfp4``: 32) or ``DEFAULT_QUANT_BLOCK``. An unknown ``scale_fmt`` raises RtpRefError listing the valid ones."""
    if quant_block_size is not None:
        return quant_block_size
    fixed = fixed_quant_block(scale_fmt)
    return DEFAULT_QUANT_BLOCK if fixed is None else fixed


def fixed_quant_block(scale_fmt: str) -> int | None:
    """The one quant block ``scale_fmt`` takes (``mxfp4``: 32), None where any that divides head_dim does."""
    return variant_record(INDEXER_VARIANTS, scale_fmt, "scale_fmt").quant_block


def indexer_layout_for(source: FormatSource, flags: LayoutFlags, head_dim: int, quant_block_size: int,
                       element_format: Fp8Format | None = None, *, scale_fmt: str = "none") -> IndexerLayout:
    """The indexer layout of ``scale_fmt`` (its bytes: ``none`` and ``ue8m0`` share one) of a platform or a kernel's
    bound contract (``source``) under its resolved ``flags``. A quant block the variant does not take (``mxfp4``:
    32 only) raises RtpRefError."""
    record = variant_record(INDEXER_VARIANTS, scale_fmt, "scale_fmt")
    for name, value in (("head_dim", head_dim), ("quant_block_size", quant_block_size)):
        if value < 1:
            raise RtpRefError(f"{name} {value} is not valid; valid: >= 1")
    if record.quant_block is not None and quant_block_size != record.quant_block:
        raise RtpRefError(f"quant_block_size {quant_block_size} with scale_fmt {scale_fmt}; valid: "
                          f"{record.quant_block} (the format's block)")
    if head_dim % quant_block_size:
        raise RtpRefError(f"head_dim {head_dim} is not a multiple of quant_block_size {quant_block_size}; "
                          f"valid: a quant block that divides head_dim")
    cache_format = flags.cache_format(source.element_format)
    fmt = element_format or cache_format
    fp4 = MXFP4_INDEXER if record.element == ELEMENT_E2M1 else None
    divisor = E2M1_MAX if fp4 is not None else flags.fp8_max_divisor if fmt == cache_format else fmt.max_value
    fields = place_fields(record.fields, {"D": head_dim, "D/Q": head_dim // quant_block_size}, fmt)
    return IndexerLayout(head_dim, quant_block_size, fmt, source.conversion_mode, divisor, fields,
                         flags.indexer_scale_apply, fp4)


def _record_of(layout: IndexerLayout, scale_fmt: str) -> VariantRecord:
    """The record of ``scale_fmt`` when ``layout`` stores it; RtpRefError naming both otherwise."""
    record = variant_record(INDEXER_VARIANTS, scale_fmt, "scale_fmt")
    if record.name not in layout.variants:
        raise RtpRefError(f"scale_fmt {scale_fmt!r} on a layout of {', '.join(layout.variants)}; valid: "
                          f"{', '.join(layout.variants)}, or the layout built for {scale_fmt} "
                          f"(indexer_layout_for(..., scale_fmt={scale_fmt!r}))")
    return record


def check_indexer_cache(layout: IndexerLayout, kv_cache: object) -> torch.Tensor:
    """``kv_cache`` when it is an indexer cache of ``layout`` (uint8 ``[num_blocks, block_size, bytes_per_token]``
    with contiguous rows); RtpRefError naming it otherwise. The writer's and the gather's check."""
    cache = check_tensor("kv_cache", kv_cache, None)
    row = layout.bytes_per_token
    if (cache.dim() != 3 or cache.dtype != torch.uint8 or cache.shape[2] != row or cache.stride(2) != 1
            or cache.stride(1) != row):
        raise RtpRefError(f"kv_cache: shape {tuple(cache.shape)}, dtype {dtype_name(cache.dtype)}, strides "
                          f"{cache.stride()}; valid: uint8 [num_blocks, block_size, {row}] with contiguous rows")
    return cache


def validate_indexer_args(layout: IndexerLayout, k: object, kv_cache: object, slot_mapping: object,
                          scale_fmt: str, values: bool = True,
                          slot_dtypes: Collection[torch.dtype] = tuple(SLOT_DTYPES.values())) -> None:
    """Check one ``indexer_k_quant_and_cache`` call against ``layout`` (the module doc says what is valid; a slot
    mapping of one of ``slot_dtypes``); without ``values``, metadata only (no device sync: the slots' values are not
    checked)."""
    if scale_fmt not in SCALE_FORMATS:
        raise RtpRefError(f"scale_fmt {scale_fmt!r}; valid: {', '.join(SCALE_FORMATS)}")
    _record_of(layout, scale_fmt)
    cache = check_indexer_cache(layout, kv_cache)
    x = check_tensor("k", k, cache.device)
    check_input_dtype("k", x.dtype)
    slots = check_slot_mapping(slot_mapping, cache.device, cache.shape[0], cache.shape[1], values, slot_dtypes)
    check_rows("k", x, slots.numel(), (layout.head_dim,))


def slice_scales(layout: IndexerLayout, k: torch.Tensor, scale_fmt: str) -> torch.Tensor:
    """The fp32 scale of each ``quant_block_size`` slice of ``k`` ``[T, head_dim]``: ``[T, n]`` (the fp8 variants;
    ``mxfp4``'s are ``mxfp4_codes``')."""
    record = _record_of(layout, scale_fmt)
    if record.rule is None:
        raise RtpRefError(f"slice_scales: scale_fmt {scale_fmt} stores no fp32 scales; valid: "
                          f"{', '.join(FP8_SCALE_FORMATS)}")
    magnitude = k.to(torch.float32).reshape(k.shape[0], layout.scales_per_token, -1).abs()
    # vLLM's kernel folds with fmaxf, which drops NaN: a NaN value does not make its slice's scale NaN
    amax = torch.where(torch.isnan(magnitude), 0.0, magnitude).amax(dim=-1)
    floor = torch.tensor(AMAX_FLOOR, dtype=torch.float32)
    scale = torch.maximum(amax, floor) / torch.tensor(layout.scale_divisor, dtype=torch.float32)
    if record.rule is ScaleRule.POW2_CEIL:
        # exp2f(ceilf(log2f(inf))) is inf: an infinite slice keeps an infinite scale
        scale = torch.where(torch.isinf(scale), scale, decode_ue8m0(encode_ue8m0(scale, Pow2Rule.CEIL)))
    return scale


def scaled(layout: IndexerLayout, x: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """The fp32 values ``x`` ``[T, head_dim]`` with their slices' ``scales`` ``[T, n]`` applied as the layout's
    ``scale_apply`` says (the module doc): what is encoded."""
    per_value = scales.repeat_interleave(layout.quant_block_size, dim=1)
    if layout.scale_apply is IndexerScaleApply.RECIPROCAL_MULTIPLY:
        # the reciprocal is one correctly rounded fp32 division, then a rounded fp32 product: two roundings
        return x.to(torch.float32) * (torch.ones_like(per_value) / per_value)
    return x.to(torch.float32) / per_value


def mxfp4_codes(layout: IndexerLayout, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``mxfp4``'s E2M1 codes (uint8 ``[T, head_dim]``, one a value, unpacked) and ue8m0 scale bytes (uint8 ``[T,
    head_dim / 32]``) of ``k`` ``[T, head_dim]`` (module doc), by ``rtp_ref.fp4``'s scale traits and codec."""
    conventions = layout.fp4
    if conventions is None:
        raise RtpRefError("mxfp4_codes: the layout is the fp8 variants'; valid: a layout built for scale_fmt mxfp4")
    x = k.to(torch.float32).reshape(k.shape[0], layout.scales_per_token, layout.quant_block_size)
    magnitude = x.abs()
    # as the fp8 variants (vLLM folds with fmaxf): a NaN does not take part in its block's amax
    amax = torch.where(torch.isnan(magnitude), 0.0, magnitude).amax(dim=-1)
    finite = torch.isfinite(amax)
    scales = fp4_scale_codes(torch.where(finite, amax, torch.zeros_like(amax)), conventions.scale)
    scales = torch.where(finite, scales, torch.full_like(scales, MXFP4_INF_SCALE_BYTE))
    q = payload_quotient(x, decode_scales(scales, conventions.scale).unsqueeze(-1), conventions.payload)
    codes = encode_e2m1(q, MXFP4_NON_FINITE, conventions.negative_zero)
    return codes.reshape(k.shape[0], layout.head_dim), scales


def encode_tokens(layout: IndexerLayout, x: torch.Tensor, scale_fmt: str) -> tuple[torch.Tensor, torch.Tensor]:
    """What the cache stores for the tokens ``x`` ``[T, head_dim]`` under ``scale_fmt`` (the module doc): their value
    bytes uint8 ``[T, data_bytes_per_token]`` and scale bytes uint8 ``[T, trailing_bytes_per_token]``."""
    if _record_of(layout, scale_fmt).rule is None:
        codes, scale_bytes = mxfp4_codes(layout, x)
        return pack(codes), scale_bytes
    scales = slice_scales(layout, x, scale_fmt)
    codes = encode(scaled(layout, x, scales), layout.element_format, layout.conversion_mode)
    return codes, scales.contiguous().view(torch.uint8).reshape(x.shape[0], -1)


def reference_indexer_k_quant_and_cache(layout: IndexerLayout, k: torch.Tensor, kv_cache: torch.Tensor,
                                        slot_mapping: torch.Tensor, scale_fmt: str) -> None:
    """Write ``k`` into ``kv_cache`` as the module doc states (CPU tensors; in place); bad arguments raise
    RtpRefError before anything is written (validate_indexer_args)."""
    validate_indexer_args(layout, k, kv_cache, slot_mapping, scale_fmt)
    block_size = kv_cache.shape[1]
    slots = slot_mapping.to(torch.int64)
    valid = torch.nonzero(slots >= 0).flatten()
    if valid.numel() == 0:
        return
    codes, scale_bytes = encode_tokens(layout, k[valid], scale_fmt)
    blocks = _blocks(kv_cache)
    block, token = slots[valid] // block_size, slots[valid] % block_size
    values, scale = layout.field(Source.KEY), layout.field(Source.SCALE)
    blocks[block[:, None], _block_columns(layout, values, token, block_size)] = codes
    blocks[block[:, None], _block_columns(layout, scale, token, block_size)] = scale_bytes


def _blocks(kv_cache: torch.Tensor) -> torch.Tensor:
    """The cache as one byte row per block ``[num_blocks, block_size * bytes_per_token]`` (a view: rows are not
    tokens, the module doc says where each byte is)."""
    num_blocks, block_size, row = kv_cache.shape
    return torch.as_strided(kv_cache, (num_blocks, block_size * row), (kv_cache.stride(0), 1))


def _block_columns(layout: IndexerLayout, f: Field, token: torch.Tensor, block_size: int) -> torch.Tensor:
    """Byte positions within their blocks of field ``f`` of each token ``[len(token), f.size]``: a per-token field
    in the token's data row, a block-trailing one after every token's data (rtp_ref.kv.fields.Placement)."""
    data, trailing = layout.data_bytes_per_token, layout.trailing_bytes_per_token
    start = token * data if f.placement is Placement.PER_TOKEN else block_size * data + token * trailing
    return start[:, None] + f.offset + torch.arange(f.size, device=start.device)


def stored_tokens(layout: IndexerLayout, kv_cache: torch.Tensor, slots: torch.Tensor) -> tuple[torch.Tensor,
                                                                                               torch.Tensor]:
    """The bytes stored for the tokens at ``slots`` (all >= 0) of ``kv_cache`` (CPU): their value bytes uint8
    ``[n, data_bytes_per_token]`` (fp8 codes, or packed E2M1 codes) and their scales' bytes uint8 ``[n,
    trailing_bytes_per_token]`` (the module doc's places)."""
    block_size = kv_cache.shape[1]
    blocks = _blocks(kv_cache)
    block, token = slots // block_size, slots % block_size

    def part(source: Source) -> torch.Tensor:
        return blocks[block[:, None], _block_columns(layout, layout.field(source), token, block_size)]

    return part(Source.KEY), part(Source.SCALE)
