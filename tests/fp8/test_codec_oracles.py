"""The fp8 encoder against independent oracles: ml_dtypes (exhaustive) and exact rationals.

Each comparison is also run against a deliberately broken codec (the mutants at the bottom) to
show the comparison can fail.
"""

from __future__ import annotations

import itertools
import random
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import pytest
import torch

from rtp_ref.fp8 import codec
from rtp_ref.fp8.codec import encode
from tests.fp8.oracles import (
    ML_DTYPES,
    all_16bit_floats,
    ml_dtypes_encode,
    ml_dtypes_is_nan,
    positive_grid,
    rational_encode,
)

FORMATS = sorted(ML_DTYPES)
MODES = ["satfinite", "nonsat"]
Encoder = Callable[[torch.Tensor, str, str], torch.Tensor]


def mismatches_vs_ml_dtypes(enc: Encoder, x: torch.Tensor, fmt: str, mode: str, device: torch.device) -> int:
    """Number of inputs where ``enc`` and ml_dtypes disagree (NaN codes compared as 'is NaN')."""
    ours = enc(x.to(device), fmt, mode).cpu().numpy()
    ref = ml_dtypes_encode(x.float().numpy(), fmt, saturate=mode == "satfinite")
    ours_nan = ml_dtypes_is_nan(ours, fmt)
    ref_nan = ml_dtypes_is_nan(ref, fmt)
    return int(np.count_nonzero(((ours != ref) & ~(ours_nan & ref_nan)) | (ours_nan != ref_nan)))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_every_16bit_input_matches_ml_dtypes(
    fmt: str, mode: str, dtype: torch.dtype, device: torch.device
) -> None:
    x = all_16bit_floats(dtype)
    assert mismatches_vs_ml_dtypes(encode, x, fmt, mode, device) == 0


def _rounding_boundaries(fmt: str) -> list[float]:
    """Every midpoint between adjacent fp8 values, and the float32 values just either side of it."""
    grid = [v for v, _ in positive_grid(fmt)]
    points: list[float] = []
    for lo, hi in itertools.pairwise(grid):
        mid = np.float32(float((lo + hi) / 2))
        points += [
            float(mid),
            float(np.nextafter(mid, np.float32(0))),
            float(np.nextafter(mid, np.float32(np.inf))),
        ]
    points += [float(v) for v in grid]
    return points + [-p for p in points]


def random_seed(fmt: str, mode: str) -> int:
    """The seed of a (format, mode) pair's random inputs: the same in every process, so a failure reproduces
    (``hash()`` of text differs per process with PYTHONHASHSEED)."""
    return zlib.crc32(f"{fmt}/{mode}".encode())


