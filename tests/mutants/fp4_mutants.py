"""Mutants of the FP4 MLA records: DeepSeek V4.1's V41_FP4 and FlashMLA's NVFP4 record (nvfp4_fp8_ds_mla), each the
reference writer with one convention of the field in place of the record's, loaded into a certify run through
``RTP_REF_KERNELS=tests.mutants.fp4_mutants:mutants`` (``:nvfp4_mutants`` for the NVFP4 ones).

``EXPECTED`` names, for each, the check that catches it and the flags the diagnosis must name (None: no flag
explains the bytes). sglang PR #39123 names the first two as the conventions that decide V41_FP4's bytes; the third
stores the two codes of a byte the other way round. The third fingerprint sglang names, ``amax / 6`` against
``amax * (1/6)``, has no mutant: on the op's 16-bit inputs both give the same scale byte, which
tests/kv/test_v41_layouts.py proves for every one of them.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import torch

from rtp_ref.contract import WriteContract
from rtp_ref.fp4 import ScaleRounding
from rtp_ref.kv.entries import encode_entries
from rtp_ref.kv.fields import ELEMENT_E2M1
from rtp_ref.kv.layouts import MlaLayout
from tests.mutants.kernels import Mutant


class _Fp4Mutant(Mutant):
    """A V41_FP4 writer: the reference under ``flags`` in place of the table's."""

    kv_cache_dtypes: ClassVar[tuple[str, ...]] = ("V41_FP4",)
    flags: ClassVar[dict[str, object]] = {}

    def mutate_contract(self, contract: WriteContract) -> WriteContract:
        return contract.under(self.flags)


class ReciprocalMultiply(_Fp4Mutant):
    """Forms ``x * (1/s)``, the reciprocal rounded to float32, instead of ``x / s``: the other side of an E2M1 tie."""

    name = "mutant-fp4-reciprocal-multiply"
    flags: ClassVar[dict[str, object]] = {"fp4_value_quotient": "reciprocal_mul"}


class PositiveZero(_Fp4Mutant):
    """Adds +0.0 before converting, as sglang's newer kernel does: a -0.0 quotient is stored as 0x0, not 0x8."""

    name = "mutant-fp4-positive-zero"
    flags: ClassVar[dict[str, object]] = {"fp4_negative_zero": "positive"}


class SwappedNibbles(_Fp4Mutant):
    """Puts the even-indexed code in the high nibble."""

    name = "mutant-fp4-swapped-nibbles"

    def entries(self, layout: MlaLayout, kv_c: torch.Tensor, k_pe: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        entries = encode_entries(layout, kv_c, k_pe, scale)
        for f in layout.entry_fields:
            if f.element == ELEMENT_E2M1:
                start = layout.entry_offset(f)
                codes = entries[:, start:start + f.size]
                entries[:, start:start + f.size] = (codes >> 4) | (codes << 4)
        return entries


#: each mutant -> (the check that must catch it, the flags its diagnosis names, or None where none explains it)
EXPECTED: dict[type[Mutant], tuple[str, str | None]] = {
    ReciprocalMultiply: ("bit_exact.bytes", "fp4_value_quotient=reciprocal_mul"),
    PositiveZero: ("bit_exact.bytes", "fp4_negative_zero=positive"),
    SwappedNibbles: ("bit_exact.bytes", None),
}


def mutants() -> list[object]:
    """The entry point for ``RTP_REF_KERNELS``: one instance of every V41_FP4 mutant."""
    return [cls() for cls in EXPECTED]


class _Nvfp4Mutant(Mutant):
    """An nvfp4_fp8_ds_mla writer: the reference with one of FlashMLA's conventions changed."""

    kv_cache_dtypes: ClassVar[tuple[str, ...]] = ("nvfp4_fp8_ds_mla",)


class ScalesInTileOrder(_Nvfp4Mutant):
    """Stores the 32 nope scales in tile order, not FlashMLA's ``nvfp4_sf_byte(s) = 8 * (s & 3) + (s >> 2)``."""

    name = "mutant-nvfp4-scales-in-tile-order"

    def entries(self, layout: MlaLayout, kv_c: torch.Tensor, k_pe: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        entries = encode_entries(layout, kv_c, k_pe, scale)
        f = layout.field("nope_scale")
        start = layout.entry_offset(f)
        entries[:, start:start + f.size] = f.to_natural_order(entries[:, start:start + f.size])
        return entries


class NearestScaleNotBumped(_Nvfp4Mutant):
    """Rounds each scale to the nearest e4m3 and stops there (FlashInfer's NVFP4 writers), without FlashMLA's bump one
    code up where that fell below amax / 6."""

    name = "mutant-nvfp4-scale-not-bumped"

    def entries(self, layout: MlaLayout, kv_c: torch.Tensor, k_pe: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        f = layout.field("nope_scale")
        spec = f.tile_scale
        assert spec is not None and spec.fp4 is not None
        nearest = dataclasses.replace(spec, fp4=dataclasses.replace(
            spec.fp4, scale=dataclasses.replace(spec.fp4.scale, rounding=ScaleRounding.RNE)))
        fields = tuple(dataclasses.replace(g, tile_scale=nearest) if g.name == f.name else g for g in layout.fields)
        return encode_entries(dataclasses.replace(layout, fields=fields), kv_c, k_pe, scale)


#: each NVFP4 mutant -> the check that must catch it in a certify run
NVFP4_EXPECTED: dict[type[Mutant], str] = {
    ScalesInTileOrder: "layout.scale_order",
    NearestScaleNotBumped: "numerics.scale_value",
}


def nvfp4_mutants() -> list[object]:
    """The entry point for ``RTP_REF_KERNELS``: one instance of every NVFP4 mutant."""
    return [cls() for cls in NVFP4_EXPECTED]
