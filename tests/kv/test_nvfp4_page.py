"""The NVFP4 MHA page (rtp_ref.kv.nvfp4_page) against its sources written out another way: vLLM's kernel's offset
arithmetic (``swizzle_scale_offset`` as it stands, not simplified) in plain loops, FlashInfer's swizzle as its
permute, and a whole write against the float32 / ml_dtypes quantizer oracle of tests/fp4/test_nvfp4.py."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest
import torch

from rtp_ref.errors import RtpRefError
from rtp_ref.fp4.nvfp4 import NVFP4_VLLM
from rtp_ref.kv.nvfp4_page import Nvfp4Page, ScaleOrder, write_nvfp4_side
from tests.fp4.test_nvfp4 import oracle_block

LINEAR, SWIZZLED = ScaleOrder.LINEAR, ScaleOrder.SWIZZLED_4_TOKEN
SHAPES = [(4, 1, 64), (8, 3, 64), (16, 2, 128), (8, 4, 256)]


def vllm_offsets(t: int, h: int, T: int, H: int, D: int, hnd: bool, swizzled: bool) -> tuple[list[int], list[int]]:
    """vLLM's ``reshape_and_cache_nvfp4_kernel`` offsets of (token t, head h) in a side's page: its code bytes and
    its scale bytes, as the kernel computes them (data first, scales carved at ``T * H * D/2``)."""
    half, S = D // 2, D // 16
    data_base = (h * T + t) * half if hnd else (t * H + h) * half
    sf_area = T * H * half
    scales = []
    for s in range(S):
        if not swizzled:
            scales.append(sf_area + ((h * T + t) * S if hnd else (t * H + h) * S) + s)
            continue
        s_group = S // 4
        swizzled_t = (t // 4) * 4 + s // s_group
        swizzled_s = (s % s_group) * 4 + (t % 4)
        scales.append(sf_area + (h * T * S + swizzled_t * S + swizzled_s if hnd
                                 else h * S + swizzled_t * (H * S) + swizzled_s))
    return [data_base + j for j in range(half)], scales


@pytest.mark.parametrize("order", ["NHD", "HND"])
@pytest.mark.parametrize("scale_order", [LINEAR, SWIZZLED])
@pytest.mark.parametrize("shape", SHAPES)
def test_offsets_are_vllms_and_cover_the_page_once(order: str, scale_order: ScaleOrder,
                                                     shape: tuple[int, int, int]) -> None:
    T, H, D = shape
    page = Nvfp4Page(T, H, D, order)
    codes, scales = page.code_offsets(), page.scale_offsets(scale_order)
    for t, h in itertools.product(range(T), range(H)):
        want_codes, want_scales = vllm_offsets(t, h, T, H, D, order == "HND", scale_order is SWIZZLED)
        assert codes[t, h].tolist() == want_codes and scales[t, h].tolist() == want_scales, (t, h)
    every = torch.cat([codes.flatten(), scales.flatten()]).sort().values
    assert torch.equal(every, torch.arange(page.side_bytes)) and page.side_bytes == T * H * D * 9 // 16


@pytest.mark.parametrize("order", ["NHD", "HND"])
def test_the_swizzle_is_flashinfers_permute(order: str) -> None:
    """FlashInfer's ``nvfp4_quantize_paged_kv_cache`` swizzles a linear ``[T, H, S]`` (NHD) or ``[H, T, S]`` (HND)
    scale tensor by viewing it ``[T/4, 4, H, 4, S/4]`` and permuting ``(0, 3, 2, 4, 1)`` (its ``[P, ...]`` form
    less the page dimension), or ``[H, T/4, 4, 4, S/4]`` by ``(0, 1, 3, 4, 2)``."""
    T, H, D = 8, 3, 128
    S = D // 16
    page = Nvfp4Page(T, H, D, order)
    area = T * H * D // 2
    ids = torch.arange(T * H * S)  # the value of (row, s) in the linear order is its linear position
    if order == "NHD":
        swizzled = ids.reshape(T // 4, 4, H, 4, S // 4).permute(0, 3, 2, 4, 1).flatten()
    else:
        swizzled = ids.reshape(H, T // 4, 4, 4, S // 4).permute(0, 1, 3, 4, 2).flatten()
    stored = torch.empty_like(ids)
    stored[page.scale_offsets(SWIZZLED).flatten() - area] = ids[page.scale_offsets(LINEAR).flatten() - area]
    assert torch.equal(stored, swizzled)


def test_the_swizzle_refuses_pages_it_does_not_permute() -> None:
    for T, D in ((6, 64), (8, 48), (8, 80)):
        with pytest.raises(RtpRefError, match="multiple of 4 and head_size a multiple of 64"):
            Nvfp4Page(T, 2, D, "NHD").scale_offsets(SWIZZLED)
        Nvfp4Page(T, 2, D, "NHD").scale_offsets(LINEAR)
    with pytest.raises(RtpRefError, match="head_size 24"):
        Nvfp4Page(8, 2, 24, "NHD")


def _cache(kind: str, blocks: int, T: int, H: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(the side a kernel is given, the tensor it is a view of), filled with the canary 0xA5."""
    if kind == "NHD":
        whole = torch.full((blocks, T, H, width), 0xA5, dtype=torch.uint8)
        return whole, whole
    if kind == "HND":
        whole = torch.full((blocks, H, T, width), 0xA5, dtype=torch.uint8)
        return whole.permute(0, 2, 1, 3), whole
    # vLLM's K side of one [blocks, 2, H, T, F] tensor, HND: pages stride(0) = 2 * side apart
    whole = torch.full((blocks, 2, H, T, width), 0xA5, dtype=torch.uint8)
    return whole[:, 1].permute(0, 2, 1, 3), whole


@pytest.mark.parametrize("kind", ["NHD", "HND", "kv-slice-HND"])
@pytest.mark.parametrize("scale_order", [LINEAR, SWIZZLED])
def test_a_write_puts_the_oracles_bytes_at_vllms_offsets_and_nothing_else(kind: str, scale_order: ScaleOrder) -> None:
    T, H, D, blocks, k_scale = 8, 2, 64, 3, 0.37
    rng = random.Random(5)
    side, whole = _cache(kind, blocks, T, H, D * 9 // 16)
    slots = torch.tensor([*rng.sample(range(blocks * T), 10), -1])
    x = (torch.randn(11, H, D) * torch.tensor([2.0 ** rng.randint(-8, 8) for _ in range(11)]).reshape(-1, 1, 1))
    x = x.to(torch.bfloat16)
    write_nvfp4_side(side, x, slots, torch.tensor([k_scale]), NVFP4_VLLM, scale_order)

    want = whole.clone().fill_(0xA5)
    flat_want = want.flatten()
    page_stride, first = side.stride(0), side.storage_offset()
    hnd = kind != "NHD"  # as the test built it, not as the module reads it
    for i, slot in enumerate(slots.tolist()):
        if slot < 0:
            continue
        block, t = divmod(slot, T)
        for h in range(H):
            codes_at, scales_at = vllm_offsets(t, h, T, H, D, hnd, scale_order is SWIZZLED)
            for g, s_at in enumerate(scales_at):
                block_values = x[i, h, 16 * g:16 * g + 16].to(torch.float32).numpy()
                scale, codes = oracle_block(block_values.astype(np.float32), k_scale, NVFP4_VLLM)
                flat_want[first + block * page_stride + s_at] = scale
                for j in range(8):
                    flat_want[first + block * page_stride + codes_at[8 * g + j]] = codes[2 * j] | codes[2 * j + 1] << 4
    assert torch.equal(whole, want)
