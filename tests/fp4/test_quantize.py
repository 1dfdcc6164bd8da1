"""Quantization under named conventions, end to end, against exact rationals; blocks no convention defines; the
reader; and the package's lazy public names."""

from __future__ import annotations

import importlib
import math
import random
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest
import torch

from rtp_ref.fp4.e2m1 import NO_CODE, NegativeZero
from rtp_ref.fp4.nvfp4 import NVFP4_VLLM, nvfp4_quantize
from rtp_ref.fp4.quantize import (
    FP4_CONVENTIONS,
    MXFP4_OCP,
    V41_FP4,
    V41_FP4_TORCH,
    Fp4Conventions,
    PayloadDivision,
    dequantize_row,
    fp4_conventions,
    quantize_row,
)
from rtp_ref.fp4.scales import AmaxDivision, ScaleElement, ScaleRounding, ScaleTraits
from tests.fp4.oracles import E2M1_MAGNITUDES, exact_e4m3_code, float32, floor_log2, mul_one_sixth, rational_code, rn32
from tests.fp8.oracles import spec_value
from tests.processes import child_env

REPO = Path(__file__).resolve().parents[2]


def random_rows(rows: int, width: int, seed: int) -> torch.Tensor:
    """float32 rows whose blocks span many binades (each block scaled by its own random power of two), with
    zeros, -0.0 and exact E2M1 ties scattered in."""
    rng = random.Random(seed)
    out = []
    for _ in range(rows * width // 16):
        binade = 2.0 ** rng.randint(-20, 20)
        block = [rng.uniform(-8.0, 8.0) * binade for _ in range(16)]
        block[rng.randrange(16)] = rng.choice([0.0, -0.0, 2.5 * binade, -5.0 * binade])
        out += block
    return torch.tensor(out, dtype=torch.float32).reshape(rows, width)


def v41_block_oracle(block: list[float], keep_negative_zero: bool) -> tuple[list[int], int]:
    """DeepSeek V4.1's FP4 block by exact rationals: scale e4m3(clamp(amax * (1/6), 2**-9, 448)), RNE; codes
    e2m1(x / s) with one float32 rounding of the quotient (its sign the float division's: x's); a zero quotient
    as 0x8 or 0x0 when negative."""
    amax = max(abs(v) for v in block)
    q = min(max(mul_one_sixth(amax), Fraction(1, 512)), Fraction(448))
    scale_code = exact_e4m3_code(q, bump=False)
    s = spec_value(scale_code, "e4m3fn")
    assert s is not None
    codes = []
    for v in block:
        quotient = rn32(Fraction(v) / s)
        sign = -1.0 if math.copysign(1.0, v) < 0 else 1.0
        as_float = math.copysign(float32(quotient), sign)
        code = rational_code(as_float)
        if quotient == 0 and not keep_negative_zero:  # a float32 -0.0 quotient, +0.0 added
            code = 0x0
        codes.append(code)
    return codes, scale_code


@pytest.mark.parametrize("conventions", [V41_FP4, V41_FP4_TORCH], ids=["kernel", "torch"])
def test_v41_rows_match_exact_rationals(conventions: Fp4Conventions, device: torch.device) -> None:
    x = random_rows(8, 64, seed=41)
    q = quantize_row(x.to(device), conventions)
    codes, scales = q.codes.cpu().tolist(), q.scales.cpu().tolist()
    keep = conventions is V41_FP4_TORCH
    for r, row in enumerate(x.tolist()):
        for b in range(4):
            want_codes, want_scale = v41_block_oracle(row[16 * b : 16 * b + 16], keep)
            assert (codes[r][16 * b : 16 * b + 16], scales[r][b]) == (want_codes, want_scale), (r, b)


def test_ocp_mx_rows_match_exact_rationals() -> None:
    x = random_rows(4, 64, seed=32)
    q = quantize_row(x, MXFP4_OCP)
    for r, row in enumerate(x.tolist()):
        for b in range(2):
            block = row[32 * b : 32 * b + 32]
            k = floor_log2(Fraction(max(abs(v) for v in block))) - 2
            assert q.scales[r, b] == k + 127
            want = [rational_code(math.copysign(float32(rn32(Fraction(v) / Fraction(2) ** k)), v)) for v in block]
            assert q.codes[r, 32 * b : 32 * b + 32].tolist() == want


def test_blocks_holding_nan_or_inf_are_not_defined() -> None:
    finite = random_rows(1, 16, seed=7)
    x = torch.cat([finite, finite, finite], dim=-1)
    x[0, 3] = math.nan
    x[0, 16 + 5] = -math.inf
    q = quantize_row(x, V41_FP4)
    assert q.defined.tolist() == [[False, False, True]]
    assert bool((q.codes[0, :32] == NO_CODE).all()) and q.scales[0, :2].tolist() == [0, 0]
    alone = quantize_row(finite, V41_FP4)
    assert torch.equal(q.codes[0, 32:], alone.codes[0]) and q.scales[0, 2] == alone.scales[0, 0]
    assert bool(torch.isnan(dequantize_row(q, V41_FP4)[0, :32]).all())


def test_dequantize_is_value_times_scale() -> None:
    x = random_rows(2, 32, seed=3)
    for conventions in (V41_FP4_TORCH, MXFP4_OCP):
        q = quantize_row(x, conventions)
        got = dequantize_row(q, conventions)
        block = conventions.scale.block
        for r in range(2):
            for i in range(32):
                code, scale_code = int(q.codes[r, i]), int(q.scales[r, i // block])
                value = -E2M1_MAGNITUDES[code & 7] if code & 8 else E2M1_MAGNITUDES[code & 7]
                scale = (spec_value(scale_code, "e4m3fn") if conventions is V41_FP4_TORCH
                         else Fraction(2) ** (scale_code - 127))
                assert scale is not None
                assert Fraction(float(got[r, i])) == rn32(value * scale), (conventions.name, r, i)


def test_quantize_refuses_a_partial_block() -> None:
    with pytest.raises(ValueError, match="multiple of the block"):
        quantize_row(torch.zeros(1, 24), V41_FP4)


def test_named_conventions() -> None:
    assert fp4_conventions("v41_fp4") is V41_FP4
    assert sorted(FP4_CONVENTIONS) == ["mxfp4_float_log2", "mxfp4_ocp", "v41_fp4", "v41_fp4_torch"]
    with pytest.raises(ValueError, match="valid: mxfp4_float_log2"):
        fp4_conventions("nvfp4")


def test_package_names_resolve_and_import_without_torch() -> None:
    module = importlib.import_module("rtp_ref.fp4")
    assert sorted(module.__all__) == sorted(name for names in module._EXPORTS.values() for name in names)
    assert [name for name in module.__all__ if not hasattr(module, name)] == []
    code = "import sys, rtp_ref.fp4\nprint('torch' in sys.modules)\n"
    proc = subprocess.run([sys.executable, "-c", code], env=child_env(REPO), cwd=REPO, capture_output=True,
                          text=True, check=False, timeout=120)
    assert (proc.returncode, proc.stdout.strip()) == (0, "False"), proc.stderr


#: NVFP4 with an implicit global scale of 1 and no floor on the e4m3 scale (the 432-byte ``nvfp4_ds_mla`` record of
#: local-inference-lab/vllm PR #82): the conventions rtp_ref.kv builds from that record's tile rule
NO_FLOOR = Fp4Conventions(
    "no_floor",
    ScaleTraits(ScaleElement.E4M3FN, 16, ScaleRounding.RNE, AmaxDivision.MUL_ONE_SIXTH, (0.0, 448.0)),
    PayloadDivision.RECIPROCAL_MUL, NegativeZero.KEEP, "test",
)


def test_an_e4m3_scale_with_no_floor_is_nvfp4_under_a_global_scale_of_one() -> None:
    """The same bytes as rtp_ref.fp4.nvfp4 (its own formula, proven against numpy and ml_dtypes in test_nvfp4.py)
    with k_scale = 1, tiny blocks included: their scale rounds to 0x00 and their values to zeros of their sign."""
    x = random_rows(8, 64, seed=82)
    x[0, :16] = 0.0
    x[0, 3] = -0.0
    x[1, 16:32] = torch.linspace(-3e-4, 2e-4, 16)  # amax / 6 below half of e4m3's smallest subnormal (2**-10)
    got = quantize_row(x, NO_FLOOR)
    want = nvfp4_quantize(x, torch.tensor(1.0), NVFP4_VLLM)
    assert torch.equal(got.codes, want.codes) and torch.equal(got.scales, want.scales)
    assert got.scales[0, 0] == 0 and got.scales[1, 1] == 0
    signs = torch.signbit(x[1, 16:32]).to(torch.uint8) * 0x8
    assert got.codes[1, 16:32].tolist() == signs.tolist()  # zeros of their sign: 0x8 for a negative value
    assert got.codes[0, :16].tolist() == [0x8 if i == 3 else 0 for i in range(16)]
