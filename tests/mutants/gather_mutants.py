"""Mutants of the read op: each is the reference gather with one fault a real reader had.

They are protocol kernels of ``gather_and_maybe_dequant_cache`` (``op``, claims, ``devices``, ``bind``), certified
through ``RTP_REF_KERNELS`` with the other mutants (tests/mutants/kernels.py ``mutants``). ``GATHER_EXPECTED`` says
the platform and the named check that must catch each one. Each is written from the fault's description, not
from the suite's hypotheses (rtp_ref.cases.gather_cases).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import torch

from rtp_ref.contract import WriteContract, default_contract
from rtp_ref.fp8 import decode
from rtp_ref.fp8.formats import E4M3FN
from rtp_ref.kernels.gather_builtin import gather_layout
from rtp_ref.kernels.protocol import UnsupportedLayoutError
from rtp_ref.kv.cache import gather_entries, scatter_entries
from rtp_ref.kv.fields import Source
from rtp_ref.kv.gather import gather_and_maybe_dequant_cache, sequence_slots, to_dst_dtype
from rtp_ref.kv.indexer import IndexerLayout, indexer_layout_for
from rtp_ref.kv.indexer_gather import gather_indexer_k_quant_cache, quant_block_of
from rtp_ref.kv.layouts import MlaLayout, build_layout
from rtp_ref.ops import INDEXER_GATHER_OP, MLA_GATHER_OP


class GatherMutant:
    """The reference gather with one fault injected by a subclass (``read``); CPU only."""

    op = MLA_GATHER_OP
    name: ClassVar[str]
    kv_cache_dtypes: ClassVar[tuple[str, ...]]
    devices = ("cpu",)
    conversion_path = "decode"

    def __init__(self, contract: WriteContract | None = None) -> None:
        self.contract = contract

    def bind(self, contract: WriteContract) -> GatherMutant:
        return type(self)(contract)

    def __call__(self, kv_cache: torch.Tensor, dst: torch.Tensor, block_table: torch.Tensor,
                 cu_seq_lens: torch.Tensor, kv_cache_dtype: str, scale: torch.Tensor,
                 seq_starts: torch.Tensor | None = None) -> None:
        if kv_cache_dtype not in self.kv_cache_dtypes:
            raise UnsupportedLayoutError(f"{self.name} does not support {kv_cache_dtype}")
        layout = gather_layout(self.contract or default_contract(kv_cache.device), kv_cache_dtype, dst)
        self.read(layout, kv_cache, dst, block_table, cu_seq_lens, scale, seq_starts)

    def read(self, layout: MlaLayout, kv_cache: torch.Tensor, dst: torch.Tensor, block_table: torch.Tensor,
             cu_seq_lens: torch.Tensor, scale: torch.Tensor, seq_starts: torch.Tensor | None) -> None:
        gather_and_maybe_dequant_cache(layout, kv_cache, dst, block_table, cu_seq_lens, scale, seq_starts)


class IgnoresBlockTable(GatherMutant):
    """Reads a sequence's position p from cache block p // block_size, as if the cache were contiguous."""

    name = "mutant-gather-ignores-block-table"
    kv_cache_dtypes = ("fp8",)

    def read(self, layout: MlaLayout, kv_cache: torch.Tensor, dst: torch.Tensor, block_table: torch.Tensor,
             cu_seq_lens: torch.Tensor, scale: torch.Tensor, seq_starts: torch.Tensor | None) -> None:
        columns = torch.arange(block_table.shape[1], dtype=block_table.dtype).repeat(block_table.shape[0], 1)
        gather_and_maybe_dequant_cache(layout, kv_cache, dst, columns, cu_seq_lens, scale, seq_starts)


