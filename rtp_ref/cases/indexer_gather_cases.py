"""Conformance cases of the indexer cache's read op, ``cp_gather_indexer_k_quant_cache``: a cache whose every slot
the reference indexer writer wrote (under the variant's ``scale_fmt``), sequences laid out in it through a
shuffled block table, and canary-filled ``dst_k`` and ``dst_scale``.

As for the MLA gather (rtp_ref.cases.gather_cases), the storages sit inside guard bytes and the outputs have
three rows past the sequences. A case also reads under named wrong hypotheses (the block table ignored; each
token's scales read right after its own values, as if the block had no scale area at its end): a reader whose
output equals one fails the check that names it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from rtp_ref.cases.cases import CANARY, GUARD_BYTES, CaseSpec
from rtp_ref.cases.domain import BLOCK_SIZE, BLOCK_TABLE, Value
from rtp_ref.cases.gather_cases import EXTRA_ROWS, block_table_for, read_row_namer
from rtp_ref.cases.input_checks import EMPTY_CALL_KIND
from rtp_ref.cases.mha_indexer_cases import INDEXER_DOMAIN
from rtp_ref.cases.storage import StorageMap, field_places
from rtp_ref.contract import WriteContract
from rtp_ref.errors import RtpRefError
from rtp_ref.kv.fields import Source, field_element
from rtp_ref.kv.gather import sequence_slots
from rtp_ref.kv.indexer import fixed_quant_block, indexer_layout_for, reference_indexer_k_quant_and_cache
from rtp_ref.kv.indexer_gather import gather_indexer_k_quant_cache
from rtp_ref.kv.op_names import INDEXER_GATHER_OP

#: the arguments of the indexer gather a kernel may narrow (``input_domain``: rtp_ref.cases.domain); head_dim and
#: quant_block are the indexer write's
INDEXER_GATHER_DOMAIN = (BLOCK_TABLE, BLOCK_SIZE,
                         *(d for d in INDEXER_DOMAIN if d.name in ("head_dim", "quant_block")))


@dataclass(frozen=True)
class IndexerGatherSpec(CaseSpec):
    """One indexer gather case: a CaseSpec (``layout``: the ``scale_fmt`` the cache was written with; ``tokens``: the
    rows the sequences fill) with the batch, head_dim and quant block."""

    op: str = INDEXER_GATHER_OP
    batch: int = 1
    head_dim: int = 128
    quant_block: int = 128
    #: the dtype of block_table and cu_seq_lens
    index: str = "int32"

    @property
    def arguments(self) -> dict[str, Value]:
        """The case's value of each of ``INDEXER_GATHER_DOMAIN``."""
        return {"block_table": self.index, "block_size": self.block_size, "head_dim": self.head_dim,
                "quant_block": self.quant_block}

    @property
    def case_id(self) -> str:
        """``random-t37-b16-bf16-n3-d128q64``, ``-i64`` for int64 index tensors."""
        return (f"{super().case_id}-n{self.batch}-d{self.head_dim}q{self.quant_block}"
                f"{'-i64' if self.index == 'int64' else ''}")


def indexer_gather_specs(variant: str) -> Iterator[IndexerGatherSpec]:
    """The cases of one ``scale_fmt``: batches of 1-4 sequences (empty ones among them), block sizes 16 and 64,
    head_dim 128 with quant blocks 128 and 64, head_dim 256, int32 index tensors and an int64 twin of a random case,
    the empty call (no rows at all). A variant with a quant block of its own (``mxfp4``: 32) has it in every case."""
    rows = [  # kind, rows, block, batch, head_dim, quant block, index dtype
        (EMPTY_CALL_KIND, 0, 16, 2, 128, 128, "int32"),
        ("random", 1, 16, 1, 128, 128, "int32"),
        ("random", 37, 16, 3, 128, 128, "int32"),
        ("random", 37, 64, 3, 128, 64, "int32"),
        ("random", 20, 16, 2, 256, 128, "int32"),
        ("ragged", 20, 16, 4, 128, 128, "int32"),
        ("random", 37, 16, 3, 128, 128, "int64"),
    ]
    for seed, (kind, tokens, block, batch, dim, quant, index) in enumerate(rows, start=1):
        yield IndexerGatherSpec(variant, kind, tokens, block, 0, torch.bfloat16, seed, batch=batch, head_dim=dim,
                                quant_block=fixed_quant_block(variant) or quant, index=index)


