"""The built-in readers of ``gather_and_maybe_dequant_cache`` (``reference-gather``, ``triton-gather``,
``cuda-gather``) and of ``cp_gather_indexer_k_quant_cache`` (``*-indexer-gather``) against the reference, bit
for bit, on what the conformance cases do not vary: a ``dst`` that is a strided view (rows wider than needed for
the indexer), int64 index tensors, a cache in another platform's fp8 format, a block size of 1; and their call
contract (a layout they do not claim raises, a bad ``dst`` is named, nothing is written). Inputs are built on the device
under test; on a machine without a GPU the Triton reader runs in Triton's interpreter and the CUDA one is
skipped. Values whose code is -0.0 are in every cache: Triton compiles ``-v`` as ``0 - v``, and a reader
that negated a decoded zero that way lost the sign on the GPU only (the interpreter kept it)."""

from __future__ import annotations

import pytest
import torch

from rtp_ref.contract import WriteContract
from rtp_ref.errors import RtpRefError, UnsupportedLayoutError
from rtp_ref.kernels.gather_builtin import MlaGatherKernel, gather_kernels
from rtp_ref.kv.cache import reference_write
from rtp_ref.kv.gather import gather_and_maybe_dequant_cache
from rtp_ref.kv.indexer import indexer_layout_for, reference_indexer_k_quant_and_cache
from rtp_ref.kv.indexer_gather import gather_indexer_k_quant_cache
from rtp_ref.ops import INDEXER_GATHER_OP, MLA_GATHER_OP, op_name
from rtp_ref.platform import load_platform

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
READERS = {k.name: k for k in gather_kernels()}
KERNELS = [pytest.param(name, marks=pytest.mark.skipif(name not in READERS or DEVICE not in READERS[name].devices,
                                                       reason=f"{name} cannot run on {DEVICE} here"))
           for name in ("reference-gather", "triton-gather", "cuda-gather")]


