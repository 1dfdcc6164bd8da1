"""Kernels that are correct writers (and readers) but behave as production kernels do at the edges of their inputs.

Loaded through ``RTP_REF_KERNELS=tests.mutants.hardening:kernels``; tests/mutants/test_input_hardening.py
certifies them. Each is the reference writer (``Mutant``, ``MhaMutant``) or reader (``GatherMutant``) with one
behaviour changed: what it refuses, whether it declares so, what its empty call leaves.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from rtp_ref.kernels.protocol import UnsupportedLayoutError
from rtp_ref.kv.cache import scatter_entries
from rtp_ref.kv.layouts import MlaLayout
from rtp_ref.kv.mha_paged import MhaPagedLayout, reference_reshape_and_cache_flash
from tests.mutants.gather_mutants import GatherMutant
from tests.mutants.kernels import Mutant
from tests.mutants.mha_indexer_mutants import MhaMutant


class NoSlotCheck(Mutant):
    """Validates no slot: slot == capacity is written where its address points, one block past the cache
    (as a GPU kernel's unchecked pointer arithmetic does). Otherwise a correct writer."""

    name = "hardening-no-slot-check"
    kv_cache_dtypes = ("auto", "fp8")

    def __call__(self, kv_c: torch.Tensor, k_pe: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
                 kv_cache_dtype: str, scale: torch.Tensor) -> None:
        if kv_cache_dtype not in self.kv_cache_dtypes or self.contract is None:
            raise UnsupportedLayoutError(f"{self.name} does not support {kv_cache_dtype}")
        layout = self.contract.layout(kv_cache_dtype, kv_c.shape[1], k_pe.shape[1])
        self.check_cache_dtype(layout, kv_c, kv_cache)
        self.write(layout, kv_c, k_pe, kv_cache, slot_mapping, scale)

    def write(self, layout: MlaLayout, kv_c: torch.Tensor, k_pe: torch.Tensor, kv_cache: torch.Tensor,
              slots: torch.Tensor, scale: torch.Tensor) -> None:
        keep = slots >= 0
        entries = self.entries(layout, kv_c[: slots.numel()][keep], k_pe[: slots.numel()][keep], scale)
        blocks = int(slots.max()) // kv_cache.shape[1] + 1 if slots.numel() else 0
        # the cache's own strides, over as many blocks as the slots reach: no bounds, like a raw pointer
        reach = torch.as_strided(kv_cache, (max(blocks, kv_cache.shape[0]), *kv_cache.shape[1:]), kv_cache.stride(),
                                 kv_cache.storage_offset())
        scatter_entries(layout, entries, reach, slots[keep])


class DeclaresContiguous(Mutant):
    """Declares that it needs contiguous inputs and refuses others with a clear error, before writing."""

    name = "hardening-declares-contiguous"
    kv_cache_dtypes = ("auto", "fp8")
    input_requirements = ("contiguous",)

    def __call__(self, kv_c: torch.Tensor, k_pe: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
                 kv_cache_dtype: str, scale: torch.Tensor) -> None:
        if not (kv_c.is_contiguous() and k_pe.is_contiguous()):
            raise ValueError(f"{self.name} needs contiguous kv_c and k_pe; got strides {kv_c.stride()} and "
                             f"{k_pe.stride()}")
        super().__call__(kv_c, k_pe, kv_cache, slot_mapping, kv_cache_dtype, scale)


class AssumesContiguous(Mutant):
    """Declares nothing but reads its inputs as if they were contiguous rows (ignores the row stride)."""

    name = "hardening-assumes-contiguous"
    kv_cache_dtypes = ("auto", "fp8")

    def __call__(self, kv_c: torch.Tensor, k_pe: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
                 kv_cache_dtype: str, scale: torch.Tensor) -> None:
        packed = [torch.as_strided(t, t.shape, (t.shape[1], 1), t.storage_offset()) if t.numel() else t
                  for t in (kv_c, k_pe)]
        super().__call__(packed[0], packed[1], kv_cache, slot_mapping, kv_cache_dtype, scale)


class LaunchErrorOnEmpty(Mutant):
    """Writes correctly, but a call with no tokens fails the way an empty-grid CUDA launch does."""

    name = "hardening-launch-error-on-empty"
    kv_cache_dtypes = ("auto",)

    def __call__(self, kv_c: torch.Tensor, k_pe: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
                 kv_cache_dtype: str, scale: torch.Tensor) -> None:
        if slot_mapping.numel() == 0:
            raise RuntimeError("CUDA error: invalid argument")
        super().__call__(kv_c, k_pe, kv_cache, slot_mapping, kv_cache_dtype, scale)


class DeclaresRankLimit(Mutant):
    """Declares (``supports``) that it writes kv_lora_rank 512 only, and refuses other ranks before writing."""

    name = "hardening-declares-rank-limit"
    kv_cache_dtypes = ("auto", "fp8")

    def supports(self, layout: MlaLayout) -> str | None:
        return None if layout.kv_lora_rank == 512 else f"kv_lora_rank {layout.kv_lora_rank}: it supports 512 only"

    def write(self, layout: MlaLayout, kv_c: torch.Tensor, k_pe: torch.Tensor, kv_cache: torch.Tensor,
              slots: torch.Tensor, scale: torch.Tensor) -> None:
        limit = self.supports(layout)
        if limit:
            raise ValueError(f"{self.name}: {limit}")
        super().write(layout, kv_c, k_pe, kv_cache, slots, scale)


class MhaNoSlotCheck(MhaMutant):
    """The MHA write validating nothing: slot == capacity is written where its address points, one block past each
    cache (as a GPU kernel's unchecked pointer arithmetic does). Otherwise a correct writer."""

    name = "hardening-mha-no-slot-check"

    def write(self, layout: MhaPagedLayout, key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor,
              value_cache: torch.Tensor, slots: torch.Tensor, k_scale: torch.Tensor, v_scale: torch.Tensor) -> None:
        blocks = int(slots.max()) // key_cache.shape[1] + 1 if slots.numel() else 0

        def reach(cache: torch.Tensor) -> torch.Tensor:  # the cache's own strides, no bounds: a raw pointer
            return torch.as_strided(cache, (max(blocks, cache.shape[0]), *cache.shape[1:]), cache.stride(),
                                    cache.storage_offset())

        reference_reshape_and_cache_flash(layout, key, value, reach(key_cache), reach(value_cache), slots, k_scale,
                                          v_scale)


class RefusesInt64AndWideDst(GatherMutant):
    """A correct MLA reader that refuses, before reading, index tensors other than int32 and a ``dst`` other than
    bf16, as vLLM's readers do ('block_table must be int32'; its fp8_ds_mla gather takes a bf16 dst only), and
    declares nothing."""

    name = "hardening-reader-int32-bf16-undeclared"
    kv_cache_dtypes = ("auto", "fp8")

    def read(self, layout: MlaLayout, kv_cache: torch.Tensor, dst: torch.Tensor, block_table: torch.Tensor,
             cu_seq_lens: torch.Tensor, scale: torch.Tensor, seq_starts: torch.Tensor | None) -> None:
        for arg, t in (("block_table", block_table), ("cu_seq_lens", cu_seq_lens), ("seq_starts", seq_starts)):
            if t is not None and t.dtype != torch.int32:
                raise ValueError(f"{arg} must be int32")
        if dst.dtype != torch.bfloat16:
            raise ValueError(f"dst must be bf16, got {dst.dtype}")
        super().read(layout, kv_cache, dst, block_table, cu_seq_lens, scale, seq_starts)


class DeclaresInt32Bf16(RefusesInt64AndWideDst):
    """The same reader, declaring what it refuses as its input domain."""

    name = "hardening-reader-int32-bf16"
    input_domain: ClassVar[dict[str, tuple[str, ...]]] = {"block_table": ("int32",), "dst": ("bf16",)}


class DeclaresFp32DstOnly(GatherMutant):
    """A correct MLA reader that declares, and takes, an fp32 ``dst`` only: a domain without the bf16 dst engines
    gather DeepSeek's cache into."""

    name = "hardening-reader-fp32-only"
    kv_cache_dtypes = ("fp8",)
    input_domain: ClassVar[dict[str, tuple[str, ...]]] = {"dst": ("fp32",)}

    def read(self, layout: MlaLayout, kv_cache: torch.Tensor, dst: torch.Tensor, block_table: torch.Tensor,
             cu_seq_lens: torch.Tensor, scale: torch.Tensor, seq_starts: torch.Tensor | None) -> None:
        if dst.dtype != torch.float32:
            raise ValueError(f"dst must be fp32, got {dst.dtype}")
        super().read(layout, kv_cache, dst, block_table, cu_seq_lens, scale, seq_starts)


class MhaSameScaleShapes(MhaMutant):
    """A correct MHA write that refuses k and v scales of different shapes (as vLLM's does) and declares so."""

    name = "hardening-mha-same-scale-shapes"
    kv_cache_dtypes = ("fp8",)
    input_domain: ClassVar[dict[str, tuple[str, ...]]] = {"scales": ("tensor", "head", "0d")}

    def write(self, layout: MhaPagedLayout, key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor,
              value_cache: torch.Tensor, slots: torch.Tensor, k_scale: torch.Tensor, v_scale: torch.Tensor) -> None:
        if k_scale.shape != v_scale.shape:
            raise ValueError(f"k_scale and v_scale must have the same shape, got {list(k_scale.shape)} and "
                             f"{list(v_scale.shape)}")
        super().write(layout, key, value, key_cache, value_cache, slots, k_scale, v_scale)


def kernels() -> list[Mutant | MhaMutant | GatherMutant]:
    """The entry point for ``RTP_REF_KERNELS``."""
    return [NoSlotCheck(), DeclaresContiguous(), AssumesContiguous(), LaunchErrorOnEmpty(), DeclaresRankLimit(),
            MhaNoSlotCheck(), RefusesInt64AndWideDst(), DeclaresInt32Bf16(), DeclaresFp32DstOnly(),
            MhaSameScaleShapes()]