class IndexerGatherCase:
    """One indexer gather case on a device: the written cache (a view into ``cache_storage``), the index tensors
    and the two outputs (views into ``dst_storage``: guard, ``dst_k``, guard, ``dst_scale``, guard)."""

    def __init__(self, spec: IndexerGatherSpec, contract: WriteContract, device: torch.device | str) -> None:
        self.spec = spec
        self.layout = indexer_layout_for(contract, contract.flags, spec.head_dim, spec.quant_block,
                                         scale_fmt=spec.layout)
        g = torch.Generator().manual_seed(spec.seed)
        table, cu, _, self.num_blocks = block_table_for(g, spec.batch, spec.tokens, spec.block_size,
                                                        spec.kind == "ragged", False, spec.index)
        self.block_table, self.cu_seq_lens = table.to(device), cu.to(device)
        row = self.layout.bytes_per_token
        self.cache_bytes = self.num_blocks * spec.block_size * row
        host = torch.full((2 * GUARD_BYTES + self.cache_bytes,), CANARY, dtype=torch.uint8)
        capacity = self.num_blocks * spec.block_size
        spread = torch.exp2(torch.randint(-6, 7, (capacity, 1), generator=g).float())
        k = (torch.randn(capacity, spec.head_dim, generator=g) * spread).to(spec.input_dtype)
        reference_indexer_k_quant_and_cache(self.layout, k, self.cache_view(host), torch.arange(capacity), spec.layout)
        self.cache_storage = host.to(device)
        self.kv_cache = self.cache_view(self.cache_storage)
        self.rows = spec.tokens + EXTRA_ROWS
        self.k_width, self.scale_width = self.layout.data_bytes_per_token, self.layout.trailing_bytes_per_token
        self.k_bytes, self.scale_bytes = self.rows * self.k_width, self.rows * self.scale_width
        self.dst_storage = torch.full((3 * GUARD_BYTES + self.k_bytes + self.scale_bytes,), CANARY,
                                      dtype=torch.uint8, device=device)
        self.dst_k, self.dst_scale = self.outputs(self.dst_storage)

    def cache_view(self, storage: torch.Tensor) -> torch.Tensor:
        """The ``kv_cache`` view over ``storage`` (this case's or a copy)."""
        row = self.layout.bytes_per_token
        return storage[GUARD_BYTES: GUARD_BYTES + self.cache_bytes].view(self.num_blocks, self.spec.block_size, row)

    def outputs(self, storage: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``dst_k`` and ``dst_scale`` views over ``storage`` (this case's or a copy)."""
        k_at, s_at = GUARD_BYTES, 2 * GUARD_BYTES + self.k_bytes
        dst_k = storage[k_at: k_at + self.k_bytes].view(self.rows, self.k_width)
        return dst_k, storage[s_at: s_at + self.scale_bytes].view(self.rows, -1)

    def footprint(self) -> torch.Tensor:
        """The output bytes the sequences' rows fill (bool over ``dst_storage``)."""
        out = torch.zeros(self.dst_storage.numel(), dtype=torch.bool)
        n, d, s = self.spec.tokens, self.k_width, self.scale_width
        out[GUARD_BYTES: GUARD_BYTES + n * d] = True
        out[2 * GUARD_BYTES + self.k_bytes: 2 * GUARD_BYTES + self.k_bytes + n * s] = True
        return out

    def storage_map(self) -> StorageMap:
        """The output storage's fields, ``dst_k`` (fp8 codes, or two E2M1 codes a byte) and ``dst_scale`` (fp32, or
        ue8m0) of every row, each row named by the slot it reads."""
        layer = torch.empty(self.dst_storage.numel(), dtype=torch.uint8)
        dst_k, dst_scale = self.outputs(layer)
        lay = self.layout
        fields = [field_places("dst_k", dst_k, layer, field_element(lay.field(Source.KEY).element), 1),
                  field_places("dst_scale", dst_scale, layer, field_element(lay.field(Source.SCALE).element), 1)]
        k_at, s_at = GUARD_BYTES, 2 * GUARD_BYTES + self.k_bytes
        areas = [("dst_k", k_at, k_at + self.k_bytes), ("dst_scale", s_at, s_at + self.scale_bytes)]
        slots = sequence_slots(self.block_table.cpu(), self.cu_seq_lens.cpu(), self.spec.block_size)
        return StorageMap(layer.numel(), fields, areas, read_row_namer(slots))

    def call(self, kernel: Callable[..., None]) -> None:
        """Call ``kernel`` the way engines call ``cp_gather_indexer_k_quant_cache``."""
        kernel(self.kv_cache, self.dst_k, self.dst_scale, self.block_table, self.cu_seq_lens)

    def reference_dst(self, hypothesis: str | None = None) -> torch.Tensor:
        """The output storage the reference (or the named wrong ``hypothesis``) leaves, on the CPU."""
        storage = torch.full((self.dst_storage.numel(),), CANARY, dtype=torch.uint8)
        dst_k, dst_scale = self.outputs(storage)
        cache = self.cache_view(self.cache_storage.cpu())
        table, cu = self.block_table.cpu(), self.cu_seq_lens.cpu()
        if hypothesis == "read.block_table":
            table = torch.arange(table.shape[1], dtype=table.dtype).expand_as(table).contiguous()
        elif hypothesis == "read.scale_placement":  # a token's entry as [values, scales], one after the other
            slots = sequence_slots(table, cu, self.spec.block_size)
            rows = cache.reshape(-1, self.layout.bytes_per_token)[slots]
            dst_k[: slots.numel()] = rows[:, : self.k_width]
            dst_scale[: slots.numel()] = rows[:, self.k_width:]
            return storage
        elif hypothesis is not None:
            raise RtpRefError(f"unknown hypothesis {hypothesis!r}")
        gather_indexer_k_quant_cache(self.layout, cache, dst_k, dst_scale, table, cu)
        return storage

    def hypotheses(self) -> list[str]:
        """The wrong hypotheses this case can tell apart from the contract."""
        return ["read.block_table", "read.scale_placement"] if self.spec.tokens else []