def with_tile_scales(layout: MlaLayout, kv_cache: torch.Tensor,
                     change: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """A copy of ``kv_cache`` whose every entry's kv_c tile-scale bytes ``[slots, scale bytes]`` are ``change``d:
    a reader that takes its scales otherwise is the reference gather of that copy."""
    changed = kv_cache.clone()
    slots = torch.arange(kv_cache.shape[0] * kv_cache.shape[1])
    entries = gather_entries(layout, changed, slots)
    field = layout.field(layout.value_field(Source.KV_C).scale_field or "")
    at = layout.entry_offset(field)
    entries[:, at: at + field.size] = change(entries[:, at: at + field.size].contiguous())
    scatter_entries(layout, entries, changed, slots)
    return changed


class NeighbourTileScale(GatherMutant):
    """Scales tile i of kv_c by tile i + 1's scale (the last by the first): an off-by-one in the scale index."""

    name = "mutant-gather-neighbour-tile-scale"
    kv_cache_dtypes = ("fp8_ds_mla",)

    def read(self, layout: MlaLayout, kv_cache: torch.Tensor, dst: torch.Tensor, block_table: torch.Tensor,
             cu_seq_lens: torch.Tensor, scale: torch.Tensor, seq_starts: torch.Tensor | None) -> None:
        count = layout.field(layout.value_field(Source.KV_C).scale_field or "").count

        def shifted(raw: torch.Tensor) -> torch.Tensor:  # tile i gets tile i + 1's scale bytes
            return raw.reshape(raw.shape[0], count, -1).roll(-1, dims=1).reshape(raw.shape)

        gather_and_maybe_dequant_cache(layout, with_tile_scales(layout, kv_cache, shifted), dst, block_table,
                                       cu_seq_lens, scale, seq_starts)


class FnuzReadAsFn(GatherMutant):
    """Decodes the cache's fp8 codes as OCP e4m3fn whatever the platform stores (vLLM #45562 on fnuz)."""

    name = "mutant-gather-fnuz-read-as-fn"
    kv_cache_dtypes = ("fp8",)

    def read(self, layout: MlaLayout, kv_cache: torch.Tensor, dst: torch.Tensor, block_table: torch.Tensor,
             cu_seq_lens: torch.Tensor, scale: torch.Tensor, seq_starts: torch.Tensor | None) -> None:
        ocp = build_layout(layout.name, kv_lora_rank=layout.kv_lora_rank, rope_dim=layout.rope_dim,
                           flags=layout.flags, element_format=E4M3FN, conversion_mode=layout.conversion_mode)
        gather_and_maybe_dequant_cache(ocp, kv_cache, dst, block_table, cu_seq_lens, scale, seq_starts)


class RopeReadAsFp8(GatherMutant):
    """Reads the bf16 rope of ds_mla as fp8 codes times the per-tensor scale, as a reader of the ``fp8`` layout."""

    name = "mutant-gather-rope-read-as-fp8"
    kv_cache_dtypes = ("fp8_ds_mla",)

    def read(self, layout: MlaLayout, kv_cache: torch.Tensor, dst: torch.Tensor, block_table: torch.Tensor,
             cu_seq_lens: torch.Tensor, scale: torch.Tensor, seq_starts: torch.Tensor | None) -> None:
        gather_and_maybe_dequant_cache(layout, kv_cache, dst, block_table, cu_seq_lens, scale, seq_starts)
        slots = sequence_slots(block_table, cu_seq_lens, kv_cache.shape[1], seq_starts)
        rope = layout.entry_offset(layout.value_field(Source.K_PE))
        codes = gather_entries(layout, kv_cache, slots)[:, rope: rope + layout.rope_dim]
        dst[: slots.numel(), layout.kv_lora_rank:] = to_dst_dtype(decode(codes, layout.element_format) * scale,
                                                                  dst.dtype)


class ReadsUnclaimedLayouts(GatherMutant):
    """Claims ``fp8`` only, and reads whatever layout it is called with instead of raising."""

    name = "mutant-gather-reads-unclaimed-layouts"
    kv_cache_dtypes = ("fp8",)

    def __call__(self, kv_cache: torch.Tensor, dst: torch.Tensor, block_table: torch.Tensor,
                 cu_seq_lens: torch.Tensor, kv_cache_dtype: str, scale: torch.Tensor,
                 seq_starts: torch.Tensor | None = None) -> None:
        layout = gather_layout(self.contract or default_contract(kv_cache.device), kv_cache_dtype, dst)
        self.read(layout, kv_cache, dst, block_table, cu_seq_lens, scale, seq_starts)


class LeavesLastRow(GatherMutant):
    """Reads every row of the sequences but the last (an off-by-one in the row count): that row of dst keeps
    whatever it held."""

    name = "mutant-gather-leaves-last-row"
    kv_cache_dtypes = ("auto", "fp8")

    def read(self, layout: MlaLayout, kv_cache: torch.Tensor, dst: torch.Tensor, block_table: torch.Tensor,
             cu_seq_lens: torch.Tensor, scale: torch.Tensor, seq_starts: torch.Tensor | None) -> None:
        last = int(cu_seq_lens[-1]) - 1
        kept = dst[last].clone() if last >= 0 else None
        gather_and_maybe_dequant_cache(layout, kv_cache, dst, block_table, cu_seq_lens, scale, seq_starts)
        if kept is not None:
            dst[last] = kept


class IndexerGatherMutant:
    """The reference indexer gather with one fault injected by a subclass (``read``); CPU only."""

    op = INDEXER_GATHER_OP
    name: ClassVar[str]
    scale_fmts = ("none",)
    devices = ("cpu",)
    conversion_path = "decode"

    def __init__(self, contract: WriteContract | None = None) -> None:
        self.contract = contract

    def bind(self, contract: WriteContract) -> IndexerGatherMutant:
        return type(self)(contract)

    def __call__(self, kv_cache: torch.Tensor, dst_k: torch.Tensor, dst_scale: torch.Tensor,
                 block_table: torch.Tensor, cu_seq_lens: torch.Tensor) -> None:
        contract = self.contract or default_contract(kv_cache.device)
        layout = indexer_layout_for(contract, contract.flags, dst_k.shape[1], quant_block_of(dst_k, dst_scale))
        self.read(layout, kv_cache, dst_k, dst_scale, block_table, cu_seq_lens)

    def read(self, layout: IndexerLayout, kv_cache: torch.Tensor, dst_k: torch.Tensor, dst_scale: torch.Tensor,
             block_table: torch.Tensor, cu_seq_lens: torch.Tensor) -> None:
        gather_indexer_k_quant_cache(layout, kv_cache, dst_k, dst_scale, block_table, cu_seq_lens)


class IndexerIgnoresBlockTable(IndexerGatherMutant):
    """Reads a sequence's position p from cache block p // block_size."""

    name = "mutant-indexer-gather-ignores-block-table"

    def read(self, layout: IndexerLayout, kv_cache: torch.Tensor, dst_k: torch.Tensor, dst_scale: torch.Tensor,
             block_table: torch.Tensor, cu_seq_lens: torch.Tensor) -> None:
        columns = torch.arange(block_table.shape[1], dtype=block_table.dtype).repeat(block_table.shape[0], 1)
        gather_indexer_k_quant_cache(layout, kv_cache, dst_k, dst_scale, columns, cu_seq_lens)


class IndexerScalesAfterValues(IndexerGatherMutant):
    """Reads each token's scales from the bytes right after its values: the cache's rows taken as whole entries
    (``[values, scales]`` one token after the other), the block's scale area ignored."""

    name = "mutant-indexer-gather-scales-after-values"

    def read(self, layout: IndexerLayout, kv_cache: torch.Tensor, dst_k: torch.Tensor, dst_scale: torch.Tensor,
             block_table: torch.Tensor, cu_seq_lens: torch.Tensor) -> None:
        slots = sequence_slots(block_table, cu_seq_lens, kv_cache.shape[1])
        entries = kv_cache.reshape(-1, kv_cache.shape[2])[slots]
        dst_k[: slots.numel()] = entries[:, : layout.head_dim]
        dst_scale[: slots.numel()] = entries[:, layout.head_dim:]


#: mutant class -> (platform it is certified on, the check that must catch it)
GATHER_EXPECTED: dict[type[GatherMutant] | type[IndexerGatherMutant], tuple[str, str]] = {
    IndexerIgnoresBlockTable: ("cpu", "read.block_table"),
    IndexerScalesAfterValues: ("cpu", "read.scale_placement"),
    IgnoresBlockTable: ("cpu", "read.block_table"),
    NeighbourTileScale: ("cpu", "read.tile_scale"),
    FnuzReadAsFn: ("rocm-gfx942", "read.fp8_format"),
    RopeReadAsFp8: ("cpu", "read.rope_as_fp8"),
    ReadsUnclaimedLayouts: ("cpu", "support.unclaimed_layout_raises"),
    LeavesLastRow: ("cpu", "read.values"),
}
