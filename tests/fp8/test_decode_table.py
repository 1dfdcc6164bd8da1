"""Decoding all 256 codes of every format against the format definition and ml_dtypes."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rtp_ref.fp8 import decode
from rtp_ref.fp8.codec import decode_table
from tests.fp8.oracles import ML_DTYPES, SPEC, spec_value

FORMATS = sorted(ML_DTYPES)


@pytest.mark.parametrize("fmt", FORMATS)
def test_all_codes_match_ml_dtypes(fmt: str, device: torch.device) -> None:
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    ours = decode(codes.to(device), fmt).cpu().numpy()
    ref = codes.numpy().view(ML_DTYPES[fmt]).astype(np.float32)
    assert np.array_equal(np.isnan(ours), np.isnan(ref))
    finite = ~np.isnan(ref)
    assert np.array_equal(ours[finite], ref[finite])
    assert np.array_equal(np.signbit(ours[finite]), np.signbit(ref[finite]))  # -0.0 where it exists


@pytest.mark.parametrize("fmt", FORMATS)
def test_all_codes_match_bit_layout_definition(fmt: str) -> None:
    table = decode_table(fmt).tolist()
    for code in range(256):
        want = spec_value(code, fmt)
        got = table[code]
        if want is None:
            assert math.isnan(got) or math.isinf(got), (fmt, hex(code), got)
        else:
            assert got == float(want), (fmt, hex(code), got, want)


# Landmarks written by hand from the format definitions (OCP FP8 spec; AMD fnuz).
LANDMARKS = {
    "e4m3fn": {0x7E: 448.0, 0x08: 2.0**-6, 0x01: 2.0**-9, 0x38: 1.0, 0xFE: -448.0, 0x80: -0.0},
    "e4m3fnuz": {0x7F: 240.0, 0x08: 2.0**-7, 0x01: 2.0**-10, 0x40: 1.0, 0xFF: -240.0},
    "e5m2": {0x7B: 57344.0, 0x7C: math.inf, 0xFC: -math.inf, 0x04: 2.0**-14, 0x01: 2.0**-16, 0x3C: 1.0},
    "e5m2fnuz": {0x7F: 57344.0, 0x04: 2.0**-15, 0x01: 2.0**-17, 0x40: 1.0},
}
NAN_CODES = {
    "e4m3fn": [0x7F, 0xFF],
    "e4m3fnuz": [0x80],
    "e5m2": [0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF],
    "e5m2fnuz": [0x80],
}


@pytest.mark.parametrize("fmt", FORMATS)
def test_landmarks(fmt: str) -> None:
    table = decode_table(fmt).tolist()
    for code, value in LANDMARKS[fmt].items():
        assert table[code] == value and math.copysign(1, table[code]) == math.copysign(1, value), hex(code)
    assert [c for c in range(256) if math.isnan(table[c])] == NAN_CODES[fmt]
    assert table[0] == 0.0 and math.copysign(1, table[0]) == 1
    assert max(v for v in table if math.isfinite(v)) == SPEC[fmt][3]


def test_decode_rejects_wide_dtypes() -> None:
    with pytest.raises(ValueError, match="1-byte dtype"):
        decode(torch.zeros(3, dtype=torch.int32), "e4m3fn")