def _random_float32(n: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        bits = rng.getrandbits(32)
        v = float(np.array([bits], dtype=np.uint32).view(np.float32)[0])
        if np.isfinite(v):
            out.append(v)
    # concentrate more samples in the fp8 range, where rounding matters
    out += [rng.uniform(-600.0, 600.0) for _ in range(n)] + [rng.uniform(-1e-2, 1e-2) for _ in range(n)]
    return out


def rational_mismatches(enc: Encoder, values: list[float], fmt: str, mode: str, device: torch.device) -> int:
    """Inputs where ``enc`` disagrees with exact round-half-even of the float32 value."""
    x = torch.tensor(values, dtype=torch.float32)
    ours = enc(x.to(device), fmt, mode).cpu().tolist()
    bad = 0
    for v, code in zip(x.tolist(), ours, strict=True):
        want = rational_encode(v, fmt, saturate=mode == "satfinite")
        if want == "nan":
            bad += not bool(ml_dtypes_is_nan(np.array([code], dtype=np.uint8), fmt)[0])
        elif isinstance(want, str):  # +-inf in e5m2
            bad += code != (0x7C | (0x80 if want == "-inf" else 0))
        else:
            bad += code != want
    return bad


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fmt", FORMATS)
def test_rounding_boundaries_match_exact_rationals(fmt: str, mode: str, device: torch.device) -> None:
    assert rational_mismatches(encode, _rounding_boundaries(fmt), fmt, mode, device) == 0


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fmt", FORMATS)
def test_random_float32_match_exact_rationals(fmt: str, mode: str, device: torch.device) -> None:
    assert rational_mismatches(encode, _random_float32(400, random_seed(fmt, mode)), fmt, mode, device) == 0


def test_issue_examples_e4m3fn_and_fnuz() -> None:
    """The examples from the foundation issue, checked against values written from the spec."""
    x = torch.tensor([1000.0, float("inf"), float("nan"), 300.0, -31.7406])
    fn = codec.decode(encode(x, "e4m3fn", "satfinite"), "e4m3fn").tolist()
    assert fn[0] == 448 and fn[1] == 448 and np.isnan(fn[2]) and fn[3] == 288 and fn[4] == -32
    fnuz = codec.decode(encode(x, "e4m3fnuz", "satfinite"), "e4m3fnuz").tolist()
    assert fnuz[0] == 240 and fnuz[1] == 240 and np.isnan(fnuz[2]) and fnuz[3] == 240 and fnuz[4] == -32


# ----------------------------------------------------------------------------------------------
# Mutants: a codec broken on purpose must be caught by the same comparisons.


def _round_half_up(value: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    half = torch.where(shift > 0, torch.ones_like(shift) << (shift - 1).clamp(min=0), torch.zeros_like(shift))
    return (value + half) >> shift


def _truncate(value: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    return value >> shift


@contextmanager
def _patched_rounding(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Iterator[None]:
    original = codec.round_shift_right_half_even
    codec.round_shift_right_half_even = fn
    try:
        yield
    finally:
        codec.round_shift_right_half_even = original


def _fnuz_as_fn(x: torch.Tensor, fmt: str, mode: str) -> torch.Tensor:
    return encode(x, {"e4m3fnuz": "e4m3fn", "e5m2fnuz": "e5m2"}.get(fmt, fmt), mode)


def _never_saturate(x: torch.Tensor, fmt: str, mode: str) -> torch.Tensor:
    return encode(x, fmt, "nonsat")


def _negative_zero_kept(x: torch.Tensor, fmt: str, mode: str) -> torch.Tensor:
    codes = encode(x, fmt, mode)
    return torch.where(
        (codes == 0) & (x < 0) | ((x == 0) & torch.signbit(x)), torch.full_like(codes, 0x80), codes
    )


MUTANTS: dict[
    str, tuple[Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None, Encoder, list[str], list[str]]
] = {
    # name: (rounding patch, encoder, formats it must be caught on, modes)
    "round-half-up": (_round_half_up, encode, FORMATS, MODES),
    "truncate": (_truncate, encode, FORMATS, MODES),
    "fnuz-treated-as-fn": (None, _fnuz_as_fn, ["e4m3fnuz", "e5m2fnuz"], MODES),
    "no-saturation": (None, _never_saturate, FORMATS, ["satfinite"]),
    "fnuz-negative-zero": (None, _negative_zero_kept, ["e4m3fnuz", "e5m2fnuz"], MODES),
}


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_mutant_is_caught_by_every_oracle(name: str) -> None:
    patch, enc, formats, modes = MUTANTS[name]
    cpu = torch.device("cpu")
    x = all_16bit_floats(torch.bfloat16)
    with _patched_rounding(patch) if patch else _patched_rounding(codec.round_shift_right_half_even):
        for fmt in formats:
            for mode in modes:
                assert mismatches_vs_ml_dtypes(enc, x, fmt, mode, cpu) > 0, (name, fmt, mode, "ml_dtypes")
                assert rational_mismatches(enc, _rounding_boundaries(fmt), fmt, mode, cpu) > 0, (
                    name,
                    fmt,
                    mode,
                    "rationals",
                )
