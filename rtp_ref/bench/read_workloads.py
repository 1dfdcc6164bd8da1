"""One timed read per read op, variant and size: a serving step's gather of ``tokens`` cached tokens into dense rows.

The tokens are sequences of ``SEQUENCE_TOKENS`` (the last one shorter) whose blocks are a random choice of a cache
twice as large, read through an int32 block table (vLLM's) with int32 ``cu_seq_lens``. There are ``INPUT_SETS``
source caches, every slot of each written by the op's writer reference with different random values on the device,
and the calls take them in turn: a reader that returns what an earlier call read (or nothing) leaves another set's
rows, which the check after each timed sample sees (``ReadCheck``).

Bytes counted: the fewest a read must move: the entries of the tokens read once (pad bytes excluded), the block table
and ``cu_seq_lens`` read once, the output rows written once. Shapes: the MLA gather at the layout's default dims into
bf16 rows; the indexer gather with head_dim 128, one quant block.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from rtp_ref.bench.workloads import BLOCK_SIZE, INDEXER_DIM, INPUT_DTYPE, INPUT_SETS, Tensors
from rtp_ref.contract import WriteContract
from rtp_ref.kv.indexer import fixed_quant_block, indexer_layout_for
from rtp_ref.kv.layouts import default_dims
from rtp_ref.ops import INDEXER_GATHER_OP, INDEXER_OP, MLA_GATHER_OP, MLA_OP, op_reference

#: tokens of each sequence a read workload gathers (the last one holds the rest)
SEQUENCE_TOKENS = 1_024
#: slots written by one call of the writer reference while the source caches are filled (bounds its memory)
FILL_CHUNK = 1 << 18


@dataclass
class ReadWorkload:
    """One read bench point's arguments on the device: ``call(kernel)`` makes the op's call on the next source
    cache (``inputs``: one tuple per set, the cache first); ``outputs`` the tensors the op writes (rows first);
    ``nbytes`` what one call must move at least; ``block_table`` and ``cu_seq_lens`` the sequences read (int32);
    ``reference(cache, outputs, block_table, cu_seq_lens)`` the op's reference read (CPU tensors); ``last``: the
    index of the set the latest call took (-1 before the first)."""

    op: str
    layout: str
    tokens: int
    nbytes: int
    block_table: torch.Tensor
    cu_seq_lens: torch.Tensor
    outputs: Tensors
    inputs: tuple[Tensors, ...]
    invoke: Callable[[Callable[..., None], Tensors], None]
    reference: Callable[[torch.Tensor, Tensors, torch.Tensor, torch.Tensor], None]
    last: int = -1

    def call(self, kernel: Callable[..., None]) -> None:
        """The op's call of ``kernel`` on the next source cache, the sets taken in turn."""
        self.last = (self.last + 1) % len(self.inputs)
        self.call_on(kernel, self.last)

    def call_on(self, kernel: Callable[..., None], index: int) -> None:
        """The op's call of ``kernel`` on source cache ``index`` (``last`` is not changed)."""
        self.invoke(kernel, self.inputs[index])

    @property
    def footprint(self) -> int:
        """Bytes the calls go through in turn: ``nbytes`` and the other sets' caches."""
        return self.nbytes + (len(self.inputs) - 1) * sum(t.numel() * t.element_size() for t in self.inputs[0])


def _sequences(g: torch.Generator, tokens: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, int]:
    """The block table and ``cu_seq_lens`` (int32, on ``device``) of ``tokens`` tokens in sequences of
    ``SEQUENCE_TOKENS``, each sequence's blocks a random choice of a cache twice the size; and that cache's blocks."""
    lens = [SEQUENCE_TOKENS] * (tokens // SEQUENCE_TOKENS) + ([tokens % SEQUENCE_TOKENS] if tokens % SEQUENCE_TOKENS
                                                               else [])
    per_sequence = math.ceil(min(tokens, SEQUENCE_TOKENS) / BLOCK_SIZE)
    needed = sum(math.ceil(n / BLOCK_SIZE) for n in lens)
    num_blocks = 2 * needed
    chosen = torch.randperm(num_blocks, generator=g)[:needed].tolist()
    table = torch.zeros((len(lens), per_sequence), dtype=torch.int32)
    at = 0
    for i, n in enumerate(lens):
        count = math.ceil(n / BLOCK_SIZE)
        table[i, :count] = torch.tensor(chosen[at: at + count], dtype=torch.int32)
        at += count
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)
    return table.to(device), cu.to(device), num_blocks


