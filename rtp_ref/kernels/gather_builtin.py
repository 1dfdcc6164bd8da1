"""rtp-ref's built-in readers (rtp_ref.ops), as protocol kernels: of the MLA cache (``gather_and_maybe_dequant_cache``:
``reference-gather``, the reference on any device through the CPU, ``triton-gather``, ``cuda-gather``) and of the
indexer cache (``cp_gather_indexer_k_quant_cache``: ``reference-indexer-gather``, ``triton-indexer-gather``,
``cuda-indexer-gather``).

A reader works its layout out from the bound contract (fp8 format, conversion mode, layout flags) and the call:
``kv_cache_dtype`` names the layout, ``dst``'s width is ``kv_lora_rank + rope_dim`` with ``rope_dim`` 64 (DeepSeek's
rope, which vLLM's and FlashMLA's readers fix too). Every call is checked on the host before anything is read
(rtp_ref.kv.gather.validate_gather_args): its metadata once per call signature (rtp_ref.kernels.call_signature: a
later call with the same shapes, strides, dtypes, devices and alignments reuses the checked read), its index values
every call (``check_sequences``, a device sync): a reader's checks are not yet on the device, so none of them
claims ``graph_safe``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection
from typing import Any, TypeVar, cast

import torch

from rtp_ref.contract import DeviceContracts, WriteContract, check_call
from rtp_ref.errors import RtpRefError, UnsupportedLayoutError
from rtp_ref.kernels.call_signature import Launch, LaunchCache, call_signature
from rtp_ref.kernels.write_plan import COMPILED_LAYOUT_NAMES
from rtp_ref.kv.gather import check_sequences, gather_and_maybe_dequant_cache, validate_gather_args
from rtp_ref.kv.indexer import SCALE_FORMATS, indexer_layout_for
from rtp_ref.kv.indexer_gather import gather_indexer_k_quant_cache, quant_block_of, validate_indexer_gather_args
from rtp_ref.kv.layouts import MlaLayout
from rtp_ref.kv.validate import check_tensor
from rtp_ref.ops import INDEXER_GATHER_OP, MLA_GATHER_OP, OPS
from rtp_ref.platform import MLA_LAYOUT_NAMES

#: the rope width a reader assumes (``dst``'s last 64 columns are ``k_pe``)
ROPE_DIM = 64
#: a reader of checked arguments: ``(layout, kv_cache, dst, block_table, cu_seq_lens, scale, seq_starts)``
Reader = Callable[..., None]
#: a reader's read prepared for one call signature: ``prepare(layout, *arguments)`` gives ``launch(*arguments)``
#: (rtp_ref.kernels.call_signature.Launch) for later calls with the same metadata
Prepare = Callable[..., Launch]


def unprepared(reader: Reader) -> Prepare:
    """The ``Prepare`` of a reader with nothing to prepare: each launch is a call of ``reader`` with the layout."""
    def prepare(layout: object, *arguments: object) -> Launch:
        return functools.partial(reader, layout)

    return prepare


def gather_layout(contract: WriteContract, kv_cache_dtype: str, dst: object) -> MlaLayout:
    """The layout a gather into ``dst`` reads under ``contract`` (module doc); RtpRefError naming ``dst`` when it
    is not a 2-D tensor wider than the rope."""
    if not isinstance(dst, torch.Tensor) or dst.dim() != 2 or dst.shape[1] <= ROPE_DIM:
        raise RtpRefError(f"dst: {getattr(dst, 'shape', dst)}; valid: a tensor [tokens, kv_lora_rank + {ROPE_DIM}]")
    return contract.layout(kv_cache_dtype, dst.shape[1] - ROPE_DIM, ROPE_DIM)


_R = TypeVar("_R", bound="_Reader")
_L = TypeVar("_L")


class _Reader:
    """What the readers of both ops share: a name (the implementation and the op's suffix), devices, the contract
    they follow (the platform table of the cache's device when unbound) and a launch counter."""

    op: str
    #: every call reads its index tensors' values on the host
    graph_safe = False
    #: decoding has one path: exact integer arithmetic (no fp8 conversion instruction is involved)
    conversion_path = "decode"

    def __init__(self, impl: str, prepare: Prepare, devices: Collection[str],
                 contract: WriteContract | None = None) -> None:
        self.impl, self.name = impl, f"{impl}{OPS[self.op].name_suffix}"
        #: the read of one call signature: the Triton readers' compiled launch, the others' reader (``unprepared``)
        self.prepare, self.devices, self.contract = prepare, tuple(devices), contract
        self.launch_count = 0
        self._contracts = DeviceContracts()
        # built once per contract, layout and width: building a layout from its record takes longer than the
        # checks of a decode-sized call
        self._layouts: dict[tuple[WriteContract, str, int, int], Any] = {}
        # the checked read of each call signature (rtp_ref.kernels.call_signature): a later call with the same
        # metadata checks only the index values (module doc)
        self._launches = LaunchCache()

    def layout_of(self, key: tuple[WriteContract, str, int, int], build: Callable[[], _L]) -> _L:
        """The layout of ``key`` (contract, layout or scale format, and the two widths that size it), made by
        ``build()`` the first time (its errors are raised every time: nothing is kept for them)."""
        found = self._layouts.get(key)
        if found is None:
            found = self._layouts[key] = build()
        return cast(_L, found)

    def bind(self: _R, contract: WriteContract) -> _R:
        """This reader following ``contract``."""
        return type(self)(self.impl, self.prepare, self.devices, contract)

    def contract_for(self, device: torch.device) -> WriteContract:
        """The bound contract, or the platform table of ``device`` when unbound."""
        return self.contract or self._contracts.of(device)


class MlaGatherKernel(_Reader):
    """``gather_and_maybe_dequant_cache(kv_cache, dst, block_table, cu_seq_lens, kv_cache_dtype, scale,
    seq_starts=None)`` by one reader (module doc)."""

    op = MLA_GATHER_OP

    def __init__(self, impl: str, prepare: Prepare, devices: Collection[str], contract: WriteContract | None = None,
                 kv_cache_dtypes: Collection[str] = MLA_LAYOUT_NAMES) -> None:
        super().__init__(impl, prepare, devices, contract)
        #: the layouts it reads: every one for the reference, those of the compiled plan for triton and cuda
        self.kv_cache_dtypes = tuple(kv_cache_dtypes)

    def bind(self, contract: WriteContract) -> MlaGatherKernel:
        """This reader following ``contract``."""
        return MlaGatherKernel(self.impl, self.prepare, self.devices, contract, self.kv_cache_dtypes)

    def __call__(self, kv_cache: torch.Tensor, dst: torch.Tensor, block_table: torch.Tensor,
                 cu_seq_lens: torch.Tensor, kv_cache_dtype: str, scale: torch.Tensor,
                 seq_starts: torch.Tensor | None = None) -> None:
        signature = call_signature(kv_cache_dtype, kv_cache, dst, block_table, cu_seq_lens, scale,
                                   "" if seq_starts is None else seq_starts)
        launch = self._launches.get(signature)
        if launch is None:
            name = check_call(self.name, self.kv_cache_dtypes, self.devices, kv_cache_dtype, kv_cache)
            cache = check_tensor("kv_cache", kv_cache, None)
            contract = self.contract_for(cache.device)
            width = dst.shape[1] if isinstance(dst, torch.Tensor) and dst.dim() == 2 else -1
            layout = self.layout_of((contract, name, width, 0), lambda: gather_layout(contract, name, dst))
            validate_gather_args(layout, kv_cache, dst, block_table, cu_seq_lens, scale, seq_starts)
            launch = self.prepare(layout, kv_cache, dst, block_table, cu_seq_lens, scale, seq_starts)
            self._launches.put(signature, launch)
        else:  # the metadata was checked for this signature: the index values are checked every call
            check_sequences(kv_cache, block_table, cu_seq_lens, seq_starts, dst.shape[0], "dst")
        launch(kv_cache, dst, block_table, cu_seq_lens, scale, seq_starts)
        self.launch_count += 1


class IndexerGatherKernel(_Reader):
    """``cp_gather_indexer_k_quant_cache(kv_cache, dst_k, dst_scale, block_table, cu_seq_lens)`` by one reader:
    ``head_dim`` is ``dst_k``'s width, the quant block ``head_dim * 4 / dst_scale.shape[1]``
    (rtp_ref.kv.indexer_gather). Every call is checked on the host (values included); the columns of ``dst_k``
    and ``dst_scale`` must be contiguous (engines allocate them so)."""

    op = INDEXER_GATHER_OP
    scale_fmts: Collection[str] = SCALE_FORMATS

    def __call__(self, kv_cache: torch.Tensor, dst_k: torch.Tensor, dst_scale: torch.Tensor,
                 block_table: torch.Tensor, cu_seq_lens: torch.Tensor) -> None:
        signature = call_signature(kv_cache, dst_k, dst_scale, block_table, cu_seq_lens)
        launch = self._launches.get(signature)
        if launch is None:
            cache = check_tensor("kv_cache", kv_cache, None)
            if cache.device.type not in self.devices:
                raise UnsupportedLayoutError(f"kernel {self.name} does not run on device type "
                                             f"{cache.device.type!r}; it runs on {', '.join(self.devices)}")
            quant = quant_block_of(dst_k, dst_scale)
            for name, t in (("dst_k", dst_k), ("dst_scale", dst_scale)):
                if t.stride(1) != 1:
                    raise RtpRefError(f"{name}: strides {t.stride()}; valid: contiguous columns (stride(1) == 1)")
            contract = self.contract_for(cache.device)
            layout = self.layout_of((contract, "", dst_k.shape[1], quant),
                                    lambda: indexer_layout_for(contract, contract.flags, dst_k.shape[1], quant))
            validate_indexer_gather_args(layout, cache, dst_k, dst_scale, block_table, cu_seq_lens)
            launch = self.prepare(layout, cache, dst_k, dst_scale, block_table, cu_seq_lens)
            self._launches.put(signature, launch)
        else:  # the metadata was checked for this signature: the index values are checked every call
            check_sequences(kv_cache, block_table, cu_seq_lens, None, dst_k.shape[0], "dst_k")
        launch(kv_cache, dst_k, dst_scale, block_table, cu_seq_lens)
        self.launch_count += 1


def gather_kernels() -> list[MlaGatherKernel | IndexerGatherKernel]:
    """The built-in readers that can run here, unbound: the references always, triton and cuda where the writers
    of those names can run."""
    from rtp_ref.kernels.builtin import unavailable_builtin_kernels

    everywhere = ("cpu", "cuda")
    kernels: list[MlaGatherKernel | IndexerGatherKernel] = [
        MlaGatherKernel("reference", unprepared(gather_and_maybe_dequant_cache), everywhere),
        IndexerGatherKernel("reference", unprepared(gather_indexer_k_quant_cache), everywhere)]
    missing = unavailable_builtin_kernels()
    if "triton" not in missing:
        from rtp_ref.kernels.triton_fp8 import interpreted
        from rtp_ref.kernels.triton_gather import prepare_triton_gather, prepare_triton_indexer_gather

        devices = ("cpu",) if interpreted() else ("cuda",)
        kernels += [MlaGatherKernel("triton", prepare_triton_gather, devices, kv_cache_dtypes=COMPILED_LAYOUT_NAMES),
                    IndexerGatherKernel("triton", prepare_triton_indexer_gather, devices)]
    if "cuda" not in missing:
        from rtp_ref.kernels.cuda_gather import cuda_gather, cuda_indexer_gather

        kernels += [MlaGatherKernel("cuda", unprepared(cuda_gather), ("cuda",), kv_cache_dtypes=COMPILED_LAYOUT_NAMES),
                    IndexerGatherKernel("cuda", unprepared(cuda_indexer_gather), ("cuda",))]
    return kernels
