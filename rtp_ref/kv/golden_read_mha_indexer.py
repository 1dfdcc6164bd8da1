"""Golden files of the MHA paged write (``reshape_and_cache_flash``) and the indexer write
(``indexer_k_quant_and_cache``), rtp_ref.kv.golden_mha_indexer, read back: their keys, and the layout and contract
their metadata describes (rtp_ref.commands._golden_locate names a differing byte of their caches)."""

from __future__ import annotations

import json
from dataclasses import dataclass

import torch

from rtp_ref.errors import RtpRefError
from rtp_ref.kv.flags import LayoutFlags
from rtp_ref.kv.golden import GoldenContract
from rtp_ref.kv.golden_file import (
    GoldenFile,
    GoldenForm,
    check_tensors,
    conversion_mode_of,
    flags_of,
    fp8_format_of,
    input_dtype,
    integer,
    one_of,
    stated,
    where_of,
)
from rtp_ref.kv.indexer import SCALE_FORMATS, indexer_layout_for
from rtp_ref.kv.mha_paged import CACHE_ORDERS, MHA_CACHE_DTYPES, mha_layout
from rtp_ref.kv.op_names import INDEXER_OP, MHA_OP

#: metadata keys every MHA and indexer golden file has, in the order docs/layouts.md lists them
_COMMON_KEYS = ("golden_format", "rtp_ref_version", "op", "layout", "platform", "platform_sha256", "input_dtype",
                "block_size", "num_blocks", "num_tokens", "seed", "flags", "fp8_format", "conversion_mode")
MHA_METADATA_KEYS = (*_COMMON_KEYS, "platform_fp8_format", "num_kv_heads", "head_size", "cache_order", "scales",
                     "k_bytes_per_token")
MHA_TENSOR_KEYS = ("key", "value", "k_scale", "v_scale", "key_cache_before", "value_cache_before",
                   "key_cache_expected", "value_cache_expected", "slot_mapping")
INDEXER_METADATA_KEYS = (*_COMMON_KEYS, "head_dim", "quant_block_size", "scale_divisor", "bytes_per_token")
INDEXER_TENSOR_KEYS = ("k", "kv_cache_before", "kv_cache_expected", "slot_mapping")
#: the ``scales`` metadata values: one k and v scale per tensor, or one per head
SCALE_SHAPES = ("per_tensor", "per_head")
#: an HND cache as stored, ``[blocks, heads, rows, dim]``, permuted to the kernel's ``[blocks, rows, heads, dim]``
HND_PERMUTATION = (0, 2, 1, 3)


@dataclass(frozen=True)
class _Call:
    """What every MHA and indexer file states of its call's size."""

    dtype: torch.dtype
    tokens: int
    block_size: int
    num_blocks: int
    flags: LayoutFlags


def _call(where: str, metadata: dict[str, str]) -> _Call:
    call = _Call(input_dtype(where, metadata), integer(where, metadata, "num_tokens", 1),
                 integer(where, metadata, "block_size", 1), integer(where, metadata, "num_blocks", 1),
                 flags_of(where, metadata))
    integer(where, metadata, "seed", 0)
    return call


def _size(call: _Call, metadata: dict[str, str]) -> str:
    return f"{metadata['input_dtype']} inputs, {call.tokens} tokens into {call.num_blocks} blocks x {call.block_size}"


