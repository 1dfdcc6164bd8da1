"""Known-bad kernels of the large-address tier: the reference with one offset computed in 32 bits, as the
production bugs had it (sglang #40351: ``page * BYTES_PER_PAGE`` in int32; FlagGems #6241: only the scale
offset). On a small cache no offset passes 2^31, so they write what the reference writes: the regular tier
certifies them, and only the large tier can catch them.

A wrapped offset is ``((offset + 2^31) mod 2^32) - 2^31`` from the cache's base, as an int32 holds it; the
bytes go there through the cache's storage (the large case keeps 2 GiB of its buffer before the cache, so
the wrapped place lies inside it, as in the pool of vLLM #50427).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import torch
import triton
import triton.language as tl

from rtp_ref.contract import WriteContract
from rtp_ref.kernels.protocol import UnsupportedLayoutError
from rtp_ref.kernels.triton_fp8 import interpreted
from rtp_ref.kv.entries import encode_entries
from rtp_ref.kv.fields import Placement, Source
from rtp_ref.kv.indexer import indexer_layout_for, reference_indexer_k_quant_and_cache
from rtp_ref.ops import INDEXER_OP
from tests.mutants.mha_indexer_mutants import _BoundMutant


def _wrap32(offset: int) -> int:
    """``offset`` as a signed 32-bit integer holds it."""
    return ((offset + (1 << 31)) % (1 << 32)) - (1 << 31)


def _storage_bytes(cache: torch.Tensor) -> tuple[torch.Tensor, int]:
    """The cache's whole storage as uint8, and the cache's first byte in it."""
    flat = torch.empty(0, dtype=torch.uint8, device=cache.device).set_(cache.untyped_storage())
    return flat, cache.storage_offset() * cache.element_size()


class Int32ByteOffsets(_BoundMutant):
    """concat_and_cache_mla whose entry offset ``block * stride(0) + row * entry`` is an int32: past 2^31
    bytes from the cache's base the entry lands at the wrapped offset. Layouts whose entry is one run of
    bytes (every one but fp8_model1_mla)."""

    name = "mutant-large-int32-byte-offsets"
    kv_cache_dtypes: ClassVar[tuple[str, ...]] = ("auto", "fp8", "fp8_ds_mla", "fp8_rocm_compact")

    def __call__(self, kv_c: torch.Tensor, k_pe: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
                 kv_cache_dtype: str, scale: torch.Tensor) -> None:
        if kv_cache_dtype not in self.kv_cache_dtypes or self.contract is None:
            raise UnsupportedLayoutError(f"{self.name} does not support {kv_cache_dtype}")
        layout = self.contract.layout(kv_cache_dtype, kv_c.shape[1], k_pe.shape[1])
        if kv_cache.dtype != layout.cache_dtype(kv_c.dtype):
            raise ValueError(f"{self.name}: kv_cache is {kv_cache.dtype}; {layout.name} needs "
                             f"{layout.cache_dtype(kv_c.dtype)}")
        flat, base = _storage_bytes(kv_cache)
        itemsize = kv_cache.element_size()
        keep = slot_mapping >= 0
        entries = encode_entries(layout, kv_c[: slot_mapping.numel()][keep], k_pe[: slot_mapping.numel()][keep], scale)
        for entry, slot in zip(entries, slot_mapping[keep].tolist(), strict=True):
            block, row = divmod(slot, kv_cache.shape[1])
            at = base + _wrap32(block * kv_cache.stride(0) * itemsize + row * kv_cache.stride(1) * itemsize)
            flat[at:at + entry.numel()] = entry


class Int32ScaleOffset(_BoundMutant):
    """indexer_k_quant_and_cache with int64 value offsets and an int32 scale offset (FlagGems #6241): a token's
    scales past 2^31 bytes from the cache's base land at the wrapped offset; its values are right."""

    name = "mutant-large-int32-scale-offset"
    op = INDEXER_OP
    scale_fmts: ClassVar[tuple[str, ...]] = ("none", "ue8m0")

    def __call__(self, k: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor, quant_block_size: int,
                 scale_fmt: str) -> None:
        if scale_fmt not in self.scale_fmts or self.contract is None:
            raise UnsupportedLayoutError(f"{self.name} does not support {scale_fmt}")
        layout = indexer_layout_for(self.contract, self.contract.flags, k.shape[1], quant_block_size)
        scale = layout.field(Source.SCALE)
        assert scale.placement is Placement.BLOCK_TRAILING
        flat, base = _storage_bytes(kv_cache)
        block_size = kv_cache.shape[1]
        places = []
        for slot in slot_mapping[slot_mapping >= 0].tolist():
            block, row = divmod(slot, block_size)
            true = (block * kv_cache.stride(0) + block_size * layout.data_bytes_per_token
                    + row * layout.trailing_bytes_per_token + scale.offset)
            places.append((base + true, base + _wrap32(true), flat[base + true: base + true + scale.size].clone()))
        reference_indexer_k_quant_and_cache(layout, k, kv_cache, slot_mapping, scale_fmt)
        for true, wrapped, before in places:
            if wrapped != true:
                written = flat[true: true + scale.size].clone()
                flat[true: true + scale.size] = before
                flat[wrapped: wrapped + scale.size] = written


@triton.jit
def _copy_rows_int32(src, dst, slots, row_bytes, stride0, stride1, block_size, BLOCK: tl.constexpr):
    """Token t's ``row_bytes`` bytes to its slot's row, the row's offset in int32 (the fault)."""
    t = tl.program_id(0)
    slot = tl.load(slots + t).to(tl.int32)
    if slot >= 0:
        at = (slot // block_size) * stride0 + (slot % block_size) * stride1  # int32: wraps past 2^31
        offs = tl.arange(0, BLOCK)
        mask = offs < row_bytes
        tl.store(dst + at + offs, tl.load(src + t * row_bytes + offs, mask=mask), mask=mask)


class Int32RowCopy(_BoundMutant, ABC):
    """A concat_and_cache_mla of the ``auto`` layout that copies each token's kv_c and k_pe bytes to its slot's
    row with a device kernel whose row offset is an int32 (``copy``, by a subclass)."""

    kv_cache_dtypes: ClassVar[tuple[str, ...]] = ("auto",)
    conversion_path = "hardware"  # it converts nothing: auto copies bits

    def __call__(self, kv_c: torch.Tensor, k_pe: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
                 kv_cache_dtype: str, scale: torch.Tensor) -> None:
        if kv_cache_dtype not in self.kv_cache_dtypes:
            raise UnsupportedLayoutError(f"{self.name} does not support {kv_cache_dtype}")
        if kv_cache.dtype != kv_c.dtype:
            raise ValueError(f"{self.name}: auto stores the inputs' {kv_c.dtype}; kv_cache is {kv_cache.dtype}")
        tokens = slot_mapping.numel()
        if tokens == 0:
            return
        rows = torch.cat([kv_c[:tokens], k_pe[:tokens]], dim=1).contiguous().view(torch.uint8)
        dst = kv_cache.view(torch.uint8)
        self.copy(rows, dst, slot_mapping, kv_cache.shape[1])

    @abstractmethod
    def copy(self, rows: torch.Tensor, dst: torch.Tensor, slots: torch.Tensor, block_size: int) -> None:
        """Token t's row of ``rows`` to slot ``slots[t]`` of ``dst`` (a byte view of the cache)."""


class TritonInt32ByteOffsets(Int32RowCopy):
    """The int32 row copy in Triton, as sglang #40351's store kernel had it: right below 2^31 bytes and at the
    wrapped offset above. Runs on a GPU, or in Triton's interpreter."""

    name = "mutant-large-triton-int32-offsets"

    def __init__(self, contract: WriteContract | None = None) -> None:
        super().__init__(contract)
        # as the built-in Triton kernels: the interpreter runs it on CPU tensors, a GPU build on CUDA ones only
        self.devices = ("cpu",) if interpreted() else ("cuda",)  # type: ignore[assignment]

    def copy(self, rows: torch.Tensor, dst: torch.Tensor, slots: torch.Tensor, block_size: int) -> None:
        row_bytes = rows.shape[1]
        _copy_rows_int32[(slots.numel(),)](rows, dst, slots, row_bytes, dst.stride(0), dst.stride(1), block_size,
                                            BLOCK=triton.next_power_of_2(row_bytes))


#: each large-tier mutant and the check that must catch it
LARGE_EXPECTED: dict[type[Int32ByteOffsets] | type[Int32ScaleOffset] | type[TritonInt32ByteOffsets], str] = {
    Int32ByteOffsets: "layout.offset_width",
    Int32ScaleOffset: "layout.offset_width",
    TritonInt32ByteOffsets: "layout.offset_width",
}


def large_mutants() -> list[object]:
    """The entry point for ``RTP_REF_KERNELS``: one instance of each large-tier mutant."""
    return [cls() for cls in LARGE_EXPECTED]
