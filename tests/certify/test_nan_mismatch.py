"""The byte comparison every grader shares (``StorageMap.mismatched``) under the NaN policy, and the graders that use
it: a NaN where the reference stored one passes as any NaN of the field's format, unless the table pins one; a NaN
for a number, a number for a NaN, padding and bytes in no field are compared as bytes.

The expected masks are written out by hand from the bytes poked in (which codes are NaN: the formats' definitions).
"""

from __future__ import annotations

import struct

import torch

from rtp_ref.cases.case_matrix import case_specs
from rtp_ref.cases.cases import build_case
from rtp_ref.cases.gather_cases import GatherCase, gather_specs
from rtp_ref.cases.gather_grading import grade_gather
from rtp_ref.cases.grading import grade_write, mla_storage_map, reference_image
from rtp_ref.cases.mha_indexer_cases import MhaCase, build_mha_indexer_case, mha_specs
from rtp_ref.cases.mha_indexer_grading import grade_mha_indexer_write
from rtp_ref.cases.storage import StorageMap, field_places
from rtp_ref.contract import default_contract
from rtp_ref.fp8.elements import ANY_NAN, NanPolicy, element_traits
from rtp_ref.ops import MHA_OP, op_reference

CONTRACT = default_contract(torch.device("cpu"))
#: storage bytes: 0-7 an e5m2 field (2 slots x 4), 8-15 an fp32 field (2 slots x 1), 16-17 padding, 18-19 no field
SIZE = 20


def _map() -> StorageMap:
    layer = torch.zeros(SIZE, dtype=torch.uint8)
    fields = [field_places("v", layer[0:8].view(2, 4), layer, element_traits("e5m2"), 1),
              field_places("s", layer[8:16].view(2, 4), layer, element_traits("fp32"), 1),
              field_places("pad", layer[16:18].view(2, 1), layer, element_traits("pad"), 1)]
    return StorageMap(SIZE, fields, [("cache", 0, 18)], lambda slot: f"slot {slot}")


def _storage(codes: list[int], scales: tuple[float | int, float | int], tail: list[int]) -> torch.Tensor:
    """The bytes of e5m2 ``codes``, two fp32 ``scales`` (an int: raw bits) and the four ``tail`` bytes."""
    packed = b"".join(struct.pack("<I", s) if isinstance(s, int) else struct.pack("<f", s) for s in scales)
    return torch.tensor([*codes, *packed, *tail], dtype=torch.uint8)


def _flagged(mask: torch.Tensor) -> list[int]:
    return torch.nonzero(mask).flatten().tolist()


WANT = _storage([0x7E, 0x3C, 0xFE, 0x00, 0x40, 0x7E, 0x7E, 0x01], (0x7FC00000, 1.0), [0x7E, 0x7E, 0x7E, 0x7E])


def test_any_nan_of_the_format_passes_where_the_reference_stored_a_nan() -> None:
    # 0x7F, 0xFD, 0x7D: other e5m2 NaNs; 0xFFFFFFFF: a negative fp32 NaN with a full payload
    got = _storage([0x7F, 0x3C, 0xFD, 0x00, 0x40, 0x7D, 0xFF, 0x01], (0xFFFFFFFF, 1.0), [0x7E, 0x7E, 0x7E, 0x7E])
    assert _flagged(_map().mismatched(got, WANT, ANY_NAN)) == []
    assert _flagged(got != WANT) == [0, 2, 5, 6, 8, 9, 10, 11]  # the bytes do differ


def test_a_nan_for_a_number_a_number_for_a_nan_padding_and_stray_bytes_differ() -> None:
    got = _storage([0x7B, 0x7F, 0xFE, 0x00, 0x40, 0x7E, 0x7E, 0x01], (0x7FC00000, 0x7FC00000),
                   [0x7F, 0x7E, 0x7D, 0x7E])
    # 0: a number (57344) for a NaN; 1: a NaN for 1.0; 12-15: an fp32 NaN for 1.0 (the bytes that differ);
    # 16: padding holds no NaN, so 0x7F is not 0x7E there; 18: a byte in no field
    assert _flagged(_map().mismatched(got, WANT, ANY_NAN)) == [0, 1, 14, 15, 16, 18]


def test_a_pinned_nan_is_the_only_one_that_passes_the_reference_s_own_included() -> None:
    got = _storage([0x7F, 0x3C, 0x7F, 0x00, 0x40, 0x7E, 0x7F, 0x01], (0x7FC00000, 1.0), [0x7E, 0x7E, 0x7E, 0x7E])
    pinned = NanPolicy.pinning({"e5m2": 0x7F})
    # 5: the reference's own 0x7E, bytes equal, is not the pin; the fp32 NaN is not pinned
    assert _flagged(_map().mismatched(got, WANT, pinned)) == [5]
    assert _flagged(_map().mismatched(got, WANT, NanPolicy.pinning({"fp32": 0x7FFFFFFF}))) == [8, 9, 10, 11]


