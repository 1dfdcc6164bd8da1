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

from tests.mutants.large_mutants import Int32RowCopy

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


class CudaInt32ByteOffsets(Int32RowCopy):
    """The int32 row copy in CUDA C++ (module doc)."""

    name = "mutant-large-cuda-int32-offsets"
    devices = ("cuda",)  # type: ignore[assignment]
    #: its kernel reads int64 slots (``data_ptr<int64_t>`` refuses an int32 mapping before launching)
    input_domain: ClassVar[dict[str, tuple[str, ...]]] = {"slot_mapping": ("int64",)}

    def copy(self, rows: torch.Tensor, dst: torch.Tensor, slots: torch.Tensor, block_size: int) -> None:
        _module().copy_rows(rows, dst, slots, rows.shape[1], dst.stride(0), dst.stride(1), block_size)


def mutants() -> list[object]:
    """The entry point for ``RTP_REF_KERNELS``."""
    return [CudaInt32ByteOffsets()]
