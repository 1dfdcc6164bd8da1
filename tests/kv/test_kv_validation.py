"""Bad input: RtpRefError (a ValueError) naming the argument, its value and what is valid, and not one
byte of the cache written."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import pytest
import torch

from rtp_ref.errors import RtpRefError
from rtp_ref.kv.cache import concat_and_cache_mla, read_slots, reference_write
from rtp_ref.kv.layouts import MlaLayout, layout_for_platform
from rtp_ref.platform import load_platform

PLATFORM = load_platform("cpu")


@dataclass(frozen=True)
class Call:
    """The arguments of one write: valid by default; each case breaks one."""

    layout: MlaLayout
    kv_c: Any  # Any: the broken calls pass what a tensor argument should never be
    k_pe: Any
    kv_cache: torch.Tensor
    slot_mapping: Any
    scale: Any


def good_call(layout_name: str = "fp8_ds_mla") -> Call:
    layout = layout_for_platform(PLATFORM, layout_name)
    g = torch.Generator().manual_seed(1)
    r, p = layout.kv_lora_rank, layout.rope_dim
    cache = torch.randint(0, 256, (2, 4, layout.bytes_per_token), dtype=torch.uint8, generator=g)
    return Call(
        layout,
        torch.randn(3, r, generator=g).to(torch.bfloat16),
        torch.randn(3, p, generator=g).to(torch.bfloat16),
        cache.view(torch.bfloat16) if layout.stores_input_dtype else cache,
        torch.tensor([5, -1, 2]),
        torch.tensor([0.05]),
    )


def _bf16(*shape: int) -> torch.Tensor:
    return torch.zeros(*shape, dtype=torch.bfloat16)


# (id, how the call is broken, pattern the message must match: argument, value, what is valid)
BAD_CALLS: list[tuple[str, Callable[[Call], Call], str]] = [
    ("kv_c not a tensor", lambda c: replace(c, kv_c=[[0.0] * 512] * 3), r"kv_c: list is not a torch.Tensor"),
    (
        "kv_c float32",
        lambda c: replace(c, kv_c=torch.zeros(3, 512)),
        r"kv_c: dtype torch.float32 is not supported; valid: bfloat16, float16",
    ),
    (
        "k_pe other dtype",
        lambda c: replace(c, k_pe=torch.zeros(3, 64, dtype=torch.float16)),
        r"k_pe: dtype float16 differs from kv_c's bfloat16; valid: the same dtype",
    ),
    (
        "rank the layout was not built for",
        lambda c: replace(c, kv_c=_bf16(3, 256)),
        r"kv_c: shape \[3, 256\] gives kv_lora_rank=256, but layout fp8_ds_mla was built for kv_lora_rank=512; "
        r"valid: \[num_tokens, 512\]",
    ),
    ("rope dim", lambda c: replace(c, k_pe=_bf16(3, 32)), r"k_pe: .*rope_dim=32.*valid: \[num_tokens, 64\]"),
    ("kv_c 3 dims", lambda c: replace(c, kv_c=_bf16(3, 1, 512)), r"kv_c: shape \[3, 1, 512\] has 3 dims"),
    (
        "kv_c columns strided",
        lambda c: replace(c, kv_c=_bf16(512, 3).t()),
        r"kv_c: strides \(1, 3\): the last dimension must be contiguous",
    ),
    (
        "too few rows",
        lambda c: replace(c, k_pe=_bf16(2, 64)),
        r"k_pe: has 2 rows but slot_mapping has 3 tokens; valid: >= 3 rows",
    ),
    (
        "slot_mapping int16",
        lambda c: replace(c, slot_mapping=torch.tensor([5, -1, 2], dtype=torch.int16)),
        r"slot_mapping: int16 \[3\]; valid: int32 or int64 \[num_tokens\]",
    ),
    (
        "slot_mapping 2 dims",
        lambda c: replace(c, slot_mapping=torch.tensor([[5, -1, 2]])),
        r"slot_mapping: int64 \[1, 3\]; valid: int32 or int64",
    ),
    (
        "slot beyond capacity",
        lambda c: replace(c, slot_mapping=torch.tensor([5, 8, 2])),
        r"slot_mapping\[1\]=8 is outside the cache; valid: a negative value \(skip the token\) or 0\.\.7 "
        r"\(num_blocks 2 x block_size 4\)",
    ),
    (
        "slot twice",
        lambda c: replace(c, slot_mapping=torch.tensor([5, 2, 5])),
        r"slot_mapping\[2\]=5 repeats slot_mapping\[0\]",
    ),
    (
        "cache dtype",
        lambda c: replace(c, kv_cache=torch.zeros(2, 4, 656, dtype=torch.bfloat16)),
        r"kv_cache: dtype bfloat16 is not valid for layout fp8_ds_mla; valid: uint8",
    ),
    (
        "cache too small",
        lambda c: replace(c, kv_cache=torch.zeros(2, 4, 576, dtype=torch.uint8)),
        r"kv_cache: entry size shape\[2\]=576 is too small for layout fp8_ds_mla; valid: 656",
    ),
    (
        "cache 2 dims",
        lambda c: replace(c, kv_cache=torch.zeros(8, 656, dtype=torch.uint8)),
        r"kv_cache: shape \[8, 656\] has 2 dims; valid: \[num_blocks, block_size, 656\]",
    ),
    (
        "cache token stride",
        lambda c: replace(c, kv_cache=torch.zeros(2, 4, 700, dtype=torch.uint8)[:, :, :656]),
        r"kv_cache: strides \(2800, 700, 1\): the per-token stride must equal the entry size",
    ),
    (
        "cache blocks overlap",
        lambda c: replace(c, kv_cache=torch.zeros(4000, dtype=torch.uint8).as_strided((2, 4, 656), (1000, 656, 1))),
        r"kv_cache: block stride 1000 is smaller than a block \(block_size 4 x entry 656\), so blocks overlap; "
        r"valid: stride\(0\) >= 2624",
    ),
    (
        "cache without slots",
        lambda c: replace(c, kv_cache=torch.zeros(0, 4, 656, dtype=torch.uint8)),
        r"kv_cache: shape \[0, 4, 656\] holds no slot",
    ),
    (
        "scale float64",
        lambda c: replace(c, scale=torch.tensor([0.05], dtype=torch.float64)),
        r"scale: float64 with 1 elements; valid: float32 with 1 element",
    ),
    (
        "scale two values",
        lambda c: replace(c, scale=torch.tensor([0.05, 0.1])),
        r"scale: float32 with 2 elements; valid: float32 with 1 element",
    ),
    (
        "kv_c on another device",
        lambda c: replace(c, kv_c=torch.empty(3, 512, dtype=torch.bfloat16, device="meta")),
        r"kv_c: is on device meta; valid: the cache's device cpu",
    ),
    (
        "slots on another device",
        lambda c: replace(c, slot_mapping=torch.empty(3, dtype=torch.int64, device="meta")),
        r"slot_mapping: is on device meta",
    ),
    ("scale on another device", lambda c: replace(c, scale=torch.empty(1, device="meta")), r"scale: is on device meta"),
]


@pytest.mark.parametrize(("broken", "message"), [pytest.param(b, m, id=i) for i, b, m in BAD_CALLS])
def test_bad_write_names_the_argument_and_writes_nothing(broken: Callable[[Call], Call], message: str) -> None:
    call = broken(good_call())
    before = call.kv_cache.clone()
    with pytest.raises(ValueError, match=message) as info:
        reference_write(call.layout, call.kv_c, call.k_pe, call.kv_cache, call.slot_mapping, call.scale)
    assert isinstance(info.value, RtpRefError)
    assert torch.equal(call.kv_cache.view(torch.uint8), before.view(torch.uint8))


@pytest.mark.parametrize("scale", [0.0, -1.0, float("inf"), float("nan")])
@pytest.mark.parametrize("layout_name", ["fp8", "fp8_rocm_compact"])
def test_per_tensor_layouts_need_a_positive_finite_scale(layout_name: str, scale: float) -> None:
    call = replace(good_call(layout_name), scale=torch.tensor([scale]))
    before = call.kv_cache.clone()
    with pytest.raises(
        RtpRefError,
        match=rf"scale: {scale} cannot divide values for layout {layout_name}; "
        r"valid: a finite number > 0",
    ):
        reference_write(call.layout, call.kv_c, call.k_pe, call.kv_cache, call.slot_mapping, call.scale)
    assert torch.equal(call.kv_cache, before)


def test_tiled_layouts_ignore_the_scale_value() -> None:
    """ds_mla and model1 compute their own scales: a zero per-tensor scale is accepted, as in vLLM."""
    call = replace(good_call("fp8_ds_mla"), scale=torch.tensor([0.0]))
    reference_write(call.layout, call.kv_c, call.k_pe, call.kv_cache, call.slot_mapping, call.scale)


def test_auto_cache_must_have_the_inputs_dtype() -> None:
    call = good_call("auto")
    cache = call.kv_cache.view(torch.float16)
    with pytest.raises(
        RtpRefError,
        match=r"kv_cache: dtype float16 is not valid for layout auto; "
        r"valid: bfloat16 \(the inputs' dtype\)",
    ):
        reference_write(call.layout, call.kv_c, call.k_pe, cache, call.slot_mapping, call.scale)


@pytest.mark.parametrize(
    ("kv_cache_dtype", "rank", "rope", "message"),
    [
        ("fp8_model1_mla", 512, 64, r"layout fp8_model1_mla supports only kv_lora_rank=448 and rope_dim=64"),
        ("fp8_ds_mla", 100, 64, r"kv_lora_rank=100 is not a multiple of 128"),
        ("auto", 512, 0, r"rope_dim=0 is not valid for layout auto; valid: an integer >= 1"),
        ("fp8_e5m2", 512, 64, r"unknown MLA layout 'fp8_e5m2'; valid layouts: auto, fp8, fp8_ds_mla"),
    ],
)
def test_rank_or_rope_a_layout_does_not_take_is_refused_before_writing(
    kv_cache_dtype: str, rank: int, rope: int, message: str
) -> None:
    cache = torch.randint(0, 256, (2, 4, 656), dtype=torch.uint8)
    before = cache.clone()
    with pytest.raises(RtpRefError, match=message):
        concat_and_cache_mla(
            _bf16(3, rank),
            _bf16(3, rope),
            cache,
            torch.tensor([0, 1, 2]),
            kv_cache_dtype,
            torch.tensor([1.0]),
            platform=PLATFORM,
        )
    assert torch.equal(cache, before)


@pytest.mark.parametrize(
    ("slots", "input_dtype", "message"),
    [
        (torch.tensor([0, -1]), torch.bfloat16, r"slots: slots\[1\]=-1 is not a slot of the cache; valid: 0\.\.7"),
        (torch.tensor([8]), torch.bfloat16, r"slots\[0\]=8 is not a slot of the cache"),
        (torch.tensor([0], dtype=torch.int32), torch.bfloat16, r"slots: int32 \[1\]; valid: int64 \[n\]"),
        (torch.tensor([0]), torch.float32, r"input_dtype: dtype torch.float32 is not supported"),
    ],
)
def test_bad_read_names_the_argument(slots: torch.Tensor, input_dtype: torch.dtype, message: str) -> None:
    call = good_call()
    with pytest.raises(RtpRefError, match=message):
        read_slots(call.layout, call.kv_cache, slots, torch.tensor([1.0]), input_dtype)
