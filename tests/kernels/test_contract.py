"""WriteContract and WritePlan: the numbers the kernels take from the reference field tables."""

from __future__ import annotations

import pytest
import torch

from rtp_ref.contract import WriteContract, check_call
from rtp_ref.errors import RtpRefError
from rtp_ref.fp8.formats import E4M3FN, E4M3FNUZ, ConversionMode
from rtp_ref.kernels.protocol import UnsupportedLayoutError
from rtp_ref.kernels.write_plan import ValueMode, WritePlan
from rtp_ref.platform import load_platform
from tests.kernels.cases import contract


def test_contract_of_a_platform_carries_its_format_mode_flags_and_name() -> None:
    c = contract("rocm-gfx942", lora_alignment="round_up")
    assert c.element_format == E4M3FNUZ
    assert c.conversion_mode is ConversionMode.SATFINITE
    assert c.flags.fp8_max_divisor == 224.0
    assert c.flags.lora_alignment.value == "round_up"
    assert c.platform == "rocm-gfx942"
    assert WriteContract.for_platform(load_platform("cpu")).element_format == E4M3FN


def test_plan_of_ds_mla_matches_the_published_byte_map() -> None:
    plan = WritePlan.of(contract("cuda-sm90").layout("fp8_ds_mla", 512, 64))
    assert (plan.nope_mode, plan.rope_mode) == (ValueMode.TILED, ValueMode.COPY16)
    assert (plan.nope_offset, plan.scale_offset, plan.rope_offset, plan.data_bytes) == (0, 512, 528, 656)
    assert (plan.tile, plan.n_tiles, plan.pow2_scale, plan.scale_ue8m0, plan.scale_trailing) == (
        128, 4, True, False, False)
    assert (plan.divisor, plan.floor) == (448.0, 1e-4)


def test_plan_of_model1_puts_ue8m0_scales_in_the_block_trailing_area() -> None:
    plan = WritePlan.of(contract("cpu").layout("fp8_model1_mla", 448, 64))
    assert (plan.nope_offset, plan.rope_offset, plan.data_bytes, plan.trailing_bytes) == (0, 448, 576, 8)
    assert (plan.tile, plan.n_tiles, plan.scale_ue8m0, plan.scale_trailing, plan.scale_offset) == (
        64, 7, True, True, 0)


@pytest.mark.parametrize("name", ["fp8", "fp8_e4m3", "fp8_rocm_compact"])
def test_plan_of_per_tensor_layouts_quantizes_nope_and_rope(name: str) -> None:
    plan = WritePlan.of(contract("rocm-gfx942").layout(name, 512, 64))
    assert (plan.nope_mode, plan.rope_mode, plan.rope_offset, plan.data_bytes) == (
        ValueMode.PER_TENSOR, ValueMode.PER_TENSOR, 512, 576)
    assert plan.traits.max_code == 0x7F and plan.traits.nan_code == 0x80 and not plan.traits.negative_zero


def test_wide_fields_are_unaligned_for_an_odd_rank_or_block_stride() -> None:
    c = contract("cpu", lora_alignment="round_up")
    aligned = WritePlan.of(c.layout("fp8_ds_mla", 512, 64))
    odd = WritePlan.of(c.layout("fp8_ds_mla", 129, 8))
    cache = torch.zeros(2, 4, 656, dtype=torch.uint8)
    assert aligned.wide_fields_aligned(cache)
    assert not aligned.wide_fields_aligned(torch.zeros(2 * 4 * 656 + 2, dtype=torch.uint8)[1:-1].view(2, 4, 656))
    assert not odd.wide_fields_aligned(torch.zeros(2, 4, odd.layout.cache_entry, dtype=torch.uint8))


def test_check_call_refuses_unclaimed_layouts_and_devices_by_name() -> None:
    cache = torch.zeros(1, 1, 576, dtype=torch.uint8)
    assert check_call("k", ("fp8",), ("cpu",), "fp8_e4m3", cache) == "fp8"
    with pytest.raises(UnsupportedLayoutError, match=r"kernel k does not support kv_cache_dtype 'fp8_ds_mla'.*fp8"):
        check_call("k", ("fp8",), ("cpu",), "fp8_ds_mla", cache)
    with pytest.raises(UnsupportedLayoutError, match=r"does not run on device type 'meta'.*runs on cpu"):
        check_call("k", ("fp8",), ("cpu",), "fp8", cache.to("meta"))


def test_layout_dims_a_layout_does_not_support_raise_rtp_ref_error() -> None:
    with pytest.raises(RtpRefError, match="fp8_model1_mla supports only kv_lora_rank=448"):
        contract("cpu").layout("fp8_model1_mla", 512, 64)


def test_block_shift_only_for_powers_of_two() -> None:
    from rtp_ref.kernels.write_plan import block_shift_of

    assert [block_shift_of(n) for n in (1, 2, 16, 64, 1 << 20)] == [0, 1, 4, 6, 20]
    assert [block_shift_of(n) for n in (0, 3, 24, 65)] == [-1, -1, -1, -1]
