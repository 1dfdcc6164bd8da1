"""What a platform's attention reader sees in a written MLA cache: its stored values as that reader takes them.

A writer can be bit-exact to its table and still be read wrongly: FlashMLA's SM90 decoder takes each stored fp32
tile scale as bf16, its SM100 decoder as an e8m0 power of two rounded toward zero (FlashMLA #184, vLLM #49435),
and a reader that decodes OCP e4m3 reads fnuz bytes as other numbers (vLLM #45562). The platform table's
``[reader]`` (``ReaderConvention``) says what the target's reader does; ``reader_changes`` compares, over the
written entries of a cache, the stored values with what that reader takes them to be.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rtp_ref.fp8 import decode
from rtp_ref.kv.cache import gather_entries
from rtp_ref.kv.entries import stored_tile_scales
from rtp_ref.kv.fields import ELEMENT_FP32, Source, is_fp8_element
from rtp_ref.kv.layouts import MlaLayout
from rtp_ref.kv.reader_convention import ReaderConvention


@dataclass(frozen=True)
class ReadChange:
    """How one kind of stored value changes on read: ``changed`` of ``total`` values; of those, ``broken`` become 0,
    NaN or infinite or change sign, and the others change by up to ``largest_factor`` (``max(stored / read,
    read / stored)``, 1.0 when none does); ``example`` names the first changed one."""

    what: str
    total: int
    changed: int
    broken: int
    largest_factor: float
    example: str

    def describe(self) -> str:
        """``tile scales: 12 of 64 change on read, by up to 1.97x (slot 3 tile scale 1: stored 0.0123, read
        0.0078)``."""
        if self.changed == 0:
            return f"{self.what}: none of {self.total} change on read"
        parts = []
        if self.changed > self.broken:
            f = self.largest_factor
            parts.append(f"by up to {(f - 1) * 100:.2g} %" if f < 1.1 else f"by up to {f:.3g}x")
        if self.broken:
            parts.append(f"{self.broken} to 0, NaN, inf or the other sign")
        return f"{self.what}: {self.changed} of {self.total} change on read, {'; '.join(parts)} ({self.example})"


def scale_as_read(scales: torch.Tensor, how: str) -> torch.Tensor:
    """float32 ``scales`` as a reader takes them (``how``: one of rtp_ref.kv.reader_convention.TILE_SCALE_READS): as
    they are, rounded to bf16 (nearest even), or rounded toward zero to a power of two (e8m0: the fp32 exponent, no
    mantissa)."""
    if how == "fp32":
        return scales.clone()
    if how == "bf16":
        return scales.to(torch.bfloat16).to(torch.float32)
    if how == "e8m0_toward_zero":
        return (scales.view(torch.int32) & -0x00800000).view(torch.float32)  # keep sign and exponent
    raise ValueError(f"unknown tile-scale reading {how!r}")


def value_change(what: str, stored: torch.Tensor, read: torch.Tensor, label: list[str]) -> ReadChange:
    """How ``read`` values ``[entries, n]`` differ from the ``stored`` ones; ``label[i]`` names entry ``i``."""
    differ = ~((stored == read) | (torch.isnan(stored) & torch.isnan(read)))
    if not bool(differ.any()):
        return ReadChange(what, stored.numel(), 0, 0, 1.0, "")
    comparable = (torch.isfinite(stored) & torch.isfinite(read) & (stored != 0) & (read != 0)
                  & (torch.sign(stored) == torch.sign(read)))
    ratio = (stored.double() / read.double()).abs()
    factors = torch.maximum(ratio, 1 / ratio)[differ & comparable]
    r, c = torch.nonzero(differ)[0].tolist()
    example = f"{label[r]} {what.rstrip('s')} {c}: stored {float(stored[r, c]):.6g}, read {float(read[r, c]):.6g}"
    largest = float(factors.max()) if factors.numel() else 1.0
    return ReadChange(what, stored.numel(), int(differ.sum()), int((differ & ~comparable).sum()), largest, example)


def reader_changes(layout: MlaLayout, kv_cache: torch.Tensor, slots: torch.Tensor,
                   reader: ReaderConvention) -> list[ReadChange]:
    """How ``reader`` takes the entries written at ``slots`` (negative ones skipped) of ``kv_cache``: one
    ``ReadChange`` for the tile scales (layouts with fp32 tile scales; an e8m0 scale reads the same everywhere)
    and one for the fp8 codes (decoded as the reader's format instead of the layout's)."""
    written = slots[slots >= 0]
    entries = gather_entries(layout, kv_cache.cpu(), written.cpu())
    label = [f"slot {s}" for s in written.tolist()]
    out = []
    nope = layout.value_field(Source.KV_C)
    scale = layout.field(nope.scale_field) if nope.scale_field else None
    if scale is not None and scale.tile_scale is not None and scale.element == ELEMENT_FP32:
        stored = stored_tile_scales(layout, entries)
        out.append(value_change("tile scales", stored, scale_as_read(stored, reader.tile_scale), label))
    # fp8 value fields: E2M1 codes (and their e4m3 scales, OCP on every platform) have one reading
    codes = [entries[:, layout.entry_offset(f): layout.entry_offset(f) + f.size]
             for f in (nope, layout.value_field(Source.K_PE)) if is_fp8_element(f.element)]
    if codes:
        raw = torch.cat(codes, dim=1)
        out.append(value_change("fp8 values", decode(raw, layout.element_format), decode(raw, reader.element_format),
                           label))
    return out
