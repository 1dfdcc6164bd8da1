"""Bit-exact FP4 numerics: the E2M1 codec and nibble packing, block scale traits and their conventions, and
quantization under a named set of conventions (docs/fp8.md, "FP4 (E2M1) and its scales").

The public names are imported on first use (PEP 562 ``__getattr__``), as in ``rtp_ref.fp8``: importing the package
does not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rtp_ref._lazy import lazy_exports

if TYPE_CHECKING:
    from rtp_ref.fp4.e2m1 import (
        E2M1_MAX,
        NO_CODE,
        UNDEFINED,
        NegativeZero,
        NonFinitePolicy,
        decode,
        encode,
        exact_value,
        pack,
        unpack,
    )
    from rtp_ref.fp4.quantize import (
        FP4_CONVENTIONS,
        MXFP4_FLOAT_LOG2,
        MXFP4_OCP,
        V41_FP4,
        V41_FP4_TORCH,
        Fp4Conventions,
        Fp4Quantized,
        PayloadDivision,
        dequantize_row,
        fp4_conventions,
        payload_quotient,
        quantize_row,
    )
    from rtp_ref.fp4.scales import (
        AmaxDivision,
        ScaleElement,
        ScaleRounding,
        ScaleTraits,
        amax_quotient,
        decode_scales,
        quotient_scale_codes,
        scale_codes,
    )

#: Submodule -> the public names it defines (what the ``TYPE_CHECKING`` imports above state for mypy).
_EXPORTS: dict[str, tuple[str, ...]] = {
    "e2m1": (
        "E2M1_MAX",
        "NO_CODE",
        "UNDEFINED",
        "NegativeZero",
        "NonFinitePolicy",
        "decode",
        "encode",
        "exact_value",
        "pack",
        "unpack",
    ),
    "quantize": (
        "FP4_CONVENTIONS",
        "MXFP4_FLOAT_LOG2",
        "MXFP4_OCP",
        "V41_FP4",
        "V41_FP4_TORCH",
        "Fp4Conventions",
        "Fp4Quantized",
        "PayloadDivision",
        "dequantize_row",
        "fp4_conventions",
        "payload_quotient",
        "quantize_row",
    ),
    "scales": (
        "AmaxDivision",
        "ScaleElement",
        "ScaleRounding",
        "ScaleTraits",
        "amax_quotient",
        "decode_scales",
        "quotient_scale_codes",
        "scale_codes",
    ),
}

__all__ = [
    "E2M1_MAX",
    "FP4_CONVENTIONS",
    "MXFP4_FLOAT_LOG2",
    "MXFP4_OCP",
    "NO_CODE",
    "UNDEFINED",
    "V41_FP4",
    "V41_FP4_TORCH",
    "AmaxDivision",
    "Fp4Conventions",
    "Fp4Quantized",
    "NegativeZero",
    "NonFinitePolicy",
    "PayloadDivision",
    "ScaleElement",
    "ScaleRounding",
    "ScaleTraits",
    "amax_quotient",
    "decode",
    "decode_scales",
    "dequantize_row",
    "encode",
    "exact_value",
    "fp4_conventions",
    "pack",
    "payload_quotient",
    "quantize_row",
    "quotient_scale_codes",
    "scale_codes",
    "unpack",
]


__getattr__ = lazy_exports(__name__, globals(), _EXPORTS)
