"""The tests' own statement of every layout, independent of rtp_ref.kv and rtp_ref.fp8.

Byte maps are written by hand from the sources (docs/sources.md#mla-layouts-and-their-byte-maps: vLLM
``concat_and_cache_mla`` / ``concat_and_cache_ds_mla_kernel``, FlashMLA ``tests/quant.py``, rtp-llm
``concat_and_cache_ds_model1_kernel``; AITER's page-segmented ds3.2 cache from ``op_tests/test_mla_persistent.py``
``split_3buffer_kv_cache``, docs/sources.md#what-aiters-mla-decode-reads; sglang's DeepSeek V4.1 ``KVLayout`` V41
and V41_FP4, PR #39123; FlashMLA's NVFP4 record with fp8 rope, vllm-project/FlashMLA PR #18 ``config.h`` and
``tests/quant.py``); expected bytes are computed with numpy float32 arithmetic, ``math`` and ml_dtypes' fp8 and
fp4 casts. Nothing here imports the code under test.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np
import numpy.typing as npt
import torch

FLT_MIN = float(np.finfo(np.float32).tiny)
ML_FP8 = {"e4m3fn": ml_dtypes.float8_e4m3fn, "e4m3fnuz": ml_dtypes.float8_e4m3fnuz}
FP8_MAX = {"e4m3fn": 448.0, "e4m3fnuz": 240.0}
LAYOUTS = ("auto", "fp8", "fp8_ds_mla", "fp8_model1_mla", "fp8_rocm_compact", "nvfp4_fp8_ds_mla",
           "nvfp4_ds_mla_bf16rope", "nvfp4_ds_mla_fp8rope", "V41", "V41_FP4")
#: FlashMLA's NVFP4 record: 256 E2M1 bytes, 64 e4m3 rope bytes, 32 e4m3 scales stored at 8 * (s & 3) + (s >> 2)
NVFP4 = "nvfp4_fp8_ds_mla"
#: local-inference-lab/vllm's 'nvfp4_ds_mla' (PR #82): 256 E2M1 bytes, 32 e4m3 scales, 16 zeros, 128 bf16 rope bytes
FORK432 = "nvfp4_ds_mla_bf16rope"
#: local-inference-lab/b12x's 'nvfp4_ds_mla' under KV_FP8_ROPE=1 (PR #35): the 432-byte record's nope and scales, an
#: fp32 rope scale, 12 zero bytes, 64 e4m3 rope bytes
B12X368 = "nvfp4_ds_mla_fp8rope"
#: b12x's rope divisor as a float32 constant: double 1/448 rounded to float32 once (its _E4M3_MAX_RCP)
RCP_448 = np.float32(1.0 / 448.0)
#: the layouts of DeepSeek V4's dims, 448 nope and 64 rope values (every other layout's default is 512 / 64)
V4_DIMS = ("fp8_model1_mla", "V41", "V41_FP4")
#: sglang's V4.1 records: (data bytes, scale bytes, values per scale) a token, from its KVLayout
V41 = {"V41": (512, 16, 32), "V41_FP4": (256, 32, 16)}
#: the described layouts: byte maps, reference writer and reader, but no op certifies them
DESCRIBED = ("fp8_ds_mla_3buffer",)
#: a described layout whose token entry (its fields in order) is another layout's: only where the bytes go differs
SAME_ENTRY = {"fp8_ds_mla_3buffer": "fp8_ds_mla"}
PER_TENSOR = ("fp8", "fp8_rocm_compact")

Bytes = npt.NDArray[np.uint8]


@dataclass(frozen=True)
class Contract:
    """What a test knows of a platform's numerics, copied by hand from its platform file."""

    fp8: str
    ds_mla_rule: str
    ds_mla_floor: float
    divisor: float
    model1_floor: float


# The platform files' [fp8] element_format and [layout_flags], written here by hand.
CONTRACTS = {
    "cpu": Contract("e4m3fn", "pow2_ceil", 1e-4, 448.0, 1e-4),
    "cuda-sm90": Contract("e4m3fn", "pow2_ceil", 1e-4, 448.0, 1e-4),
    "rocm-gfx942": Contract("e4m3fnuz", "amax_div", FLT_MIN, 224.0, 1e-4),
}


def default_dims(layout: str) -> tuple[int, int]:
    """(R, P) a layout is stated at by its sources."""
    return (448, 64) if layout in V4_DIMS else (512, 64)


