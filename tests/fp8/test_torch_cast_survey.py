"""How does this torch build's own ``.to(float8_*)`` behave? Measured, never assumed.

In range, torch's cast must equal the reference codec bit for bit (that can fail). For overflow,
inf and NaN the test records which contract the build follows (saturating or not) and shows it in
the run summary; it fails only if the cast follows neither. Known results: CUDA torch 2.11 gives
NaN for 1000 -> e4m3fn; the CPU build 2.13 gives 448 (docs/sources.md#fp8-conversion-on-an-h200).
"""

from __future__ import annotations

import math

import pytest
import torch

from rtp_ref.fp8 import FP8_FORMATS, decode, decode_table, encode, encode_ue8m0

FORMATS = [f for f in sorted(FP8_FORMATS) if hasattr(torch, FP8_FORMATS[f].torch_dtype_name)]


def _torch_codes(x: torch.Tensor, fmt: str) -> torch.Tensor:
    return x.to(getattr(torch, FP8_FORMATS[fmt].torch_dtype_name)).view(torch.uint8)


def _same(a: torch.Tensor, b: torch.Tensor, fmt: str) -> torch.Tensor:
    """Code-wise equality where any two NaN codes count as equal."""
    nan_a = torch.isnan(decode(a, fmt))
    nan_b = torch.isnan(decode(b, fmt))
    return (a == b) | (nan_a & nan_b)


@pytest.mark.parametrize("fmt", FORMATS)
def test_torch_cast_in_range_is_bit_exact(fmt: str, device: torch.device) -> None:
    table = decode_table(fmt)
    finite = table[torch.isfinite(table)]
    values = torch.sort(torch.unique(finite)).values
    mids = (values[1:] + values[:-1]) / 2  # round-half-even ties, all inside the finite range
    x = torch.cat([values, mids]).to(device)
    ours = encode(x, fmt, "satfinite")
    theirs = _torch_codes(x, fmt)
    bad = ~_same(ours, theirs, fmt)
    assert not bad.any(), f"torch disagrees in range at {x[bad][:8].tolist()}"


@pytest.mark.parametrize("fmt", FORMATS)
def test_torch_cast_overflow_contract_is_recorded(fmt: str, device: torch.device, survey: list[str]) -> None:
    top = FP8_FORMATS[fmt].max_value
    x = torch.tensor([top * 1.2, 1000.0 * top, math.inf, -math.inf, math.nan], device=device)
    theirs = _torch_codes(x, fmt)
    sat = _same(theirs, encode(x, fmt, "satfinite"), fmt).all().item()
    nonsat = _same(theirs, encode(x, fmt, "nonsat"), fmt).all().item()
    values = decode(theirs, fmt).tolist()
    verdict = "saturating" if sat else "non-saturating" if nonsat else "neither contract"
    survey.append(
        f"torch {torch.__version__} {device.type}: .to({fmt}) is {verdict}: "
        f"{[round(v, 3) for v in x.tolist()]} -> {values}"
    )
    assert sat or nonsat, f"torch's {fmt} cast on {device.type} follows neither contract: {values}"


def test_torch_e8m0_cast_rule_is_recorded(device: torch.device, survey: list[str]) -> None:
    if not hasattr(torch, "float8_e8m0fnu"):
        pytest.skip(f"torch {torch.__version__} has no float8_e8m0fnu")
    x = torch.tensor([0.3, 3.0, 6.0, 0.75, 1.0, 5.0], device=device)
    theirs = x.to(torch.float8_e8m0fnu).view(torch.uint8)
    matches = [r for r in ("ceil", "floor", "nearest") if torch.equal(theirs, encode_ue8m0(x, r))]
    survey.append(
        f"torch {torch.__version__} {device.type}: .to(float8_e8m0fnu) rounds like {matches or 'no rule'}"
    )
    assert "ceil" not in matches or "nearest" not in matches  # the probes separate the rules
