"""The cache reads in CUDA C++ (``csrc/gather.cu``), for CUDA GPUs: ``gather_and_maybe_dequant_cache`` for every MLA
layout, from the layout's plan (rtp_ref.kernels.write_plan) and the fp8 format's traits, and
``cp_gather_indexer_k_quant_cache`` (bytes copied)."""

from __future__ import annotations

import ctypes
import functools

import torch

from rtp_ref.kernels.call_signature import on_device, raw_stream
from rtp_ref.kernels.cuda_build import arch_of, build_library
from rtp_ref.kernels.write_plan import WritePlan
from rtp_ref.kv.gather import read16
from rtp_ref.kv.indexer import IndexerLayout
from rtp_ref.kv.layouts import MlaLayout

#: ``dst`` dtype -> the kernel's ``out`` selector
_OUT = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}


class _GatherParams(ctypes.Structure):
    """Mirror of ``struct RtpRefGatherParams`` in gather.cu: int64 fields, no padding."""

    _fields_ = [(name, ctypes.c_int64) for name in (
        "cache", "dst", "table", "cu", "starts", "scale",
        "rows", "batch", "block_size", "block_bytes", "table_row", "table_col", "dst_row", "dst_col",
        "table_i32", "cu_i32", "starts_i32",
        "r", "p", "nope_mode", "rope_mode", "nope_off", "rope_off", "data_bytes", "trail_bytes",
        "tile", "scale_ue8m0", "scale_trailing", "scale_off", "in_bf16", "out",
        "man_bits", "emin", "max_code", "neg_zero", "has_inf", "inf_code")]


class _IndexerGatherParams(ctypes.Structure):
    """Mirror of ``struct RtpRefIndexerGatherParams`` in gather.cu: int64 fields, no padding."""

    _fields_ = [(name, ctypes.c_int64) for name in (
        "cache", "dst_k", "dst_scale", "table", "cu", "rows", "batch", "block_size", "block_bytes", "table_row",
        "table_col", "k_row", "scale_row", "table_i32", "cu_i32", "head_dim", "scale_bytes")]


@functools.cache
def _library(arch: str) -> ctypes.CDLL:
    lib = build_library("gather.cu", arch)
    lib.rtp_ref_mla_gather.argtypes = [ctypes.POINTER(_GatherParams), ctypes.c_void_p]
    lib.rtp_ref_indexer_gather.argtypes = [ctypes.POINTER(_IndexerGatherParams), ctypes.c_void_p]
    lib.rtp_ref_mla_gather.restype = lib.rtp_ref_indexer_gather.restype = ctypes.c_int
    lib.rtp_ref_gather_error_string.argtypes = [ctypes.c_int]
    lib.rtp_ref_gather_error_string.restype = ctypes.c_char_p
    return lib


def cuda_gather(layout: MlaLayout, kv_cache: torch.Tensor, dst: torch.Tensor, block_table: torch.Tensor,
                cu_seq_lens: torch.Tensor, scale: torch.Tensor, seq_starts: torch.Tensor | None = None) -> None:
    """The gather of rtp_ref.kv.gather on checked arguments (``MlaGatherKernel`` checks them), in one CUDA launch
    on the current stream; nothing is launched for a ``dst`` of no rows."""
    plan = WritePlan.of(layout)
    t = plan.traits
    params = _GatherParams(
        cache=kv_cache.data_ptr(), dst=dst.data_ptr(), table=block_table.data_ptr(), cu=cu_seq_lens.data_ptr(),
        starts=seq_starts.data_ptr() if seq_starts is not None else 0, scale=scale.data_ptr(),
        rows=dst.shape[0], batch=block_table.shape[0], block_size=kv_cache.shape[1],
        block_bytes=kv_cache.stride(0) * kv_cache.element_size(), table_row=block_table.stride(0),
        table_col=block_table.stride(1), dst_row=dst.stride(0), dst_col=dst.stride(1),
        table_i32=block_table.dtype == torch.int32, cu_i32=cu_seq_lens.dtype == torch.int32,
        starts_i32=seq_starts is not None and seq_starts.dtype == torch.int32,
        r=plan.kv_lora_rank, p=plan.rope_dim, nope_mode=int(plan.nope_mode), rope_mode=int(plan.rope_mode),
        nope_off=plan.nope_offset, rope_off=plan.rope_offset, data_bytes=plan.data_bytes,
        trail_bytes=plan.trailing_bytes, tile=max(plan.tile, 1), scale_ue8m0=plan.scale_ue8m0,
        scale_trailing=plan.scale_trailing, scale_off=plan.scale_offset, in_bf16=read16(kv_cache) == torch.bfloat16,
        out=_OUT[dst.dtype], man_bits=t.man_bits, emin=t.emin, max_code=t.max_code, neg_zero=t.negative_zero,
        has_inf=t.has_inf, inf_code=t.inf_code,
    )
    _launch("rtp_ref_mla_gather", params, kv_cache.device)


def cuda_indexer_gather(layout: IndexerLayout, kv_cache: torch.Tensor, dst_k: torch.Tensor,
                        dst_scale: torch.Tensor, block_table: torch.Tensor, cu_seq_lens: torch.Tensor) -> None:
    """The indexer gather of rtp_ref.kv.indexer_gather on checked arguments (columns contiguous), in one CUDA
    launch on the current stream; nothing is launched for no rows."""
    params = _IndexerGatherParams(
        cache=kv_cache.data_ptr(), dst_k=dst_k.data_ptr(), dst_scale=dst_scale.data_ptr(),
        table=block_table.data_ptr(), cu=cu_seq_lens.data_ptr(), rows=dst_k.shape[0], batch=block_table.shape[0],
        block_size=kv_cache.shape[1], block_bytes=kv_cache.stride(0), table_row=block_table.stride(0),
        table_col=block_table.stride(1), k_row=dst_k.stride(0), scale_row=dst_scale.stride(0),
        table_i32=block_table.dtype == torch.int32, cu_i32=cu_seq_lens.dtype == torch.int32,
        head_dim=layout.data_bytes_per_token, scale_bytes=layout.trailing_bytes_per_token,
    )
    _launch("rtp_ref_indexer_gather", params, kv_cache.device)


def _launch(entry: str, params: ctypes.Structure, device: torch.device) -> None:
    """Call ``entry`` of the library with ``params`` on the current stream of ``device``."""
    lib = _library(arch_of(device))
    with on_device(device.index):
        code = getattr(lib, entry)(ctypes.byref(params), raw_stream(device.index))
    if code != 0:
        raise RuntimeError(f"cuda kernel launch failed: {lib.rtp_ref_gather_error_string(code).decode()}")
