"""NVFP4 with a global scale: the two-level scaling of the NVFP4 MHA paged cache (vLLM ``reshape_and_cache_flash``
with ``kv_cache_dtype="nvfp4"``, PR #37332; FlashInfer ``nvfp4_quantize_paged_kv_cache``).

Per tensor, a float32 decode scale ``k_scale`` (vLLM's; FlashInfer's ``global_sf`` is its reciprocal); per block of
16 consecutive values of a head, one e4m3 scale; per value, one E2M1 code. The writer (vLLM
``csrc/libtorch_stable/quantization/fp4/nvfp4_utils.cuh``, ``cvt_warp_fp16_to_fp4``, the TensorRT-LLM quantizer
FlashInfer also runs) computes, every step rounded to float32:

1. ``g = 1 / k_scale``, the encode scale;
2. ``sf = e4m3(g * q)``, ``q = amax * (1/6)``: nearest, ties to even, saturating at 448; a block whose ``g * q``
   is below half of e4m3's smallest subnormal (2**-10) gets scale code 0x00;
3. ``s = decoded(sf) * (1 / g)``, the block's decode scale, and each value's code ``e2m1(x * (1 / s))``, or 0 (a
   signed zero) where ``sf`` is 0.

The kernels take the reciprocals with ``rcp.approx.ftz.f32`` (PTX); this module takes them correctly rounded, as
FlashInfer's exact path (``FLASHINFER_DISABLE_FP4_QUANT_FAST_MATH=1``) and rtp-ref's kernels do: where the
approximate reciprocal is off by an ulp, a code next to an E2M1 rounding boundary can differ. The fingerprints that
decide bytes are the convention's fields: how ``amax / 6`` is formed (rtp_ref.fp4.scales.AmaxDivision), whether a
value is divided by ``s`` or multiplied by its reciprocal (rtp_ref.fp4.quantize.PayloadDivision), and what a -0.0
becomes (rtp_ref.fp4.e2m1.NegativeZero).

A block holding NaN or +-inf is not defined (vLLM's amax, ``__hmax2``, skips a NaN, and what the hardware's E2M1
conversion makes of it is not stated): its codes are ``NO_CODE`` and its ``defined`` False, as in
rtp_ref.fp4.quantize.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rtp_ref.fp4.e2m1 import NO_CODE, UNDEFINED, NegativeZero, encode
from rtp_ref.fp4.quantize import Fp4Quantized, PayloadDivision, payload_quotient
from rtp_ref.fp4.scales import AmaxDivision, amax_quotient
from rtp_ref.fp8.codec import decode
from rtp_ref.fp8.codec import encode as encode_fp8
from rtp_ref.fp8.formats import E4M3FN, ConversionMode
from rtp_ref.fp8.scales import tile_amax

#: values per e4m3 block scale
NVFP4_BLOCK = 16


@dataclass(frozen=True)
class Nvfp4Conventions:
    """What decides an NVFP4 block's bytes beside the global scale (module doc): how ``amax / 6`` is formed, how a
    value is divided by its block's decode scale, what a -0.0 becomes; ``source``: where the set is read from."""

    name: str
    division: AmaxDivision
    payload: PayloadDivision
    negative_zero: NegativeZero
    source: str


#: vLLM's writer as it reads (module doc), its reciprocals correctly rounded
NVFP4_VLLM = Nvfp4Conventions(
    "nvfp4_vllm",
    AmaxDivision.MUL_ONE_SIXTH,
    PayloadDivision.RECIPROCAL_MUL,
    NegativeZero.KEEP,
    "vllm-project/vllm@20b4ad8eb933:csrc/libtorch_stable/quantization/fp4/nvfp4_utils.cuh (cvt_warp_fp16_to_fp4); "
    "vllm-project/vllm PR #37332 (reshape_and_cache_flash nvfp4)",
)


def encode_scale(k_scale: torch.Tensor) -> torch.Tensor:
    """The encode scale ``g = 1 / k_scale`` (float32, one IEEE division; same shape and device)."""
    k = k_scale.to(torch.float32)
    return torch.ones_like(k) / k


def block_scale_codes(amax: torch.Tensor, g: torch.Tensor, division: AmaxDivision | str) -> torch.Tensor:
    """The e4m3 scale code (uint8) of each finite block ``amax`` under encode scale ``g`` (float32, broadcasting):
    ``e4m3(g * (amax / 6))``, nearest even, saturating at 448, 0x00 below e4m3's reach."""
    product = g.to(torch.float32) * amax_quotient(amax, division)
    return encode_fp8(product, E4M3FN, ConversionMode.SATFINITE)


def decode_scales(codes: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Each block's decode scale ``s = decoded(code) * (1 / g)`` (float32; ``g`` broadcasts)."""
    inverse = torch.ones_like(g.to(torch.float32)) / g.to(torch.float32)
    return decode(codes, E4M3FN) * inverse


def nvfp4_quantize(x: torch.Tensor, k_scale: torch.Tensor, conventions: Nvfp4Conventions) -> Fp4Quantized:
    """Quantize ``x[..., n]`` (float32, bf16 or fp16; ``n`` a multiple of 16) under the float32 decode scale
    ``k_scale`` (one value, on ``x``'s device) by ``conventions`` (module doc): unpacked E2M1 codes, one e4m3 scale
    code per 16 values, and which blocks are defined (finite)."""
    n = x.shape[-1]
    if n % NVFP4_BLOCK:
        raise ValueError(f"nvfp4_quantize: last dimension {n} is not a multiple of {NVFP4_BLOCK}")
    amax = tile_amax(x, NVFP4_BLOCK)
    defined = torch.isfinite(amax)
    g = encode_scale(k_scale.reshape(()))
    scales = block_scale_codes(torch.where(defined, amax, torch.zeros_like(amax)), g, conventions.division)
    scales = torch.where(defined, scales, torch.zeros_like(scales))
    s = decode_scales(scales, g).unsqueeze(-1)
    blocks = x.to(torch.float32).reshape(*x.shape[:-1], n // NVFP4_BLOCK, NVFP4_BLOCK)
    quotient = payload_quotient(blocks, s, conventions.payload)  # a zero scale gives zeros of the values' signs
    codes = encode(quotient, UNDEFINED, conventions.negative_zero)
    codes = torch.where(defined.unsqueeze(-1), codes, torch.full_like(codes, NO_CODE))
    return Fp4Quantized(codes.reshape(x.shape), scales, defined)
