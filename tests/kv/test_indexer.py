"""The DeepSeek indexer cache (rtp_ref.kv.indexer): 132 bytes a token as rtp-llm's spec states, and the
reference writer against a per-slice oracle (numpy float32 arithmetic, exact powers of two by math.frexp,
ml_dtypes rounding) that places every byte by the vLLM kernel's own offset formulas."""

from __future__ import annotations

import math
from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest
import torch

from rtp_ref.errors import RtpRefError
from rtp_ref.fp8.formats import E4M3FN
from rtp_ref.kv.fields import Placement, Source
from rtp_ref.kv.indexer import indexer_layout, reference_indexer_k_quant_and_cache
from rtp_ref.kv.place_fields import place_fields
from rtp_ref.kv.records import FieldRecord
from rtp_ref.platform import load_platform

ML_DTYPES = {"e4m3fn": ml_dtypes.float8_e4m3fn, "e4m3fnuz": ml_dtypes.float8_e4m3fnuz}


@pytest.mark.parametrize("indexer_dim", [128, 256, 512])
def test_bytes_per_token_follow_rtp_llms_formula(indexer_dim: int) -> None:
    """rtp-llm SingleConfigCreator.cc: ``(indexer_dim + indexer_dim / 128 * 4) * S`` bytes a block."""
    layout = indexer_layout(load_platform("cuda-sm90"), head_dim=indexer_dim)
    assert layout.bytes_per_token == indexer_dim + indexer_dim // 128 * 4
    assert indexer_layout(load_platform("cuda-sm90")).bytes_per_token == 132


def _pow2_ceil(x: np.float32) -> np.float32:
    mantissa, exponent = math.frexp(float(x))  # x = m * 2**e, 0.5 <= m < 1
    return np.float32(2.0 ** (exponent - 1) if mantissa == 0.5 else 2.0 ** exponent)


