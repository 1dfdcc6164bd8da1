"""An fp8 format and conversion mode as the integers the kernels' software encoders take, in the one
spelling each kernel language wants (CUDA parameter names, Triton constexprs)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rtp_ref.fp8.formats import ConversionMode, Fp8Format

#: the traits' fields in the CUDA parameter structs (mla_cache.cu, mha_indexer.cu), in their order there
CUDA_TRAIT_FIELDS = ("man_bits", "emin", "max_code", "nan_code", "neg_zero", "has_inf", "inf_code", "satfinite")


@dataclass(frozen=True)
class FormatTraits:
    """The fp8 format and conversion mode as the integers the software encoders take.

    The software encoders use the algorithm of ``rtp_ref.fp8.codec.encode``: the target binade
    ``te = max(e, emin)``, a round-half-even shift, ``code = ((te - emin) << man_bits) + q``.
    """

    man_bits: int
    emin: int
    max_code: int
    nan_code: int
    negative_zero: bool
    has_inf: bool
    inf_code: int
    satfinite: bool
    max_value: float

    @classmethod
    def of(cls, fmt: Fp8Format, mode: ConversionMode) -> FormatTraits:
        """Traits of ``fmt`` under ``mode``."""
        return cls(
            man_bits=fmt.man_bits,
            emin=fmt.min_normal_exp,
            max_code=fmt.max_code,
            nan_code=fmt.nan_code,
            negative_zero=fmt.has_negative_zero,
            has_inf=fmt.has_inf,
            inf_code=fmt.inf_code if fmt.has_inf else 0,
            satfinite=mode is ConversionMode.SATFINITE,
            max_value=fmt.max_value,
        )

    def cuda_params(self) -> dict[str, int]:
        """The traits as the CUDA kernels' parameter fields (``CUDA_TRAIT_FIELDS``)."""
        values = (self.man_bits, self.emin, self.max_code, self.nan_code, self.negative_zero, self.has_inf,
                  self.inf_code, self.satfinite)
        return dict(zip(CUDA_TRAIT_FIELDS, (int(v) for v in values), strict=True))

    def triton_constexprs(self) -> dict[str, Any]:
        """The traits as the Triton kernels' constexpr arguments (``MAN_BITS``... ``MAX_VALUE``)."""
        return {"MAN_BITS": self.man_bits, "EMIN": self.emin, "MAX_CODE": self.max_code, "NAN_CODE": self.nan_code,
                "NEG_ZERO": self.negative_zero, "HAS_INF": self.has_inf, "INF_CODE": self.inf_code,
                "SATFINITE": self.satfinite, "MAX_VALUE": self.max_value}