def _case(layout_name: str, platform: str, block: int, index: torch.dtype) -> tuple[object, ...]:
    contract = WriteContract.for_platform(load_platform(platform))
    r = 448 if layout_name == "fp8_model1_mla" else 512
    layout = contract.layout(layout_name, r, 64)
    g = torch.Generator().manual_seed(block)
    blocks = 40 // block + 4
    cache = torch.zeros(layout.cache_shape(blocks, block), dtype=layout.cache_dtype(torch.bfloat16))
    capacity = blocks * block
    kv_c = (torch.randn(capacity, r, generator=g) * 5).to(torch.bfloat16)
    k_pe = (torch.randn(capacity, 64, generator=g) * 5).to(torch.bfloat16)
    # values whose fp8 code is -0.0 (0x80 in OCP e4m3; fnuz has none): a reader must keep the sign
    kv_c[:, :4] = k_pe[:, :4] = torch.tensor([-1e-7, -0.0, 1e-7, 0.0]).to(torch.bfloat16)
    reference_write(layout, kv_c, k_pe, cache, torch.arange(capacity), torch.tensor([0.07]))
    table = torch.randperm(blocks, generator=g)[: 2 * (blocks // 2)].reshape(2, -1).to(index)
    cu = torch.tensor([0, 11, 11 + 17], dtype=index)
    starts = torch.tensor([3, 1], dtype=index)
    return contract, cache, table, cu, starts


@pytest.mark.parametrize("name", KERNELS)
@pytest.mark.parametrize(("layout_name", "platform"), [("auto", "cpu"), ("fp8", "rocm-gfx942"),
                                                       ("fp8_ds_mla", "cuda-sm100"), ("fp8_model1_mla", "cpu")])
@pytest.mark.parametrize(("block", "index"), [(16, torch.int64), (1, torch.int32)])
def test_reader_matches_the_reference_into_a_strided_dst(name: str, layout_name: str, platform: str, block: int,
                                                         index: torch.dtype) -> None:
    contract, cache, table, cu, starts = _case(layout_name, platform, block, index)
    width = cache.shape[2] if layout_name == "auto" else (512 if layout_name == "fp8_model1_mla" else 576)
    want = torch.full((30, 2 * width), 9.0, dtype=torch.float16)
    gather_and_maybe_dequant_cache(contract.layout(layout_name, width - 64, 64), cache, want[:, 3: 3 + width],
                                   table, cu, torch.tensor([0.07]), starts)
    reader = READERS[name].bind(contract)
    wide = torch.full((30, 2 * width), 9.0, dtype=torch.float16, device=DEVICE)
    dst = wide[:, 3: 3 + width]  # row stride 2 * width: a view of a wider buffer, built on the device
    assert not dst.is_contiguous()
    reader(cache.to(DEVICE), dst, table.to(DEVICE), cu.to(DEVICE), layout_name,
           torch.tensor([0.07], device=DEVICE), starts.to(DEVICE))
    assert torch.equal(wide.cpu().view(torch.int16), want.view(torch.int16))


@pytest.mark.parametrize("name", KERNELS)
def test_reader_refuses_what_it_cannot_read_and_writes_nothing(name: str) -> None:
    contract, cache, table, cu, _ = _case("fp8", "cpu", 16, torch.int32)
    reader = READERS[name].bind(contract)
    args = (table.to(DEVICE), cu.to(DEVICE))
    scale = torch.tensor([0.07], device=DEVICE)
    dst = torch.full((30, 576), 5.0, device=DEVICE)
    with pytest.raises(UnsupportedLayoutError, match="does not support kv_cache_dtype 'fp8_e5m2'"):
        reader(cache.to(DEVICE), dst, *args, "fp8_e5m2", scale)
    with pytest.raises(RtpRefError, match=r"dst: torch.Size\(\[30, 64\]\); valid: a tensor \[tokens, kv_lora_rank"):
        reader(cache.to(DEVICE), dst[:, :64], *args, "fp8", scale)
    with pytest.raises(RtpRefError, match="dst: 20 rows for 28 tokens"):
        reader(cache.to(DEVICE), dst[:20], *args, "fp8", scale)
    assert bool((dst == 5.0).all()) and reader.launch_count == 0


def test_the_builtin_readers_name_their_op() -> None:
    assert {"reference-gather", "reference-indexer-gather"} <= set(READERS)
    for k in READERS.values():
        want = MLA_GATHER_OP if isinstance(k, MlaGatherKernel) else INDEXER_GATHER_OP
        assert op_name(k) == want and not k.graph_safe


INDEXER_KERNELS = [pytest.param(name, marks=pytest.mark.skipif(
    name not in READERS or DEVICE not in READERS[name].devices, reason=f"{name} cannot run on {DEVICE} here"))
    for name in ("reference-indexer-gather", "triton-indexer-gather", "cuda-indexer-gather")]


@pytest.mark.parametrize("name", INDEXER_KERNELS)
@pytest.mark.parametrize(("head_dim", "quant", "block"), [(128, 128, 16), (128, 64, 1), (256, 128, 64)])
def test_indexer_reader_matches_the_reference_into_wider_rows(name: str, head_dim: int, quant: int,
                                                              block: int) -> None:
    contract = WriteContract.for_platform(load_platform("rocm-gfx942"))
    layout = indexer_layout_for(contract, contract.flags, head_dim, quant)
    blocks = 40 // block + 4
    g = torch.Generator().manual_seed(block)
    cache = torch.zeros(blocks, block, layout.bytes_per_token, dtype=torch.uint8)
    k = (torch.randn(blocks * block, head_dim, generator=g) * 5).to(torch.bfloat16)
    reference_indexer_k_quant_and_cache(layout, k, cache, torch.arange(blocks * block), "ue8m0")
    table = torch.randperm(blocks, generator=g)[: 2 * (blocks // 2)].reshape(2, -1)
    cu = torch.tensor([0, 11, 28])
    n = 4 * head_dim // quant
    want_k, want_s = torch.full((30, head_dim + 8), 3, dtype=torch.uint8), torch.full((30, n + 8), 3, dtype=torch.uint8)
    gather_indexer_k_quant_cache(layout, cache, want_k[:, :head_dim], want_s[:, :n], table, cu)
    wide_k = torch.full((30, head_dim + 8), 3, dtype=torch.uint8, device=DEVICE)  # rows 8 bytes wider than needed
    wide_s = torch.full((30, n + 8), 3, dtype=torch.uint8, device=DEVICE)
    READERS[name].bind(contract)(cache.to(DEVICE), wide_k[:, :head_dim], wide_s[:, :n], table.to(DEVICE),
                                 cu.to(DEVICE))
    assert torch.equal(wide_k.cpu(), want_k) and torch.equal(wide_s.cpu(), want_s)


@pytest.mark.parametrize("name", INDEXER_KERNELS)
@pytest.mark.parametrize(("head_dim", "block"), [(128, 16), (256, 64)])
def test_indexer_reader_copies_an_mxfp4_cache_as_bytes(name: str, head_dim: int, block: int) -> None:
    """A cache written under ``mxfp4`` read as vLLM's unchanged reader takes it: ``dst_k`` [T, head_dim / 2] (the
    packed codes) and ``dst_scale`` [T, head_dim / 32] (the ue8m0 bytes), copied from ``t * head_dim / 2`` and
    ``block_size * head_dim / 2 + t * head_dim / 32`` of the token's block (the places stated here, by hand)."""
    contract = WriteContract.for_platform(load_platform("cpu"))
    layout = indexer_layout_for(contract, contract.flags, head_dim, 32, scale_fmt="mxfp4")
    blocks = 40 // block + 4
    g = torch.Generator().manual_seed(head_dim + block)
    cache = torch.zeros(blocks, block, head_dim // 2 + head_dim // 32, dtype=torch.uint8)
    k = (torch.randn(blocks * block, head_dim, generator=g) * 5).to(torch.bfloat16)
    reference_indexer_k_quant_and_cache(layout, k, cache, torch.arange(blocks * block), "mxfp4")
    table = torch.randperm(blocks, generator=g)[: 2 * (blocks // 2)].reshape(2, -1)
    cu = torch.tensor([0, 11, 28])
    flat = cache.reshape(blocks, -1)
    # sequence b's position i (cu: 11 and 17 tokens) sits in block table[b, i // block] at offset i % block
    rows = [(int(table[b, i // block]), i % block) for b, n in enumerate((11, 17)) for i in range(n)]
    d, s = head_dim // 2, head_dim // 32
    want_k = torch.stack([flat[blk, t * d: (t + 1) * d] for blk, t in rows])
    want_s = torch.stack([flat[blk, block * d + t * s: block * d + (t + 1) * s] for blk, t in rows])
    got_k = torch.full((30, d), 3, dtype=torch.uint8, device=DEVICE)
    got_s = torch.full((30, s), 3, dtype=torch.uint8, device=DEVICE)
    READERS[name].bind(contract)(cache.to(DEVICE), got_k, got_s, table.to(DEVICE), cu.to(DEVICE))
    assert torch.equal(got_k[:28].cpu(), want_k) and torch.equal(got_s[:28].cpu(), want_s)
    assert bool((got_k[28:] == 3).all()) and bool((got_s[28:] == 3).all())


@pytest.mark.parametrize("name", KERNELS)
@pytest.mark.parametrize("batch", [1, 2, 3, 8, 9, 33])
def test_each_row_finds_its_sequence_among_many_with_empty_ones(name: str, batch: int) -> None:
    """The readers find a row's sequence from ``cu_seq_lens`` alone (the Triton reader by a binary search): many
    sequences, a third of them empty (two in a row, first and last included), a batch at, below and above a power of
    two, rows past ``cu[-1]`` left alone. Fails with the search one step short or taking the first equal entry."""
    contract = WriteContract.for_platform(load_platform("cpu"))
    layout = contract.layout("auto", 512, 64)
    g = torch.Generator().manual_seed(batch)
    lens = torch.randint(1, 6, (batch,), generator=g)
    lens[torch.randperm(batch, generator=g)[: batch // 3]] = 0
    lens[0] = lens[-1] = 0 if batch > 2 else lens[0]
    cu = torch.cat([torch.zeros(1, dtype=torch.int64), lens.cumsum(0)])
    block = 4
    width = -(-int(lens.max()) // block) if int(lens.max()) else 1
    blocks = batch * width + 2
    cache = torch.zeros(layout.cache_shape(blocks, block), dtype=torch.bfloat16)
    values = (torch.randn(blocks * block, 576, generator=g) * 3).to(torch.bfloat16)
    reference_write(layout, values[:, :512], values[:, 512:], cache, torch.arange(blocks * block), torch.tensor([1.0]))
    table = torch.randperm(blocks, generator=g)[: batch * width].reshape(batch, width)
    rows = int(cu[-1]) + 3
    want = torch.full((rows, 576), 7.0, dtype=torch.bfloat16)
    gather_and_maybe_dequant_cache(layout, cache, want, table, cu, torch.tensor([1.0]))
    dst = torch.full((rows, 576), 7.0, dtype=torch.bfloat16, device=DEVICE)
    READERS[name].bind(contract)(cache.to(DEVICE), dst, table.to(DEVICE), cu.to(DEVICE), "auto",
                                 torch.tensor([1.0], device=DEVICE))
    assert torch.equal(dst.cpu().view(torch.int16), want.view(torch.int16))


@pytest.mark.parametrize("name", [*KERNELS, *INDEXER_KERNELS])
def test_a_call_like_a_checked_one_still_has_its_index_values_checked(name: str) -> None:
    """A reader checks a call's metadata once per signature (the same shapes, strides, dtypes and devices reuse the
    checked read) but its index values every call: after a good call, the same tensors holding a block outside the
    cache, then a decreasing ``cu_seq_lens``, are refused by name and nothing is written. Fails with the values
    checked only on a signature's first call."""
    contract = WriteContract.for_platform(load_platform("cpu"))
    reader = READERS[name].bind(contract)
    block, blocks = 4, 6
    table = torch.tensor([[0, 1], [2, 3]], dtype=torch.int32, device=DEVICE)
    cu = torch.tensor([0, 5, 8], dtype=torch.int32, device=DEVICE)
    if op_name(reader) == MLA_GATHER_OP:
        layout = contract.layout("auto", 512, 64)
        cache = torch.zeros(layout.cache_shape(blocks, block), dtype=torch.bfloat16, device=DEVICE)
        outputs: tuple[torch.Tensor, ...] = (torch.full((8, 576), 3.0, dtype=torch.bfloat16, device=DEVICE),)

        def read() -> None:
            reader(cache, outputs[0], table, cu, "auto", torch.tensor([1.0], device=DEVICE))
    else:
        layout = indexer_layout_for(contract, contract.flags, 128, 128)
        cache = torch.zeros(blocks, block, layout.bytes_per_token, dtype=torch.uint8, device=DEVICE)
        outputs = (torch.full((8, 128), 3, dtype=torch.uint8, device=DEVICE),
                   torch.full((8, 4), 3, dtype=torch.uint8, device=DEVICE))

        def read() -> None:
            reader(cache, *outputs, table, cu)
    read()
    for o in outputs:
        o.fill_(3)
    table[0, 1] = blocks  # sequence 0's fifth row reads it
    with pytest.raises(RtpRefError, match=rf"^block_table: row 4 of dst\S* reads block {blocks}; valid: 0\.\.5$"):
        read()
    table[0, 1] = 1
    cu[1] = 9
    with pytest.raises(RtpRefError, match=r"^cu_seq_lens: \[0, 9, 8\]; valid: starts at 0 and never decreases$"):
        read()
    assert all(bool((o == 3).all()) for o in outputs)
