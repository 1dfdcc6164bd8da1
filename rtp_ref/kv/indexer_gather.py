"""The read side of the indexer cache: ``cp_gather_indexer_k_quant_cache``, its sequences' stored bytes gathered
into dense rows.

The call of vLLM's indexer gather (``csrc/cache_kernels.cu``; rtp-llm and AITER have the same):
``(kv_cache, dst_k, dst_scale, block_table, cu_seq_lens)``. Sequence ``b`` fills rows ``cu_seq_lens[b]`` to
``cu_seq_lens[b + 1]``; its token ``i`` sits at position ``i``, in block ``block_table[b, i // block_size]`` at
offset ``i % block_size``. Row ``r`` of ``dst_k`` (uint8 ``[tokens, head_dim]``) is that token's fp8 codes as
stored, row ``r`` of ``dst_scale`` (uint8 ``[tokens, head_dim / quant_block_size * 4]``) its fp32 scales' bytes:
nothing is decoded (the indexer's scoring kernel reads both). ``quant_block_size`` is ``head_dim * 4 /
dst_scale.shape[1]``, as vLLM derives it. Rows past ``cu_seq_lens[-1]`` are left as they are. Every argument is
checked before anything is written (RtpRefError naming it).

The copy is of bytes, so a cache written under ``mxfp4`` reads the same way: ``dst_k`` uint8 ``[tokens, head_dim /
2]`` (the packed E2M1 codes) and ``dst_scale`` uint8 ``[tokens, head_dim / 32]`` (the ue8m0 bytes), which vLLM's
unchanged kernel takes as a head_dim of ``head_dim / 2`` in quant blocks of 64 (4 scale bytes copied as one fp32
word: head_dim a multiple of 128; vllm-project/vllm@00eb0c874eb5:csrc/libtorch_stable/cache_kernels.cu,
``cp_gather_indexer_k_quant_cache``). What a call must match is a token's bytes: ``dst_k``'s width its value bytes,
``dst_scale``'s its scale bytes.
"""

from __future__ import annotations

import torch

from rtp_ref.errors import RtpRefError
from rtp_ref.kv.gather import check_sequences, sequence_slots
from rtp_ref.kv.indexer import IndexerLayout, check_indexer_cache, stored_tokens
from rtp_ref.kv.validate import check_tensor, dtype_name


def quant_block_of(dst_k: object, dst_scale: object) -> int:
    """``quant_block_size`` as the call gives it: ``head_dim * 4 / dst_scale.shape[1]``; RtpRefError naming
    ``dst_k`` or ``dst_scale`` when they are not uint8 2-D tensors of matching widths."""
    k = check_tensor("dst_k", dst_k, None)
    s = check_tensor("dst_scale", dst_scale, k.device)
    if k.dim() != 2 or k.dtype != torch.uint8:
        raise RtpRefError(f"dst_k: {dtype_name(k.dtype)} {list(k.shape)}; valid: uint8 [tokens, head_dim]")
    if s.dim() != 2 or s.dtype != torch.uint8 or s.shape[0] != k.shape[0] or s.shape[1] < 4 or s.shape[1] % 4 \
            or (4 * k.shape[1]) % s.shape[1]:
        raise RtpRefError(f"dst_scale: {dtype_name(s.dtype)} {list(s.shape)}; valid: uint8 [{k.shape[0]}, "
                          f"head_dim / quant_block_size * 4] with quant_block_size dividing head_dim {k.shape[1]}")
    return 4 * k.shape[1] // s.shape[1]


def validate_indexer_gather_args(layout: IndexerLayout, kv_cache: object, dst_k: object, dst_scale: object,
                                 block_table: object, cu_seq_lens: object) -> None:
    """Check one call against ``layout`` (module doc); RtpRefError naming the first bad argument. Reads the index
    tensors' values (a device sync): the reference's check."""
    cache = check_indexer_cache(layout, kv_cache)
    k = check_tensor("dst_k", dst_k, cache.device)
    quant = quant_block_of(k, dst_scale)
    widths = (k.shape[1], check_tensor("dst_scale", dst_scale, cache.device).shape[1])
    if widths != (layout.data_bytes_per_token, layout.trailing_bytes_per_token):
        if layout.fp4 is None:
            raise RtpRefError(f"dst_k, dst_scale: head_dim {k.shape[1]} and quant block {quant}; valid: the cache's "
                              f"{layout.head_dim} and {layout.quant_block_size}")
        raise RtpRefError(f"dst_k, dst_scale: {widths[0]} and {widths[1]} bytes a row; valid: a token's code and "
                          f"scale bytes in the cache, {layout.data_bytes_per_token} and "
                          f"{layout.trailing_bytes_per_token} (mxfp4, head_dim {layout.head_dim})")
    check_sequences(cache, block_table, cu_seq_lens, None, k.shape[0], "dst_k")


def gather_indexer_k_quant_cache(layout: IndexerLayout, kv_cache: torch.Tensor, dst_k: torch.Tensor,
                                 dst_scale: torch.Tensor, block_table: torch.Tensor,
                                 cu_seq_lens: torch.Tensor) -> None:
    """Fill the first ``cu_seq_lens[-1]`` rows of ``dst_k`` and ``dst_scale`` with the sequences' stored bytes
    (module doc). The op's reference (rtp_ref.ops): called as a kernel is, with the layout first."""
    validate_indexer_gather_args(layout, kv_cache, dst_k, dst_scale, block_table, cu_seq_lens)
    slots = sequence_slots(block_table, cu_seq_lens, kv_cache.shape[1])
    if slots.numel() == 0:
        return
    values, scales = stored_tokens(layout, kv_cache.cpu(), slots)
    dst_k[: slots.numel()] = values.to(dst_k.device)
    dst_scale[: slots.numel()] = scales.to(dst_scale.device)
