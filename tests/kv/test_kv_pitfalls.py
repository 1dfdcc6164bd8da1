"""The review's layout pitfalls (alibaba/rtp-llm PR #1330, docs/sources.md#rtp-llm-plugin-pr-review), each a
check that the reference passes and an emulation of the old behaviour demonstrably fails."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

import pytest
import torch

from rtp_ref.errors import RtpRefError
from rtp_ref.fp8.formats import E4M3FN, ConversionMode
from rtp_ref.kv.dtypes import KvDtype
from rtp_ref.kv.fields import Source
from rtp_ref.kv.flags import LayoutFlags, resolve_flags
from rtp_ref.kv.layouts import MlaLayout, build_layout, layout_for_platform
from rtp_ref.kv.specs import mla_spec, resolve_sparse_fp8_layout
from rtp_ref.platform import all_platforms, load_platform

# ---- 1. the compact gate was `#if USING_ROCM`: it follows the build, not the target ----------------

# Which layout rtp-llm's sparse fp8 spec must use per target, from the platform files' intent.
SPARSE_FP8_LAYOUT = {
    "cpu": "fp8_ds_mla",
    "cuda-sm90": "fp8_ds_mla",
    "cuda-sm100": "fp8_ds_mla",
    "cuda-sm120": "fp8_ds_mla",  # rtp-llm's CUDA build: compact_fp8_for_sparse is false on every NVIDIA GPU
    "rocm-gfx942": "fp8_rocm_compact",
    "rocm-gfx950": "fp8_rocm_compact",
}
BUILT_FOR_ROCM = torch.version.hip is not None  # all `#if USING_ROCM` can see


def legacy_sparse_fp8_layout(flags: LayoutFlags) -> str:
    """A copy of the old gate (and of its test, which copied the same #if): the flags cannot reach it."""
    return "fp8_rocm_compact" if BUILT_FOR_ROCM else "fp8_ds_mla"


def check_sparse_gate(gate: Callable[[LayoutFlags], str]) -> None:
    for platform in all_platforms():
        assert gate(resolve_flags(platform)) == SPARSE_FP8_LAYOUT[platform.name], platform.name
    # the choice is injectable on any machine, both ways
    assert gate(resolve_flags(load_platform("cpu"), {"compact_fp8_for_sparse": "true"})) == "fp8_rocm_compact"
    assert gate(resolve_flags(load_platform("rocm-gfx942"), {"compact_fp8_for_sparse": "false"})) == "fp8_ds_mla"


def test_sparse_gate_follows_the_injected_flag() -> None:
    check_sparse_gate(resolve_sparse_fp8_layout)


def test_a_copy_of_the_compile_time_gate_is_caught() -> None:
    with pytest.raises(AssertionError):
        check_sparse_gate(legacy_sparse_fp8_layout)


def test_both_sparse_layouts_are_exercised_on_this_machine() -> None:
    """The ROCm branch is no longer CUDA-CI-dead: its 576-byte spec is built here, whatever the build."""
    rocm = resolve_flags(load_platform("rocm-gfx942"))
    spec = mla_spec(
        KvDtype.FP8_E4M3,
        kv_lora_rank=512,
        rope_dim=64,
        flags=rocm,
        element_format=E4M3FN,
        conversion_mode=ConversionMode.SATFINITE,
        is_sparse=True,
    )
    assert spec.layout.name == "fp8_rocm_compact" and spec.block_size_bytes == 576


# ---- 2. the compact layout had no scale area and no statement of where its scale lives -------------


def compact_fields(layout: MlaLayout, *, declared_scale: bool) -> MlaLayout:
    """The compact layout's table, or the PR's: nope and rope fp8 with nothing saying where the scale is."""
    if declared_scale:
        return layout
    fields = tuple(replace(f, scale_field=None) for f in layout.fields if f.source is not Source.SCALE)
    return replace(layout, fields=fields)


@pytest.mark.parametrize("declared_scale", [True, False], ids=["reference", "pr_without_scale"])
def test_a_compact_layout_must_declare_its_scale(declared_scale: bool) -> None:
    reference = layout_for_platform(load_platform("rocm-gfx942"), "fp8_rocm_compact")
    if declared_scale:
        compact = compact_fields(reference, declared_scale=True)
        assert compact.external_scale is not None and compact.bytes_per_token == 576
    else:
        with pytest.raises(
            RtpRefError,
            match=r"fp8 field 'nope' declares no scale field, so nothing says where "
            r"its scale lives",
        ):
            compact_fields(reference, declared_scale=False)


# ---- 3. scale room: rtp-llm HEAD floors R / 128, the PR makes R % 128 a hard error everywhere -----


def needed_bytes_per_token(r: int, p: int) -> int:
    """What ds_mla needs: R fp8 + one fp32 scale per started tile of 128 + the bf16 rope."""
    return r + 4 * math.ceil(r / 128) + 2 * p


def round_up_bytes_per_token(r: int, p: int) -> int:
    flags = resolve_flags(load_platform("cpu"), {"lora_alignment": "round_up"})
    spec = mla_spec(
        KvDtype.FP8_E4M3,
        kv_lora_rank=r,
        rope_dim=p,
        flags=flags,
        element_format=E4M3FN,
        conversion_mode=ConversionMode.SATFINITE,
    )
    return spec.block_size_bytes


def legacy_floor_bytes_per_token(r: int, p: int) -> int:
    """rtp-llm HEAD: ``r + r/128*4 + 2*rope`` in integer division."""
    return r + r // 128 * 4 + 2 * p


def check_scale_room(bytes_per_token: Callable[[int, int], int]) -> None:
    for r in (*range(1, 1025, 3), 100, 512):
        assert bytes_per_token(r, 64) >= needed_bytes_per_token(r, 64), f"kv_lora_rank={r}"


def test_round_up_never_allocates_less_than_needed() -> None:
    check_scale_room(round_up_bytes_per_token)
    assert round_up_bytes_per_token(100, 64) == 100 + 4 + 128


def test_floor_division_scale_room_is_caught() -> None:
    with pytest.raises(AssertionError, match="kv_lora_rank=1"):
        check_scale_room(legacy_floor_bytes_per_token)
    assert legacy_floor_bytes_per_token(100, 64) == 228 < needed_bytes_per_token(100, 64)


@pytest.mark.parametrize("platform", ["cpu", "cuda-sm90", "rocm-gfx942"])
def test_strict_alignment_failure_says_what_to_change(platform: str) -> None:
    with pytest.raises(RtpRefError) as info:
        layout_for_platform(load_platform(platform), "fp8_ds_mla", kv_lora_rank=100)
    message = str(info.value)
    for advice in (
        "kv_lora_rank=100 is not a multiple of 128",
        "bf16/fp16 KV cache (layout 'auto')",
        "--layout-flag lora_alignment=round_up",
        "ceil(100/128) = 1 scale(s), 232 bytes per token at rope_dim 64",  # 100 + 4 + 2 * 64
        "'fp8' or 'fp8_rocm_compact' (any rank, one per-tensor scale)",
    ):
        assert advice in message


def test_alignment_is_not_a_rule_of_the_other_layouts() -> None:
    """Only ds_mla's 128-value tiles need it: a compact sparse spec takes R = 100 on a strict platform."""
    flags = resolve_flags(load_platform("rocm-gfx942"))
    spec = mla_spec(
        KvDtype.FP8_E4M3,
        kv_lora_rank=100,
        rope_dim=64,
        flags=flags,
        element_format=E4M3FN,
        conversion_mode=ConversionMode.SATFINITE,
        is_sparse=True,
    )
    assert spec.block_size_bytes == 164
    for name in ("auto", "fp8"):
        build_layout(
            name,
            kv_lora_rank=100,
            rope_dim=64,
            flags=flags,
            element_format=E4M3FN,
            conversion_mode=ConversionMode.SATFINITE,
        )