def _filled(write: Callable[[torch.Tensor, torch.Tensor], None], capacity: int, width: int,
            device: torch.device, g: torch.Generator) -> None:
    """Write every slot of a cache of ``capacity`` slots by ``write(values [n, width], slots [n])``, values random
    (per-row magnitudes 2^-6..2^6) drawn on the device, ``FILL_CHUNK`` slots at a time."""
    for start in range(0, capacity, FILL_CHUNK):
        n = min(FILL_CHUNK, capacity - start)
        spread = torch.exp2(torch.randint(-6, 7, (n, 1), generator=g, device=device).float())
        values = (torch.randn((n, width), generator=g, device=device) * spread).to(INPUT_DTYPE)
        write(values, torch.arange(start, start + n, device=device))


def _mla_gather(variant: str, tokens: int, contract: WriteContract, device: torch.device,
                g: torch.Generator) -> ReadWorkload:
    layout = contract.layout(variant, *default_dims(variant))
    r, p = layout.kv_lora_rank, layout.rope_dim
    table, cu, num_blocks = _sequences(torch.Generator().manual_seed(tokens), tokens, device)
    scale = torch.tensor([0.05], dtype=torch.float32, device=device)
    caches = []
    for _ in range(INPUT_SETS):
        cache = torch.zeros(layout.cache_shape(num_blocks, BLOCK_SIZE), dtype=layout.cache_dtype(INPUT_DTYPE),
                            device=device)

        def write(values: torch.Tensor, slots: torch.Tensor, cache: torch.Tensor = cache) -> None:
            op_reference(MLA_OP)(layout, values[:, :r], values[:, r:], cache, slots, scale)

        _filled(write, num_blocks * BLOCK_SIZE, r + p, device, g)
        caches.append((cache,))
    dst = torch.zeros((tokens, r + p), dtype=INPUT_DTYPE, device=device)

    def invoke(kernel: Callable[..., None], x: Tensors) -> None:
        kernel(x[0], dst, table, cu, variant, scale, None)

    def reference(cache: torch.Tensor, out: Tensors, at_table: torch.Tensor, at_cu: torch.Tensor) -> None:
        op_reference(MLA_GATHER_OP)(layout, cache, out[0], at_table, at_cu, scale.cpu(), None)

    entry = layout.bytes_per_token - layout.pad_bytes_per_token  # a reader reads no padding
    nbytes = tokens * entry + table.numel() * 4 + cu.numel() * 4 + tokens * (r + p) * 2
    return ReadWorkload(MLA_GATHER_OP, variant, tokens, nbytes, table, cu, (dst,), tuple(caches), invoke, reference)


def _indexer_gather(scale_fmt: str, tokens: int, contract: WriteContract, device: torch.device,
                    g: torch.Generator) -> ReadWorkload:
    layout = indexer_layout_for(contract, contract.flags, INDEXER_DIM, fixed_quant_block(scale_fmt) or INDEXER_DIM,
                                scale_fmt=scale_fmt)
    table, cu, num_blocks = _sequences(torch.Generator().manual_seed(tokens), tokens, device)
    caches = []
    for _ in range(INPUT_SETS):
        cache = torch.zeros((num_blocks, BLOCK_SIZE, layout.bytes_per_token), dtype=torch.uint8, device=device)

        def write(values: torch.Tensor, slots: torch.Tensor, cache: torch.Tensor = cache) -> None:
            op_reference(INDEXER_OP)(layout, values, cache, slots, scale_fmt)

        _filled(write, num_blocks * BLOCK_SIZE, INDEXER_DIM, device, g)
        caches.append((cache,))
    dst_k = torch.zeros((tokens, layout.data_bytes_per_token), dtype=torch.uint8, device=device)
    dst_scale = torch.zeros((tokens, layout.trailing_bytes_per_token), dtype=torch.uint8, device=device)

    def invoke(kernel: Callable[..., None], x: Tensors) -> None:
        kernel(x[0], dst_k, dst_scale, table, cu)

    def reference(cache: torch.Tensor, out: Tensors, at_table: torch.Tensor, at_cu: torch.Tensor) -> None:
        op_reference(INDEXER_GATHER_OP)(layout, cache, out[0], out[1], at_table, at_cu)

    nbytes = 2 * tokens * layout.bytes_per_token + table.numel() * 4 + cu.numel() * 4
    return ReadWorkload(INDEXER_GATHER_OP, scale_fmt, tokens, nbytes, table, cu, (dst_k, dst_scale), tuple(caches),
                        invoke, reference)


_BUILDERS = {MLA_GATHER_OP: _mla_gather, INDEXER_GATHER_OP: _indexer_gather}


def read_workload(op: str, variant: str, tokens: int, contract: WriteContract, device: torch.device) -> ReadWorkload:
    """The bench point of read op ``op``'s ``variant`` at ``tokens`` tokens on ``device`` under ``contract``."""
    values = torch.Generator(device=device).manual_seed(tokens)
    return _BUILDERS[op](variant, tokens, contract, device, values)
