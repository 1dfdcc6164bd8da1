"""The named tile scale rules, torch-free so that a layout flag or a platform table can name one.

``rtp_ref.fp8.scales`` applies them (and re-exports ``ScaleRule``); this module holds only the names,
because ``rtp_ref.kv.flags`` (imported when a platform table is loaded) must not import torch.
"""

from __future__ import annotations

from enum import Enum


class Pow2Rule(str, Enum):
    """How a positive value becomes a power of two (rtp_ref.fp8.ue8m0 applies it)."""

    CEIL = "ceil"
    FLOOR = "floor"
    NEAREST = "nearest"


class ScaleRule(str, Enum):
    """Named rule turning a tile's amax into its scale."""

    AMAX_DIV = "amax_div"
    POW2_CEIL = "pow2_ceil"
