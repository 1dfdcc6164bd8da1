"""A ``zero`` field (padding the writer sets to 0: local-inference-lab/vllm's 432-byte ``nvfp4_ds_mla`` record) is
claimed and planned only by a kernel whose plan writes it, and only as one field per token."""

from __future__ import annotations

import dataclasses

import pytest

from rtp_ref.errors import UnsupportedLayoutError
from rtp_ref.kernels.write_plan import TRITON_LIMITS, WritePlan, compiled_record
from rtp_ref.kv.fields import Placement, Source
from rtp_ref.kv.layout_records import ELEMENT_PAD, FieldRecord, layout_record
from rtp_ref.kv.layouts import layout_for_platform
from rtp_ref.platform import load_platform

NAME = "nvfp4_ds_mla_bf16rope"
#: the Triton writer's limits less the zero padding: everything else the record needs
NO_ZERO = dataclasses.replace(TRITON_LIMITS, zero_pad=False)


def test_only_a_plan_that_writes_zero_padding_takes_the_record() -> None:
    record = layout_record(NAME)
    assert compiled_record(record, TRITON_LIMITS) and not compiled_record(record, NO_ZERO)
    layout = layout_for_platform(load_platform("cpu"), NAME)
    plan = WritePlan.of(layout, TRITON_LIMITS)
    assert (plan.zero_offset, plan.zero_bytes) == (288, 16)  # [288, 304) of the fork's record, as its source gives
    with pytest.raises(UnsupportedLayoutError, match="does not write zero padding"):
        WritePlan.of(layout, NO_ZERO)


def test_a_second_zero_field_is_claimed_by_no_plan() -> None:
    record = layout_record(NAME)
    extra = FieldRecord("zero2", Source.ZERO, Placement.PER_TOKEN, ELEMENT_PAD, 16)
    assert not compiled_record(dataclasses.replace(record, fields=(*record.fields, extra)), TRITON_LIMITS)
