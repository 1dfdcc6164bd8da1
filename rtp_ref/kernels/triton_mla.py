# Triton ships no type information: every @triton.jit is an untyped decorator to mypy.
# mypy: disable-error-code="untyped-decorator"
"""The ``triton`` built-in kernel: one Triton kernel family for every MLA layout, on CUDA and ROCm.

One program writes ``BLOCK_T`` tokens: it reads each input row once (16-byte vector loads where the
strides allow), computes tile scales in registers and writes each entry once; no atomics. The layout
is a set of constexprs taken from the reference field table (``WritePlan``), so every layout compiles
to its own specialised kernel.

fp8 conversion has two paths, chosen per call and reported as ``conversion_path``:

* ``hardware``: Triton's ``.to(tl.float8e4nv)`` (OCP e4m3: NVIDIA sm89+, AMD gfx950 from triton
  3.8) or ``.to(tl.float8e4b8)`` (fnuz: AMD gfx942); see ``hip_hardware_format``. On AMD the value
  is clamped to +-max first with a select that lets NaN through, so saturation never depends on the
  backend's default; on NVIDIA Triton emits the saturating ``cvt.rn.satfinite`` (a test reads the
  PTX), so the clamp would only cost instructions. NaN is written as the format's canonical code.
* ``software``: round-half-even in integer arithmetic inside the kernel (the algorithm of
  ``rtp_ref.fp8.codec.encode``). Used where no hardware conversion exists (fnuz on NVIDIA, OCP on
  gfx942), for other formats, for the ``nonsat`` mode, and under ``TRITON_INTERPRET=1``: Triton's
  interpreter rounds fp8 conversions wrongly (-31.74 -> -16, 126.48 -> 64; triton 3.6 and 3.9).

Every float32 division is ``tl.math.div_rn`` (correctly rounded), as the contract requires; Triton's
``/`` may lower to an approximate division. Power-of-two tile scales multiply by their exact
reciprocal instead, which gives the same bits. Compiled with ``enable_fp_fusion=False``: no contraction
into fused multiply-adds may change a rounding.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Collection
from typing import Any

import torch
import triton
import triton.language as tl

from rtp_ref.fp8.formats import E4M3FN, E4M3FNUZ, ConversionMode, Fp8Format
from rtp_ref.kernels.contract import (
    ConversionChoice,
    ConversionPath,
    FormatTraits,
    PlannedKernel,
    ValueMode,
    WriteContract,
    WritePlan,
    block_shift_of,
    default_contract,
)
from rtp_ref.platform import MLA_LAYOUT_NAMES

#: hardware selector constexpr: software conversion, Triton's OCP e4m3 type, Triton's fnuz e4m3 type
_SW, _HW_E4M3FN, _HW_E4M3FNUZ = 0, 1, 2
#: float32 bit pattern of a quiet NaN, and of 2**-127 (the ue8m0 byte 0; a float32 subnormal)
_F32_NAN_BITS = tl.constexpr(0x7FC00000)
_F32_2POW_M127_BITS = tl.constexpr(0x00400000)


@triton.jit
def _fp8_software(x: tl.tensor, MAN_BITS: tl.constexpr, EMIN: tl.constexpr, MAX_CODE: tl.constexpr,
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
def _fp8_hardware(x: tl.tensor, HW: tl.constexpr, MAX_VALUE: tl.constexpr, NAN_CODE: tl.constexpr,
                  CLAMP: tl.constexpr) -> tl.tensor:
    """fp8 codes of float32 ``x`` by the GPU's conversion, saturating by an explicit clamp if ``CLAMP``.

    Without ``CLAMP`` the conversion itself must saturate: on NVIDIA Triton emits
    ``cvt.rn.satfinite.e4m3x2.f32`` (tests/kernels/test_triton_aot.py reads the PTX to hold it to that).
    """
    if CLAMP:
        # Comparisons with NaN are false, so NaN passes both selects unchanged.
        x = tl.where(x > MAX_VALUE, MAX_VALUE, tl.where(x < -MAX_VALUE, -MAX_VALUE, x))
    if HW == 2:
        code = x.to(tl.float8e4b8).to(tl.uint8, bitcast=True)
        # fnuz has no negative zero: 0x80 is its NaN, never a rounded -0.
        code = tl.where(code == 0x80, 0, code)
    else:
        code = x.to(tl.float8e4nv).to(tl.uint8, bitcast=True)
    return tl.where(x != x, NAN_CODE, code).to(tl.uint8)


@triton.jit
def _fp8(x: tl.tensor, HW: tl.constexpr, MAN_BITS: tl.constexpr, EMIN: tl.constexpr, MAX_CODE: tl.constexpr,
         NAN_CODE: tl.constexpr, NEG_ZERO: tl.constexpr, HAS_INF: tl.constexpr, INF_CODE: tl.constexpr,
         SATFINITE: tl.constexpr, MAX_VALUE: tl.constexpr, CLAMP: tl.constexpr) -> tl.tensor:
    if HW == 0:
        code = _fp8_software(x, MAN_BITS, EMIN, MAX_CODE, NAN_CODE, NEG_ZERO, HAS_INF, INF_CODE, SATFINITE)
    else:
        code = _fp8_hardware(x, HW, MAX_VALUE, NAN_CODE, CLAMP)
    return code


@triton.jit
def _ue8m0_ceil(s: tl.tensor) -> tl.tensor:
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
def _store16(cache: tl.tensor, base: tl.tensor, cols: tl.tensor, value: tl.tensor, mask: tl.tensor,
             SPLIT: tl.constexpr) -> None:
    """Store int16 ``value`` [BT, N] at byte ``base[:, None] + 2 * cols`` (byte by byte if SPLIT)."""
    if SPLIT:
        v = value.to(tl.int32) & 0xFFFF
        ptr = cache + base[:, None] + 2 * cols[None, :]
        tl.store(ptr, (v & 0xFF).to(tl.uint8), mask=mask)
        tl.store(ptr + 1, (v >> 8).to(tl.uint8), mask=mask)
    else:
        ptr = (cache + base[:, None]).to(tl.pointer_type(tl.int16)) + cols[None, :]
        tl.store(ptr, value, mask=mask)


@triton.jit
def _store32(cache: tl.tensor, base: tl.tensor, cols: tl.tensor, value: tl.tensor, mask: tl.tensor,
             SPLIT: tl.constexpr) -> None:
    """Store float32 ``value`` [BT, N] at byte ``base[:, None] + 4 * cols`` (byte by byte if SPLIT)."""
    if SPLIT:
        v = value.to(tl.int32, bitcast=True)
        ptr = cache + base[:, None] + 4 * cols[None, :]
        for k in tl.static_range(4):
            tl.store(ptr + k, ((v >> (8 * k)) & 0xFF).to(tl.uint8), mask=mask)
    else:
        ptr = (cache + base[:, None]).to(tl.pointer_type(tl.float32)) + cols[None, :]
        tl.store(ptr, value, mask=mask)


@triton.jit
def _load_f32(ptr: tl.tensor, offs: tl.tensor, mask: tl.tensor, IN_BF16: tl.constexpr) -> tl.tensor:
    """Load 16-bit inputs as float32. bf16 is widened by placing its bits in the top half of a float32:
    exact for every value, subnormals included (Triton 3.9's interpreter flushes bf16 subnormals to
    zero in ``.to(tl.float32)``)."""
    if IN_BF16:
        bits = tl.load(ptr.to(tl.pointer_type(tl.int16)) + offs, mask=mask, other=0)
        return ((bits.to(tl.int32) & 0xFFFF) << 16).to(tl.float32, bitcast=True)
    return tl.load(ptr + offs, mask=mask, other=0.0).to(tl.float32)


@triton.jit
def _mla_cache_write(
    kv_c: tl.tensor, k_pe: tl.tensor, cache: tl.tensor, slots: tl.tensor, scale_ptr: tl.tensor,
    num_tokens: tl.tensor, kv_c_row: tl.tensor, k_pe_row: tl.tensor, block_size: tl.tensor,
    block_shift: tl.tensor, block_bytes: tl.tensor, divisor: tl.tensor, floor: tl.tensor,
    R: tl.constexpr, P: tl.constexpr, R_PAD: tl.constexpr, P_PAD: tl.constexpr, BLOCK_T: tl.constexpr,
    NOPE_MODE: tl.constexpr, ROPE_MODE: tl.constexpr, NOPE_OFF: tl.constexpr, ROPE_OFF: tl.constexpr,
    DATA_BYTES: tl.constexpr, TRAIL_BYTES: tl.constexpr,
    TILE: tl.constexpr, N_TILES: tl.constexpr, NT_PAD: tl.constexpr, POW2: tl.constexpr,
    SCALE_UE8M0: tl.constexpr, SCALE_TRAILING: tl.constexpr, SCALE_OFF: tl.constexpr, SPLIT: tl.constexpr,
    HW: tl.constexpr, MAN_BITS: tl.constexpr, EMIN: tl.constexpr, MAX_CODE: tl.constexpr,
    NAN_CODE: tl.constexpr, NEG_ZERO: tl.constexpr, HAS_INF: tl.constexpr, INF_CODE: tl.constexpr,
    SATFINITE: tl.constexpr, MAX_VALUE: tl.constexpr, IN_BF16: tl.constexpr, CLAMP: tl.constexpr,
) -> None:
    """Write tokens ``[pid * BLOCK_T, (pid + 1) * BLOCK_T)`` to their slots; see the module doc.

    ``cache`` is the cache's bytes; ``block_bytes`` its block stride in bytes. Modes: 0 = 16-bit
    copy, 1 = fp8 with the per-tensor scale, 2 = fp8 with per-tile scales (nope only).
    """
    t = (tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)).to(tl.int64)
    in_range = t < num_tokens
    # Every load comes first and none is predicated on a slot: a program then waits for memory once,
    # not once for the slots, again for kv_c and again for k_pe (the stores below are; see
    # docs/performance.md for what this ordering is worth).
    slot = tl.load(slots + t, mask=in_range, other=-1)
    cols = tl.arange(0, R_PAD)
    nload = in_range[:, None] & (cols < R)[None, :]
    nsrc = t[:, None] * kv_c_row + cols[None, :]
    if NOPE_MODE == 0:
        nbits = tl.load(kv_c.to(tl.pointer_type(tl.int16)) + nsrc, mask=nload)
    else:
        x = _load_f32(kv_c, nsrc, nload, IN_BF16)
    pcols = tl.arange(0, P_PAD)
    pload = in_range[:, None] & (pcols < P)[None, :]
    psrc = t[:, None] * k_pe_row + pcols[None, :]
    if ROPE_MODE == 0:
        pbits = tl.load(k_pe.to(tl.pointer_type(tl.int16)) + psrc, mask=pload)
    else:
        y = _load_f32(k_pe, psrc, pload, IN_BF16)
    if NOPE_MODE == 1 or ROPE_MODE == 1:
        tensor_scale = tl.load(scale_ptr)

    valid = slot >= 0
    slot = tl.where(valid, slot, 0)
    # Block sizes are usually powers of two; a shift then replaces the 64-bit division (a long
    # software routine on GPUs).
    if block_shift >= 0:  # noqa: SIM108 - a statement-level runtime branch, which Triton compiles to scf.if
        block = slot >> block_shift
    else:
        block = slot // block_size
    offset = slot - block * block_size
    row = block * block_bytes + offset * DATA_BYTES
    nmask = valid[:, None] & (cols < R)[None, :]
    pmask = valid[:, None] & (pcols < P)[None, :]

    # ---- nope (kv_c) ----
    if NOPE_MODE == 0:
        _store16(cache, row + NOPE_OFF, cols, nbits, nmask, SPLIT)
    else:
        if NOPE_MODE == 1:
            q = tl.math.div_rn(x, tensor_scale)
        else:
            # Padded columns hold 0.0, which never raises a tile's amax (the reference pads with zeros).
            x3 = tl.reshape(x, (BLOCK_T, NT_PAD, TILE))
            # |x| as float32 bits orders like |x|, and every NaN's bits exceed inf's: one integer max
            # gives the amax and whether the tile holds a NaN (then its amax is NaN, as torch's amax).
            amax_bits = tl.max(x3.to(tl.int32, bitcast=True) & 0x7FFFFFFF, axis=2)
            amax = tl.where(amax_bits > 0x7F800000, _F32_NAN_BITS, amax_bits).to(tl.float32, bitcast=True)
            raw = tl.math.div_rn(amax, divisor)
            s = tl.where(raw < floor, floor, raw)  # max(raw, floor) that keeps a NaN raw
            byte = _ue8m0_ceil(s)
            if POW2:
                sbits = tl.where(byte == 0, _F32_2POW_M127_BITS,
                                 tl.where(byte == 0xFF, _F32_NAN_BITS, byte << 23))
                s = sbits.to(tl.float32, bitcast=True)
                # x / 2**e == x * 2**-e exactly (both are the correctly rounded x * 2**-e), and 2**-e is
                # built from the exponent: 2**(127 - byte), 2**-127 a subnormal for byte 254, NaN for 0xFF.
                rbits = tl.where(byte == 254, _F32_2POW_M127_BITS,
                                 tl.where(byte == 0xFF, _F32_NAN_BITS, (254 - byte) << 23))
                q3 = x3 * rbits.to(tl.float32, bitcast=True)[:, :, None]
            else:
                q3 = tl.math.div_rn(x3, s[:, :, None])
            q = tl.reshape(q3, (BLOCK_T, R_PAD))
            tiles = tl.arange(0, NT_PAD)
            smask = valid[:, None] & (tiles < N_TILES)[None, :]
            if SCALE_TRAILING:
                sbase = block * block_bytes + block_size * DATA_BYTES + offset * TRAIL_BYTES + SCALE_OFF
            else:
                sbase = row + SCALE_OFF
            if SCALE_UE8M0:
                tl.store(cache + sbase[:, None] + tiles[None, :], byte.to(tl.uint8), mask=smask)
            else:
                _store32(cache, sbase, tiles, s, smask, SPLIT)
        code = _fp8(q, HW, MAN_BITS, EMIN, MAX_CODE, NAN_CODE, NEG_ZERO, HAS_INF, INF_CODE, SATFINITE, MAX_VALUE, CLAMP)
        tl.store(cache + row[:, None] + NOPE_OFF + cols[None, :], code, mask=nmask)

    # ---- rope (k_pe) ----
    if ROPE_MODE == 0:
        _store16(cache, row + ROPE_OFF, pcols, pbits, pmask, SPLIT)
    else:
        pq = tl.math.div_rn(y, tensor_scale)
        pcode = _fp8(pq, HW, MAN_BITS, EMIN, MAX_CODE, NAN_CODE, NEG_ZERO, HAS_INF, INF_CODE, SATFINITE,
                     MAX_VALUE, CLAMP)
        tl.store(cache + row[:, None] + ROPE_OFF + pcols[None, :], pcode, mask=pmask)


def interpreted() -> bool:
    """True when Triton runs kernels in its CPU interpreter (``TRITON_INTERPRET=1`` at import time)."""
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(_mla_cache_write, InterpretedFunction)


def hip_hardware_format(arch: str) -> Fp8Format | None:
    """The fp8 format this Triton converts to with a hardware instruction on AMD ``arch``, if any.

    gfx942: fnuz (``tl.float8e4b8`` -> ``v_cvt_pk_fp8_f32``, triton 3.6, 3.8 and 3.9). gfx950: OCP
    from triton 3.8 (``v_cvt_scalef32_pk_fp8_f32``, seen with 3.8 and 3.9); triton 3.6 lowers it to
    integer code without the instruction, so the kernel's own software path is used there. gfx12:
    no instruction in 3.9.
    Measured with ahead-of-time builds (tests/kernels/test_triton_aot.py checks the claim).
    """
    base = arch.split(":", 1)[0]
    if base == "gfx942":
        return E4M3FNUZ
    if base == "gfx950" and _triton_version() >= (3, 8):
        return E4M3FN
    return None


def _triton_version() -> tuple[int, int]:
    major, minor = triton.__version__.split(".")[:2]
    return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)


def _hardware_selector(contract: WriteContract) -> int:
    """Which hardware fp8 type the active GPU converts the contract's format with (``_SW``: none)."""
    if interpreted() or contract.conversion_mode is not ConversionMode.SATFINITE:
        return _SW
    target = triton.runtime.driver.active.get_current_target()
    if target.backend == "cuda":
        native = E4M3FN if isinstance(target.arch, int) and target.arch >= 89 else None
    elif target.backend == "hip":
        native = hip_hardware_format(str(target.arch))
    else:
        return _SW
    if contract.element_format != native:
        return _SW
    return _HW_E4M3FNUZ if native == E4M3FNUZ else _HW_E4M3FN


