"""The reference gather (rtp_ref.kv.gather): sequences read out of a paged MLA cache through a block table, against
expectations derived independently: the writer's own bf16 bits for ``auto``, and for the fp8 layouts the stored
bytes decoded with ml_dtypes and scaled in numpy, at the byte offsets docs/layouts.md gives (``fp8``: 512 e4m3
codes then 64; ``fp8_ds_mla``: 512 codes, four fp32 tile scales of 128 values, 64 bf16 rope values)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

from rtp_ref.contract import WriteContract
from rtp_ref.errors import RtpRefError
from rtp_ref.kv import gather
from rtp_ref.kv.cache import reference_write
from rtp_ref.kv.gather import check_sequences, gather_and_maybe_dequant_cache
from rtp_ref.platform import load_platform

BLOCK, BLOCKS, R, P = 16, 12, 512, 64


def _case(layout_name: str, seed: int = 0) -> tuple[object, ...]:
    """A cache written by the reference for two sequences (9 and 21 tokens, the second from position 5 on)
    through a shuffled block table, and the arguments of the gather that reads them back."""
    contract = WriteContract.for_platform(load_platform("cpu"))
    layout = contract.layout(layout_name, R, P)
    g = torch.Generator().manual_seed(seed)
    table = torch.randperm(BLOCKS, generator=g)[:8].reshape(2, 4).to(torch.int32)
    cu = torch.tensor([0, 9, 30], dtype=torch.int32)
    starts = torch.tensor([0, 5], dtype=torch.int32)
    positions = [(0, i) for i in range(9)] + [(1, 5 + i) for i in range(21)]
    slots = torch.tensor([int(table[b, p // BLOCK]) * BLOCK + p % BLOCK for b, p in positions])
    kv_c = (torch.randn(30, R, generator=g) * 3).to(torch.bfloat16)
    k_pe = (torch.randn(30, P, generator=g) * 3).to(torch.bfloat16)
    scale = torch.tensor([0.03], dtype=torch.float32)
    cache = torch.zeros(layout.cache_shape(BLOCKS, BLOCK), dtype=layout.cache_dtype(torch.bfloat16))
    reference_write(layout, kv_c, k_pe, cache, slots, scale)
    return layout, cache, table, cu, starts, slots, kv_c, k_pe, scale


def _entry(cache: torch.Tensor, slot: int) -> np.ndarray:
    return cache.view(torch.uint8).reshape(BLOCKS * BLOCK, -1)[slot].numpy()


def test_auto_gives_back_the_written_bits() -> None:
    layout, cache, table, cu, starts, _, kv_c, k_pe, scale = _case("auto")
    dst = torch.full((32, R + P), 7.0, dtype=torch.bfloat16)
    gather_and_maybe_dequant_cache(layout, cache, dst, table, cu, scale, starts)
    assert torch.equal(dst[:30].view(torch.int16), torch.cat([kv_c, k_pe], dim=1).view(torch.int16))
    assert bool((dst[30:] == 7.0).all())  # rows past cu_seq_lens[-1] are left alone


@pytest.mark.parametrize("layout_name", ["fp8", "fp8_ds_mla"])
def test_fp8_layouts_are_decoded_and_scaled(layout_name: str) -> None:
    layout, cache, table, cu, starts, slots, _, _, scale = _case(layout_name, seed=1)
    dst = torch.zeros(30, R + P, dtype=torch.float32)
    gather_and_maybe_dequant_cache(layout, cache, dst, table, cu, scale, starts)
    for row, slot in enumerate(slots.tolist()):
        raw = _entry(cache, slot)
        nope = raw[:R].view(ml_dtypes.float8_e4m3fn).astype(np.float32)
        if layout_name == "fp8":
            want = np.concatenate([nope, raw[R:R + P].view(ml_dtypes.float8_e4m3fn).astype(np.float32)])
            want = want * np.float32(0.03)
        else:
            tiles = raw[R:R + 16].view(np.float32)
            rope = raw[R + 16:R + 16 + 2 * P].view(ml_dtypes.bfloat16).astype(np.float32)
            want = np.concatenate([nope * np.repeat(tiles, 128), rope])
        assert np.array_equal(dst[row].numpy(), want.astype(np.float32)), (layout_name, row)


def test_the_same_cache_read_into_fp16_rounds_once() -> None:
    layout, cache, table, cu, starts, _, _, _, scale = _case("fp8_ds_mla", seed=2)
    wide, narrow = torch.zeros(30, R + P), torch.zeros(30, R + P, dtype=torch.float16)
    gather_and_maybe_dequant_cache(layout, cache, wide, table, cu, scale, starts)
    gather_and_maybe_dequant_cache(layout, cache, narrow, table, cu, scale, starts)
    assert torch.equal(narrow, wide.to(torch.float16))


@pytest.mark.parametrize(("change", "message"), [
    ("block", r"block_table: row 0 of dst reads block 99; valid: 0\.\.11"),
    ("cu", r"cu_seq_lens: \[0, 9, 3\]; valid: starts at 0 and never decreases"),
    ("dst", r"dst: 20 rows for 30 tokens \(cu_seq_lens\[-1\]\); valid: >= 30 rows"),
    ("start", r"block_table: sequence 1 reaches position 64, block 4, past its 4 columns; valid: a wider table"),
    ("width", r"dst: float32 \[30, 512\]; valid: bfloat16, float16 or float32 \[tokens, 576\]"),
])
def test_bad_arguments_are_named_and_nothing_is_written(change: str, message: str) -> None:
    layout, cache, table, cu, starts, _, _, _, scale = _case("fp8", seed=3)
    dst = torch.full((30, R + P), 5.0)
    if change == "block":
        table[0, 0] = 99
    elif change == "cu":
        cu = torch.tensor([0, 9, 3], dtype=torch.int32)
    elif change == "dst":
        dst = torch.full((20, R + P), 5.0)
    elif change == "start":
        starts = torch.tensor([0, 44], dtype=torch.int32)
    else:
        dst = torch.full((30, R), 5.0)
    with pytest.raises(RtpRefError, match=message):
        gather_and_maybe_dequant_cache(layout, cache, dst, table, cu, scale, starts)
    assert bool((dst == 5.0).all())


def _first_bad_row(cache_blocks: int, table: torch.Tensor, cu: torch.Tensor, starts: torch.Tensor,
                   block_size: int) -> tuple[int, int] | None:
    """(row, block) of the first row whose block is outside the cache, walking every row: the definition the check
    must keep while costing the table's size instead of the rows'."""
    row = 0
    for b in range(table.shape[0]):
        for position in range(int(starts[b]), int(starts[b]) + int(cu[b + 1] - cu[b])):
            block = int(table[b, position // block_size])
            if not 0 <= block < cache_blocks:
                return row, block
            row += 1
    return None


@pytest.fixture(params=["listed", "tensors"])
def check_form(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """``check_sequences`` in each of its forms: lists for small tables, tensor operations for large ones."""
    if request.param == "tensors":
        monkeypatch.setattr(gather, "LISTED_CHECK_ENTRIES", -1)
    return str(request.param)


def test_the_block_check_names_the_first_row_that_reads_outside_the_cache(check_form: str) -> None:
    """Random tables, lengths and starts, a few entries out of range (some in columns no row reads): the check
    names the row and block the row-by-row walk finds first, and passes where it finds none, in both forms."""
    g = torch.Generator().manual_seed(7)
    block_size, blocks = 4, 10
    for _ in range(200):
        batch = int(torch.randint(1, 5, (1,), generator=g))
        lens = torch.randint(0, 9, (batch,), generator=g)
        starts = torch.randint(0, 6, (batch,), generator=g)
        width = int(((starts + lens + block_size - 1) // block_size).max()) + 1
        table = torch.randint(0, blocks, (batch, width), generator=g, dtype=torch.int32)
        flips = torch.rand((batch, width), generator=g) < 0.15
        table[flips] = torch.tensor([-1, blocks, 99], dtype=torch.int32)[
            torch.randint(0, 3, (int(flips.sum()),), generator=g)]
        cu = torch.cat([torch.zeros(1, dtype=torch.int64), lens.cumsum(0)]).to(torch.int32)
        cache = torch.empty(blocks, block_size, 1, dtype=torch.uint8)
        expected = _first_bad_row(blocks, table, cu, starts, block_size)
        if expected is None:
            check_sequences(cache, table, cu, starts, int(cu[-1]), "dst")
        else:
            with pytest.raises(RtpRefError, match=rf"^block_table: row {expected[0]} of dst reads block "
                                                  rf"{expected[1]}; valid: 0\.\.{blocks - 1}$"):
                check_sequences(cache, table, cu, starts, int(cu[-1]), "dst")


def _outcome(*args: object) -> str:
    try:
        check_sequences(*args)  # type: ignore[arg-type]
    except RtpRefError as exc:
        return str(exc)
    return "passed"


def test_both_forms_of_the_check_pass_and_refuse_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    """Random index arguments, each kind of bad one among them (cu_seq_lens not starting at 0 or decreasing, too few
    rows, a negative start, a table too narrow, blocks outside the cache), int32 and int64: the list form and the
    tensor form pass the same calls and name the same first fault in the same words."""
    g = torch.Generator().manual_seed(11)
    block_size, blocks = 4, 10
    cache = torch.empty(blocks, block_size, 1, dtype=torch.uint8)
    seen = set()
    for i in range(300):
        batch = int(torch.randint(1, 5, (1,), generator=g))
        lens = torch.randint(0, 9, (batch,), generator=g)
        starts = torch.randint(0, 6, (batch,), generator=g)
        width = int(((starts + lens + block_size - 1) // block_size).max()) + 1
        table = torch.randint(0, blocks, (batch, width), generator=g)
        cu = torch.cat([torch.zeros(1, dtype=torch.int64), lens.cumsum(0)])
        rows = int(cu[-1])
        fault = i % 7
        if fault == 1:
            cu[0] = 1
        elif fault == 2 and batch > 1:
            cu[1] = cu[2] + 1
        elif fault == 3:
            rows -= 1
        elif fault == 4:
            starts[-1] = -2
        elif fault == 5:
            table = table[:, : max(width - 2, 1)]
        elif fault == 6:
            table[torch.rand(table.shape, generator=g) < 0.2] = blocks
        dtype = torch.int32 if i % 2 else torch.int64
        args = (cache, table.to(dtype), cu.to(dtype), starts.to(dtype) if i % 3 else None, rows, "dst")
        listed = _outcome(*args)
        monkeypatch.setattr(gather, "LISTED_CHECK_ENTRIES", -1)
        assert _outcome(*args) == listed, args
        monkeypatch.undo()
        seen.add(listed.split(":")[0])
    assert seen == {"passed", "cu_seq_lens", "dst", "seq_starts", "block_table"}
