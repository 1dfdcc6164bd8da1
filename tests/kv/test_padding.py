"""The engine padding conventions (rtp_ref.kv.padding): what each makes of a slot mapping, against slots written
out by hand."""

from __future__ import annotations

import pytest
import torch

from rtp_ref.kv.padding import NEGATIVE, ZERO, as_negative, first_real_slot, padding_sentinel, reserved_slot


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_zero_makes_slot_0_padding_and_keeps_the_dtype(dtype: torch.dtype) -> None:
    slots = torch.tensor([5, 0, -1, 1, 0, 7], dtype=dtype)
    out = as_negative(slots, ZERO)
    assert out.dtype == dtype
    assert out.tolist() == [5, -1, -1, 1, -1, 7]
    assert slots.tolist() == [5, 0, -1, 1, 0, 7], "the engine's tensor is not changed"


def test_negative_hands_back_the_same_tensor() -> None:
    slots = torch.tensor([0, -1, 3])
    assert as_negative(slots, NEGATIVE) is slots


def test_each_convention_names_its_sink_sentinel_and_first_real_slot() -> None:
    assert (reserved_slot(ZERO), padding_sentinel(ZERO), first_real_slot(ZERO)) == (0, 0, 1)
    assert (reserved_slot(NEGATIVE), padding_sentinel(NEGATIVE), first_real_slot(NEGATIVE)) == (None, -1, 0)
