"""Element formats of a cache field as traits, one record each: how many bytes a value takes and how its bytes
read as a number. fp8 value formats, the 16-bit and 32-bit floats and the ue8m0 scale all go through the same
record, so code that names or decodes an element (a failed check's examples, a layout table) is written once over
every format: a new element format is one entry of ``ELEMENT_TRAITS``.

Bytes are little-endian, as every GPU rtp-ref targets stores them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from rtp_ref.errors import RtpRefError
from rtp_ref.fp8.codec import decode
from rtp_ref.fp8.formats import FP8_FORMATS
from rtp_ref.fp8.ue8m0 import decode_ue8m0


@dataclass(frozen=True)
class ElementTraits:
    """One element format: its name, its size in bytes, and ``decode``: raw bytes ``[n, size]`` (uint8) -> the
    ``n`` values they hold (float64; NaN where the bytes are a NaN); None for bytes that hold no value (padding)."""

    name: str
    size: int
    decode: Callable[[torch.Tensor], torch.Tensor] | None

    def values(self, raw: torch.Tensor) -> torch.Tensor:
        """The values of ``raw``, bytes ``[..., k * size]`` of ``k`` consecutive elements: float64 ``[..., k]``
        (NaN for an element that holds no value)."""
        rows = raw.reshape(-1, self.size).contiguous()
        decoded = self.decode(rows) if self.decode is not None else torch.full((rows.shape[0],), float("nan"))
        return decoded.double().reshape(*raw.shape[:-1], raw.shape[-1] // self.size)


def _fp8(name: str) -> ElementTraits:
    return ElementTraits(name, 1, lambda raw: decode(raw[:, 0], name).double())


def _float(name: str, dtype: torch.dtype) -> ElementTraits:
    return ElementTraits(name, torch.finfo(dtype).bits // 8, lambda raw: raw.view(dtype)[:, 0].double())


#: every element format a cache field may hold, by name
ELEMENT_TRAITS: dict[str, ElementTraits] = {
    **{name: _fp8(name) for name in FP8_FORMATS},
    "bf16": _float("bf16", torch.bfloat16),
    "fp16": _float("fp16", torch.float16),
    "fp32": _float("fp32", torch.float32),
    # a power of two 2^(e - 127); 0xFF is NaN (OCP MX spec v1.0, E8M0)
    "ue8m0": ElementTraits("ue8m0", 1, lambda raw: decode_ue8m0(raw[:, 0]).double()),
    # a layout's padding: neither written nor read
    "pad": ElementTraits("pad", 1, None),
}

#: the element name of each torch float dtype a cache may hold verbatim
DTYPE_ELEMENTS = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}


def element_traits(name: str) -> ElementTraits:
    """The traits of element format ``name``; an unknown name raises RtpRefError listing the valid ones."""
    try:
        return ELEMENT_TRAITS[name]
    except KeyError:
        raise RtpRefError(f"unknown element format {name!r}; valid: {', '.join(ELEMENT_TRAITS)}") from None


def dtype_element(dtype: torch.dtype) -> ElementTraits:
    """The traits of a float dtype's values stored verbatim (bf16, fp16, fp32)."""
    try:
        return ELEMENT_TRAITS[DTYPE_ELEMENTS[dtype]]
    except KeyError:
        raise RtpRefError(f"no element format for {dtype}; valid: {', '.join(map(str, DTYPE_ELEMENTS))}") from None
