"""The shared locator (rtp_ref.cases.storage) and the examples every op's failed checks carry through it.

Places and values are derived independently of the locator: positions by the cache's own index arithmetic
(the HND formula written out here), values by ml_dtypes and struct, and each fault poked into one known element
through the case's own views.
"""

from __future__ import annotations

import struct

import ml_dtypes
import numpy as np
import pytest
import torch

from rtp_ref.cases.cases import CANARY, GUARD_BYTES
from rtp_ref.cases.gather_cases import GatherCase, gather_specs
from rtp_ref.cases.gather_grading import grade_gather
from rtp_ref.cases.grading import Grading
from rtp_ref.cases.mha_indexer_cases import IndexerCase, MhaCase, build_mha_indexer_case, indexer_specs, mha_specs
from rtp_ref.cases.mha_indexer_grading import grade_mha_indexer_write
from rtp_ref.cases.storage import byte_positions
from rtp_ref.contract import default_contract
from rtp_ref.ops import INDEXER_OP, MHA_OP, op_reference

CONTRACT = default_contract(torch.device("cpu"))


def _failed(grading: Grading, name: str) -> str:
    found = {c.name: c.detail for c in grading.checks if not c.passed}
    assert name in found, f"{name} did not fail; failed: {sorted(found)}"
    return found[name]


def _mha(variant: str, order: str) -> MhaCase:
    spec = next(s for s in mha_specs(variant) if s.order == order and s.heads == 8 and s.kind == "random")
    case = build_mha_indexer_case(spec, CONTRACT, "cpu")
    assert isinstance(case, MhaCase)
    return case


def _write_reference(case: MhaCase) -> torch.Tensor:
    before = case.storage.clone()
    op_reference(MHA_OP)(case.layout, case.key, case.value, case.key_cache, case.value_cache, case.slot_mapping,
                         case.k_scale, case.v_scale)
    return before


def test_byte_positions_of_a_permuted_16bit_view_follow_the_hnd_formula() -> None:
    case = _mha("auto", "HND")
    s = case.spec
    got = byte_positions(case.value_cache, case.storage)
    b, r, h, d = 1, 5, 3, 7
    # HND: [block, head, row, dim] in memory, the value cache after the key cache and a guard zone
    element = ((b * s.heads + h) * s.block_size + r) * s.width + d
    start = 2 * GUARD_BYTES + case.cache_bytes + 2 * element
    assert got[b, r, h, d].tolist() == [start, start + 1]
    assert got.shape == (s.num_blocks, s.block_size, s.heads, s.width, 2)


def test_an_element_and_a_fields_bytes_of_a_permuted_view_follow_the_hnd_formula() -> None:
    """``element_bytes`` (computed from strides, no position table) and ``bytes_in`` (a strided view) agree with
    the formula and with the storage's own bytes there."""
    case = _mha("auto", "HND")
    s = case.spec
    value = case.storage_map().field("value")
    b, r, h, d = 1, 5, 3, 7
    element = ((b * s.heads + h) * s.block_size + r) * s.width + d
    start = 2 * GUARD_BYTES + case.cache_bytes + 2 * element
    slot = b * s.block_size + r
    assert value.element_bytes(slot, h * s.width + d).tolist() == [start, start + 1]
    marked = torch.zeros_like(case.storage)
    marked[start] = 7
    row = value.bytes_in(marked)[slot]
    assert row.nonzero().flatten().tolist() == [2 * (h * s.width + d)]
    assert torch.equal(value.bytes_in(case.storage), case.storage[value.positions])


def test_a_slots_positions_follow_the_hnd_formula() -> None:
    """``slot_positions`` (what ``layout.reserved_slot`` masks): every head's values of one slot, from the formula."""
    case = _mha("auto", "HND")
    s = case.spec
    b, r = 1, 5
    slot = b * s.block_size + r
    want = [2 * GUARD_BYTES + case.cache_bytes + 2 * (((b * s.heads + h) * s.block_size + r) * s.width + d) + k
            for h in range(s.heads) for d in range(s.width) for k in range(2)]
    assert case.storage_map().field("value").slot_positions(slot).tolist() == want
    mask = case.storage_map().slot_mask(slot)
    assert int(mask.sum()) == 2 * 2 * s.heads * s.width  # the key's and the value's bytes of the slot


