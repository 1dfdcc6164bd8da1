# Triton ships no type information: every @triton.jit is an untyped decorator to mypy.
# mypy: disable-error-code="untyped-decorator"
"""The Triton writer's FP4 arithmetic (rtp_ref.kernels.triton_fp4), held to ml_dtypes and to the reference.

The E2M1 rounding is checked on every finite bf16 value against ``ml_dtypes.float4_e2m1fn`` (not against rtp-ref's
own codec), the e4m3 scale decoding on every finite code against ``ml_dtypes.float8_e4m3fn``, and the writer, bound
to each FP4 convention a layout flag names, against the reference writer under the same flags on the witnesses of
tests/kv/test_v41_layouts.py, where each convention's bytes differ from the default's (so each comparison can fail).
Runs wherever Triton runs: its interpreter on the CPU (tox sets TRITON_INTERPRET=1), compiled on a GPU.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from rtp_ref.contract import WriteContract
from rtp_ref.kernels.triton_fp4 import e2m1_codes, e4m3_value
from rtp_ref.kernels.triton_fp8 import interpreted
from rtp_ref.kernels.triton_mla import TritonMlaKernel
from rtp_ref.kv.entries import encode_entries
from rtp_ref.platform import load_platform
from tests.kv.test_v41_layouts import TIE_TILE

DEVICE = "cpu" if interpreted() else "cuda"
pytestmark = pytest.mark.skipif(DEVICE == "cuda" and not torch.cuda.is_available(),
                                reason="compiled Triton needs a GPU; set TRITON_INTERPRET=1 to run on the CPU")


@triton.jit
def _codes_kernel(x: tl.tensor, out: tl.tensor, n: tl.tensor, NEG_ZERO_POSITIVE: tl.constexpr,
                  BLOCK: tl.constexpr) -> None:
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    q = tl.load(x + i, mask=i < n, other=0.0)
    tl.store(out + i, e2m1_codes(q, NEG_ZERO_POSITIVE).to(tl.uint8), mask=i < n)


@triton.jit
def _e4m3_kernel(codes: tl.tensor, out: tl.tensor, BLOCK: tl.constexpr) -> None:
    i = tl.arange(0, BLOCK)
    tl.store(out + i, e4m3_value(tl.load(codes + i)))


def _codes(x: torch.Tensor, negative_zero_positive: bool = False) -> np.ndarray:
    out = torch.empty(x.numel(), dtype=torch.uint8, device=DEVICE)
    block = 1 << 14
    _codes_kernel[(triton.cdiv(x.numel(), block),)](x.to(DEVICE), out, x.numel(), negative_zero_positive, block)
    result: np.ndarray = out.cpu().numpy()
    return result


def test_e2m1_codes_are_ml_dtypes_on_every_finite_bf16() -> None:
    bits = np.arange(0x10000, dtype=np.uint16)
    values = bits.view(ml_dtypes.bfloat16).astype(np.float32)
    finite = values[np.isfinite(values)]
    expected = finite.astype(ml_dtypes.float4_e2m1fn).view(np.uint8) & 0xF
    assert np.array_equal(_codes(torch.from_numpy(finite)), expected)


def test_negative_zero_follows_the_convention() -> None:
    """-0.0 gives 0x8 (ml_dtypes, the torch references) or 0x0 (a writer adding +0.0); a negative value that rounds
    to zero keeps its sign under both."""
    x = torch.tensor([-0.0, -0.1, 0.0])
    assert _codes(x).tolist() == [0x8, 0x8, 0x0]
    assert _codes(x, negative_zero_positive=True).tolist() == [0x0, 0x8, 0x0]


def test_e4m3_values_are_ml_dtypes_on_every_finite_code() -> None:
    codes = torch.arange(0x7F, dtype=torch.int32)
    out = torch.empty(128, dtype=torch.float32, device=DEVICE)
    _e4m3_kernel[(1,)](torch.cat([codes, torch.zeros(1, dtype=torch.int32)]).to(DEVICE), out, 128)
    expected = np.arange(0x7F, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    assert np.array_equal(out.cpu().numpy()[:0x7F], expected)


def _witness_inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Three V41_FP4 tokens: the E2M1 tie tile, a tile of -0.0, and random values."""
    g = torch.Generator().manual_seed(5)
    kv_c = torch.randn(3, 448, generator=g).to(torch.bfloat16)
    k_pe = torch.randn(3, 64, generator=g).to(torch.bfloat16)
    kv_c[0, :16] = torch.tensor(TIE_TILE + (0.0,) * 14)
    kv_c[1, :16] = -0.0
    return kv_c, k_pe, torch.tensor([1.0])


@pytest.mark.parametrize("flags", [{}, {"fp4_value_quotient": "reciprocal_mul"}, {"fp4_negative_zero": "positive"}],
                         ids=["default", "reciprocal", "positive-zero"])
def test_the_writer_follows_each_fp4_convention(flags: dict[str, object]) -> None:
    """Bound to a contract under ``flags``, the Triton writer stores the reference's bytes under them; each
    convention changes those bytes on the witnesses, so a writer ignoring the flag would fail here."""
    contract = WriteContract.for_platform(load_platform("cpu")).under(flags)
    layout = contract.layout("V41_FP4", 448, 64)
    kv_c, k_pe, scale = _witness_inputs()
    expected = encode_entries(layout, kv_c, k_pe, scale)
    if flags:
        default = encode_entries(WriteContract.for_platform(load_platform("cpu")).layout("V41_FP4", 448, 64),
                                 kv_c, k_pe, scale)
        assert not torch.equal(expected, default), "the witnesses must tell the convention from the default"
    cache = torch.full((1, 4, layout.bytes_per_token), 0xA5, dtype=torch.uint8, device=DEVICE)
    TritonMlaKernel().bind(contract)(kv_c.to(DEVICE), k_pe.to(DEVICE), cache, torch.tensor([0, 1, 2], device=DEVICE),
                                     "V41_FP4", scale.to(DEVICE))
    block = cache.cpu().view(-1)
    data = block[:4 * 256].view(4, 256)[:3]
    scales = block[4 * 256:].view(4, 32)[:3]
    assert torch.equal(torch.cat([data, scales], dim=1), expected)