def _edge_mha(variant: str) -> tuple[MhaCase, torch.Tensor]:
    spec = next(s for s in mha_specs(variant) if s.kind == "edge")
    case = build_mha_indexer_case(spec, CONTRACT, "cpu")
    assert isinstance(case, MhaCase)
    before = case.storage.clone()
    op_reference(MHA_OP)(case.layout, case.key, case.value, case.key_cache, case.value_cache, case.slot_mapping,
                         case.k_scale, case.v_scale)
    return case, before


def _failed(grading: object) -> list[str]:
    return [c.name for c in grading.checks if not c.passed]  # type: ignore[attr-defined]


def test_the_mha_grading_takes_the_hardware_e5m2_nan_and_a_pin_refuses_it() -> None:
    case, before = _edge_mha("fp8_e5m2")
    after = case.storage.clone()
    nan_at = torch.nonzero(after == 0x7E).flatten()  # 0x7E is an e5m2 NaN and not the canary
    assert nan_at.numel() >= 4  # NaN of both signs in K and V
    after[nan_at] = 0x7F
    assert not _failed(grade_mha_indexer_write(case, before, after, 1.0))
    grading = grade_mha_indexer_write(case, before, after, 1.0, NanPolicy.pinning({"e5m2": 0x7E}))
    assert _failed(grading) == ["bit_exact.bytes"]
    detail = next(c.detail for c in grading.checks if not c.passed)
    assert detail.startswith(f"{nan_at.numel()} of ") and "(the table pins NaN: e5m2 0x7e)" in detail


def test_the_gather_grading_takes_the_hardware_bf16_nan() -> None:
    spec = next(s for s in gather_specs("fp8") if s.kind == "edge" and s.out == "bf16")
    case = GatherCase(spec, CONTRACT, "cpu")
    cache = case.cache_storage.cpu()
    dst_after = case.reference_dst()
    rows = case.dst_view(dst_after)[: spec.tokens]
    nan = torch.isnan(rows.float())
    assert int(nan.sum()) >= 1
    rows.view(torch.int16)[nan] = 0x7FFF
    assert not _failed(grade_gather(case, cache, cache, case.dst_storage.cpu(), dst_after))
    rows.view(torch.int16)[0, 0] = 0x7FFF if not bool(nan[0, 0]) else 0x3F80
    failed = _failed(grade_gather(case, cache, cache, case.dst_storage.cpu(), dst_after))
    assert "read.values" in failed and "bit_exact.bytes" in failed


def test_a_16bit_copy_takes_any_nan_too() -> None:
    """The ``auto`` cache copies the inputs' bits: its NaN may come back as another NaN of the input's format (bf16
    in the first edge case); a number there may not."""
    case, before = _edge_mha("auto")
    assert case.spec.input_dtype == torch.bfloat16
    after = case.storage.clone()
    halves = after.view(torch.int16)
    nan_at = torch.nonzero(torch.isnan(after.view(torch.bfloat16).float())).flatten()
    assert nan_at.numel() >= 2
    halves[nan_at] = 0x7FFF
    assert not _failed(grade_mha_indexer_write(case, before, after, 1.0))
    halves[nan_at[0]] = 0x3F80  # 1.0 where the input held a NaN
    assert {"layout.key_exact", "bit_exact.bytes"} <= set(_failed(grade_mha_indexer_write(case, before, after, 1.0)))


def test_the_mla_grading_takes_any_nan_in_a_16bit_rope_copy_unless_pinned() -> None:
    spec, dims = next((s, d) for s, d in case_specs("fp8_ds_mla")
                      if s.kind == "edge" and s.input_dtype == torch.float16)
    layout = CONTRACT.layout("fp8_ds_mla", *dims)
    inputs = build_case(spec, layout, "cpu")
    before, ref = inputs.storage.clone(), reference_image(layout, inputs)
    after = ref.storage.clone()
    rope = mla_storage_map(layout, inputs).field("rope").positions.reshape(-1, 2)
    nan = torch.isnan(after[rope].contiguous().view(torch.float16).float().flatten())
    assert int(nan.sum()) >= 2
    after[rope[nan]] = torch.tensor([0xFF, 0xFF], dtype=torch.uint8)  # fp16 0xFFFF: a negative NaN, full payload
    assert not grade_write(layout, "edge", inputs, before, after, ref, 1.0).failed
    pinned = grade_write(layout, "edge", inputs, before, after, ref, 1.0, NanPolicy.pinning({"fp16": 0x7E00}))
    assert pinned.failed == ["layout.rope_exact", "bit_exact.bytes"]