def test_an_mha_byte_difference_names_token_slot_head_element_and_both_fp8_values() -> None:
    case = _mha("fp8", "HND")
    before = _write_reference(case)
    token = 9
    slot = int(case.slot_mapping[token])
    block, row = divmod(slot, case.spec.block_size)
    old = int(case.key_cache[block, row, 3, 17])
    new = old ^ 0x01
    case.key_cache[block, row, 3, 17] = new
    text = _failed(grade_mha_indexer_write(case, before, case.storage.clone(), 1.0), "bit_exact.bytes")

    def e4m3(code: int) -> str:
        return f"{float(np.uint8(code).view(ml_dtypes.float8_e4m3fn)):.6g} (0x{code:02x})"

    assert text.startswith("1 of ")
    assert f"token {token} (slot {slot}) key head 3 [17]: kernel {e4m3(new)} vs reference {e4m3(old)}" in text


def test_a_scale_the_indexer_never_wrote_is_not_written_not_a_number() -> None:
    spec = next(s for s in indexer_specs("none") if s.quant_block == 64 and s.kind == "random")
    case = build_mha_indexer_case(spec, CONTRACT, "cpu")
    assert isinstance(case, IndexerCase)
    before = case.storage.clone()
    op_reference(INDEXER_OP)(case.layout, case.k, case.kv_cache, case.slot_mapping, spec.layout)
    token = 6
    slot = int(case.slot_mapping[token])
    block, row = divmod(slot, spec.block_size)
    blocks = case.kv_cache.reshape(spec.num_blocks, -1)
    second = spec.block_size * spec.width + row * 4 * 2 + 4  # two fp32 scales a token, at the block's end
    contract = bytes(blocks[block, second:second + 4].tolist())
    blocks[block, second:second + 4] = CANARY
    grading = grade_mha_indexer_write(case, before, case.storage.clone(), 1.0)
    want = f"{struct.unpack('<f', contract)[0]:.6g} (0x{struct.unpack('<I', contract)[0]:08x})"
    for check in ("numerics.scale_positive", "bit_exact.bytes"):
        assert (f"token {token} (slot {slot}) scale[1]: kernel not written (still 0xa5a5a5a5) vs "
                in _failed(grading, check))
    assert want in _failed(grading, "bit_exact.bytes")
    assert "e-16" not in _failed(grading, "numerics.scale_positive")  # the canary is not shown as a number


def test_a_stray_write_names_the_guard_zone_it_hit() -> None:
    case = _mha("auto", "NHD")
    before = _write_reference(case)
    after = case.storage.clone()
    after[2 * GUARD_BYTES + 2 * case.cache_bytes + 4] = 0
    after[GUARD_BYTES + case.cache_bytes + 1] = 0
    text = _failed(grade_mha_indexer_write(case, before, after, 1.0), "layout.untouched_bytes")
    assert text == ("2 byte(s) outside the target entries changed, e.g. guard byte +1 (after key_cache): kernel 0x00 "
                    "vs untouched 0xa5; guard byte +4 (after value_cache): kernel 0x00 vs untouched 0xa5")


def test_a_reader_row_left_unwritten_names_the_row_the_slot_it_reads_and_the_field() -> None:
    spec = next(s for s in gather_specs("auto") if s.tokens == 37 and s.out == "fp16")
    case = GatherCase(spec, CONTRACT, "cpu")
    cache_before, dst_before = case.cache_storage.clone(), case.dst_storage.clone()
    ref = case.reference_dst()
    after = ref.clone()  # a correct read but for one k_pe value, never written
    rank, row, col = case.layout.kv_lora_rank, 11, 2
    at = GUARD_BYTES + (row * (rank + case.layout.rope_dim) + rank + col) * 2
    after[at:at + 2] = CANARY
    grading = grade_gather(case, cache_before, case.cache_storage.clone(), dst_before, after)
    slot = int(case.read_slots()[row])
    want = float(np.frombuffer(bytes(ref[at:at + 2].tolist()), dtype=np.float16)[0])
    hexed = f"0x{int.from_bytes(bytes(ref[at:at + 2].tolist()), 'little'):04x}"
    for check in ("read.values", "bit_exact.bytes"):
        assert (f"row {row} (reads slot {slot}) k_pe[{col}]: kernel not written (still 0xa5a5) vs contract "
                f"{want:.6g} ({hexed})") in _failed(grading, check)


@pytest.mark.parametrize("variant", ["auto", "fp8"])
def test_a_correct_write_fails_nothing(variant: str) -> None:
    case = _mha(variant, "HND")
    before = _write_reference(case)
    assert grade_mha_indexer_write(case, before, case.storage.clone(), 1.0).failed == []
