# Triton ships no type information: every @triton.jit is an untyped decorator to mypy.
# mypy: disable-error-code="untyped-decorator"
"""fp8 and ue8m0 conversion inside Triton kernels, shared by every built-in Triton kernel.

Two conversion paths (each kernel reports which one it took): ``hardware``, Triton's ``.to(tl.float8e4nv)``,
``.to(tl.float8e4b8)`` (fnuz) or ``.to(tl.float8e5)`` where the running GPU's platform table lists the format under
``[hardware] triton_fp8_conversion`` (OCP e4m3 and e5m2 on NVIDIA sm90/sm100, OCP e4m3 on AMD gfx950 from triton
3.8, fnuz on gfx942); and ``software``, round-half-even in integer arithmetic (the algorithm of
``rtp_ref.fp8.codec.encode``), used where no hardware conversion exists, for other formats, for the
``nonsat`` mode and under ``TRITON_INTERPRET=1`` (Triton's interpreter rounds fp8 conversions wrongly:
-31.74 -> -16, 126.48 -> 64; triton 3.6 and 3.9).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import triton
import triton.language as tl

from rtp_ref.fp8.formats import E4M3FN, E4M3FNUZ, E5M2, ConversionMode, Fp8Format
from rtp_ref.platform import gpu_index, gpu_platform

if TYPE_CHECKING:
    import torch

    from rtp_ref.platform import Platform

#: hardware selector constexpr: software conversion, Triton's OCP e4m3 type, its fnuz e4m3 type, its OCP e5m2 type
SW, HW_E4M3FN, HW_E4M3FNUZ, HW_E5M2 = 0, 1, 2, 3
#: the formats with a Triton type, by their selector
HARDWARE_TYPES = {E4M3FN: HW_E4M3FN, E4M3FNUZ: HW_E4M3FNUZ, E5M2: HW_E5M2}
#: float32 bit pattern of a quiet NaN, and of 2**-127 (the ue8m0 byte 0; a float32 subnormal)
F32_NAN_BITS = tl.constexpr(0x7FC00000)
F32_2POW_M127_BITS = tl.constexpr(0x00400000)


@triton.jit
def fp8_software(x: tl.tensor, MAN_BITS: tl.constexpr, EMIN: tl.constexpr, MAX_CODE: tl.constexpr,
                  NAN_CODE: tl.constexpr, NEG_ZERO: tl.constexpr, HAS_INF: tl.constexpr,
                  INF_CODE: tl.constexpr, SATFINITE: tl.constexpr) -> tl.tensor:
    """fp8 codes (uint8) of float32 ``x``: round half to even on the float32 bits, then the mode."""
    bits = x.to(tl.int32, bitcast=True)
    sign = (bits >> 31) & 1
    exp_field = (bits >> 23) & 0xFF
    man = bits & 0x7FFFFF
    is_nan = (exp_field == 0xFF) & (man != 0)
    is_inf = (exp_field == 0xFF) & (man == 0)
    normal = exp_field != 0
    sig = tl.where(normal, man | 0x800000, man)
    exp = tl.where(normal, exp_field - 127, -126)
    target = tl.maximum(exp, EMIN)
    # A shift of 25 already rounds every 24-bit significand to 0; the clamp keeps 1 << shift in int32.
    shift = tl.minimum(23 - MAN_BITS + target - exp, 25)
    q = sig >> shift
    rem = sig - (q << shift)
    half = (1 << shift) >> 1
    up = (rem > half) | ((rem == half) & (shift > 0) & ((q & 1) == 1))
    mag = ((target - EMIN) << MAN_BITS) + q + up.to(tl.int32)
    overflow = (mag > MAX_CODE) | is_inf
    if SATFINITE:
        mag = tl.where(overflow, MAX_CODE, mag)
        nan_out = is_nan
    elif HAS_INF:
        mag = tl.where(overflow, INF_CODE, mag)
        nan_out = is_nan
    else:
        nan_out = is_nan | overflow
    sign_bit = sign << 7
    if not NEG_ZERO:
        sign_bit = tl.where(mag == 0, 0, sign_bit)
    return tl.where(nan_out, NAN_CODE, sign_bit | mag).to(tl.uint8)


@triton.jit
def fp8_hardware(x: tl.tensor, HW: tl.constexpr, MAX_VALUE: tl.constexpr, NAN_CODE: tl.constexpr,
                  CLAMP: tl.constexpr) -> tl.tensor:
    """fp8 codes of float32 ``x`` by the GPU's conversion, saturating by an explicit clamp if ``CLAMP``.

    Without ``CLAMP`` the conversion itself must saturate: on NVIDIA Triton emits
    ``cvt.rn.satfinite.e4m3x2.f32`` and ``cvt.rn.satfinite.e5m2x2.f32`` (tests/kernels/test_triton_aot.py reads
    the PTX to hold it to that).
    """
    if CLAMP:
        # Comparisons with NaN are false, so NaN passes both selects unchanged.
        x = tl.where(x > MAX_VALUE, MAX_VALUE, tl.where(x < -MAX_VALUE, -MAX_VALUE, x))
    if HW == 2:
        code = x.to(tl.float8e4b8).to(tl.uint8, bitcast=True)
        # fnuz has no negative zero: 0x80 is its NaN, never a rounded -0.
        code = tl.where(code == 0x80, 0, code)
    elif HW == 3:
        code = x.to(tl.float8e5).to(tl.uint8, bitcast=True)
    else:
        code = x.to(tl.float8e4nv).to(tl.uint8, bitcast=True)
    # NaN as the format's canonical code: any NaN of the format passes (rtp_ref.fp8.elements.NanPolicy), but fnuz's
    # one NaN, 0x80, was cleared to zero above
    return tl.where(x != x, NAN_CODE, code).to(tl.uint8)


@triton.jit
def fp8_codes(x: tl.tensor, HW: tl.constexpr, MAN_BITS: tl.constexpr, EMIN: tl.constexpr, MAX_CODE: tl.constexpr,
         NAN_CODE: tl.constexpr, NEG_ZERO: tl.constexpr, HAS_INF: tl.constexpr, INF_CODE: tl.constexpr,
         SATFINITE: tl.constexpr, MAX_VALUE: tl.constexpr, CLAMP: tl.constexpr) -> tl.tensor:
    if HW == 0:
        code = fp8_software(x, MAN_BITS, EMIN, MAX_CODE, NAN_CODE, NEG_ZERO, HAS_INF, INF_CODE, SATFINITE)
    else:
        code = fp8_hardware(x, HW, MAX_VALUE, NAN_CODE, CLAMP)
    return code


@triton.jit
def ue8m0_ceil(s: tl.tensor) -> tl.tensor:
    """ue8m0 byte (int32) of the smallest power of two >= ``s`` (s > 0 or NaN), as encode_ue8m0 'ceil'.

    Subnormal s are scaled by 2**24 first (exact), so one normal-number formula covers them; results
    below 2**-127 clamp to byte 0, above 2**127 or NaN/inf give 0xFF.
    """
    subnormal = s < 1.1754943508222875e-38
    bits = tl.where(subnormal, s * 16777216.0, s).to(tl.int32, bitcast=True)
    exp_field = (bits >> 23) & 0xFF
    k = exp_field - 127 + ((bits & 0x7FFFFF) != 0).to(tl.int32) - tl.where(subnormal, 24, 0)
    byte = tl.maximum(k + 127, 0)
    return tl.where((byte > 254) | (exp_field == 0xFF), 0xFF, byte)


@triton.jit
def load_f32(ptr: tl.tensor, offs: tl.tensor, mask: tl.tensor, IN_BF16: tl.constexpr,
             ONE: tl.constexpr) -> tl.tensor:
    """Load 16-bit inputs as float32, masked lanes as 0.0 (1.0 if ``ONE``: lanes that are only divided, since a zero
    dividend takes div.rn's slow path). bf16 is widened by placing its bits in the top half of a float32:
    exact for every value, subnormals included (Triton 3.9's interpreter flushes bf16 subnormals to
    zero in ``.to(tl.float32)``)."""
    if IN_BF16:
        bits = tl.load(ptr.to(tl.pointer_type(tl.int16)) + offs, mask=mask, other=0x3F80 if ONE else 0)
        return ((bits.to(tl.int32) & 0xFFFF) << 16).to(tl.float32, bitcast=True)
    return tl.load(ptr + offs, mask=mask, other=1.0 if ONE else 0.0).to(tl.float32)


def interpreted() -> bool:
    """True when Triton runs kernels in its CPU interpreter (``TRITON_INTERPRET=1`` at import time)."""
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(fp8_codes, InterpretedFunction)


def triton_converts(platform: Platform, element_format: Fp8Format) -> bool:
    """Whether this Triton converts ``element_format`` with a hardware instruction on ``platform``: the table's
    ``[hardware] triton_fp8_conversion`` lists it, from its ``triton_fp8_since`` release on (data, not code:
    tests/kernels/test_triton_aot.py builds each AMD target ahead of time and checks the claim both ways)."""
    if platform.triton_fp8_since is not None and triton_version() < platform.triton_fp8_since:
        return False
    return element_format.name in platform.triton_fp8_conversion


def triton_version() -> tuple[int, int]:
    """This Triton's (major, minor) release."""
    major, minor = triton.__version__.split(".")[:2]
    return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)


def hardware_selector(element_format: Fp8Format, mode: ConversionMode, device: torch.device | None = None) -> int:
    """Which hardware fp8 type GPU ``device`` (default: the current one) converts ``element_format`` with
    (``SW``: none: the interpreter, a mode other than satfinite, a GPU without a platform table, or a format
    its table's ``[hardware]`` does not list for this Triton)."""
    if interpreted() or mode is not ConversionMode.SATFINITE:
        return SW
    platform = gpu_platform(gpu_index(device))
    if platform is None or not triton_converts(platform, element_format):
        return SW
    return HARDWARE_TYPES.get(element_format, SW)


def conversion_saturates() -> bool:
    """Whether this backend's fp8 conversion saturates by itself: NVIDIA's ``cvt.rn.satfinite``."""
    if interpreted():
        return False
    return bool(triton.runtime.driver.active.get_current_target().backend == "cuda")

