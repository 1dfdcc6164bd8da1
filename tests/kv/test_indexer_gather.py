"""The reference indexer gather (rtp_ref.kv.indexer_gather): each row's stored bytes, found independently at the
offsets the module doc gives (values at ``t * head_dim`` of the block, scales at ``block_size * head_dim + t * 4n``),
bad arguments named with nothing written."""

from __future__ import annotations

import pytest
import torch

from rtp_ref.errors import RtpRefError
from rtp_ref.kv.indexer import indexer_layout, reference_indexer_k_quant_and_cache
from rtp_ref.kv.indexer_gather import gather_indexer_k_quant_cache
from rtp_ref.platform import load_platform

BLOCK, BLOCKS, D, Q = 16, 6, 128, 64


def _case() -> tuple[object, ...]:
    layout = indexer_layout(load_platform("cpu"), D, Q)
    g = torch.Generator().manual_seed(3)
    cache = torch.zeros(BLOCKS, BLOCK, layout.bytes_per_token, dtype=torch.uint8)
    k = (torch.randn(BLOCKS * BLOCK, D, generator=g) * 3).to(torch.bfloat16)
    reference_indexer_k_quant_and_cache(layout, k, cache, torch.arange(BLOCKS * BLOCK), "none")
    table = torch.tensor([[4, 1], [0, 5]], dtype=torch.int32)
    cu = torch.tensor([0, 20, 27], dtype=torch.int32)
    return layout, cache, table, cu


def test_rows_are_the_stored_bytes() -> None:
    layout, cache, table, cu = _case()
    dst_k = torch.full((30, D), 7, dtype=torch.uint8)
    dst_scale = torch.full((30, 4 * D // Q), 7, dtype=torch.uint8)
    gather_indexer_k_quant_cache(layout, cache, dst_k, dst_scale, table, cu)
    flat = cache.reshape(BLOCKS, -1)
    rows = [(0, i) for i in range(20)] + [(1, i) for i in range(7)]
    for r, (b, i) in enumerate(rows):
        block, t = int(table[b, i // BLOCK]), i % BLOCK
        assert torch.equal(dst_k[r], flat[block, t * D:(t + 1) * D])
        start = BLOCK * D + t * 8
        assert torch.equal(dst_scale[r], flat[block, start:start + 8])
    assert bool((dst_k[27:] == 7).all()) and bool((dst_scale[27:] == 7).all())


@pytest.mark.parametrize(("change", "message"), [
    ("scale", r"dst_scale: uint8 \[30, 6\]; valid: uint8 \[30, head_dim / quant_block_size \* 4\]"),
    ("quant", r"dst_k, dst_scale: head_dim 128 and quant block 128; valid: the cache's 128 and 64"),
    ("rows", r"dst_k: 20 rows for 27 tokens"),
    ("block", r"block_table: row 20 of dst_k reads block 9; valid: 0\.\.5"),
])
def test_bad_arguments_are_named_and_nothing_is_written(change: str, message: str) -> None:
    layout, cache, table, cu = _case()
    rows = 20 if change == "rows" else 30
    dst_k = torch.full((rows, D), 7, dtype=torch.uint8)
    dst_scale = torch.full((rows, {"scale": 6, "quant": 4}.get(change, 8)), 7, dtype=torch.uint8)
    if change == "block":
        table[1, 0] = 9
    with pytest.raises(RtpRefError, match=message):
        gather_indexer_k_quant_cache(layout, cache, dst_k, dst_scale, table, cu)
    assert bool((dst_k == 7).all()) and bool((dst_scale == 7).all())
