"""The CUDA C++ version of the large-address tier's 32-bit row-offset mutant (GPU only; built at first use with
torch's cpp_extension): a ``concat_and_cache_mla`` of the ``auto`` layout whose kernel computes a row's byte
offset ``block * stride0 + row * stride1`` in ``int``, as CUDA cache writers did (tests/mutants/large_mutants.py
has the reference and Triton versions and the bug reports). Past 2^31 bytes from the cache's base the row lands
at the wrapped offset, inside the large case's buffer before the cache; the tier must name it
``layout.offset_width``."""

from __future__ import annotations

import functools
from typing import Any, ClassVar

import torch

from rtp_ref.kernels.protocol import UnsupportedLayoutError
from tests.mutants.family_mutants import _BoundMutant

_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void copy_rows_int32(const uint8_t* src, uint8_t* dst, const int64_t* slots, int row_bytes, int stride0,
                                int stride1, int block_size) {
  const int t = blockIdx.x;
  const int slot = static_cast<int>(slots[t]);
  if (slot < 0) return;
  const int at = (slot / block_size) * stride0 + (slot % block_size) * stride1;  // int: wraps past 2^31 (the fault)
  for (int i = threadIdx.x; i < row_bytes; i += blockDim.x) dst[at + i] = src[static_cast<int64_t>(t) * row_bytes + i];
}

void copy_rows(torch::Tensor src, torch::Tensor dst, torch::Tensor slots, int64_t row_bytes, int64_t stride0,
               int64_t stride1, int64_t block_size) {
  copy_rows_int32<<<static_cast<unsigned>(slots.numel()), 256, 0, at::cuda::getCurrentCUDAStream()>>>(
      src.data_ptr<uint8_t>(), dst.data_ptr<uint8_t>(), slots.data_ptr<int64_t>(), static_cast<int>(row_bytes),
      static_cast<int>(stride0), static_cast<int>(stride1), static_cast<int>(block_size));
}
"""


@functools.cache
def _module() -> Any:
    from torch.utils.cpp_extension import load_inline

    return load_inline("rtp_ref_mutant_cuda_int32_rows", cpp_sources="void copy_rows(torch::Tensor src, "
                       "torch::Tensor dst, torch::Tensor slots, int64_t row_bytes, int64_t stride0, int64_t stride1, "
                       "int64_t block_size);", cuda_sources=_SOURCE, functions=["copy_rows"])


class CudaInt32ByteOffsets(_BoundMutant):
    """concat_and_cache_mla of ``auto`` in CUDA C++ with an ``int`` row offset (module doc)."""

    name = "mutant-large-cuda-int32-offsets"
    kv_cache_dtypes: ClassVar[tuple[str, ...]] = ("auto",)
    devices = ("cuda",)  # type: ignore[assignment]
    conversion_path = "hardware"  # it converts nothing: auto copies bits

    def __call__(self, kv_c: torch.Tensor, k_pe: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
                 kv_cache_dtype: str, scale: torch.Tensor) -> None:
        if kv_cache_dtype not in self.kv_cache_dtypes:
            raise UnsupportedLayoutError(f"{self.name} does not support {kv_cache_dtype}")
        tokens = slot_mapping.numel()
        if tokens == 0:
            return
        rows = torch.cat([kv_c[:tokens], k_pe[:tokens]], dim=1).contiguous().view(torch.uint8)
        dst = kv_cache.view(torch.uint8)
        _module().copy_rows(rows, dst, slot_mapping, rows.shape[1], dst.stride(0), dst.stride(1), kv_cache.shape[1])


def mutants() -> list[object]:
    """The entry point for ``RTP_REF_KERNELS``."""
    return [CudaInt32ByteOffsets()]
