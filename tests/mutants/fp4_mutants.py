"""Mutants of DeepSeek V4.1's FP4 record (V41_FP4): each the reference writer with one convention of the field in
place of the record's, loaded into a certify run through ``RTP_REF_KERNELS=tests.mutants.fp4_mutants:mutants``.

``EXPECTED`` names, for each, the check that catches it and the flags the diagnosis must name (None: no flag
explains the bytes). sglang PR #39123 names the first two as the conventions that decide V41_FP4's bytes; the third
stores the two codes of a byte the other way round. The third fingerprint sglang names, ``amax / 6`` against
``amax * (1/6)``, has no mutant: on the op's 16-bit inputs both give the same scale byte, which
tests/kv/test_v41_layouts.py proves for every one of them.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from rtp_ref.contract import WriteContract
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
    """The entry point for ``RTP_REF_KERNELS``: one instance of every FP4 mutant."""
    return [cls() for cls in EXPECTED]
