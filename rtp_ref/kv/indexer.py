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
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from rtp_ref.errors import RtpRefError
from rtp_ref.fp8.codec import encode
from rtp_ref.fp8.formats import ConversionMode, FormatSource, Fp8Format
from rtp_ref.fp8.rules import Pow2Rule, ScaleRule
from rtp_ref.fp8.ue8m0 import decode_ue8m0, encode_ue8m0
from rtp_ref.kv.fields import Field, Placement, Source
from rtp_ref.kv.flags import IndexerScaleApply, LayoutFlags, resolve_flags
from rtp_ref.kv.mha_indexer_records import INDEXER_FIELDS, INDEXER_VARIANTS, variant_record
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

#: ``scale_fmt``: fp32 scales as computed, or raised to powers of two: the names of the variant records
SCALE_FORMATS = tuple(r.name for r in INDEXER_VARIANTS)
#: the amax floor of a slice (an all-zero slice still gets a positive scale)
AMAX_FLOOR = 1e-4
#: DeepSeek V3.2's indexer: 128 dims, one scale per 128 values
DEFAULT_HEAD_DIM = 128
DEFAULT_QUANT_BLOCK = 128


@dataclass(frozen=True)
class IndexerLayout:
    """The indexer cache of ``head_dim`` fp8 values a token, one fp32 scale per ``quant_block_size``; ``fields``
    is the record's field table placed for them (rtp_ref.kv.mha_indexer_records.INDEXER_FIELDS)."""

    head_dim: int
    quant_block_size: int
    element_format: Fp8Format
    conversion_mode: ConversionMode
    scale_divisor: float
    fields: tuple[Field, ...]
    #: how the scale is applied to the values (flag ``indexer_scale_apply``)
    scale_apply: IndexerScaleApply = IndexerScaleApply.DIVIDE

    @property
    def scales_per_token(self) -> int:
        return self.head_dim // self.quant_block_size

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
        """fp8 values plus fp32 scales: 132 at head_dim 128, quant block 128."""
        return self.data_bytes_per_token + self.trailing_bytes_per_token

    def field(self, source: Source) -> Field:
        """The field holding ``source`` (KEY: the values, SCALE: their scales)."""
        return next(f for f in self.fields if f.source is source)



def indexer_layout(platform: PlatformTable, head_dim: int = DEFAULT_HEAD_DIM,
                   quant_block_size: int = DEFAULT_QUANT_BLOCK,
                   element_format: Fp8Format | None = None, flags: LayoutFlags | None = None) -> IndexerLayout:
    """The indexer layout on ``platform`` (the cache's fp8 format, flag ``cache_fp8_format``, unless
    ``element_format`` says otherwise; ``flags``: the resolved layout flags, the platform's defaults when None)."""
    return indexer_layout_for(platform, flags or resolve_flags(platform), head_dim, quant_block_size, element_format)


def indexer_layout_for(source: FormatSource, flags: LayoutFlags, head_dim: int, quant_block_size: int,
                       element_format: Fp8Format | None = None) -> IndexerLayout:
    """The indexer layout of a platform or a kernel's bound contract (``source``) under its resolved ``flags``."""
    for name, value in (("head_dim", head_dim), ("quant_block_size", quant_block_size)):
        if value < 1:
            raise RtpRefError(f"{name} {value} is not valid; valid: >= 1")
    if head_dim % quant_block_size:
        raise RtpRefError(f"head_dim {head_dim} is not a multiple of quant_block_size {quant_block_size}; "
                          f"valid: a quant block that divides head_dim")
    cache_format = flags.cache_format(source.element_format)
    fmt = element_format or cache_format
    divisor = flags.fp8_max_divisor if fmt == cache_format else fmt.max_value
    fields = place_fields(INDEXER_FIELDS, {"D": head_dim, "D/Q": head_dim // quant_block_size}, fmt)
    return IndexerLayout(head_dim, quant_block_size, fmt, source.conversion_mode, divisor, fields,
                         flags.indexer_scale_apply)


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
    cache = check_indexer_cache(layout, kv_cache)
    x = check_tensor("k", k, cache.device)
    check_input_dtype("k", x.dtype)
    slots = check_slot_mapping(slot_mapping, cache.device, cache.shape[0], cache.shape[1], values, slot_dtypes)
    check_rows("k", x, slots.numel(), (layout.head_dim,))


def slice_scales(layout: IndexerLayout, k: torch.Tensor, scale_fmt: str) -> torch.Tensor:
    """The fp32 scale of each ``quant_block_size`` slice of ``k`` ``[T, head_dim]``: ``[T, n]``."""
    record = variant_record(INDEXER_VARIANTS, scale_fmt, "scale_fmt")
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
    x = k[valid]
    scales = slice_scales(layout, x, scale_fmt)
    codes = encode(scaled(layout, x, scales), layout.element_format, layout.conversion_mode)
    blocks = _blocks(kv_cache)
    block, token = slots[valid] // block_size, slots[valid] % block_size
    values, scale = layout.field(Source.KEY), layout.field(Source.SCALE)
    blocks[block[:, None], _block_columns(layout, values, token, block_size)] = codes
    scale_bytes = scales.contiguous().view(torch.uint8).reshape(-1, scale.size)
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
    return start[:, None] + f.offset + torch.arange(f.size)


def stored_tokens(layout: IndexerLayout, kv_cache: torch.Tensor, slots: torch.Tensor) -> tuple[torch.Tensor,
                                                                                               torch.Tensor]:
    """The bytes stored for the tokens at ``slots`` (all >= 0) of ``kv_cache`` (CPU): their fp8 values uint8
    ``[n, head_dim]`` and their scales' bytes uint8 ``[n, 4 * scales_per_token]`` (the module doc's places)."""
    block_size = kv_cache.shape[1]
    blocks = _blocks(kv_cache)
    block, token = slots // block_size, slots % block_size

    def part(source: Source) -> torch.Tensor:
        return blocks[block[:, None], _block_columns(layout, layout.field(source), token, block_size)]

    return part(Source.KEY), part(Source.SCALE)
