"""rtp-ref's built-in readers of the MLA cache (``gather_and_maybe_dequant_cache``, rtp_ref.ops), as protocol
kernels: ``reference-gather`` (the reference, on any device through the CPU), ``triton-gather`` and
``cuda-gather``.

A reader works its layout out from the bound contract (fp8 format, conversion mode, layout flags) and the call:
``kv_cache_dtype`` names the layout, ``dst``'s width is ``kv_lora_rank + rope_dim`` with ``rope_dim`` 64 (DeepSeek's
rope, which vLLM's and FlashMLA's readers fix too). Every call is checked on the host, values included
(rtp_ref.kv.gather.validate_gather_args, a device sync), before anything is read: a reader's checks are not yet
on the device, so none of them claims ``graph_safe``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

import torch

from rtp_ref.errors import RtpRefError
from rtp_ref.kernels.contract import DeviceContracts, WriteContract, check_call
from rtp_ref.kv.gather import gather_and_maybe_dequant_cache, validate_gather_args
from rtp_ref.kv.layouts import MlaLayout
from rtp_ref.ops import MLA_GATHER_OP, OPS
from rtp_ref.platform import MLA_LAYOUT_NAMES

#: the rope width a reader assumes (``dst``'s last 64 columns are ``k_pe``)
ROPE_DIM = 64
#: a reader of checked arguments: ``(layout, kv_cache, dst, block_table, cu_seq_lens, scale, seq_starts)``
Reader = Callable[..., None]


def gather_layout(contract: WriteContract, kv_cache_dtype: str, dst: object) -> MlaLayout:
    """The layout a gather into ``dst`` reads under ``contract`` (module doc); RtpRefError naming ``dst`` when it
    is not a 2-D tensor wider than the rope."""
    if not isinstance(dst, torch.Tensor) or dst.dim() != 2 or dst.shape[1] <= ROPE_DIM:
        raise RtpRefError(f"dst: {getattr(dst, 'shape', dst)}; valid: a tensor [tokens, kv_lora_rank + {ROPE_DIM}]")
    return contract.layout(kv_cache_dtype, dst.shape[1] - ROPE_DIM, ROPE_DIM)


class MlaGatherKernel:
    """``gather_and_maybe_dequant_cache(kv_cache, dst, block_table, cu_seq_lens, kv_cache_dtype, scale,
    seq_starts=None)`` by one reader (module doc). Unbound, it follows the platform table of the cache's device."""

    op = MLA_GATHER_OP
    kv_cache_dtypes: Collection[str] = MLA_LAYOUT_NAMES
    #: every call reads its index tensors' values on the host
    graph_safe = False
    #: decoding has one path: exact integer arithmetic (no fp8 conversion instruction is involved)
    conversion_path = "decode"

    def __init__(self, impl: str, reader: Reader, devices: Collection[str],
                 contract: WriteContract | None = None) -> None:
        self.impl, self.name = impl, f"{impl}{OPS[MLA_GATHER_OP].name_suffix}"
        self.reader, self.devices, self.contract = reader, tuple(devices), contract
        self.launch_count = 0
        self._contracts = DeviceContracts()

    def bind(self, contract: WriteContract) -> MlaGatherKernel:
        """This reader following ``contract``."""
        return MlaGatherKernel(self.impl, self.reader, self.devices, contract)

    def __call__(self, kv_cache: torch.Tensor, dst: torch.Tensor, block_table: torch.Tensor,
                 cu_seq_lens: torch.Tensor, kv_cache_dtype: str, scale: torch.Tensor,
                 seq_starts: torch.Tensor | None = None) -> None:
        name = check_call(self.name, self.kv_cache_dtypes, self.devices, kv_cache_dtype, kv_cache)
        if not isinstance(kv_cache, torch.Tensor):
            raise RtpRefError(f"kv_cache: {kv_cache!r}; valid: a tensor [num_blocks, block_size, entry]")
        layout = gather_layout(self.contract or self._contracts.of(kv_cache.device), name, dst)
        validate_gather_args(layout, kv_cache, dst, block_table, cu_seq_lens, scale, seq_starts)
        self.reader(layout, kv_cache, dst, block_table, cu_seq_lens, scale, seq_starts)
        self.launch_count += 1


def gather_kernels() -> list[MlaGatherKernel]:
    """The built-in readers that can run here, unbound: the reference always, triton and cuda where the writers
    of those names can run."""
    from rtp_ref.kernels.builtin import unavailable_builtin_kernels

    kernels = [MlaGatherKernel("reference", gather_and_maybe_dequant_cache, ("cpu", "cuda"))]
    missing = unavailable_builtin_kernels()
    if "triton" not in missing:
        from rtp_ref.kernels.triton_fp8 import interpreted
        from rtp_ref.kernels.triton_gather import triton_gather

        kernels.append(MlaGatherKernel("triton", triton_gather, ("cpu",) if interpreted() else ("cuda",)))
    if "cuda" not in missing:
        from rtp_ref.kernels.cuda_gather import cuda_gather

        kernels.append(MlaGatherKernel("cuda", cuda_gather, ("cuda",)))
    return kernels
