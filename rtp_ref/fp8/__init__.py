"""Bit-exact fp8 numerics: formats as data, an integer-arithmetic codec, ue8m0 scales, tile scaling."""

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
from rtp_ref.fp8.scales import (
    FLT_MIN,
    ScaleRule,
    dequantize_tiles,
    quantize_tiles,
    scale_from_amax,
    tile_amax,
)
from rtp_ref.fp8.ue8m0 import Pow2Rule, decode_ue8m0, encode_ue8m0

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
