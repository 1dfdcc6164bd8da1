"""Mutants of the NVFP4 MHA paged write: the reference with one fingerprint of a real writer changed.

``NVFP4_MHA_EXPECTED`` names, for each, the check that catches it on the cpu table and the flags its diagnosis must
name (None: a fault, not a convention). The third fingerprint of the FP4 records, ``amax / 6`` against
``amax * (1/6)``, has no mutant: on 16-bit inputs both give the same scale byte, which
tests/fp4/test_nvfp4.py proves for every bf16 and fp16 amax.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from typing import ClassVar

from rtp_ref.fp4.e2m1 import NegativeZero
from rtp_ref.fp4.quantize import PayloadDivision
from rtp_ref.kv.mha_paged import MhaPagedLayout, reference_reshape_and_cache_flash
from rtp_ref.kv.nvfp4_page import ScaleOrder, other_scale_order
from tests.mutants.mha_indexer_mutants import HndAsNhd, MhaMutant


class _Nvfp4Mutant(MhaMutant, ABC):
    """An nvfp4 writer: the reference under a changed layout (``changed``)."""

    kv_cache_dtypes: ClassVar[tuple[str, ...]] = ("nvfp4",)

    @abstractmethod
    def changed(self, layout: MhaPagedLayout) -> MhaPagedLayout:
        """The layout this mutant writes in place of the contract's ``layout``."""

    def write(self, layout, key, value, key_cache, value_cache, slots, k_scale, v_scale):  # type: ignore[no-untyped-def]
        reference_reshape_and_cache_flash(self.changed(layout), key, value, key_cache, value_cache, slots,
                                          k_scale, v_scale)


class IeeeDivision(_Nvfp4Mutant):
    """Divides each value by its block's decode scale instead of multiplying by the reciprocal (FlashInfer's
    append kernel, PR #3740, divides; vLLM's writer multiplies)."""

    name = "mutant-nvfp4-mha-ieee-division"

    def changed(self, layout: MhaPagedLayout) -> MhaPagedLayout:
        assert layout.fp4 is not None
        return dataclasses.replace(layout, fp4=dataclasses.replace(layout.fp4, payload=PayloadDivision.IEEE_DIV))


class PositiveZero(_Nvfp4Mutant):
    """Stores -0.0 as code 0x0 (a kernel that adds +0.0 before converting, as sglang's newer FP4 writer does)."""

    name = "mutant-nvfp4-mha-positive-zero"

    def changed(self, layout: MhaPagedLayout) -> MhaPagedLayout:
        assert layout.fp4 is not None
        return dataclasses.replace(layout, fp4=dataclasses.replace(layout.fp4, negative_zero=NegativeZero.POSITIVE))


class OtherVScaleOrder(_Nvfp4Mutant):
    """Stores the V scales in the other platform's order (vLLM's writer swizzles them on every GPU, vLLM #50084;
    here, on the cpu table's swizzled order, the writer keeps them linear)."""

    name = "mutant-nvfp4-mha-other-v-scale-order"

    def changed(self, layout: MhaPagedLayout) -> MhaPagedLayout:
        return dataclasses.replace(layout, v_scale_order=other_scale_order(layout.v_scale_order))


class SwizzlesVEverywhere(_Nvfp4Mutant):
    """vLLM's writer before its fix (#55976): V scales swizzled for SM100 on every GPU, whatever the table says. Right
    on SM100 (and the cpu table, which states SM100's order), wrong on SM120/121 (vLLM #50084)."""

    name = "nvfp4-mha-swizzles-v-everywhere"

    def changed(self, layout: MhaPagedLayout) -> MhaPagedLayout:
        return dataclasses.replace(layout, v_scale_order=ScaleOrder.SWIZZLED_4_TOKEN)


class Nvfp4HndAsNhd(HndAsNhd):
    """Writes an HND cache as NHD (vLLM #49012: the order of a physically HND cache read from the wrong dims)."""

    name = "mutant-nvfp4-mha-hnd-as-nhd"
    kv_cache_dtypes = ("nvfp4",)


#: mutant class -> (the check that must catch it on the cpu table, the flags its diagnosis names, or None)
NVFP4_MHA_EXPECTED: dict[type[MhaMutant], tuple[str, str | None]] = {
    IeeeDivision: ("bit_exact.bytes", "nvfp4_value_quotient=ieee_div"),
    PositiveZero: ("bit_exact.bytes", "fp4_negative_zero=positive"),
    OtherVScaleOrder: ("layout.v_scale_order", None),
    Nvfp4HndAsNhd: ("layout.cache_order", None),
}


def nvfp4_mha_mutants() -> list[object]:
    """The entry point for ``RTP_REF_KERNELS``: one instance of every NVFP4 MHA mutant, and the writer that swizzles V
    everywhere."""
    return [*(cls() for cls in NVFP4_MHA_EXPECTED), SwizzlesVEverywhere()]
