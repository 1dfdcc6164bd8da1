"""The ``torch-eager`` writers of the other cache families: ``reshape_and_cache_flash`` (MHA paged) and
``indexer_k_quant_and_cache`` (DeepSeek indexer), as a user writes them in plain torch ops.

This is a second implementation of the contracts of rtp_ref.kv.mha_paged and rtp_ref.kv.indexer, which the
suite compares byte for byte against their references. It shares only their argument checks
(validate_mha_args, validate_indexer_args); everything else is computed another way:

* the fp8 conversion is torch's own cast, ``.to(torch.float8_*)``, not rtp_ref.fp8.codec's integer
  encoder. In range that cast rounds to nearest even like the reference (tests/fp8/test_torch_cast_survey.py
  measures it); outside the range it differs between builds and devices (CPU 2.13 saturates e4m3fn but
  writes NaN for e4m3fnuz, CUDA writes NaN; NaN keeps its sign). So the values are clamped to +-max
  before the cast (inf included), and afterwards the sign bit is re-derived, NaN is written as the format's
  canonical ``nan_code`` and, for ``nonsat``, overflow is written explicitly: nothing outside the range the
  survey checks is left to the cast;
* the ue8m0 scale is found with ``torch.frexp`` (a mantissa of exactly 0.5 is a power of two already), not
  by the reference's bit-field rounding and not by ``exp2(ceil(log2(s)))``, which can land a binade low;
* the indexer's bytes are addressed through the cache's own ``[block, row, byte]`` indices (a byte offset
  ``p`` of a block is row ``p // row_bytes``, column ``p % row_bytes``), not through an as_strided view;
* ``mxfp4``'s exponent is ``torch.frexp``'s of the block's quotient (one less where its mantissa is exactly 0.5),
  not rtp_ref.fp4's bit-field rounding; its values are multiplied by ``2**-e`` (not divided) and rounded to E2M1 with
  ``torch.round`` (half to even) on the grid of their binade (steps of 0.5 below 2, 1 below 4, 2 above), not by
  rtp_ref.fp4.e2m1's integer encoder.

Both work on CPU and CUDA tensors alike: index_put on the caches' device, no host round trip, no loop over
tokens. Divisions are tensor-by-tensor on the device in fp32: CUDA divides by a *CPU scalar* as a
multiplication by its reciprocal, which is not the correctly rounded quotient the contracts ask for.
"""

from __future__ import annotations

import math

import torch

from rtp_ref.fp4.scales import ONE_SIXTH_F32
from rtp_ref.fp8.formats import ConversionMode, Fp8Format
from rtp_ref.kv.indexer import AMAX_FLOOR, IndexerLayout, validate_indexer_args
from rtp_ref.kv.mha_paged import MhaPagedLayout, validate_mha_args

#: the exponent range of a ue8m0 scale: 2**-127 (byte 0) to 2**127 (byte 254)
_UE8M0_MIN_EXP = -127
_UE8M0_MAX_EXP = 127


def _overflow_threshold(fmt: Fp8Format) -> tuple[float, bool]:
    """(the midpoint between ``fmt``'s largest finite value and the next binade step, whether a value exactly
    at it rounds up): a magnitude above the midpoint, or at it when the largest code is odd (ties go to
    even), rounds past the largest finite value."""
    _, exp = math.frexp(fmt.max_value)  # max_value = f * 2**exp, 0.5 <= f < 1
    half_ulp = math.ldexp(1.0, exp - 1 - fmt.man_bits - 1)
    return fmt.max_value + half_ulp, bool(fmt.max_code & 1)


def _fp8_codes(q: torch.Tensor, fmt: Fp8Format, mode: ConversionMode) -> torch.Tensor:
    """The fp8 codes (uint8, same shape and device) of the float32 quotients ``q``, bit-exact with
    rtp_ref.fp8.codec.encode: round to nearest even; ``satfinite``: overflow and +-inf give +-max;
    ``nonsat``: they give +-inf (e5m2) or NaN; NaN gives ``fmt.nan_code``; fnuz formats have no -0."""
    fp8 = getattr(torch, fmt.torch_dtype_name)
    top = fmt.max_value
    # Clamped first, so torch's cast only ever sees values it rounds like the reference: its own overflow
    # handling (saturate, NaN or inf, by build and device) never comes into play. clamp keeps NaN as NaN.
    codes = q.clamp(-top, top).to(fp8).view(torch.uint8).to(torch.int32)
    magnitude = codes & 0x7F
    negative = torch.signbit(q)
    if fmt.has_negative_zero:
        # the sign is the quotient's: a negative value that rounds to zero is -0 (0x80), as in the reference
        codes = magnitude | (negative.to(torch.int32) << 7)
    else:
        # fnuz: 0x80 is the NaN, so every zero (-0.0, negative underflow) is +0
        codes = torch.where((magnitude == 0) | ~negative, magnitude, magnitude | 0x80)
    if mode is ConversionMode.NONSAT:
        threshold, tie_overflows = _overflow_threshold(fmt)
        size = q.abs()
        overflow = size > threshold
        if tie_overflows:  # the largest code is odd: the tie rounds to the even code past it
            overflow |= size == threshold
        if fmt.has_inf:
            inf_codes = fmt.inf_code | (negative.to(torch.int32) << 7)
            codes = torch.where(overflow, inf_codes, codes)
        else:
            codes = torch.where(overflow, fmt.nan_code, codes)
    # torch's cast keeps a NaN's sign (0xFF in e4m3fn); the contract writes the one canonical NaN
    codes = torch.where(torch.isnan(q), fmt.nan_code, codes)
    return codes.to(torch.uint8)