def _conversion_saturates() -> bool:
    """Whether this backend's fp8 conversion saturates by itself: NVIDIA's ``cvt.rn.satfinite``."""
    if interpreted():
        return False
    return bool(triton.runtime.driver.active.get_current_target().backend == "cuda")


def _pow2_at_least(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def _constexprs(plan: WritePlan, hw: int, split: bool, block_t: int, in_bf16: bool = True,
                clamp: bool = True) -> dict[str, Any]:
    """The kernel's constexpr arguments for a plan (also what ``_compile_ahead`` compiles).

    ``clamp``: clamp before the hardware conversion (not needed where it saturates by itself: NVIDIA).
    """
    r, p, f = plan.kv_lora_rank, plan.rope_dim, plan.traits
    if ValueMode.COPY16 == plan.nope_mode == plan.rope_mode:
        # No fp8 field: one specialisation serves every contract (fewer compiles).
        hw, f = _SW, FormatTraits.of(E4M3FN, ConversionMode.SATFINITE)
    tile = plan.tile if plan.nope_mode is ValueMode.TILED else 1
    r_pad = max(_pow2_at_least(r), tile)
    return {
        "R": r, "P": p, "R_PAD": r_pad, "P_PAD": _pow2_at_least(p), "BLOCK_T": block_t,
        "NOPE_MODE": int(plan.nope_mode), "ROPE_MODE": int(plan.rope_mode),
        "NOPE_OFF": plan.nope_offset, "ROPE_OFF": plan.rope_offset,
        "DATA_BYTES": plan.data_bytes, "TRAIL_BYTES": plan.trailing_bytes,
        "TILE": tile, "N_TILES": plan.n_tiles, "NT_PAD": r_pad // tile, "POW2": plan.pow2_scale,
        "SCALE_UE8M0": plan.scale_ue8m0, "SCALE_TRAILING": plan.scale_trailing, "SCALE_OFF": plan.scale_offset,
        "SPLIT": split, "HW": hw, "IN_BF16": in_bf16, "CLAMP": clamp,
        **_format_constexprs(f),
    }


def _format_constexprs(f: FormatTraits) -> dict[str, Any]:
    return {
        "MAN_BITS": f.man_bits, "EMIN": f.emin, "MAX_CODE": f.max_code, "NAN_CODE": f.nan_code,
        "NEG_ZERO": f.negative_zero, "HAS_INF": f.has_inf, "INF_CODE": f.inf_code,
        "SATFINITE": f.satfinite, "MAX_VALUE": f.max_value,
    }


#: tokens per program and warps: on an H200 at 2M tokens 4 x 2 was within 1 point of the best of the
#: configurations tried for every layout and 2.5-3 points ahead of 8 x 4 (the earlier choice) for
#: fp8_model1_mla, over two runs (``python -m tests.kernels.bandwidth --sweep``; docs/performance.md)
BLOCK_T = 4
NUM_WARPS = 2


class TritonMlaKernel(PlannedKernel):
    """``concat_and_cache_mla`` for every layout in one Triton kernel family (module doc).

    Unbound, it follows the platform table of the tensors' device (``default_contract``); ``bind``
    returns a copy following another contract. ``conversion`` ``"software"`` forces the integer
    conversion path even where the hardware one exists (to test it on a GPU). ``tokens_per_program``
    (a power of two) and ``num_warps`` are launch tuning; they never change the bytes written.
    """

    name = "triton"
    kv_cache_dtypes: Collection[str] = MLA_LAYOUT_NAMES

    def __init__(self, contract: WriteContract | None = None,
                 conversion: ConversionChoice = "auto", *,
                 tokens_per_program: int = BLOCK_T, num_warps: int = NUM_WARPS) -> None:
        if tokens_per_program < 1 or tokens_per_program & (tokens_per_program - 1):
            raise ValueError(f"tokens_per_program={tokens_per_program}: must be a power of two (tl.arange)")
        self.contract = contract
        self.conversion = conversion
        self.tokens_per_program = tokens_per_program
        self.num_warps = num_warps
        # The interpreter runs on CPU tensors only; compiled Triton on CUDA/ROCm ("cuda" in torch).
        self.devices: Collection[str] = ("cpu",) if interpreted() else ("cuda",)

    def bind(self, contract: WriteContract, *,
             conversion: ConversionChoice | None = None) -> TritonMlaKernel:
        """This kernel configured for ``contract`` (and optionally a forced conversion path)."""
        return TritonMlaKernel(contract, conversion or self.conversion,
                               tokens_per_program=self.tokens_per_program, num_warps=self.num_warps)

    def conversion_path_for(self, contract: WriteContract) -> ConversionPath:
        """``hardware`` or ``software``: how fp8 values are converted under ``contract`` here."""
        if self.conversion == "software" or _hardware_selector(contract) == _SW:
            return "software"
        return "hardware"

    @property
    def conversion_path(self) -> ConversionPath:
        """The conversion path of this kernel's contract (of its device's platform when unbound)."""
        device = torch.device("cpu" if interpreted() else "cuda")
        return self.conversion_path_for(self.contract or default_contract(device))

    def _launch(self, plan: WritePlan, contract: WriteContract, kv_c: torch.Tensor, k_pe: torch.Tensor,
                kv_cache: torch.Tensor, slot_mapping: torch.Tensor, scale: torch.Tensor) -> None:
        tokens = slot_mapping.shape[0]
        if tokens == 0:
            return
        # The same choice as conversion_path_for, asking Triton for its target once.
        hw = _SW if self.conversion == "software" else _hardware_selector(contract)
        block_t = self.tokens_per_program
        constexprs = _constexprs(plan, hw, not plan.wide_fields_aligned(kv_cache), block_t,
                                 in_bf16=kv_c.dtype == torch.bfloat16, clamp=not _conversion_saturates())
        block_size = kv_cache.shape[1]
        cache_bytes = kv_cache if kv_cache.dtype == torch.uint8 else kv_cache.view(torch.uint8)
        on_gpu = torch.cuda.device(kv_cache.device) if kv_cache.is_cuda else contextlib.nullcontext()
        with on_gpu:
            _mla_cache_write[(triton.cdiv(tokens, block_t),)](
                kv_c, k_pe, cache_bytes, slot_mapping, scale,
                tokens, kv_c.stride(0), k_pe.stride(0), block_size, block_shift_of(block_size),
                kv_cache.stride(0) * kv_cache.element_size(), plan.divisor, plan.floor,
                num_warps=self.num_warps, enable_fp_fusion=False, **constexprs,
            )
        self.launch_count += 1


@functools.cache
def _backend_ready(name: str) -> bool:
    from triton.backends import backends

    return name in backends


def amdgcn_for(plan: WritePlan, arch: str, hardware: bool = True) -> str:
    """AMDGCN assembly of the kernel for ``plan`` compiled ahead of time for ``arch`` (e.g. ``gfx942``).

    Needs no AMD GPU: ``triton.compile`` with a HIP ``GPUTarget``. With ``hardware`` the fp8 values
    use the Triton type of the plan's format (fnuz -> ``tl.float8e4b8``, OCP -> ``tl.float8e4nv``),
    else the software conversion. Raises RuntimeError when this Triton has no AMD backend.
    """
    if not _backend_ready("amd"):
        raise RuntimeError("this Triton build has no AMD backend; amdgcn_for needs triton's 'amd' backend")
    fmt_is_fnuz = not plan.traits.negative_zero
    hw = (_HW_E4M3FNUZ if fmt_is_fnuz else _HW_E4M3FN) if hardware else _SW
    return _compile_ahead(plan, ("hip", arch, 64), hw, clamp=True, asm="amdgcn")


def ptx_for(plan: WritePlan, sm: int) -> str:
    """PTX of the kernel for ``plan`` on NVIDIA ``sm`` (e.g. 90) as it runs there: hardware e4m3
    conversion, no clamp (the conversion is expected to saturate by itself). Needs no GPU.
    Raises RuntimeError when this Triton has no NVIDIA backend."""
    if not _backend_ready("nvidia"):
        raise RuntimeError("this Triton build has no NVIDIA backend; ptx_for needs triton's 'nvidia' backend")
    return _compile_ahead(plan, ("cuda", sm, 32), _HW_E4M3FN, clamp=False, asm="ptx")


def _compile_ahead(plan: WritePlan, target: tuple[str, int | str, int], hw: int, clamp: bool, asm: str) -> str:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    constexprs = _constexprs(plan, hw, split=False, block_t=BLOCK_T, clamp=clamp)
    pointer_types = {"kv_c": "*bf16", "k_pe": "*bf16", "cache": "*u8", "slots": "*i64", "scale_ptr": "*fp32"}
    scalar_types = {"num_tokens": "i32", "kv_c_row": "i32", "k_pe_row": "i32", "block_size": "i32",
                    "block_shift": "i32", "block_bytes": "i64", "divisor": "fp32", "floor": "fp32"}
    signature = {**pointer_types, **scalar_types, **dict.fromkeys(constexprs, "constexpr")}
    source = ASTSource(_mla_cache_write, signature, constexprs)
    options = {"num_warps": NUM_WARPS, "enable_fp_fusion": False}
    compiled = triton.compile(source, target=GPUTarget(*target), options=options)
    return str(compiled.asm[asm])
