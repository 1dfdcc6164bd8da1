"""Hypothesis properties of the encoder, stated without reference to its implementation."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from rtp_ref.fp8 import decode, decode_table, encode
from tests.fp8.oracles import SPEC

FORMATS = sorted(SPEC)
floats32 = st.floats(width=32, allow_nan=False, allow_infinity=False)
ranged = st.floats(min_value=-70000, max_value=70000, width=32)


def _enc_dec(values: list[float], fmt: str, mode: str = "satfinite") -> list[float]:
    return decode(encode(torch.tensor(values, dtype=torch.float32), fmt, mode), fmt).tolist()


@pytest.mark.parametrize("fmt", FORMATS)
@given(a=ranged, b=ranged)
def test_monotonic(fmt: str, a: float, b: float) -> None:
    lo, hi = sorted((a, b))
    qlo, qhi = _enc_dec([lo, hi], fmt)
    assert qlo <= qhi


@pytest.mark.parametrize("fmt", FORMATS)
@given(x=floats32)
def test_sign_symmetric(fmt: str, x: float) -> None:
    pos, neg = encode(torch.tensor([abs(x), -abs(x)], dtype=torch.float32), fmt, "satfinite").tolist()
    if pos == 0 and SPEC[fmt][4] == "fnuz":
        assert neg == 0  # fnuz has no negative zero
    else:
        assert neg == pos | 0x80


@pytest.mark.parametrize("fmt", FORMATS)
@given(x=st.floats(min_value=-57344, max_value=57344, width=32))
def test_result_is_a_nearest_representable_value(fmt: str, x: float) -> None:
    top = SPEC[fmt][3]
    if abs(x) > top:
        x = math.copysign(top, x)
    (q,) = _enc_dec([x], fmt)
    table = decode_table(fmt)
    finite = table[torch.isfinite(table)].double()
    best = (finite - x).abs().min().item()
    assert abs(q - x) == best


@pytest.mark.parametrize("fmt", FORMATS)
@given(x=floats32)
def test_idempotent(fmt: str, x: float) -> None:
    once = encode(torch.tensor([x], dtype=torch.float32), fmt, "satfinite")
    twice = encode(decode(once, fmt), fmt, "satfinite")
    assert once.tolist() == twice.tolist()


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_finite_code_round_trips(fmt: str) -> None:
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    values = decode(codes, fmt)
    keep = torch.isfinite(values)
    again = encode(values[keep], fmt, "nonsat")
    assert again.tolist() == codes[keep].tolist()


def test_rejects_integer_inputs() -> None:
    with pytest.raises(ValueError, match="dtype"):
        encode(torch.zeros(2, dtype=torch.int32), "e4m3fn")