def _cache_elements(layout: MhaPagedLayout, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """What goes into the cache for the rows ``x`` ``[V, H, D]``: their 16-bit patterns (``auto``; int16, so
    every bit, NaN payloads included, is moved and not converted), or the fp8 codes of ``x / scale``."""
    if layout.element_format is None:
        return x.view(torch.int16)
    # [1] per tensor or [H] per head, broadcast over [V, H, D]; a device tensor, so a true fp32 division
    per_head = scale.to(torch.float32).view(1, -1, 1)
    return _fp8_codes(x.float() / per_head, layout.element_format, layout.conversion_mode)


def torch_eager_reshape_and_cache_flash(layout: MhaPagedLayout, key: torch.Tensor, value: torch.Tensor,
                                        key_cache: torch.Tensor, value_cache: torch.Tensor,
                                        slot_mapping: torch.Tensor, k_scale: torch.Tensor,
                                        v_scale: torch.Tensor) -> None:
    """Write ``key``/``value`` ``[T, H, D]`` into ``key_cache``/``value_cache`` in place, as
    rtp_ref.kv.mha_paged.reference_reshape_and_cache_flash does, on the caches' device (CPU or CUDA).

    Token ``t < slot_mapping.numel()`` with slot ``s >= 0`` goes to block ``s // block_size``, row
    ``s % block_size`` of each cache (NHD, or HND as a permuted view: written through the view's strides);
    negative slots write nothing. ``auto`` copies the bits; ``fp8``/``fp8_e5m2`` store the codes of
    ``x / scale`` in fp32 with the token's head's scale (``k_scale``/``v_scale`` of 1 or H values), converted
    under the layout's conversion mode. Bad arguments raise RtpRefError before anything is written
    (validate_mha_args).
    """
    validate_mha_args(layout, key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale)
    tokens, block_size = slot_mapping.numel(), key_cache.shape[1]
    keep = slot_mapping >= 0
    slots = slot_mapping[keep]
    blocks, rows = slots // block_size, slots % block_size
    for x, scale, cache in ((key, k_scale, key_cache), (value, v_scale, value_cache)):
        target = cache if layout.element_format is not None else cache.view(torch.int16)
        # advanced indexing on the (possibly permuted) view: index_put honours its strides, so HND works as is
        target[blocks, rows] = _cache_elements(layout, x[:tokens][keep], scale)


def _pow2_ceil(s: torch.Tensor) -> torch.Tensor:
    """The smallest power of two at or above each positive float32 ``s``, exactly; inf stays inf. Below
    2**-127 the result is 2**-127 and above 2**127 NaN, the ends of what a ue8m0 byte holds."""
    mantissa, exp = torch.frexp(s)  # s = mantissa * 2**exp, 0.5 <= mantissa < 1
    # clamped to one past the top as well: frexp's exponent of inf is unspecified (inf is restored below)
    k = torch.where(mantissa == 0.5, exp - 1, exp).clamp(_UE8M0_MIN_EXP, _UE8M0_MAX_EXP + 1)
    # 2**k built from its float32 bits (no pow/exp2 rounding): exponent field k + 127, or the subnormal 2**-127
    bits = torch.where(k > _UE8M0_MIN_EXP, (k + 127) << 23, 1 << 22).to(torch.int32)
    pow2 = bits.view(torch.float32)
    pow2 = torch.where(k > _UE8M0_MAX_EXP, torch.full_like(pow2, math.nan), pow2)
    return torch.where(torch.isinf(s), s, pow2)


def _e2m1_magnitudes(m: torch.Tensor) -> torch.Tensor:
    """E2M1 magnitude codes (int64, 0..7) of float32 ``m >= 0`` or NaN: the nearest value of the binade's grid,
    ties to even (``torch.round``), 6 for anything past it; a NaN gives 7 (``mxfp4``'s statement)."""
    m = m.clamp(max=8.0)  # past 6 is saturated anyway; inf becomes a finite number torch.round takes
    code = torch.where(m < 2, torch.round(m * 2), torch.where(m < 4, 2 + torch.round(m), 4 + torch.round(m / 2)))
    return torch.where(torch.isnan(m), 7.0, code.clamp(max=7)).to(torch.int64)


def _mxfp4_bytes(x: torch.Tensor, n: int, quant: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``mxfp4``'s packed code bytes ``[V, D / 2]`` and ue8m0 scale bytes ``[V, D / 32]`` of float32 ``x`` ``[V,
    D]``, ``n`` blocks of ``quant`` a row (rtp_ref.kv.indexer's module doc), computed as the module doc says."""
    device = x.device
    blocks = x.view(x.shape[0], n, quant)  # explicit rows: there may be none
    magnitude = blocks.abs()
    amax = magnitude.masked_fill(torch.isnan(magnitude), 0.0).amax(dim=-1)
    floor = torch.tensor(6 * 2.0**-126, dtype=torch.float32, device=device)
    q = torch.maximum(amax, floor) * torch.tensor(ONE_SIXTH_F32, dtype=torch.float32, device=device)
    mantissa, exp = torch.frexp(q)  # q = mantissa * 2**exp, 0.5 <= mantissa < 1: ceil(log2 q) is exp or exp - 1
    e = torch.where(mantissa == 0.5, exp - 1, exp).clamp(max=127)
    e = torch.where(torch.isinf(q), 127, e).to(torch.int32)  # frexp's exponent of inf is unspecified
    # 2**-e from its float32 bits (exponent field 127 - e; 2**-127 is the subnormal 1 << 22): x times it is exact
    reciprocal = torch.where(e < 127, (127 - e) << 23, 1 << 22).to(torch.int32).view(torch.float32)
    scaled = blocks * reciprocal.unsqueeze(-1)
    codes = _e2m1_magnitudes(scaled.abs()) | (torch.signbit(scaled) & ~torch.isnan(scaled)).to(torch.int64) << 3
    codes = codes.reshape(x.shape[0], n * quant)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).to(torch.uint8)
    return packed, (e + 127).to(torch.uint8)


def torch_eager_indexer_k_quant_and_cache(layout: IndexerLayout, k: torch.Tensor, kv_cache: torch.Tensor,
                                          slot_mapping: torch.Tensor, scale_fmt: str) -> None:
    """Write ``k`` ``[T, head_dim]`` into the uint8 ``kv_cache`` ``[num_blocks, block_size, bytes_per_token]``
    in place, as rtp_ref.kv.indexer.reference_indexer_k_quant_and_cache does, on the cache's device.

    A block's bytes hold ``block_size * head_dim`` fp8 values (token row ``r`` at ``r * head_dim``), then the
    fp32 scales (row ``r``'s ``j``-th at ``block_size * head_dim + (r * n + j) * 4``, ``n`` scales a token).
    A slice of ``quant_block_size`` values has the scale ``max(amax, AMAX_FLOOR) / scale_divisor`` in fp32
    (amax over its non-NaN values), raised to the smallest power of two at or above it for ``ue8m0``; its
    values are stored as the codes of ``x / scale``. ``mxfp4`` stores E2M1 codes and ue8m0 scale bytes in the same
    two parts (``_mxfp4_bytes``). Negative slots write nothing. Bad arguments raise RtpRefError before anything is
    written (validate_indexer_args).
    """
    validate_indexer_args(layout, k, kv_cache, slot_mapping, scale_fmt)
    block_size, row = kv_cache.shape[1], kv_cache.shape[2]
    device = kv_cache.device
    keep = slot_mapping >= 0
    slots = slot_mapping[keep]
    x = k[: slot_mapping.numel()][keep].float()
    block, offset = (slots // block_size).unsqueeze(1), (slots % block_size).unsqueeze(1)
    if layout.fp4 is not None:
        width, trailing = layout.data_bytes_per_token, layout.trailing_bytes_per_token
        packed, fp4_scales = _mxfp4_bytes(x, layout.scales_per_token, layout.quant_block_size)
        for start, part in ((offset * width, packed), (block_size * width + offset * trailing, fp4_scales)):
            at = start + torch.arange(part.shape[1], device=device)
            kv_cache[block, at // row, at % row] = part
        return
    n, d = layout.scales_per_token, layout.head_dim
    slices = x.view(x.shape[0], n, layout.quant_block_size)  # explicit rows: there may be none
    magnitude = slices.abs()
    # vLLM folds the amax with fmaxf, which drops NaN: a NaN does not make its slice's scale NaN
    amax = magnitude.masked_fill(torch.isnan(magnitude), 0.0).amax(dim=-1)
    floor = torch.tensor(AMAX_FLOOR, dtype=torch.float32, device=device)
    divisor = torch.tensor(layout.scale_divisor, dtype=torch.float32, device=device)
    scales = torch.maximum(amax, floor) / divisor
    if scale_fmt == "ue8m0":
        scales = _pow2_ceil(scales)
    codes = _fp8_codes((slices / scales.unsqueeze(-1)).view(x.shape[0], d), layout.element_format,
                       layout.conversion_mode)
    scale_bytes = scales.contiguous().view(torch.uint8)  # [V, 4n], the fp32 scales' bytes in memory order
    for start, data in ((offset * d, codes), (block_size * d + offset * 4 * n, scale_bytes)):
        # a byte offset within the block as the cache's own (row, column): rows are views of the block's bytes
        at = start + torch.arange(data.shape[1], device=device)
        kv_cache[block, at // row, at % row] = data
