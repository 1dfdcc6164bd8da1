"""Each MLA layout's identity and certification rules, one record per layout: the one list of layout names.

Torch-free (rtp_ref.platform reads it to validate tables). A record says what is not in the field table:
the (R, P) a layout is built at by default, the fixed dims it only supports (when it does), and the extra
(R, P) the conformance suite certifies it at. The field table itself comes from the layout's builder
(rtp_ref.kv.layouts.LAYOUT_BUILDERS, keyed by these names: a test holds the two to the same set).
"""

from __future__ import annotations

from dataclasses import dataclass

from rtp_ref.errors import RtpRefError

#: DeepSeek V3's MLA: kv_lora_rank 512, rope 64
DEFAULT_DIMS = (512, 64)
#: FlashMLA MODEL1: 448 latent values (7 tiles of 64), rope 64
MODEL1_DIMS = (448, 64)
#: a second (R, P) for layouts whose R is free: smaller, and not DeepSeek's, so no width is hard-coded
SMALL_DIMS = (256, 32)


@dataclass(frozen=True)
class LayoutRecord:
    """One MLA layout: its name, default (R, P), whether those are the only dims it supports, and the
    (R, P) the suite certifies it at besides the default."""

    name: str
    summary: str
    default_dims: tuple[int, int] = DEFAULT_DIMS
    fixed_dims: bool = False
    extra_certified_dims: tuple[tuple[int, int], ...] = ()

    @property
    def certified_dims(self) -> list[tuple[int, int]]:
        """Every (R, P) the suite certifies this layout at: the default first."""
        return [self.default_dims, *self.extra_certified_dims]


MLA_LAYOUTS: tuple[LayoutRecord, ...] = (
    LayoutRecord("auto", "the inputs' 16-bit values, copied", extra_certified_dims=(SMALL_DIMS,)),
    LayoutRecord("fp8", "fp8 latent and rope, one per-tensor scale argument", extra_certified_dims=(SMALL_DIMS,)),
    LayoutRecord("fp8_ds_mla", "fp8 latent in 128-value tiles with fp32 scales, 16-bit rope, 656 bytes"),
    LayoutRecord("fp8_model1_mla", "fp8 latent in 64-value tiles, 16-bit rope, block-trailing ue8m0 scales",
                 default_dims=MODEL1_DIMS, fixed_dims=True),
    LayoutRecord("fp8_rocm_compact", "fp8 latent and rope with no scale area (ROCm), 576 bytes",
                 extra_certified_dims=(SMALL_DIMS,)),
)

#: every MLA layout name, in the records' order
MLA_LAYOUT_NAMES: tuple[str, ...] = tuple(r.name for r in MLA_LAYOUTS)
_BY_NAME = {r.name: r for r in MLA_LAYOUTS}


def layout_record(name: str) -> LayoutRecord:
    """The record of MLA layout ``name``; an unknown name raises RtpRefError listing the valid ones."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise RtpRefError(f"unknown MLA layout {name!r}; valid layouts: {', '.join(MLA_LAYOUT_NAMES)}") from None
