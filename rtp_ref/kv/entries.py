"""Token entries: the bytes a layout stores for each token, encoded and decoded from the field table.

An entry is ``layout.bytes_per_token`` uint8 in entry order (per-token fields, then the token's
block-trailing fields; ``MlaLayout.entry_offset``). Where the bytes go in a cache is ``rtp_ref.kv.cache``'s
business; this module is pure (tensor in, tensor out) and works for any layout from its fields alone.

Numerics (the contract the writer kernels are graded against):

* a 16-bit field copies the input's bits verbatim (bf16 or fp16; vLLM's ds_mla kernel stores an fp16
  input's rope bits as they are, so only bf16 inputs give the bf16 rope FlashMLA reads);
* an fp8 field with the external scale stores ``encode(float32(x) / scale)``, an ``unscaled`` one ``encode(x)``;
* an fp8 field with a tile scale stores ``encode(float32(x) / s_i)`` with ``s_i`` from the tile's amax
  (``TileScale``); fp32 scales are stored as their bits, ue8m0 scales as their exponent byte; a tile rule of
  reciprocal multiplies (``TileScale.reciprocal_amax``, ``reciprocal_payload``) forms ``s_i = max(amax * r, floor)``
  with ``r = float32(1 / divisor)`` and stores ``encode(float32(x) * float32(1 / s_i))``, every value 0x00 where
  ``s_i`` is 0;
* an E2M1 field stores the codes and scale codes of ``rtp_ref.fp4.quantize_row`` under its tile scale's FP4
  conventions, two codes a byte (``rtp_ref.fp4.pack``: the even index in the low nibble); a tile holding NaN or
  +-inf stores what its tile rule's ``non_finite_tile`` says: its scale element's NaN and every code 0, or, where
  that is ``undefined``, nothing: the writer raises RtpRefError naming the layout's non-finite policy;
* ``encode`` is ``rtp_ref.fp8.encode`` with the layout's element format and conversion mode, and
  every division is one correctly rounded float32 division;
* a scale field with an ``order`` stores its scales in that order (``Field.to_stored_order``);
* pad bytes are 0 in an entry and are never written to a cache; a ``zero`` field's bytes are 0 in an entry and
  written (rtp_ref.kv.cache.scatter_entries).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from rtp_ref.errors import RtpRefError
from rtp_ref.fp4.e2m1 import pack
from rtp_ref.fp4.quantize import quantize_row
from rtp_ref.fp8 import (
    Pow2Rule,
    encode,
    encode_ue8m0,
    quantize_tiles,
    scale_from_amax,
    tile_amax,
)
from rtp_ref.kv.fields import ELEMENT_FP32, ELEMENT_INPUT16, Field, Source, TileScale, field_element
from rtp_ref.kv.layouts import MlaLayout


def _padded_tiles(x: torch.Tensor, tile: int) -> torch.Tensor:
    """``x`` [T, n] float32 zero-padded to a whole number of tiles (zeros never raise an amax)."""
    n = x.shape[-1]
    return F.pad(x, (0, math.ceil(n / tile) * tile - n))


def tile_scales(x: torch.Tensor, spec: TileScale) -> torch.Tensor:
    """float32 scale per tile of ``x`` [T, n] under ``spec``: ``[T, ceil(n / tile)]``."""
    amax = tile_amax(_padded_tiles(x.to(torch.float32), spec.tile), spec.tile)
    if spec.reciprocal_amax:
        # the reciprocal rounded to float32 once (b12x: a compile-time float constant), then one float32 multiply
        s = amax * torch.full_like(amax, 1.0 / spec.divisor)
        return torch.maximum(s, torch.full_like(s, spec.floor)) if spec.floor else s
    return scale_from_amax(amax, spec.rule, spec.divisor, spec.floor)


def _quantize_reciprocal(xf: torch.Tensor, s: torch.Tensor, tile: int, layout: MlaLayout) -> torch.Tensor:
    """fp8 codes of ``xf * float32(1 / s)`` per tile, 0x00 where ``s`` is 0 (module doc)."""
    tiles = xf.reshape(xf.shape[0], xf.shape[1] // tile, tile)
    # one correctly rounded float32 division makes the reciprocal (1 / 0 is inf: those tiles are zeroed below)
    reciprocal = torch.ones_like(s) / s
    codes = encode(tiles * reciprocal.unsqueeze(-1), layout.element_format, layout.conversion_mode)
    return torch.where((s == 0).unsqueeze(-1), torch.zeros_like(codes), codes).reshape(xf.shape)


def _scale_bytes(f: Field, scales: torch.Tensor) -> torch.Tensor:
    if f.element == ELEMENT_FP32:
        return scales.contiguous().view(torch.uint8)
    # ue8m0: the scale is already a power of two, so "ceil" is exact.
    return encode_ue8m0(scales, Pow2Rule.CEIL)


def _scale_values(f: Field, raw: torch.Tensor) -> torch.Tensor:
    """The float32 values of scale field ``f``'s bytes ``raw`` ``[T, f.size]``, by its element's traits."""
    return field_element(f.element).values(raw).float()


def _check_inputs(layout: MlaLayout, kv_c: torch.Tensor, k_pe: torch.Tensor) -> None:
    if kv_c.shape[:1] != k_pe.shape[:1]:
        raise RtpRefError(f"kv_c has {kv_c.shape[0]} rows but k_pe has {k_pe.shape[0]}; pass the same tokens")
    for name, x, n in (("kv_c", kv_c, layout.kv_lora_rank), ("k_pe", k_pe, layout.rope_dim)):
        if x.dim() != 2 or x.shape[1] != n or x.dtype not in (torch.bfloat16, torch.float16):
            raise RtpRefError(f"{name}: expected bf16/fp16 [T, {n}], got {x.dtype} {list(x.shape)}")


def encode_entries(layout: MlaLayout, kv_c: torch.Tensor, k_pe: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Entries of tokens ``kv_c`` [T, R] and ``k_pe`` [T, P] (bf16/fp16): uint8 ``[T, bytes_per_token]``.

    ``scale`` is the float32 per-tensor scale (one element), used only by layouts with an external
    scale field. Validation of kernel arguments is ``rtp_ref.kv.cache.validate_write_args``; this
    function only checks shapes (and raises RtpRefError for a tile no FP4 convention defines, module doc).
    """
    _check_inputs(layout, kv_c, k_pe)
    values = {Source.KV_C: kv_c, Source.K_PE: k_pe}
    out = torch.zeros(kv_c.shape[0], layout.bytes_per_token, dtype=torch.uint8, device=kv_c.device)
    for f in layout.entry_fields:
        if f.source not in values:
            continue
        start = layout.entry_offset(f)
        scale_field = layout.field(f.scale_field) if f.scale_field else None
        if scale_field is None or scale_field.tile_scale is None:
            out[:, start : start + f.size] = _value_bytes(layout, f, values[f.source], scale)
            continue
        codes, scale_bytes = encode_tiled(layout, f, values[f.source])
        out[:, start : start + f.size] = codes
        scale_start = layout.entry_offset(scale_field)
        out[:, scale_start : scale_start + scale_field.size] = scale_field.to_stored_order(scale_bytes)
    return out


