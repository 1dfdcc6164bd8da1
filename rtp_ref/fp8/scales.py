"""Per-tile scaling: amax, scale rules, quantize and dequantize.

The scale rules are the ones the public writers disagree on (docs/sources.md#scale-contracts): each
is named so a platform table can say which one it follows.

* ``amax_div``:  ``s = max(amax / fp8_max, floor)`` in float32 (rtp-llm and vLLM ds_mla kernels
  before vLLM PR #49435, with ``floor = FLT_MIN``).
* ``pow2_ceil``: ``s = 2**ceil(log2(max(amax / fp8_max, floor)))`` (FlashMLA tests/quant.py at
  082094b7, with ``floor = 1e-4``; rtp-llm's model1 writer with ``floor = FLT_MIN``).

Quantization is ``encode(x / s)``: a float32 division rounded to nearest, then the fp8 encoder.
For power-of-two scales the division is exact, so multiply-by-reciprocal kernels agree bit for bit.
"""

from __future__ import annotations

import torch

from rtp_ref.fp8.codec import decode, encode
from rtp_ref.fp8.formats import ConversionMode, Fp8Format
from rtp_ref.fp8.rules import Pow2Rule

# Re-exported: the rule is named here, where it is applied; it is defined in the torch-free rules module.
from rtp_ref.fp8.rules import ScaleRule as ScaleRule
from rtp_ref.fp8.ue8m0 import decode_ue8m0, encode_ue8m0

FLT_MIN = float(torch.finfo(torch.float32).tiny)


def tile_amax(x: torch.Tensor, tile: int) -> torch.Tensor:
    """Max of ``|x|`` over consecutive tiles of the last dimension, as float32.

    ``x[..., n]`` with ``n % tile == 0`` gives ``[..., n // tile]``. NaN in a tile gives NaN.
    """
    n = x.shape[-1]
    if tile <= 0 or n % tile != 0:
        raise ValueError(f"tile_amax: last dimension {n} is not a positive multiple of tile={tile}")
    tiles = x.to(torch.float32).reshape(*x.shape[:-1], n // tile, tile)
    return tiles.abs().amax(dim=-1)


def scale_from_amax(amax: torch.Tensor, rule: ScaleRule | str, fp8_max: float, floor: float) -> torch.Tensor:
    """Scale (float32) for each amax under ``rule``; see the module doc for the formulas.

    ``floor`` keeps an all-zero tile's scale positive and finite (a zero scale would make
    ``x / s`` NaN). The result is always > 0 for finite amax; NaN amax gives the canonical quiet
    NaN (bits 0x7FC00000), whatever NaN the input carried: one answer on every device. The contract
    leaves a NaN scale's bits open (kernels' hardware division may give another NaN).
    """
    if fp8_max <= 0:
        raise ValueError(f"scale_from_amax: fp8_max={fp8_max} must be positive")
    if not floor > 0:
        raise ValueError(f"scale_from_amax: floor={floor} must be positive")
    r = ScaleRule(rule)
    a = amax.to(torch.float32)
    # Divide by a tensor on a's device: torch on CUDA turns division by a CPU scalar into a multiply
    # by its reciprocal, which is not the correctly rounded quotient the contract states.
    raw = a / torch.full_like(a, fp8_max)
    s = torch.maximum(raw, torch.full_like(a, floor))
    if r is ScaleRule.POW2_CEIL:
        s = decode_ue8m0(encode_ue8m0(s, Pow2Rule.CEIL))
    return torch.where(torch.isnan(s), torch.full_like(s, float("nan")), s)


def quantize_tiles(
    x: torch.Tensor, scale: torch.Tensor, tile: int, fmt: Fp8Format | str, mode: ConversionMode | str
) -> torch.Tensor:
    """fp8 codes of ``x / scale`` where ``scale[..., i]`` applies to tile ``i`` of the last dim."""
    n = x.shape[-1]
    tiles = x.to(torch.float32).reshape(*x.shape[:-1], n // tile, tile)
    q = tiles / scale.to(torch.float32).unsqueeze(-1)
    return encode(q, fmt, mode).reshape(x.shape)


def dequantize_tiles(
    codes: torch.Tensor, scale: torch.Tensor, tile: int, fmt: Fp8Format | str
) -> torch.Tensor:
    """float32 ``decode(codes) * scale`` per tile; the inverse map of ``quantize_tiles``."""
    n = codes.shape[-1]
    values = decode(codes, fmt).reshape(*codes.shape[:-1], n // tile, tile)
    return (values * scale.to(torch.float32).unsqueeze(-1)).reshape(codes.shape)
