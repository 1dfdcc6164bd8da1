"""Golden files of the MHA paged and indexer writes hold what an element-by-element oracle writes.

The oracle places each token by the byte maps of docs/layouts.md (written here by hand) and converts with
numpy float32 arithmetic and ml_dtypes' fp8 casts; the files are read back with safetensors.
"""

from __future__ import annotations

import math
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from rtp_ref.kv.golden import safetensors_bytes, write_golden
from rtp_ref.kv.golden_mha_indexer import GoldenShape, make_indexer_golden, make_mha_golden
from rtp_ref.platform import load_platform

SHAPE = GoldenShape(tokens=24, block_size=16, num_blocks=3, seed=5)


def _codes(q: np.ndarray) -> np.ndarray:
    """e4m3fn codes of float32 quotients, round to nearest even, saturating at 448."""
    return np.clip(q, -448, 448).astype(np.float32).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)


@pytest.mark.parametrize("order", ["NHD", "HND"])
@pytest.mark.parametrize(("cache_dtype", "per_head"), [("fp8", True), ("fp8", False), ("auto", False)])
def test_the_mha_golden_file_holds_what_an_element_loop_writes(tmp_path: Path, order: str, cache_dtype: str,
                                                               per_head: bool) -> None:
    case = make_mha_golden(load_platform("cuda-sm90"), cache_dtype, 2, 64, order, per_head, SHAPE)
    write_golden(tmp_path / "g.safetensors", case)
    t = load_file(str(tmp_path / "g.safetensors"))
    slots = t["slot_mapping"].tolist()
    assert -1 in slots
    for name, source, scale in (("key_cache", "key", "k_scale"), ("value_cache", "value", "v_scale")):
        before, expected = t[f"{name}_before"], t[f"{name}_expected"]
        if order == "HND":  # stored as [blocks, heads, rows, dim]: the kernel's view is its permutation
            before, expected = before.permute(0, 2, 1, 3), expected.permute(0, 2, 1, 3)
        untouched = torch.ones(expected.shape[:2], dtype=torch.bool)
        for token, slot in enumerate(slots):
            if slot < 0:
                continue
            block, row = divmod(slot, SHAPE.block_size)
            untouched[block, row] = False
            got = expected[block, row].contiguous().view(torch.uint8).numpy()
            x = t[source][token].float().numpy()
            if cache_dtype == "auto":
                want = t[source][token].contiguous().view(torch.uint8).numpy()
            else:
                s = t[scale].numpy().astype(np.float32)
                want = _codes(x / (s[:, None] if s.size > 1 else s[0]))
            assert np.array_equal(got.reshape(-1), want.reshape(-1)), (name, token, slot)
        same = torch.equal(expected[untouched].contiguous().view(torch.uint8),
                           before[untouched].contiguous().view(torch.uint8))  # bytes: random bf16 holds NaNs
        assert same, f"{name}: a slot nobody writes changed"
    assert case.metadata["cache_order"] == order and case.metadata["op"] == "reshape_and_cache_flash"


def _pow2_ceil(value: float) -> float:
    mantissa, exponent = math.frexp(value)
    return 2.0 ** (exponent - 1) if mantissa == 0.5 else 2.0**exponent


@pytest.mark.parametrize(("scale_fmt", "quant"), [("none", 128), ("ue8m0", 128), ("ue8m0", 64)])
def test_the_indexer_golden_file_holds_what_an_element_loop_writes(tmp_path: Path, scale_fmt: str,
                                                                   quant: int) -> None:
    case = make_indexer_golden(load_platform("cuda-sm90"), scale_fmt, 128, quant, SHAPE)
    write_golden(tmp_path / "g.safetensors", case)
    t = load_file(str(tmp_path / "g.safetensors"))
    n, d, bs = 128 // quant, 128, SHAPE.block_size
    assert t["kv_cache_expected"].shape[2] == d + 4 * n  # 132 bytes a token at quant block 128
    blocks = t["kv_cache_expected"].reshape(SHAPE.num_blocks, -1).numpy()
    for token, slot in enumerate(t["slot_mapping"].tolist()):
        if slot < 0:
            continue
        block, row = divmod(slot, bs)
        x = t["k"][token].float().numpy().reshape(n, quant)
        scales = np.maximum(np.abs(x).max(axis=1), np.float32(1e-4)).astype(np.float32) / np.float32(448)
        if scale_fmt == "ue8m0":
            scales = np.array([_pow2_ceil(float(s)) for s in scales], dtype=np.float32)
        assert np.array_equal(blocks[block, row * d:(row + 1) * d], _codes(x / scales[:, None]).reshape(-1))
        at = bs * d + row * 4 * n
        assert np.array_equal(blocks[block, at:at + 4 * n], scales.astype("<f4").view(np.uint8)), (token, slot)


def test_golden_family_files_are_the_same_bytes_for_the_same_arguments() -> None:
    platform = load_platform("rocm-gfx942")
    for make in (lambda: make_mha_golden(platform, "fp8", 8, 128, "HND", True, SHAPE),
                 lambda: make_indexer_golden(platform, "ue8m0", 128, 64, SHAPE)):
        first, second = make(), make()
        assert safetensors_bytes(first.tensors, first.metadata) == safetensors_bytes(second.tensors, second.metadata)