def encode_tiled(layout: MlaLayout, f: Field, x: torch.Tensor, scale_from: torch.Tensor | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """The bytes of tile-scaled value field ``f`` for values ``x`` [T, f.count] and the bytes of its scale field:
    ``(uint8 [T, f.size], uint8 [T, scale field size])`` (module doc). ``scale_from`` (default ``x``) is what the
    tile amax is taken of (rtp_ref.cases.diagnosis tries a writer that read other numbers for its scales)."""
    scale_field = layout.field(f.scale_field or "")
    spec = scale_field.tile_scale
    assert spec is not None, f"field {f.name} has no tile scale"
    xf = _padded_tiles(x.to(torch.float32), spec.tile)
    amax_of = xf if scale_from is None else _padded_tiles(scale_from.to(torch.float32), spec.tile)
    if spec.fp4 is None:
        s = tile_scales(amax_of, spec)
        if spec.reciprocal_payload:
            codes = _quantize_reciprocal(xf, s, spec.tile, layout)[:, : f.count]
        else:
            codes = quantize_tiles(xf, s, spec.tile, layout.element_format, layout.conversion_mode)[:, : f.count]
        return codes, _scale_bytes(scale_field, s)
    quantized = quantize_row(xf, spec.fp4, amax_of)
    codes, scales, defined = quantized.codes, quantized.scales, quantized.defined
    if not bool(defined.all()):
        if spec.non_finite_tile == "undefined":
            row, tile = (int(i) for i in torch.nonzero(~defined)[0])
            raise RtpRefError(f"layout {layout.name}: token row {row} holds NaN or inf in tile {tile} of {f.name}; "
                              f"the layout defines no bytes for it "
                              f"({layout.non_finite.text if layout.non_finite else 'undefined'})")
        # nan_scale_zero_codes: the scale element's NaN, every code of the tile 0
        scales = torch.where(defined, scales, _nan_code(scale_field.element))
        codes = torch.where(defined.repeat_interleave(spec.tile, dim=1), codes, torch.zeros_like(codes))
    return pack(codes)[:, : f.size], scales


def _nan_code(element: str) -> torch.Tensor:
    """The one-byte NaN an FP4 scale element stores for a tile holding NaN or inf (e4m3fn 0x7F, ue8m0 0xFF)."""
    traits = field_element(element)
    assert traits.nan is not None and traits.nan.top is not None, f"{element} has a NaN above its top magnitude"
    return torch.tensor(traits.nan.top + 1, dtype=torch.uint8)


def _value_bytes(layout: MlaLayout, f: Field, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """A value field without tile scales: 16-bit bits copied, fp8 of ``x`` (``unscaled``), or fp8 of ``x / scale``
    (the per-tensor scale)."""
    if f.element == ELEMENT_INPUT16:
        return x.contiguous().view(torch.uint8)
    if f.unscaled:
        return encode(x.to(torch.float32), layout.element_format, layout.conversion_mode)
    return encode(x.to(torch.float32) / scale.to(torch.float32).reshape(1, 1), layout.element_format,
                  layout.conversion_mode)


def decode_entries(
    layout: MlaLayout, entries: torch.Tensor, scale: torch.Tensor, input_dtype: torch.dtype = torch.bfloat16
) -> tuple[torch.Tensor, torch.Tensor]:
    """Decode entries (uint8 ``[T, bytes_per_token]``) to float32 ``(kv_c [T, R], k_pe [T, P])``.

    16-bit fields are read as ``input_dtype`` (what the writer was given); fp8 and E2M1 fields are decoded by their
    element's traits and multiplied by their scale (per tile, or the per-tensor ``scale``), in float32.
    """
    if entries.dim() != 2 or entries.shape[1] != layout.bytes_per_token or entries.dtype != torch.uint8:
        raise RtpRefError(
            f"entries: expected uint8 [T, {layout.bytes_per_token}], got {entries.dtype} {list(entries.shape)}"
        )
    raw = {f.name: entries[:, layout.entry_offset(f) : layout.entry_offset(f) + f.size] for f in layout.entry_fields}
    out = []
    for source in (Source.KV_C, Source.K_PE):
        f = layout.value_field(source)
        if f.element == ELEMENT_INPUT16:
            out.append(raw[f.name].contiguous().view(input_dtype).to(torch.float32))
            continue
        values = field_element(f.element).values(raw[f.name]).float()
        if f.unscaled:
            out.append(values)
            continue
        scale_field = layout.field(f.scale_field or "")
        if scale_field.tile_scale is None:
            out.append(values * scale.to(torch.float32).reshape(1, 1))
            continue
        tile = scale_field.tile_scale.tile
        s = _scale_values(scale_field, scale_field.to_natural_order(raw[scale_field.name]))
        tiled = _padded_tiles(values, tile).reshape(values.shape[0], -1, tile)
        out.append((tiled * s.unsqueeze(-1)).reshape(values.shape[0], -1)[:, : f.count])
    return out[0], out[1]


def stored_tile_scales(layout: MlaLayout, entries: torch.Tensor) -> torch.Tensor:
    """The tile scales of ``kv_c``'s field as ``entries`` (uint8 ``[T, bytes_per_token]``) store them: float32
    ``[T, tiles]``; RtpRefError for a layout whose ``kv_c`` has no tile scale."""
    name = layout.value_field(Source.KV_C).scale_field
    scale_field = layout.field(name) if name else None
    if scale_field is None or scale_field.tile_scale is None:
        raise RtpRefError(f"layout {layout.name}: kv_c has no tile scales")
    start = layout.entry_offset(scale_field)
    return _scale_values(scale_field, scale_field.to_natural_order(entries[:, start: start + scale_field.size]))
