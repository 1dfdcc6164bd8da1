"""Kernels that do less than the op on the calls the bench times, loaded by ``rtp-ref bench`` through
``RTP_REF_KERNELS=tests.bench.cheating_kernels:kernels``: each writes what torch-eager writes on its first call,
then not at all (``first-call-only``) or the first call's bytes again, its inputs unread (``replays-first-write``);
the readers the same with the reference's read of the MLA gather (``first-read-only``, ``replays-first-read``).
Timed as they are, all would look many times faster than the op; the bench must reject their figures.

Two grouped writers (``write_layers``: every layer's write in one call) for the bench's layered points:
``grouped-torch-eager`` writes every layer (torch-eager's write of each), ``grouped-first-layer-only`` only the first
(an off-by-one in a layer loop): the bench must reject the second's layered figures, never the first's."""

from __future__ import annotations

import torch

from rtp_ref.contract import WriteContract
from rtp_ref.kernels.torch_eager import TorchEagerKernel
from rtp_ref.ops import MLA_GATHER_OP, op_reference


class FirstCallOnly:
    """torch-eager's write on the first call; every later call returns at once."""

    name = "first-call-only"
    kv_cache_dtypes = ("fp8",)
    devices = ("cpu", "cuda")

    def __init__(self, contract: WriteContract | None = None) -> None:
        self.inner = TorchEagerKernel(contract)
        self.calls = 0

    def bind(self, contract: WriteContract) -> FirstCallOnly:
        return type(self)(contract)

    def __call__(self, kv_c: torch.Tensor, k_pe: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
                 kv_cache_dtype: str, scale: torch.Tensor) -> None:
        self.calls += 1
        if self.calls == 1:
            self.inner(kv_c, k_pe, kv_cache, slot_mapping, kv_cache_dtype, scale)


class ReplaysFirstWrite(FirstCallOnly):
    """torch-eager's write on the first call; every later call copies that call's cache back, inputs unread."""

    name = "replays-first-write"

    def __init__(self, contract: WriteContract | None = None) -> None:
        super().__init__(contract)
        self.first: torch.Tensor | None = None

    def __call__(self, kv_c: torch.Tensor, k_pe: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
                 kv_cache_dtype: str, scale: torch.Tensor) -> None:
        if self.first is None:
            self.inner(kv_c, k_pe, kv_cache, slot_mapping, kv_cache_dtype, scale)
            self.first = kv_cache.clone()
        else:
            kv_cache.copy_(self.first)


class FirstReadOnly:
    """The reference's MLA gather on the first call; every later call returns at once."""

    name = "first-read-only"
    op = MLA_GATHER_OP
    kv_cache_dtypes = ("fp8",)
    devices = ("cpu", "cuda")

    def __init__(self, contract: WriteContract | None = None) -> None:
        self.contract = contract
        self.first: torch.Tensor | None = None

    def bind(self, contract: WriteContract) -> FirstReadOnly:
        return type(self)(contract)

    def read(self, kv_cache: torch.Tensor, dst: torch.Tensor, block_table: torch.Tensor, cu_seq_lens: torch.Tensor,
             kv_cache_dtype: str, scale: torch.Tensor) -> None:
        assert self.contract is not None, "bound by the bench"
        layout = self.contract.layout(kv_cache_dtype, 512, 64)
        op_reference(MLA_GATHER_OP)(layout, kv_cache, dst, block_table, cu_seq_lens, scale, None)
        self.first = dst.clone()

    def __call__(self, kv_cache: torch.Tensor, dst: torch.Tensor, block_table: torch.Tensor,
                 cu_seq_lens: torch.Tensor, kv_cache_dtype: str, scale: torch.Tensor,
                 seq_starts: torch.Tensor | None) -> None:
        if self.first is None:
            self.read(kv_cache, dst, block_table, cu_seq_lens, kv_cache_dtype, scale)


class ReplaysFirstRead(FirstReadOnly):
    """The reference's MLA gather on the first call; every later call copies that call's rows back, the cache
    unread."""

    name = "replays-first-read"

    def __call__(self, kv_cache: torch.Tensor, dst: torch.Tensor, block_table: torch.Tensor,
                 cu_seq_lens: torch.Tensor, kv_cache_dtype: str, scale: torch.Tensor,
                 seq_starts: torch.Tensor | None) -> None:
        if self.first is None:
            self.read(kv_cache, dst, block_table, cu_seq_lens, kv_cache_dtype, scale)
        else:
            dst.copy_(self.first)


class GroupedTorchEager:
    """torch-eager's write; ``write_layers`` makes every layer's in one call."""

    name = "grouped-torch-eager"
    kv_cache_dtypes = ("fp8",)
    devices = ("cpu", "cuda")
    #: layers a grouped call writes (the first ``written`` of them)
    written: int | None = None

    def __init__(self, contract: WriteContract | None = None) -> None:
        self.inner = TorchEagerKernel(contract)

    def bind(self, contract: WriteContract) -> GroupedTorchEager:
        return type(self)(contract)

    def __call__(self, kv_c: torch.Tensor, k_pe: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
                 kv_cache_dtype: str, scale: torch.Tensor) -> None:
        self.inner(kv_c, k_pe, kv_cache, slot_mapping, kv_cache_dtype, scale)

    def write_layers(self, layers: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, str,
                                              torch.Tensor]]) -> None:
        for arguments in layers[:self.written]:
            self(*arguments)


class GroupedFirstLayerOnly(GroupedTorchEager):
    """A grouped call that writes the first layer only."""

    name = "grouped-first-layer-only"
    written = 1


def kernels() -> list[object]:
    """The entry point for ``RTP_REF_KERNELS``."""
    return [FirstCallOnly(), ReplaysFirstWrite(), FirstReadOnly(), ReplaysFirstRead(), GroupedTorchEager(),
            GroupedFirstLayerOnly()]