def _oracle(k: np.ndarray, slots: list[int], num_blocks: int, block_size: int, quant: int, divisor: float,
            fmt: str, ue8m0: bool) -> np.ndarray:
    dim = k.shape[1]
    row = dim + dim // quant * 4
    blocks = np.zeros((num_blocks, block_size * row), dtype=np.uint8)
    for t, slot in enumerate(slots):
        if slot < 0:
            continue
        b, offset = divmod(slot, block_size)
        for j in range(dim // quant):
            part = k[t, j * quant:(j + 1) * quant].astype(np.float32)
            scale = np.float32(max(np.float32(np.abs(part).max()), np.float32(1e-4))) / np.float32(divisor)
            if ue8m0:
                scale = _pow2_ceil(scale)
            for i, x in enumerate(part):
                code = np.array(np.float32(x) / scale, dtype=np.float32).astype(ML_DTYPES[fmt]).view(np.uint8)
                blocks[b, offset * dim + j * quant + i] = code  # vLLM: block_offset * head_dim + head_dim_idx
            # vLLM: cache_block_size * head_dim + (block_offset * head_dim + head_dim_idx) * 4 / quant_block_size
            at = block_size * dim + (offset * dim + j * quant) * 4 // quant
            blocks[b, at:at + 4] = np.frombuffer(np.float32(scale).tobytes(), dtype=np.uint8)
    return blocks


@pytest.mark.parametrize(("platform_name", "dim", "quant", "scale_fmt", "fmt", "divisor"), [
    ("cuda-sm90", 128, 128, "none", "e4m3fn", 448.0), ("cuda-sm90", 128, 128, "ue8m0", "e4m3fn", 448.0),
    ("cuda-sm90", 256, 64, "none", "e4m3fn", 448.0), ("rocm-gfx942", 128, 128, "none", "e4m3fnuz", 224.0),
])
def test_the_reference_writes_what_the_oracle_places(platform_name: str, dim: int, quant: int, scale_fmt: str,
                                                     fmt: str, divisor: float) -> None:
    layout = indexer_layout(load_platform(platform_name), head_dim=dim, quant_block_size=quant)
    gen = torch.Generator().manual_seed(3)
    k = (torch.randn(6, dim, generator=gen) * torch.tensor([4.0, 0.01, 1.0, 100.0, 1.0, 1.0])[:, None])
    k[4] = 0.0  # an all-zero row: the amax floor gives it a positive scale
    k = k.to(torch.bfloat16)
    slots = [3, 17, -1, 0, 31, 16]
    num_blocks, block_size = 2, 16
    cache = torch.zeros(num_blocks, block_size, layout.bytes_per_token, dtype=torch.uint8)
    reference_indexer_k_quant_and_cache(layout, k, cache, torch.tensor(slots), scale_fmt)
    want = _oracle(k.float().numpy(), slots, num_blocks, block_size, quant, divisor, fmt, scale_fmt == "ue8m0")
    assert np.array_equal(cache.reshape(num_blocks, -1).numpy(), want)


def test_the_writer_places_bytes_by_the_layouts_field_table() -> None:
    """The field table is what the writer follows: a record with the scales inline (after each token's values,
    no block-trailing area) moves exactly the scale bytes, which the standard table's bytes predict."""
    standard = indexer_layout(load_platform("cuda-sm90"), head_dim=128, quant_block_size=64)
    inline = replace(standard, fields=place_fields(
        [FieldRecord("k", Source.KEY, Placement.PER_TOKEN, "fp8", "D", "k_scale"),
         FieldRecord("k_scale", Source.SCALE, Placement.PER_TOKEN, "fp32", "D/Q")], {"D": 128, "D/Q": 2}, E4M3FN))
    k = torch.randn(5, 128, generator=torch.Generator().manual_seed(5)).to(torch.bfloat16)
    slots = torch.tensor([0, 7, 3, -1, 12])
    caches = [torch.zeros(2, 8, 136, dtype=torch.uint8) for _ in range(2)]
    for layout, cache in zip((standard, inline), caches, strict=True):
        reference_indexer_k_quant_and_cache(layout, k, cache, slots, "none")
    flat = caches[0].reshape(2, -1)
    values = flat[:, :8 * 128].reshape(2, 8, 128)
    scales = flat[:, 8 * 128:].reshape(2, 8, 8)
    assert torch.equal(caches[1], torch.cat([values, scales], dim=2))


def test_the_divisor_follows_the_caches_format() -> None:
    """gfx942's own fnuz format divides by its flag (224); a cache kept in e4m3fn there divides by 448."""
    gfx942 = load_platform("rocm-gfx942")
    assert indexer_layout(gfx942).scale_divisor == 224.0
    assert indexer_layout(gfx942, element_format=E4M3FN).scale_divisor == 448.0
    assert indexer_layout(load_platform("cuda-sm90")).scale_divisor == 448.0


def test_bad_arguments_name_themselves() -> None:
    platform = load_platform("cpu")
    with pytest.raises(RtpRefError, match="head_dim 100 is not a multiple of quant_block_size 128"):
        indexer_layout(platform, head_dim=100)
    layout = indexer_layout(platform)
    expected = r"kv_cache: shape \(1, 16, 128\).*valid: uint8 \[num_blocks, block_size, 132\] with contiguous rows"
    with pytest.raises(RtpRefError, match=expected):
        reference_indexer_k_quant_and_cache(layout, torch.zeros(1, 128, dtype=torch.bfloat16),
                                            torch.zeros(1, 16, 128, dtype=torch.uint8),
                                            torch.tensor([0]), "none")
    with pytest.raises(RtpRefError, match="scale_fmt 'e8m0'; valid: none, ue8m0"):
        reference_indexer_k_quant_and_cache(layout, torch.zeros(1, 128, dtype=torch.bfloat16),
                                            torch.zeros(1, 16, 132, dtype=torch.uint8),
                                            torch.tensor([0]), "e8m0")
