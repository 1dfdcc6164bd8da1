"""Every element format's NaN encodings (rtp_ref.fp8.elements.NanEncodings) and the NaN policy (NanPolicy).

The oracle is ml_dtypes and numpy: every one of the 256 codes of each 8-bit format and the 65,536 patterns of bf16
and fp16 are decoded there and the NaNs found are compared with the data, both ways; fp32 is probed at its edges and
on random patterns. The policy's verdict on every pair of e5m2 codes is derived from that oracle alone.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

from rtp_ref.errors import RtpRefError
from rtp_ref.fp8.elements import ANY_NAN, ELEMENT_TRAITS, NanPolicy, element_bits, element_traits, nan_pin_problem
from rtp_ref.fp8.formats import FP8_FORMATS
from tests.fp8.oracles import ML_DTYPES

#: each format with NaNs -> its numpy dtype, and the width of its patterns in bits
NUMPY = {**{name: (dtype, 8) for name, dtype in ML_DTYPES.items()}, "ue8m0": (ml_dtypes.float8_e8m0fnu, 8),
         "bf16": (ml_dtypes.bfloat16, 16), "fp16": (np.float16, 16)}
UNSIGNED = {8: np.uint8, 16: np.uint16, 32: np.uint32}


def oracle_nan(name: str, patterns: np.ndarray) -> np.ndarray:
    """Which bit patterns of format ``name`` numpy/ml_dtypes decode to NaN."""
    dtype, width = NUMPY[name]
    return np.isnan(patterns.astype(UNSIGNED[width]).view(dtype).astype(np.float32))


def all_patterns(name: str) -> np.ndarray:
    return np.arange(1 << NUMPY[name][1], dtype=np.int64)


@pytest.mark.parametrize("name", sorted(NUMPY))
def test_every_pattern_is_nan_exactly_when_the_oracle_says_so(name: str) -> None:
    patterns = all_patterns(name)
    want = oracle_nan(name, patterns)
    nan = element_traits(name).nan
    assert nan is not None
    got = nan.is_nan(torch.from_numpy(patterns)).numpy()
    assert np.array_equal(got, want), f"{name}: {np.flatnonzero(got != want)[:8]}"
    assert [nan.contains(int(p)) for p in patterns] == want.tolist()


def test_the_landmark_sets() -> None:
    """Written out from the formats' definitions (OCP 8-bit FP spec; fnuz; OCP MX E8M0)."""
    def codes(name: str) -> set[int]:
        nan = element_traits(name).nan
        assert nan is not None
        return {c for c in range(256) if nan.contains(c)}

    assert codes("e5m2") == {0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF}
    assert codes("e4m3fn") == {0x7F, 0xFF}
    assert codes("e4m3fnuz") == codes("e5m2fnuz") == {0x80}
    assert codes("ue8m0") == {0xFF}
    bf16 = element_traits("bf16").nan
    assert bf16 is not None and bf16.contains(0x7FFF) and bf16.contains(0xFFC1) and not bf16.contains(0x7F80)


@pytest.mark.parametrize("name", sorted(FP8_FORMATS))
def test_the_codec_and_the_element_agree_on_nan(name: str) -> None:
    nan = element_traits(name).nan
    assert nan is not None
    assert [nan.contains(c) for c in range(256)] == [FP8_FORMATS[name].is_nan_code(c) for c in range(256)]


def test_fp32_at_its_edges_and_at_random() -> None:
    edges = [0x7F800000, 0xFF800000, 0x7F800001, 0xFF800001, 0x7FC00000, 0x7FFFFFFF, 0xFFFFFFFF, 0x7F7FFFFF,
             0x00000000, 0x80000000, 0x00000001]
    rng = np.random.default_rng(7)
    patterns = np.concatenate([np.array(edges, dtype=np.int64), rng.integers(0, 1 << 32, 100_000)])
    want = np.isnan(patterns.astype(np.uint32).view(np.float32))
    nan = element_traits("fp32").nan
    assert nan is not None
    assert np.array_equal(nan.is_nan(torch.from_numpy(patterns)).numpy(), want)
    assert want[:11].tolist() == [False, False, True, True, True, True, True, False, False, False, False]


def test_padding_holds_no_nan() -> None:
    assert ELEMENT_TRAITS["pad"].nan is None


@pytest.mark.parametrize("width", [1, 2, 4])
def test_element_bits_read_the_bytes_little_endian(width: int) -> None:
    raw = np.random.default_rng(width).integers(0, 256, (50, width), dtype=np.uint8)
    want = raw.view({1: np.uint8, 2: np.uint16, 4: np.uint32}[width]).astype(np.int64)[:, 0]
    assert element_bits(torch.from_numpy(raw)).tolist() == want.tolist()


def _policy_oracle(want: np.ndarray, got: np.ndarray, pin: int | None) -> np.ndarray:
    """The policy from the oracle: a NaN wanted takes any NaN (or the pin alone); anything else takes itself."""
    want_nan, got_nan = oracle_nan("e5m2", want), oracle_nan("e5m2", got)
    accepted = got_nan if pin is None else got == pin
    return np.where(want_nan, accepted, want == got)


@pytest.mark.parametrize("pin", [None, 0x7E, 0x7F])
def test_the_policy_on_every_pair_of_e5m2_codes(pin: int | None) -> None:
    want, got = (a.reshape(-1) for a in np.meshgrid(np.arange(256), np.arange(256), indexing="ij"))
    policy = ANY_NAN if pin is None else NanPolicy.pinning({"e5m2": pin})
    verdict = policy.matches(element_traits("e5m2"), torch.from_numpy(want), torch.from_numpy(got)).numpy()
    assert np.array_equal(verdict, _policy_oracle(want, got, pin))
    # a few pairs spelled out: the hardware's NaN for the reference's, a NaN for a number and back
    pairs = dict(zip(zip(want.tolist(), got.tolist(), strict=True), verdict.tolist(), strict=True))
    assert pairs[(0x7E, 0x7F)] is (pin != 0x7E)
    assert pairs[(0x7E, 0x7E)] is (pin != 0x7F)
    assert not pairs[(0x3C, 0x7F)] and not pairs[(0x7E, 0x7B)] and pairs[(0x3C, 0x3C)]


def test_a_pin_must_be_a_nan_of_a_format_that_has_nans() -> None:
    assert nan_pin_problem("bf16", 0x7FFF) is None
    assert nan_pin_problem("e5m2", 0x7C) == "0x7c is not a NaN of e5m2"  # +inf
    assert "no element format 'pad'" in (nan_pin_problem("pad", 0) or "")
    assert "no element format 'e4m3'" in (nan_pin_problem("e4m3", 0x7F) or "")
    with pytest.raises(RtpRefError, match=r"NaN pin e4m3fn = 0x7e: 0x7e is not a NaN of e4m3fn"):
        NanPolicy.pinning({"e4m3fn": 0x7E})
    policy = NanPolicy.pinning({"fp16": 0x7E00, "e5m2": 0x7F})
    assert policy.pinned(element_traits("e5m2")) == 0x7F and policy.pinned(element_traits("bf16")) is None
    assert policy.describe() == "the table pins NaN: e5m2 0x7f, fp16 0x7e00" and ANY_NAN.describe() == ""