def read_mha(path: str, tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> GoldenFile:
    """An MHA golden file whose key sets are checked: its metadata describes a layout under the contract it
    states (``fp8_format`` and ``k_bytes_per_token`` are that layout's), and its tensors have the dtypes and shapes
    that metadata implies."""
    where = where_of(path)
    variant = one_of(where, metadata, "layout", list(MHA_CACHE_DTYPES))
    call = _call(where, metadata)
    platform_format = fp8_format_of(where, metadata, "platform_fp8_format")
    contract = GoldenContract(call.flags.cache_format(platform_format), conversion_mode_of(where, metadata),
                              call.flags)
    heads, size = integer(where, metadata, "num_kv_heads", 1), integer(where, metadata, "head_size", 1)
    order = one_of(where, metadata, "cache_order", list(CACHE_ORDERS))
    scales = one_of(where, metadata, "scales", list(SCALE_SHAPES))
    layout = mha_layout(contract, variant, heads, size)
    because = f"kv_cache_dtype {variant} under these flags and platform_fp8_format"
    stated(where, metadata, "fp8_format", layout.element_format.name if layout.element_format else "none", because)
    stated(where, metadata, "k_bytes_per_token", str(layout.k_bytes_per_token()), f"{because}, {heads} x {size}")
    width = layout.row_width
    stored = (call.num_blocks, heads, call.block_size, width) if order == "HND" else \
        (call.num_blocks, call.block_size, heads, width)
    cache = (layout.cache_dtype(call.dtype), stored)
    scale = (torch.float32, (heads if scales == "per_head" else 1,))
    check_tensors(where, tensors, {
        "key": (call.dtype, (call.tokens, heads, size)), "value": (call.dtype, (call.tokens, heads, size)),
        "k_scale": scale, "v_scale": scale, "key_cache_before": cache, "value_cache_before": cache,
        "key_cache_expected": cache, "value_cache_expected": cache, "slot_mapping": (torch.int64, (call.tokens,)),
    })
    summary = (f"{MHA_OP} {variant} on {metadata['platform']} ({metadata['fp8_format']}, "
               f"{contract.conversion_mode.value}), {heads} heads x {size} {order}, {scales.replace('_', '-')} "
               f"scales, {_size(call, metadata)}")
    return GoldenFile(path, tensors, metadata, MHA_FORM, variant, layout, contract, call.block_size,
                      call.num_blocks, ("key_cache", "value_cache"), {"kv_cache_dtype": variant}, summary,
                      HND_PERMUTATION if order == "HND" else None)


def read_indexer(path: str, tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> GoldenFile:
    """An indexer golden file whose key sets are checked: its metadata describes a layout under the contract it
    states (``scale_divisor`` and ``bytes_per_token`` are that layout's), and its tensors have the dtypes and
    shapes that metadata implies."""
    where = where_of(path)
    variant = one_of(where, metadata, "layout", list(SCALE_FORMATS))
    call = _call(where, metadata)
    contract = GoldenContract(fp8_format_of(where, metadata, "fp8_format"), conversion_mode_of(where, metadata),
                              call.flags)
    head_dim, quant = integer(where, metadata, "head_dim", 1), integer(where, metadata, "quant_block_size", 1)
    try:
        layout = indexer_layout_for(contract, call.flags, head_dim, quant, scale_fmt=variant)
    except RtpRefError as exc:
        raise RtpRefError(f"{where}: the metadata does not describe a layout: {exc}") from exc
    because = f"head_dim {head_dim}, quant_block_size {quant} and these flags"
    stated(where, metadata, "fp8_format", layout.element_format.name, because)
    stated(where, metadata, "scale_divisor", json.dumps(layout.scale_divisor), because)
    stated(where, metadata, "bytes_per_token", str(layout.bytes_per_token), because)
    cache = (torch.uint8, (call.num_blocks, call.block_size, layout.bytes_per_token))
    check_tensors(where, tensors, {"k": (call.dtype, (call.tokens, head_dim)), "kv_cache_before": cache,
                                   "kv_cache_expected": cache, "slot_mapping": (torch.int64, (call.tokens,))})
    summary = (f"{INDEXER_OP} {variant} on {metadata['platform']} ({layout.element_format.name}, "
               f"{contract.conversion_mode.value}, divisor {layout.scale_divisor:g}), head_dim {head_dim} in quant "
               f"blocks of {quant}, {_size(call, metadata)}")
    return GoldenFile(path, tensors, metadata, INDEXER_FORM, variant, layout, contract, call.block_size,
                      call.num_blocks, ("kv_cache",), {"scale_fmt": variant, "quant_block_size": quant}, summary)


MHA_FORM = GoldenForm(MHA_OP, MHA_TENSOR_KEYS, MHA_METADATA_KEYS, read_mha)
INDEXER_FORM = GoldenForm(INDEXER_OP, INDEXER_TENSOR_KEYS, INDEXER_METADATA_KEYS, read_indexer)
