"""E2M1 as the element format of a cache field: its ``rtp_ref.fp8.elements.ElementTraits`` record.

Two codes a byte, the even index in the low nibble (``rtp_ref.fp4.e2m1.pack``); no NaN and no infinity, so a stored
byte never reads as NaN. Torch-free to import (the layout tables size their fields with it); the decoder imports the
codec when it first runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rtp_ref.fp8.elements import ElementTraits

if TYPE_CHECKING:
    import torch


def _decode(raw: torch.Tensor) -> torch.Tensor:
    """Bytes ``[n, 1]`` -> their two values each, ``[n, 2]`` (float64), the low nibble first."""
    from rtp_ref.fp4.e2m1 import decode, unpack

    return decode(unpack(raw)).double()


#: the E2M1 element of a cache field
E2M1_ELEMENT = ElementTraits("e2m1", 1, _decode, None, per_unit=2)
