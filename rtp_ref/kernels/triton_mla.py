# Triton ships no type information: every @triton.jit is an untyped decorator to mypy.
# mypy: disable-error-code="untyped-decorator"
"""The ``triton`` built-in kernel: one Triton kernel for every MLA layout, on CUDA and ROCm.

One program writes ``BLOCK_T`` tokens: it reads each input row once (16-byte vector loads where the
strides allow), computes tile scales in registers and writes each entry once; no atomics. The layout
is a set of constexprs taken from the reference field table (``WritePlan``), so every layout compiles
to its own specialised kernel.

fp8 conversion (rtp_ref.kernels.triton_fp8) has two paths, chosen per call and reported as ``conversion_path``:

* ``hardware``: Triton's ``.to(tl.float8e4nv)`` (OCP e4m3: NVIDIA sm89+, AMD gfx950 from triton
  3.8) or ``.to(tl.float8e4b8)`` (fnuz: AMD gfx942), as the platform tables' ``[hardware]`` list. On AMD the value
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

import functools
from collections.abc import Collection, Sequence
from typing import Any

import torch
import triton
import triton.language as tl

from rtp_ref.contract import ConversionChoice, ConversionPath, WriteContract, default_contract
from rtp_ref.fp8.formats import E4M3FN, ConversionMode
from rtp_ref.kernels.call_signature import MAX_LAUNCHES, Launch, LaunchCache, call_signature, no_launch, on_device
from rtp_ref.kernels.format_traits import FormatTraits
from rtp_ref.kernels.input_flags import Validation
from rtp_ref.kernels.triton_fp4 import fp4_constexprs, fp4_tile_quantize, fp4_unsupported, scale_slots
from rtp_ref.kernels.triton_fp8 import (
    F32_2POW_M127_BITS,
    F32_NAN_BITS,
    HW_E4M3FN,
    HW_E4M3FNUZ,
    SW,
    conversion_saturates,
    fp8_codes,
    hardware_selector,
    interpreted,
    load_f32,
    ue8m0_ceil,
)
from rtp_ref.kernels.triton_launch import CompiledLaunch, has_backend
from rtp_ref.kernels.write_plan import (
    TRITON_LAYOUT_NAMES,
    TRITON_LIMITS,
    PlannedKernel,
    ValueMode,
    WritePlan,
    block_shift_of,
)
from rtp_ref.kv.layouts import MlaLayout
from rtp_ref.kv.padding import as_negative


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
def _mla_cache_write(
    kv_c: tl.tensor, k_pe: tl.tensor, cache: tl.tensor, slots: tl.tensor, scale_ptr: tl.tensor, flags: tl.tensor,
    num_tokens: tl.tensor, capacity: tl.tensor, kv_c_row: tl.tensor, k_pe_row: tl.tensor, block_size: tl.tensor,
    block_shift: tl.tensor, block_bytes: tl.tensor, divisor: tl.tensor, floor: tl.tensor,
    R: tl.constexpr, P: tl.constexpr, R_PAD: tl.constexpr, P_PAD: tl.constexpr, BLOCK_T: tl.constexpr,
    NOPE_MODE: tl.constexpr, ROPE_MODE: tl.constexpr, NOPE_OFF: tl.constexpr, ROPE_OFF: tl.constexpr,
    DATA_BYTES: tl.constexpr, TRAIL_BYTES: tl.constexpr,
    TILE: tl.constexpr, N_TILES: tl.constexpr, POW2: tl.constexpr,
    SCALE_UE8M0: tl.constexpr, SCALE_TRAILING: tl.constexpr, SCALE_OFF: tl.constexpr, SPLIT: tl.constexpr,
    ROPE_N_TILES: tl.constexpr, ROPE_SCALE_OFF: tl.constexpr, LOW: tl.constexpr, HIGH: tl.constexpr,
    MUL_SIXTH: tl.constexpr, BUMP: tl.constexpr, RECIPROCAL: tl.constexpr, NEG_ZERO_POSITIVE: tl.constexpr,
    POISON: tl.constexpr, ORDER_ROWS: tl.constexpr, ORDER_COLS: tl.constexpr, HW: tl.constexpr,
    MAN_BITS: tl.constexpr, EMIN: tl.constexpr, MAX_CODE: tl.constexpr,
    NAN_CODE: tl.constexpr, NEG_ZERO: tl.constexpr, HAS_INF: tl.constexpr, INF_CODE: tl.constexpr,
    SATFINITE: tl.constexpr, MAX_VALUE: tl.constexpr, IN_BF16: tl.constexpr, CLAMP: tl.constexpr,
    ZERO_OFF: tl.constexpr, ZERO_BYTES: tl.constexpr, ZERO_PAD: tl.constexpr, LAYERED: tl.constexpr,
) -> None:
    """Write tokens ``[pid * BLOCK_T, (pid + 1) * BLOCK_T)`` to their slots; see the module doc.

    ``cache`` is the cache's bytes; ``block_bytes`` its block stride in bytes. Modes: 0 = 16-bit
    copy, 1 = fp8 with the per-tensor scale, 2 = fp8 with per-tile scales, 3 = E2M1 codes with per-tile e4m3
    scales (rtp_ref.kernels.triton_fp4), 4 = fp8 of the value itself (no scale); a tile-scaled rope's scales sit
    beside the nope's, the nope's in the order ``ORDER_ROWS`` x ``ORDER_COLS`` transposed (0: tile order); the
    token's ``ZERO_BYTES`` at ``ZERO_OFF`` are set to 0 (a ``zero`` field). A slot at or past ``capacity`` writes
    nothing and sets ``flags`` (rtp_ref.kernels.input_flags). ``LAYERED``: ``kv_c``, ``k_pe``, ``cache`` and
    ``scale_ptr`` are int64 tables of each layer's addresses, and the grid's second axis the layer
    (``TritonMlaKernel.write_layers``: one launch for several layers' writes of one slot mapping).
    """
    if LAYERED:
        layer = tl.program_id(1)
        if IN_BF16:
            kv_c = tl.load(kv_c + layer).to(tl.pointer_type(tl.bfloat16))
            k_pe = tl.load(k_pe + layer).to(tl.pointer_type(tl.bfloat16))
        else:
            kv_c = tl.load(kv_c + layer).to(tl.pointer_type(tl.float16))
            k_pe = tl.load(k_pe + layer).to(tl.pointer_type(tl.float16))
        cache = tl.load(cache + layer).to(tl.pointer_type(tl.uint8))
        scale_ptr = tl.load(scale_ptr + layer).to(tl.pointer_type(tl.float32))
    t = (tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)).to(tl.int64)
    in_range = t < num_tokens
    # Every load comes first and none is predicated on a slot: a program then waits for memory once,
    # not once for the slots, again for kv_c and again for k_pe (the stores below are; see
    # docs/performance.md for what this ordering is worth).
    # an int32 mapping (the pointer's type says which) is widened: every offset below is computed in 64 bits
    slot = tl.load(slots + t, mask=in_range, other=-1).to(tl.int64)
    cols = tl.arange(0, R_PAD)
    nload = in_range[:, None] & (cols < R)[None, :]
    nsrc = t[:, None] * kv_c_row + cols[None, :]
    if NOPE_MODE == 0:
        nbits = tl.load(kv_c.to(tl.pointer_type(tl.int16)) + nsrc, mask=nload)
    else:
        # masked lanes: 1.0 where only divided (per-tensor fp8; see load_f32), 0.0 where a tile's amax reads them
        x = load_f32(kv_c, nsrc, nload, IN_BF16, NOPE_MODE == 1)
    pcols = tl.arange(0, P_PAD)
    pload = in_range[:, None] & (pcols < P)[None, :]
    psrc = t[:, None] * k_pe_row + pcols[None, :]
    if ROPE_MODE == 0:
        pbits = tl.load(k_pe.to(tl.pointer_type(tl.int16)) + psrc, mask=pload)
    else:
        y = load_f32(k_pe, psrc, pload, IN_BF16, ROPE_MODE == 1)  # 1.0 where only divided, as the nope's
    if NOPE_MODE == 1 or ROPE_MODE == 1:
        tensor_scale = tl.load(scale_ptr)

    past = slot >= capacity
    tl.store(flags + 0 * t, tl.full([BLOCK_T], 1, tl.int32), mask=past)
    valid = (slot >= 0) & ~past
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
    elif NOPE_MODE == 3:
        sbase = _scale_base(block, block_bytes, block_size, offset, row, DATA_BYTES, TRAIL_BYTES, SCALE_OFF,
                            SCALE_TRAILING)
        packed = fp4_tile_quantize(x, cache, sbase, valid, BLOCK_T, R_PAD, TILE, N_TILES, ORDER_ROWS, ORDER_COLS, LOW,
                                   HIGH, MUL_SIXTH, BUMP, RECIPROCAL, NEG_ZERO_POSITIVE, POISON)
        bcols = tl.arange(0, R_PAD // 2)
        tl.store(cache + row[:, None] + NOPE_OFF + bcols[None, :], packed.to(tl.uint8),
                 mask=valid[:, None] & (bcols < R // 2)[None, :])
    else:
        if NOPE_MODE == 1:
            q = tl.math.div_rn(x, tensor_scale)
        elif NOPE_MODE == 4:
            q = x
        else:
            sbase = _scale_base(block, block_bytes, block_size, offset, row, DATA_BYTES, TRAIL_BYTES, SCALE_OFF,
                                SCALE_TRAILING)
            q = _tile_quantize(x, cache, sbase, valid, divisor, floor, BLOCK_T, R_PAD, TILE, N_TILES, ORDER_ROWS,
                               ORDER_COLS, POW2, SCALE_UE8M0, SPLIT)
        code = fp8_codes(q, HW, MAN_BITS, EMIN, MAX_CODE, NAN_CODE, NEG_ZERO, HAS_INF, INF_CODE, SATFINITE,
                         MAX_VALUE, CLAMP)
        tl.store(cache + row[:, None] + NOPE_OFF + cols[None, :], code, mask=nmask)

    # ---- rope (k_pe) ----
    if ROPE_MODE == 0:
        _store16(cache, row + ROPE_OFF, pcols, pbits, pmask, SPLIT)
    elif ROPE_MODE == 3:
        rbase = _scale_base(block, block_bytes, block_size, offset, row, DATA_BYTES, TRAIL_BYTES, ROPE_SCALE_OFF,
                            SCALE_TRAILING)
        ppacked = fp4_tile_quantize(y, cache, rbase, valid, BLOCK_T, P_PAD, TILE, ROPE_N_TILES, 0, 0, LOW, HIGH,
                                    MUL_SIXTH, BUMP, RECIPROCAL, NEG_ZERO_POSITIVE, POISON)
        pbcols = tl.arange(0, P_PAD // 2)
        tl.store(cache + row[:, None] + ROPE_OFF + pbcols[None, :], ppacked.to(tl.uint8),
                 mask=valid[:, None] & (pbcols < P // 2)[None, :])
    else:
        if ROPE_MODE == 1:
            pq = tl.math.div_rn(y, tensor_scale)
        elif ROPE_MODE == 4:
            pq = y
        else:
            # the rope's tiles follow the nope's: the same rule, their scales in the same area (WritePlan)
            rbase = _scale_base(block, block_bytes, block_size, offset, row, DATA_BYTES, TRAIL_BYTES, ROPE_SCALE_OFF,
                                SCALE_TRAILING)
            pq = _tile_quantize(y, cache, rbase, valid, divisor, floor, BLOCK_T, P_PAD, TILE, ROPE_N_TILES, 0, 0,
                                POW2, SCALE_UE8M0, SPLIT)
        pcode = fp8_codes(pq, HW, MAN_BITS, EMIN, MAX_CODE, NAN_CODE, NEG_ZERO, HAS_INF, INF_CODE, SATFINITE,
                          MAX_VALUE, CLAMP)
        tl.store(cache + row[:, None] + ROPE_OFF + pcols[None, :], pcode, mask=pmask)

    # ---- zero padding ----
    if ZERO_BYTES > 0:
        zcols = tl.arange(0, ZERO_PAD)
        tl.store(cache + row[:, None] + ZERO_OFF + zcols[None, :], tl.zeros([BLOCK_T, ZERO_PAD], tl.uint8),
                 mask=valid[:, None] & (zcols < ZERO_BYTES)[None, :])


@triton.jit
def _scale_base(block: tl.tensor, block_bytes: tl.tensor, block_size: tl.tensor, offset: tl.tensor, row: tl.tensor,
                DATA_BYTES: tl.constexpr, TRAIL_BYTES: tl.constexpr, SCALE_OFF: tl.constexpr,
                SCALE_TRAILING: tl.constexpr) -> tl.tensor:
    """Byte address of a token's first tile scale at ``SCALE_OFF``: in its block-trailing group, or in its row."""
    if SCALE_TRAILING:
        base = block * block_bytes + block_size * DATA_BYTES + offset * TRAIL_BYTES + SCALE_OFF
    else:
        base = row + SCALE_OFF
    return base


@triton.jit
def _tile_quantize(x: tl.tensor, cache: tl.tensor, sbase: tl.tensor, valid: tl.tensor, divisor: tl.tensor,
                   floor: tl.tensor, BLOCK_T: tl.constexpr, N_PAD: tl.constexpr, TILE: tl.constexpr,
                   N_TILES: tl.constexpr, ORDER_ROWS: tl.constexpr, ORDER_COLS: tl.constexpr, POW2: tl.constexpr,
                   SCALE_UE8M0: tl.constexpr, SPLIT: tl.constexpr) -> tl.tensor:
    """The quotients ``x / s_i`` of ``x`` [BLOCK_T, N_PAD] under per-``TILE`` scales ``s_i = max(amax_i / divisor,
    floor)`` (the next power of two under ``POW2``); stores the ``N_TILES`` scales of each valid token at byte
    ``sbase`` (ue8m0 bytes or float32), in the order ``scale_slots`` gives."""
    # Padded columns hold 0.0, which never raises a tile's amax (the reference pads with zeros).
    x3 = tl.reshape(x, (BLOCK_T, N_PAD // TILE, TILE))
    # |x| as float32 bits orders like |x|, and every NaN's bits exceed inf's: one integer max
    # gives the amax and whether the tile holds a NaN (then its amax is NaN, as torch's amax).
    amax_bits = tl.max(x3.to(tl.int32, bitcast=True) & 0x7FFFFFFF, axis=2)
    amax = tl.where(amax_bits > 0x7F800000, F32_NAN_BITS, amax_bits).to(tl.float32, bitcast=True)
    raw = tl.math.div_rn(amax, divisor)
    s = tl.where(raw < floor, floor, raw)  # max(raw, floor) that keeps a NaN raw
    byte = ue8m0_ceil(s)
    if POW2:
        sbits = tl.where(byte == 0, F32_2POW_M127_BITS,
                         tl.where(byte == 0xFF, F32_NAN_BITS, byte << 23))
        s = sbits.to(tl.float32, bitcast=True)
        # x / 2**e == x * 2**-e exactly (both are the correctly rounded x * 2**-e), and 2**-e is
        # built from the exponent: 2**(127 - byte), 2**-127 a subnormal for byte 254, NaN for 0xFF.
        rbits = tl.where(byte == 254, F32_2POW_M127_BITS,
                         tl.where(byte == 0xFF, F32_NAN_BITS, (254 - byte) << 23))
        q3 = x3 * rbits.to(tl.float32, bitcast=True)[:, :, None]
    else:
        q3 = tl.math.div_rn(x3, s[:, :, None])
    tiles = tl.arange(0, N_PAD // TILE)
    smask = valid[:, None] & (tiles < N_TILES)[None, :]
    slots = scale_slots(tiles, ORDER_ROWS, ORDER_COLS)
    if SCALE_UE8M0:
        tl.store(cache + sbase[:, None] + slots[None, :], byte.to(tl.uint8), mask=smask)
    else:
        _store32(cache, sbase, slots, s, smask, SPLIT)
    return tl.reshape(q3, (BLOCK_T, N_PAD))


def _pow2_at_least(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


@functools.lru_cache(maxsize=256)
def _constexprs(plan: WritePlan, hw: int, split: bool, block_t: int, in_bf16: bool = True,
                clamp: bool = True, layered: bool = False) -> dict[str, Any]:
    """The kernel's constexpr arguments for a plan (also what ``_compile_ahead`` compiles).

    ``clamp``: clamp before the hardware conversion (not needed where it saturates by itself: NVIDIA).
    ``layered``: the kernel takes tables of each layer's addresses (``_mla_cache_write``).
    """
    r, p, f = plan.kv_lora_rank, plan.rope_dim, plan.traits
    if ValueMode.COPY16 == plan.nope_mode == plan.rope_mode:
        # No fp8 field: one specialisation serves every contract (fewer compiles).
        hw, f = SW, FormatTraits.of(E4M3FN, ConversionMode.SATFINITE)
    tiled = (ValueMode.TILED, ValueMode.FP4)
    tile = plan.tile if plan.nope_mode in tiled else 1
    r_pad = max(_pow2_at_least(r), tile)
    p_pad = max(_pow2_at_least(p), tile if plan.rope_mode in tiled else 1)
    return {
        "R": r, "P": p, "R_PAD": r_pad, "P_PAD": p_pad, "BLOCK_T": block_t,
        "NOPE_MODE": int(plan.nope_mode), "ROPE_MODE": int(plan.rope_mode),
        "NOPE_OFF": plan.nope_offset, "ROPE_OFF": plan.rope_offset,
        "DATA_BYTES": plan.data_bytes, "TRAIL_BYTES": plan.trailing_bytes,
        "TILE": tile, "N_TILES": plan.n_tiles, "POW2": plan.pow2_scale,
        "SCALE_UE8M0": plan.scale_ue8m0, "SCALE_TRAILING": plan.scale_trailing, "SCALE_OFF": plan.scale_offset,
        "ROPE_N_TILES": plan.rope_n_tiles, "ROPE_SCALE_OFF": plan.rope_scale_offset, "SPLIT": split,
        "ORDER_ROWS": plan.scale_order[0] if plan.scale_order else 0,
        "ORDER_COLS": plan.scale_order[1] if plan.scale_order else 0,
        **fp4_constexprs(plan.fp4_tile), "HW": hw, "IN_BF16": in_bf16, "CLAMP": clamp,
        "ZERO_OFF": plan.zero_offset, "ZERO_BYTES": plan.zero_bytes, "ZERO_PAD": _pow2_at_least(plan.zero_bytes),
        **f.triton_constexprs(), "LAYERED": layered,
    }


#: tokens per program and warps: on an H200 at 2M tokens 4 x 2 was within 1 point of the best of the
#: configurations tried for every layout and 2.5-3 points ahead of 8 x 4 (the earlier choice) for
#: fp8_model1_mla, over two runs (``python -m tests.kernels.bandwidth --sweep``; docs/performance.md)
BLOCK_T = 4
NUM_WARPS = 2
#: tokens per program under Triton's interpreter, which runs each program as Python over numpy arrays:
#: fewer, wider programs cost less (measured on 2 CPU cores: the 124 cpu conformance cases of this kernel
#: took 18.5 s at 16 tokens a program, 11.1 s at 64; every case has at most 40 tokens). Launch tuning only:
#: the bytes are the same (tests/kernels).
INTERPRETER_BLOCK_T = 64


class AddressTables:
    """The device tables of several layers' addresses a grouped launch takes (``_mla_cache_write`` with
    ``LAYERED``), made once per set of addresses: the host-to-device copy that makes one cannot be captured in a
    CUDA graph, so a capture must follow an eager call with the same tensors (as an engine's warm-up does).
    Keeps at most ``MAX_LAUNCHES`` sets; past that the oldest half is dropped."""

    def __init__(self) -> None:
        self._tables: dict[tuple[int, ...], tuple[torch.Tensor, ...]] = {}

    def of(self, layers: Sequence[tuple[Any, ...]], device: torch.device) -> tuple[torch.Tensor, ...]:
        """The ``kv_c``, ``k_pe``, ``kv_cache`` and ``scale`` address tables of ``layers`` (each item one layer's
        ``concat_and_cache_mla`` arguments) on ``device``: int64, one address a layer."""
        key = tuple(layer[i].data_ptr() for i in (0, 1, 2, 5) for layer in layers)
        found = self._tables.get(key)
        if found is None:
            if len(self._tables) >= MAX_LAUNCHES:
                for old in list(self._tables)[: MAX_LAUNCHES // 2]:
                    del self._tables[old]
            table = torch.tensor(key, dtype=torch.int64).to(device)
            found = tuple(table[i * len(layers):(i + 1) * len(layers)] for i in range(4))
            self._tables[key] = found
        return found


class TritonMlaKernel(PlannedKernel):
    """``concat_and_cache_mla`` for every layout in one Triton kernel (module doc).

    Unbound, it follows the platform table of the tensors' device (``default_contract``); ``bind``
    returns a copy following another contract. ``conversion`` ``"software"`` forces the integer
    conversion path even where the hardware one exists (to test it on a GPU). ``tokens_per_program``
    (a power of two) and ``num_warps`` are launch tuning; they never change the bytes written.
    """

    name = "triton"
    kv_cache_dtypes: Collection[str] = TRITON_LAYOUT_NAMES
    plan_limits = TRITON_LIMITS

    def __init__(self, contract: WriteContract | None = None,
                 conversion: ConversionChoice = "auto", *,
                 tokens_per_program: int | None = None, num_warps: int = NUM_WARPS,
                 validation: Validation = "device") -> None:
        if tokens_per_program is None:
            tokens_per_program = INTERPRETER_BLOCK_T if interpreted() else BLOCK_T
        if tokens_per_program < 1 or tokens_per_program & (tokens_per_program - 1):
            raise ValueError(f"tokens_per_program={tokens_per_program}: must be a power of two (tl.arange)")
        self._init_call_path(validation)
        self.contract = contract
        self.conversion = conversion
        self.tokens_per_program = tokens_per_program
        self.num_warps = num_warps
        # The interpreter runs on CPU tensors only; compiled Triton on CUDA/ROCm ("cuda" in torch).
        self.devices: Collection[str] = ("cpu",) if interpreted() else ("cuda",)
        self._grouped = LaunchCache()
        self._tables = AddressTables()

    def bind(self, contract: WriteContract, *, conversion: ConversionChoice | None = None,
             validation: Validation | None = None) -> TritonMlaKernel:
        """This kernel configured for ``contract`` (and optionally a forced conversion path)."""
        return TritonMlaKernel(contract, conversion or self.conversion, tokens_per_program=self.tokens_per_program,
                               num_warps=self.num_warps, validation=validation or self.validation)

    def supports(self, layout: MlaLayout) -> str | None:
        """None, or why this kernel does not write ``layout``: a tile-scaled rope whose scales are not beside the
        nope's, or FP4 scales other than e4m3 rounded to nearest even (or bumped)."""
        plan = WritePlan.of(layout, TRITON_LIMITS)
        if plan.rope_mode in (ValueMode.TILED, ValueMode.FP4) and not plan.rope_beside_nope:
            return f"the triton writer needs a tile-scaled rope's scales beside the nope's ({layout.name})"
        return fp4_unsupported(plan.fp4_tile) if plan.fp4_tile is not None else None

    def conversion_path_for(self, contract: WriteContract) -> ConversionPath:
        """``hardware`` or ``software``: how fp8 values are converted under ``contract`` here."""
        if self.conversion == "software" or hardware_selector(contract.element_format, contract.conversion_mode) == SW:
            return "software"
        return "hardware"

    @property
    def conversion_path(self) -> ConversionPath:
        """The conversion path of this kernel's contract (of its device's platform when unbound)."""
        device = torch.device("cpu" if interpreted() else "cuda")
        return self.conversion_path_for(self.contract or default_contract(device))

    def _prepare(self, plan: WritePlan, contract: WriteContract, kv_c: torch.Tensor, k_pe: torch.Tensor,
                 kv_cache: torch.Tensor, slot_mapping: torch.Tensor, scale: torch.Tensor,
                 flags: torch.Tensor, layers: int = 0) -> Launch:
        """The launch of a checked call; with ``layers``, of that many layers' writes at once, called with the
        address tables of ``AddressTables.of`` (``kv_c``, ``k_pe``, ``kv_cache``, ``scale``), then the slots."""
        tokens = slot_mapping.shape[0]
        if tokens == 0:
            return no_launch
        # The same choice as conversion_path_for, asking Triton for its target once per device.
        hw = SW if self.conversion == "software" else _selector(contract.element_format, contract.conversion_mode,
                                                                kv_cache.device)
        block_t = self.tokens_per_program
        constexprs = _constexprs(plan, hw, not plan.wide_fields_aligned(kv_cache), block_t,
                                 in_bf16=kv_c.dtype == torch.bfloat16, clamp=not _saturates(), layered=layers > 0)
        block_size = kv_cache.shape[1]
        scalars = (tokens, kv_cache.shape[0] * block_size, kv_c.stride(0), k_pe.stride(0), block_size,
                   block_shift_of(block_size), kv_cache.stride(0) * kv_cache.element_size(), plan.divisor, plan.floor)
        as_bytes = kv_cache.dtype != torch.uint8
        index = kv_cache.device.index if kv_cache.is_cuda else None
        grid = (triton.cdiv(tokens, block_t), layers) if layers else (triton.cdiv(tokens, block_t),)
        write = CompiledLaunch(_mla_cache_write, grid, constexprs, num_warps=self.num_warps, enable_fp_fusion=False)

        def launch(kv_c: torch.Tensor, k_pe: torch.Tensor, kv_cache: torch.Tensor, slots: torch.Tensor,
                   scale: torch.Tensor) -> None:
            cache = kv_cache.view(torch.uint8) if as_bytes else kv_cache
            with on_device(index):
                write(kv_c, k_pe, cache, slots, scale, flags, *scalars)
            self.launch_count += 1

        def layered(kv_c: torch.Tensor, k_pe: torch.Tensor, caches: torch.Tensor, scales: torch.Tensor,
                    slots: torch.Tensor) -> None:
            with on_device(index):
                write(kv_c, k_pe, caches, slots, scales, flags, *scalars)
            self.launch_count += 1

        return layered if layers else launch


    def write_layers(self, layers: Sequence[tuple[Any, ...]]) -> None:
        """``concat_and_cache_mla`` of several layers of one step, each item of ``layers`` one layer's arguments as
        ``__call__`` takes them: in one launch (a second grid axis over the layers; vLLM #55356 reports 4-6x less
        kernel time at small batches from writing five layers so) where every layer's tensors have the first's
        metadata (``call_signature``) and the same slot mapping tensor, under device validation; otherwise one call
        per layer. Checked as one call is (the first layer's arguments: the others' metadata equal them; the shared
        slots on the device), and capturable in a CUDA graph after a first eager call with the same tensors (each
        set of addresses becomes a device table once, ``AddressTables``)."""
        first = layers[0]
        signature = None
        if self.validation == "device" and len(layers) > 1:
            signature = call_signature(first[4], *first[:4], first[5])
            if signature is not None and not all(
                    layer[3] is first[3] and call_signature(layer[4], *layer[:4], layer[5]) == signature
                    for layer in layers[1:]):
                signature = None
        if signature is None:
            for layer in layers:
                self(*layer)
            return
        kv_c, k_pe, kv_cache, slot_mapping, kv_cache_dtype, scale = first
        slots = as_negative(slot_mapping, self._device_contracts.padding_slot(self.contract, slot_mapping))
        key = (*signature, len(layers))
        launch = self._grouped.get(key)
        if launch is None:
            plan, contract = self._checked(kv_c, k_pe, kv_cache, slots, kv_cache_dtype, scale, host=False)
            launch = self._prepare(plan, contract, kv_c, k_pe, kv_cache, slots, scale,
                                   self.input_flags.word(kv_cache.device), layers=len(layers))
            self._grouped.put(key, launch)
        launch(*self._tables.of(layers, kv_cache.device), slots)


#: the hardware selector and the backend's saturation, asked once per format and device (they read the device's
#: properties and Triton's target, which do not change within a process)
_selector = functools.lru_cache(maxsize=64)(hardware_selector)
_saturates = functools.cache(conversion_saturates)


def amdgcn_for(plan: WritePlan, arch: str, hardware: bool = True) -> str:
    """AMDGCN assembly of the kernel for ``plan`` compiled ahead of time for ``arch`` (e.g. ``gfx942``).

    Needs no AMD GPU: ``triton.compile`` with a HIP ``GPUTarget``. With ``hardware`` the fp8 values
    use the Triton type of the plan's format (fnuz -> ``tl.float8e4b8``, OCP -> ``tl.float8e4nv``),
    else the software conversion. Raises RuntimeError when this Triton has no AMD backend.
    """
    if not has_backend("amd"):
        raise RuntimeError("this Triton build has no AMD backend; amdgcn_for needs triton's 'amd' backend")
    fmt_is_fnuz = not plan.traits.negative_zero
    hw = (HW_E4M3FNUZ if fmt_is_fnuz else HW_E4M3FN) if hardware else SW
    return _compile_ahead(plan, ("hip", arch, 64), hw, clamp=True, asm="amdgcn")


def ptx_for(plan: WritePlan, sm: int) -> str:
    """PTX of the kernel for ``plan`` on NVIDIA ``sm`` (e.g. 90) as it runs there: hardware e4m3
    conversion, no clamp (the conversion is expected to saturate by itself). Needs no GPU.
    Raises RuntimeError when this Triton has no NVIDIA backend."""
    if not has_backend("nvidia"):
        raise RuntimeError("this Triton build has no NVIDIA backend; ptx_for needs triton's 'nvidia' backend")
    return _compile_ahead(plan, ("cuda", sm, 32), HW_E4M3FN, clamp=False, asm="ptx")


def _compile_ahead(plan: WritePlan, target: tuple[str, int | str, int], hw: int, clamp: bool, asm: str) -> str:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    constexprs = _constexprs(plan, hw, split=False, block_t=BLOCK_T, clamp=clamp)
    pointer_types = {"kv_c": "*bf16", "k_pe": "*bf16", "cache": "*u8", "slots": "*i64", "scale_ptr": "*fp32",
                     "flags": "*i32"}
    scalar_types = {"num_tokens": "i32", "capacity": "i64", "kv_c_row": "i32", "k_pe_row": "i32", "block_size": "i32",
                    "block_shift": "i32", "block_bytes": "i64", "divisor": "fp32", "floor": "fp32"}
    signature = {**pointer_types, **scalar_types, **dict.fromkeys(constexprs, "constexpr")}
    source = ASTSource(_mla_cache_write, signature, constexprs)
    options = {"num_warps": NUM_WARPS, "enable_fp_fusion": False}
    compiled = triton.compile(source, target=GPUTarget(*target), options=options)
    return str(compiled.asm[asm])
