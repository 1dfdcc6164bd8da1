"""Bit-exact fp8 numerics: formats as data, an integer-arithmetic codec, ue8m0 scales, tile scaling.

The public names are imported on first use (PEP 562 ``__getattr__``): ``rtp_ref.fp8.formats`` and
``rtp_ref.fp8.rules`` are torch-free, and importing them (a platform table's loader does) must not pay
for the torch-based codec that an eager import of every submodule here would pull in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rtp_ref._lazy import lazy_exports

if TYPE_CHECKING:
    from rtp_ref.fp8.codec import decode, decode_table, encode
    from rtp_ref.fp8.formats import (
        E4M3FN,
        E4M3FNUZ,
        E5M2,
        E5M2FNUZ,
        FP8_FORMATS,
        ConversionMode,
        Fp8Format,
        conversion_mode,
        fp8_format,
    )
    from rtp_ref.fp8.rules import Pow2Rule, ScaleRule
    from rtp_ref.fp8.scales import FLT_MIN, dequantize_tiles, quantize_tiles, scale_from_amax, tile_amax
    from rtp_ref.fp8.ue8m0 import decode_ue8m0, encode_ue8m0

#: Submodule -> the public names it defines (what the ``TYPE_CHECKING`` imports above state for mypy).
_EXPORTS: dict[str, tuple[str, ...]] = {
    "codec": ("decode", "decode_table", "encode"),
    "formats": (
        "E4M3FN",
        "E4M3FNUZ",
        "E5M2",
        "E5M2FNUZ",
        "FP8_FORMATS",
        "ConversionMode",
        "Fp8Format",
        "conversion_mode",
        "fp8_format",
    ),
    "rules": ("Pow2Rule", "ScaleRule"),
    "scales": ("FLT_MIN", "dequantize_tiles", "quantize_tiles", "scale_from_amax", "tile_amax"),
    "ue8m0": ("decode_ue8m0", "encode_ue8m0"),
}

__all__ = [
    "E4M3FN",
    "E4M3FNUZ",
    "E5M2",
    "E5M2FNUZ",
    "FLT_MIN",
    "FP8_FORMATS",
    "ConversionMode",
    "Fp8Format",
    "Pow2Rule",
    "ScaleRule",
    "conversion_mode",
    "decode",
    "decode_table",
    "decode_ue8m0",
    "dequantize_tiles",
    "encode",
    "encode_ue8m0",
    "fp8_format",
    "quantize_tiles",
    "scale_from_amax",
    "tile_amax",
]


__getattr__ = lazy_exports(__name__, globals(), _EXPORTS)
