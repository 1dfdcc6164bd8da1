"""The MHA paged cache (rtp_ref.kv.mha_paged): sizes against rtp-llm's spec, the reference writer against an
element-by-element oracle built on ml_dtypes and numpy float32 arithmetic, and HND checked in raw storage."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

from rtp_ref.errors import RtpRefError
from rtp_ref.fp8.formats import E4M3FN
from rtp_ref.kv.dtypes import KvDtype
from rtp_ref.kv.mha_paged import mha_layout, reference_reshape_and_cache_flash
from rtp_ref.kv.specs import MhaSpec
from rtp_ref.platform import load_platform

ML_DTYPES = {"e4m3fn": ml_dtypes.float8_e4m3fn, "e4m3fnuz": ml_dtypes.float8_e4m3fnuz,
             "e5m2": ml_dtypes.float8_e5m2}


@pytest.mark.parametrize(("heads", "tp"), [(8, 1), (8, 2), (1, 1), (8, 3), (32, 8)])
@pytest.mark.parametrize("head_size", [64, 128, 256])
def test_k_and_v_bytes_per_token_are_the_specs(heads: int, tp: int, head_size: int) -> None:
    """Bytes per token of one rank's caches: the spec's elements per block / tokens, times the element size."""
    platform = load_platform("cuda-sm90")
    for dtype, cache_dtype, itemsize in ((KvDtype.BF16, "auto", 2), (KvDtype.FP8_E4M3, "fp8", 1)):
        spec = MhaSpec(dtype, heads, head_size, tp_size=tp, seq_size_per_block=16)
        layout = mha_layout(platform, cache_dtype, spec.local_head_num_kv, head_size)
        assert layout.k_bytes_per_token() == spec.k_block_size // 16 * itemsize
        assert layout.v_bytes_per_token() == spec.v_block_size // 16 * itemsize


def _oracle_values(x: np.ndarray, scale: np.ndarray, fmt: str) -> np.ndarray:
    """fp8 codes of x / scale, one element at a time: numpy float32 division, ml_dtypes rounding."""
    out = np.zeros(x.shape, dtype=np.uint8)
    for index in np.ndindex(*x.shape):
        quotient = np.float32(x[index]) / np.float32(scale[index[1] if scale.size > 1 else 0])
        out[index] = np.array(quotient, dtype=np.float32).astype(ML_DTYPES[fmt]).view(np.uint8)
    return out


@pytest.mark.parametrize("order", ["NHD", "HND"])
@pytest.mark.parametrize(("cache_dtype", "platform_name", "per_head", "fmt"), [
    ("fp8", "cuda-sm90", True, "e4m3fn"), ("fp8", "cuda-sm90", False, "e4m3fn"),
    ("fp8", "rocm-gfx942", True, "e4m3fnuz"), ("fp8_e5m2", "cuda-sm90", True, "e5m2"),
    ("auto", "cuda-sm90", False, None),
])
def test_the_reference_writes_each_token_where_an_element_loop_does(order: str, cache_dtype: str, platform_name: str,
                                                                   per_head: bool, fmt: str | None) -> None:
    heads, head_size, block_size, num_blocks = 4, 64, 16, 3
    layout = mha_layout(load_platform(platform_name), cache_dtype, heads, head_size)
    gen = torch.Generator().manual_seed(11)
    key = (torch.randn(7, heads, head_size, generator=gen) * 3).to(torch.bfloat16)
    value = (torch.randn(7, heads, head_size, generator=gen) * 3).to(torch.bfloat16)
    slots = torch.tensor([5, -1, 16, 47, 0, 31, -1])
    k_scale = torch.tensor([0.5, 0.25, 1.0, 0.125][: heads if per_head else 1])
    v_scale = torch.tensor([0.75, 2.0, 0.5, 1.5][: heads if per_head else 1])
    key_cache = layout.new_cache(num_blocks, block_size, order, torch.bfloat16)
    value_cache = layout.new_cache(num_blocks, block_size, order, torch.bfloat16)
    reference_reshape_and_cache_flash(layout, key, value, key_cache, value_cache, slots, k_scale, v_scale)

    for cache, x, scale in ((key_cache, key, k_scale), (value_cache, value, v_scale)):
        # the raw storage, addressed by hand: NHD [b, row, h, d], HND [b, h, row, d]
        storage = cache.permute(0, 2, 1, 3) if order == "HND" else cache
        assert storage.is_contiguous()
        flat = storage.contiguous().flatten().view(torch.uint8 if fmt else torch.int16)
        expected = torch.zeros_like(flat)
        for t, slot in enumerate(slots.tolist()):
            if slot < 0:
                continue
            b, row = divmod(slot, block_size)
            if fmt is None:
                codes = torch.from_numpy(x[t].float().numpy().astype(ml_dtypes.bfloat16).view(np.int16))
            else:
                codes = torch.from_numpy(_oracle_values(x[t].float().numpy()[None], scale.numpy(), fmt)[0])
            for h in range(heads):
                base = ((b * heads + h) * block_size + row) * head_size if order == "HND" \
                    else ((b * block_size + row) * heads + h) * head_size
                expected[base:base + head_size] = codes[h]
        assert torch.equal(flat, expected)


def test_rocm_fp8_is_fnuz_and_a_cache_may_keep_its_own_format() -> None:
    gfx942 = load_platform("rocm-gfx942")
    assert mha_layout(gfx942, "fp8", 8, 128).element_format.name == "e4m3fnuz"  # type: ignore[union-attr]
    own = mha_layout(gfx942, "fp8", 8, 128, element_format=E4M3FN)
    assert own.element_format is E4M3FN
    x = torch.full((1, 8, 128), 300.0, dtype=torch.bfloat16)  # within e4m3fn (448), past e4m3fnuz (240)
    cache = own.new_cache(1, 16, "NHD", torch.bfloat16)
    reference_reshape_and_cache_flash(own, x, x, cache, cache.clone(), torch.tensor([0]), torch.ones(1),
                                      torch.ones(1))
    assert cache[0, 0, 0, 0].item() == np.array(300.0, np.float32).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)


def test_bad_arguments_name_themselves() -> None:
    platform = load_platform("cpu")
    with pytest.raises(RtpRefError, match="kv_cache_dtype 'int4'"):
        mha_layout(platform, "int4", 8, 128)
    with pytest.raises(RtpRefError, match="head_size 0 is not valid"):
        mha_layout(platform, "fp8", 8, 0)
    layout = mha_layout(platform, "fp8", 4, 8)
    cache = layout.new_cache(1, 16, "NHD", torch.bfloat16)
    x = torch.zeros(1, 4, 8, dtype=torch.bfloat16)
    expected = r"k_scale: dtype float32 with 3 values; valid: float32 with 1 \(per tensor\) or 4 \(per head\)"
    with pytest.raises(RtpRefError, match=expected):
        reference_reshape_and_cache_flash(layout, x, x, cache, cache.clone(), torch.tensor([0]), torch.ones(3),
                                          torch.ones(1))