def byte_map(layout: str, r: int, p: int) -> dict[str, tuple[int, int]]:
    """Field -> (offset within the token's entry, size) from the sources; model1's trailing group
    (7 ue8m0 + 1 pad) is listed after its 576 data bytes, a V4.1 token's scale row after its data row."""
    layout = SAME_ENTRY.get(layout, layout)
    if layout in V41:
        assert (r, p) == (448, 64)
        data, _, per = V41[layout]
        nope = data * 448 // 512  # 448 of the 512 values, at one byte (V41) or half a byte (V41_FP4) each
        return {"nope": (0, nope), "rope": (nope, data - nope), "nope_scale": (data, 448 // per),
                "rope_scale": (data + 448 // per, 64 // per)}
    if layout == NVFP4:
        assert (r, p) == (512, 64)
        return {"nope": (0, 256), "rope": (256, 64), "nope_scale": (320, 32)}
    if layout == FORK432:
        assert (r, p) == (512, 64)
        return {"nope": (0, 256), "nope_scale": (256, 32), "zero": (288, 16), "rope": (304, 128)}
    if layout == B12X368:
        assert (r, p) == (512, 64)
        return {"nope": (0, 256), "nope_scale": (256, 32), "rope_scale": (288, 4), "zero": (292, 12), "rope": (304, 64)}
    if layout == "auto":
        return {"nope": (0, 2 * r), "rope": (2 * r, 2 * p)}
    if layout in PER_TENSOR:
        return {"nope": (0, r), "rope": (r, p)}
    if layout == "fp8_ds_mla":
        tiles = -(-r // 128)
        return {"nope": (0, r), "nope_scale": (r, 4 * tiles), "rope": (r + 4 * tiles, 2 * p)}
    assert (r, p) == (448, 64)
    return {"nope": (0, 448), "rope": (448, 128), "nope_scale": (576, 7), "pad": (583, 1)}


def bytes_per_token(layout: str, r: int, p: int) -> int:
    return sum(size for _, size in byte_map(layout, r, p).values())


def written_entry_bytes(layout: str, r: int, p: int) -> list[int]:
    """Entry bytes a write sets: all but model1's pad byte (FORK432's zero bytes are written, as 0)."""
    return [offset + i for name, (offset, size) in byte_map(layout, r, p).items() if name != "pad" for i in range(size)]


def block_position(layout: str, r: int, p: int, block_size: int, t: int, entry_byte: int) -> int:
    """Where entry byte ``entry_byte`` of token ``t`` sits inside its block."""
    if layout == "fp8_model1_mla":
        # token data at t * 576; the token's 8 scale bytes after all block_size tokens' data
        return t * 576 + entry_byte if entry_byte < 576 else block_size * 576 + t * 8 + (entry_byte - 576)
    if layout in V41:
        # sglang's page: page_size data rows, then page_size scale rows
        data, scales, _ = V41[layout]
        return t * data + entry_byte if entry_byte < data else block_size * data + t * scales + (entry_byte - data)
    if layout == "fp8_ds_mla_3buffer":
        # AITER's page: [B x 512 fp8 | B x 4 fp32 | B x 64 bf16], each segment one field of every token
        assert (r, p) == (512, 64)
        if entry_byte < 512:
            return t * 512 + entry_byte
        if entry_byte < 528:
            return block_size * 512 + t * 16 + (entry_byte - 512)
        return block_size * 528 + t * 128 + (entry_byte - 528)
    return t * bytes_per_token(layout, r, p) + entry_byte


def _bits16(x: torch.Tensor) -> Bytes:
    """Little-endian bytes of a bf16/fp16 row, from its float32 value (both upcasts are exact)."""
    f = x.to(torch.float32).numpy()
    halves = (f.view(np.uint32) >> 16).astype("<u2") if x.dtype == torch.bfloat16 else f.astype(np.float16).view("<u2")
    out: Bytes = halves.view(np.uint8)
    return out


def _fp8(q: npt.NDArray[np.floating[Any]], fmt: str) -> Bytes:
    """fp8 codes of float32 values: round to nearest even, saturating (inputs here are finite)."""
    clipped = np.clip(q, -FP8_MAX[fmt], FP8_MAX[fmt]).astype(np.float32)
    codes: Bytes = clipped.astype(ML_FP8[fmt]).view(np.uint8)
    return codes


def pow2_ceil(value: float) -> float:
    """Smallest power of two >= value > 0."""
    mantissa, exponent = math.frexp(value)
    return 2.0 ** (exponent - 1) if mantissa == 0.5 else 2.0**exponent


def tile_scale(tile: npt.NDArray[np.float32], rule: str, divisor: float, floor: float) -> np.float32:
    amax = np.float32(np.abs(tile).max())
    s = max(np.float32(amax / np.float32(divisor)), np.float32(floor))
    return np.float32(pow2_ceil(float(s))) if rule == "pow2_ceil" else np.float32(s)


#: 1/6 rounded to float32: the constant of V41_FP4's ``amax * (1/6)``
ONE_SIXTH = np.float32(1.0 / 6.0)


def v41_fp4_tile(tile: npt.NDArray[np.float32]) -> tuple[Bytes, np.uint8]:
    """One V41_FP4 tile of 16 values: its E2M1 codes (one a byte, 0..15) and its e4m3 scale byte, from sglang's
    statement: ``scale = e4m3(clamp(amax * (1/6), 2^-9, 448))`` to nearest even, ``code = e2m1(x / scale)``."""
    amax = np.float32(np.abs(tile).max())
    q = np.float32(min(max(np.float32(amax * ONE_SIXTH), np.float32(2.0**-9)), np.float32(448.0)))
    scale = np.array([q], np.float32).astype(ml_dtypes.float8_e4m3fn)
    codes: Bytes = (tile / scale.astype(np.float32)).astype(np.float32).astype(ml_dtypes.float4_e2m1fn).view(np.uint8)
    return codes, scale.view(np.uint8)[0]


def nvfp4_tile(tile: npt.NDArray[np.float32]) -> tuple[Bytes, np.uint8]:
    """One NVFP4 tile of 16 nope values as FlashMLA's tests/quant.py (PR #18) states it: ``target = max(amax / 6,
    2^-9)`` (448 at most), its e4m3 to nearest even, one code up where that is below the target; codes
    ``e2m1(x / sf)``."""
    amax = np.float32(np.abs(tile).max())
    target = np.float32(min(max(np.float32(amax / np.float32(6.0)), np.float32(2.0**-9)), np.float32(448.0)))
    sf = np.array([target], np.float32).astype(ml_dtypes.float8_e4m3fn)
    bits = sf.view(np.uint8)[0]
    if np.float32(sf.astype(np.float32)[0]) < target and bits < 0x7E:
        bits = np.uint8(bits + 1)
    value = np.array([bits], np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    codes: Bytes = (tile / value).astype(np.float32).astype(ml_dtypes.float4_e2m1fn).view(np.uint8)
    return codes, bits


def fork432_tile(tile: npt.NDArray[np.float32]) -> tuple[Bytes, np.uint8]:
    """One tile of 16 nope values as the fork's cvt_warp_fp16_to_fp4 states it with a global scale of 1: ``sf =
    e4m3(amax * (1/6))`` to nearest even with no floor (448 at most), each code ``e2m1(x * (1 / sf))``, the
    reciprocal rounded to float32; where ``sf`` is 0 the reciprocal is 0, so each code is a zero of its value's
    sign."""
    amax = np.float32(np.abs(tile).max())
    target = np.float32(min(np.float32(amax * ONE_SIXTH), np.float32(448.0)))
    sf = np.array([target], np.float32).astype(ml_dtypes.float8_e4m3fn)
    value = sf.astype(np.float32)[0]
    reciprocal = np.float32(0.0) if value == 0 else np.float32(np.float32(1.0) / value)
    quotient = (tile * reciprocal).astype(np.float32)
    codes: Bytes = quotient.astype(ml_dtypes.float4_e2m1fn).view(np.uint8)
    return codes, sf.view(np.uint8)[0]


def _fork432_nope(x: npt.NDArray[np.float32]) -> Bytes:
    """The fork's nope bytes of one token: 512 codes packed (even index low), then the 32 scales in tile order."""
    data, scales = [], np.zeros(32, np.uint8)
    for s in range(32):
        codes, scale = fork432_tile(x[16 * s: 16 * s + 16])
        data.append((codes[0::2] | (codes[1::2] << 4)).astype(np.uint8))
        scales[s] = scale
    return np.concatenate([*data, scales])


def _fork432_entry(x: npt.NDArray[np.float32], k_pe: torch.Tensor) -> Bytes:
    """The fork's 432-byte record of one token: the nope and its scales, 16 zero bytes, the rope's 16-bit bits."""
    return np.concatenate([_fork432_nope(x), np.zeros(16, np.uint8), _bits16(k_pe)])


def b12x_rope(rope: npt.NDArray[np.float32], fmt: str = "e4m3fn") -> tuple[Bytes, np.float32]:
    """b12x's fp8 rope of one token (kv_cache.py, the RoPE lane): ``scale = amax * float32(1/448)`` in float32, then
    each value ``fp8(v * (1 / scale))`` to nearest even, saturating, the reciprocal rounded to float32 (the
    writer's rcp.approx.ftz, stated here correctly rounded); every code 0x00 where the scale is 0. ``fmt``: the
    cache's fp8 format (b12x's e4m3fn; a table of another format stores the rope in its own, as FlashMLA's NVFP4
    record's)."""
    amax = np.float32(np.abs(rope).max())
    scale = np.float32(amax * RCP_448)
    if scale == 0:
        return np.zeros(rope.shape[0], np.uint8), scale
    reciprocal = np.float32(np.float32(1.0) / scale)
    return _fp8((rope * reciprocal).astype(np.float32), fmt), scale


def _b12x_entry(c: Contract, x: npt.NDArray[np.float32], k_pe: torch.Tensor) -> Bytes:
    """b12x's 368-byte record of one token: the fork's nope and scales, the fp32 rope scale, 12 zero bytes, the
    fp8 rope."""
    codes, scale = b12x_rope(k_pe.to(torch.float32).numpy(), c.fp8)
    return np.concatenate([_fork432_nope(x), np.array([scale], "<f4").view(np.uint8), np.zeros(12, np.uint8), codes])


def _nvfp4_entry(c: Contract, x: npt.NDArray[np.float32], rope: npt.NDArray[np.float32]) -> Bytes:
    """The NVFP4 record of one token: 512 nope codes packed (even index low), the rope as e4m3 (no scale), then the
    32 scales, scale s at byte 8 * (s & 3) + (s >> 2) of the scale area (FlashMLA ``nvfp4_sf_byte``)."""
    data, scales = [], np.zeros(32, np.uint8)
    for s in range(32):
        codes, scale = nvfp4_tile(x[16 * s: 16 * s + 16])
        data.append((codes[0::2] | (codes[1::2] << 4)).astype(np.uint8))
        scales[8 * (s & 3) + (s >> 2)] = scale
    return np.concatenate([*data, _fp8(rope, c.fp8), scales])


def _v41_entry(layout: str, c: Contract, x: npt.NDArray[np.float32]) -> Bytes:
    """The V4.1 entry of one token's 512 values ``x`` (nope then rope): the data row, then the scale row."""
    data, scales = [], []
    per = V41[layout][2]
    for start in range(0, 512, per):
        tile = x[start : start + per]
        if layout == "V41":
            s = tile_scale(tile, "pow2_ceil", c.divisor, 1e-4)
            data.append(_fp8(tile / s, c.fp8))
            scales.append(np.array([math.frexp(float(s))[1] - 1 + 127], np.uint8))
        else:
            codes, scale = v41_fp4_tile(tile)
            data.append((codes[0::2] | (codes[1::2] << 4)).astype(np.uint8))  # the even index in the low nibble
            scales.append(np.array([scale], np.uint8))
    return np.concatenate([*data, *scales])


def expected_entry(layout: str, c: Contract, kv_c: torch.Tensor, k_pe: torch.Tensor, scale: float) -> Bytes:
    """The entry bytes of one token (``kv_c`` [R], ``k_pe`` [P] bf16/fp16), in byte-map order."""
    layout = SAME_ENTRY.get(layout, layout)
    x = kv_c.to(torch.float32).numpy()
    if layout in V41:
        return _v41_entry(layout, c, np.concatenate([x, k_pe.to(torch.float32).numpy()]))
    if layout == NVFP4:
        return _nvfp4_entry(c, x, k_pe.to(torch.float32).numpy())
    if layout == FORK432:
        return _fork432_entry(x, k_pe)
    if layout == B12X368:
        return _b12x_entry(c, x, k_pe)
    if layout == "auto":
        return np.concatenate([_bits16(kv_c), _bits16(k_pe)])
    if layout in PER_TENSOR:
        s = np.float32(scale)
        return np.concatenate([_fp8(x / s, c.fp8), _fp8(k_pe.to(torch.float32).numpy() / s, c.fp8)])
    tile_size = 128 if layout == "fp8_ds_mla" else 64
    nope, scales = [], []
    for start in range(0, x.shape[0], tile_size):
        tile = x[start : start + tile_size]
        if layout == "fp8_ds_mla":
            s = tile_scale(tile, c.ds_mla_rule, c.divisor, c.ds_mla_floor)
            scales.append(np.array([s], "<f4").view(np.uint8))
        else:
            s = tile_scale(tile, "pow2_ceil", c.divisor, c.model1_floor)
            scales.append(np.array([math.frexp(float(s))[1] - 1 + 127], np.uint8))
        nope.append(_fp8(tile / s, c.fp8))
    if layout == "fp8_ds_mla":
        return np.concatenate([*nope, *scales, _bits16(k_pe)])
    return np.concatenate([*nope, _bits16(k_pe), *scales, np.zeros(1, np.uint8)])


def decode_entry(
    layout: str, c: Contract, entry: Bytes, r: int, p: int, scale: float, input_dtype: torch.dtype
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    """(kv_c, k_pe) float32 from an entry's bytes, walking the hand-written byte map."""
    layout = SAME_ENTRY.get(layout, layout)
    fields = {name: entry[o : o + n] for name, (o, n) in byte_map(layout, r, p).items()}
    half = np.float16 if input_dtype == torch.float16 else None

    def bits16(raw: Bytes) -> npt.NDArray[np.float32]:
        codes = raw.view("<u2")
        if half is not None:
            return codes.view(np.float16).astype(np.float32)
        return (codes.astype(np.uint32) << 16).view(np.float32)

    if layout == "auto":
        return bits16(fields["nope"]), bits16(fields["rope"])
    if layout in V41:
        return _v41_values(layout, c, fields, "nope"), _v41_values(layout, c, fields, "rope")
    if layout == NVFP4:
        raw = fields["nope"]
        codes = np.stack([raw & 0xF, raw >> 4], axis=-1).reshape(-1).astype(np.uint8)
        stored = fields["nope_scale"].view(ml_dtypes.float8_e4m3fn).astype(np.float32)
        scales = np.array([stored[8 * (s & 3) + (s >> 2)] for s in range(32)], np.float32)
        nope = codes.view(ml_dtypes.float4_e2m1fn).astype(np.float32) * np.repeat(scales, 16)
        return nope, fields["rope"].view(ML_FP8[c.fp8]).astype(np.float32)
    if layout in (FORK432, B12X368):
        raw = fields["nope"]
        codes = np.stack([raw & 0xF, raw >> 4], axis=-1).reshape(-1).astype(np.uint8)
        stored = fields["nope_scale"].view(ml_dtypes.float8_e4m3fn).astype(np.float32)
        nope = codes.view(ml_dtypes.float4_e2m1fn).astype(np.float32) * np.repeat(stored, 16)
        if layout == FORK432:
            return nope, bits16(fields["rope"])
        rope_scale = fields["rope_scale"].view("<f4").astype(np.float32)[0]
        return nope, fields["rope"].view(ML_FP8[c.fp8]).astype(np.float32) * rope_scale
    values = fields["nope"].view(ML_FP8[c.fp8]).astype(np.float32)
    if layout in PER_TENSOR:
        s = np.float32(scale)
        return values * s, fields["rope"].view(ML_FP8[c.fp8]).astype(np.float32) * s
    tile_size = 128 if layout == "fp8_ds_mla" else 64
    if layout == "fp8_ds_mla":
        scales = fields["nope_scale"].view("<f4").astype(np.float32)
    else:
        scales = np.array([2.0 ** (int(b) - 127) for b in fields["nope_scale"]], np.float32)
    per_value = np.repeat(scales, tile_size)[: values.shape[0]]
    return values * per_value, bits16(fields["rope"])


def _v41_values(layout: str, c: Contract, fields: dict[str, Bytes], name: str) -> npt.NDArray[np.float32]:
    """A V4.1 value field's values: codes decoded (E2M1 nibbles, the low one first) times their tile's scale."""
    raw = fields[name]
    if layout == "V41":
        values = raw.view(ML_FP8[c.fp8]).astype(np.float32)
        scales = np.array([2.0 ** (int(b) - 127) for b in fields[f"{name}_scale"]], np.float32)
    else:
        codes = np.stack([raw & 0xF, raw >> 4], axis=-1).reshape(-1).astype(np.uint8)
        values = codes.view(ml_dtypes.float4_e2m1fn).astype(np.float32)
        scales = fields[f"{name}_scale"].view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    out: npt.NDArray[np.float32] = values * np.repeat(scales, V41[layout][2])
    return out
