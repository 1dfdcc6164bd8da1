"""Element formats of a cache field as traits, one record each: how many bytes a value takes and how its bytes
read as a number. fp8 value formats, the 16-bit and 32-bit floats, the ue8m0 scale and padding all go through the
same record, so code that sizes, names or decodes an element (the layouts' field tables, the reference reader, a
failed check's examples) is written once over every format: a new element format is one entry of
``ELEMENT_TRAITS``.

Bytes are little-endian, as every GPU rtp-ref targets stores them. Torch-free to import (the platform loader's
field tables take the sizes); the decoders import the torch-based codecs when they first run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rtp_ref.errors import RtpRefError
from rtp_ref.fp8.formats import FP8_FORMATS

if TYPE_CHECKING:
    import torch


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
        import torch

        rows = raw.reshape(-1, self.size).contiguous()
        decoded = self.decode(rows) if self.decode is not None else torch.full((rows.shape[0],), float("nan"))
        return decoded.double().reshape(*raw.shape[:-1], raw.shape[-1] // self.size)


def _fp8(name: str) -> ElementTraits:
    def decode(raw: torch.Tensor) -> torch.Tensor:
        from rtp_ref.fp8.codec import decode as decode_fp8

        return decode_fp8(raw[:, 0], name).double()

    return ElementTraits(name, 1, decode)


def _float(name: str, dtype_name: str, size: int) -> ElementTraits:
    def decode(raw: torch.Tensor) -> torch.Tensor:
        import torch

        return raw.view(getattr(torch, dtype_name))[:, 0].double()

    return ElementTraits(name, size, decode)


def _ue8m0(raw: torch.Tensor) -> torch.Tensor:
    from rtp_ref.fp8.ue8m0 import decode_ue8m0

    return decode_ue8m0(raw[:, 0]).double()


#: every element format a cache field may hold, by name
ELEMENT_TRAITS: dict[str, ElementTraits] = {
    **{name: _fp8(name) for name in FP8_FORMATS},
    "bf16": _float("bf16", "bfloat16", 2),
    "fp16": _float("fp16", "float16", 2),
    "fp32": _float("fp32", "float32", 4),
    # a power of two 2^(e - 127); 0xFF is NaN (OCP MX spec v1.0, E8M0)
    "ue8m0": ElementTraits("ue8m0", 1, _ue8m0),
    # a layout's padding: neither written nor read
    "pad": ElementTraits("pad", 1, None),
}

#: the element name of each torch float dtype a cache may hold verbatim, by the dtype's name
DTYPE_ELEMENTS = {"torch.bfloat16": "bf16", "torch.float16": "fp16", "torch.float32": "fp32"}


def element_traits(name: str) -> ElementTraits:
    """The traits of element format ``name``; an unknown name raises RtpRefError listing the valid ones."""
    try:
        return ELEMENT_TRAITS[name]
    except KeyError:
        raise RtpRefError(f"unknown element format {name!r}; valid: {', '.join(ELEMENT_TRAITS)}") from None


def dtype_element(dtype: torch.dtype) -> ElementTraits:
    """The traits of a float dtype's values stored verbatim (bf16, fp16, fp32)."""
    try:
        return ELEMENT_TRAITS[DTYPE_ELEMENTS[str(dtype)]]
    except KeyError:
        raise RtpRefError(f"no element format for {dtype}; valid: {', '.join(DTYPE_ELEMENTS)}") from None
