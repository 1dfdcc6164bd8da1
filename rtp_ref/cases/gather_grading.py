"""Grade one read-op call against the reference read of the same cache: ``gather_and_maybe_dequant_cache``
(``grade_gather``) and ``cp_gather_indexer_k_quant_cache`` (``grade_indexer_gather``: bytes only, nothing decoded).

The footprint is ``dst``'s first ``cu_seq_lens[-1]`` rows; the cache storage (and its guards), ``dst``'s other
rows and ``dst``'s guards must be left as they were. Inside the footprint, values are compared as numbers
(``read.values``: within one unit in the last place of ``dst``'s dtype, NaN where NaN) and as bits
(``bit_exact.bytes``; where the reference stored a NaN, any NaN the platform's NaN policy accepts). When the bits
are wrong, the case's wrong hypotheses (rtp_ref.cases.gather_cases) are read too, and a reader whose ``dst`` holds
what one reads (any NaN for a NaN) fails the check named after it; on a layout with tile scales, a tile that holds
its codes times another tile's stored scale fails ``read.tile_scale``.
"""

from __future__ import annotations

from typing import Any

import torch

from rtp_ref.cases.cases import GUARD_BYTES
from rtp_ref.cases.checks import Check, grade_reached
from rtp_ref.cases.gather_cases import GatherCase
from rtp_ref.cases.grading import Grading, merge_checks, pinned_nan
from rtp_ref.cases.indexer_gather_cases import IndexerGatherCase
from rtp_ref.cases.storage import StorageMap, kernel_text, value_text
from rtp_ref.cases.value_checks import MAX_EXAMPLES, failing, first, with_examples
from rtp_ref.fp8 import decode
from rtp_ref.fp8.elements import ANY_NAN, NanPolicy
from rtp_ref.kv.cache import gather_entries
from rtp_ref.kv.entries import stored_tile_scales
from rtp_ref.kv.fields import Source
from rtp_ref.kv.gather import to_dst_dtype

#: the integer view of each ``dst`` dtype, for distances in units in the last place
_BITS = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32}


def _check(name: str, ok: bool, detail: str) -> Check:
    return Check(name, ok, "" if ok else detail)


def _ordered(bits: torch.Tensor) -> torch.Tensor:
    """Sign-magnitude float bits mapped to integers that order like the floats (adjacent floats differ by 1)."""
    wide = bits.to(torch.int64)
    return torch.where(wide < 0, -(wide & (2 ** (8 * bits.element_size() - 1) - 1)), wide)


def _rows(case: GatherCase, storage: torch.Tensor) -> torch.Tensor:
    return case.dst_view(storage)[: case.spec.tokens]


def _examples(case: GatherCase, map_: StorageMap, mask: torch.Tensor, dst_after: torch.Tensor,
              dst_before: torch.Tensor, ref: torch.Tensor) -> list[str]:
    """``row 3 (reads slot 17) kv_c[17]: kernel 1.5 (0x3fc0) vs contract 1.25 (0x3fa0)`` for the first few places of
    ``mask`` (over ``dst``'s sequence rows), ``not written`` where the reader left the canary."""
    rank = case.layout.kv_lora_rank
    out = []
    for r, c in first(mask):
        place = map_.at("kv_c", r, c) if c < rank else map_.at("k_pe", r, c - rank)
        out.append(f"{map_.where(place)}: kernel {kernel_text(place, dst_after, dst_before, ref[place.positions])} "
                   f"vs contract {value_text(place.field.element, ref[place.positions])}")
    return out


def _differing(map_: StorageMap, mask: torch.Tensor, after: torch.Tensor, want: torch.Tensor, before: torch.Tensor,
               versus: str = "contract") -> list[str]:
    """Examples for the output bytes of ``mask`` where the reader's bytes are not ``want``."""
    return map_.examples(torch.nonzero(mask).flatten(), after, want, before, versus)


def _tile_scale(case: GatherCase, got: torch.Tensor, want: torch.Tensor) -> Check:
    """``read.tile_scale``: a wrong tile of ``kv_c`` holds exactly its codes times another tile's stored scale."""
    lay = case.layout
    spec = lay.field(lay.value_field(Source.KV_C).scale_field or "").tile_scale
    assert spec is not None  # case.tiled()
    entries = gather_entries(lay, case.cache_view(case.cache_storage.cpu()), case.read_slots())
    nope = lay.value_field(Source.KV_C)
    at = lay.entry_offset(nope)
    values = decode(entries[:, at: at + lay.kv_lora_rank], lay.element_format)
    scales = stored_tile_scales(lay, entries)
    n, tile = scales.shape[1], spec.tile
    pad = n * tile - lay.kv_lora_rank
    bits = _BITS[got.dtype]

    def tiles(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.pad(x, (0, pad)).reshape(x.shape[0], n, tile)

    candidates = to_dst_dtype(tiles(values)[:, :, None, :] * scales[:, None, :, None], got.dtype).view(bits)
    g, w = tiles(got[:, : lay.kv_lora_rank]).view(bits), tiles(want[:, : lay.kv_lora_rank]).view(bits)
    matches = (candidates == g[:, :, None, :]).all(dim=3) & ~torch.eye(n, dtype=torch.bool)
    wrong = (g != w).any(dim=2) & matches.any(dim=2)
    spots = torch.nonzero(wrong)[:MAX_EXAMPLES].tolist()
    examples = "; ".join(f"row {r} tile {i} with tile {int(torch.nonzero(matches[r, i])[0])}'s" for r, i in spots)
    return _check("read.tile_scale", not bool(wrong.any()),
                  f"{int(wrong.sum())} tile(s) of kv_c hold their codes times another tile's stored scale, e.g. "
                  f"{examples}")


def _cache_untouched(cache_before: torch.Tensor, cache_after: torch.Tensor) -> Check:
    changed = int((cache_after != cache_before).sum())
    return _check("read.cache_untouched", changed == 0,
                  f"{changed} byte(s) of the cache storage (the cache and its guard zones) changed: a reader must not "
                  f"write its cache")


def grade_indexer_gather(case: IndexerGatherCase, cache_before: torch.Tensor, cache_after: torch.Tensor,
                         dst_before: torch.Tensor, dst_after: torch.Tensor, nan: NanPolicy = ANY_NAN) -> Grading:
    """Grade one indexer gather: the ``*_before``/``*_after`` tensors are CPU copies of the case's cache and
    output storages around the call; ``nan``: the platform's NaN policy."""
    ref, footprint, map_ = case.reference_dst(), case.footprint(), case.storage_map()
    checks = [_cache_untouched(cache_before, cache_after)]
    stray = (dst_after != dst_before) & ~footprint
    checks.append(failing("read.untouched_rows", not bool(stray.any()), lambda: with_examples(
        f"{int(stray.sum())} byte(s) of dst_k/dst_scale outside their first {case.spec.tokens} rows changed",
        _differing(map_, stray, dst_after, dst_before, dst_before, "untouched"))))
    differ = map_.mismatched(dst_after, ref, nan) & footprint
    exact = not bool(differ.any())
    for name in case.hypotheses():
        predicted = case.reference_dst(name) if not exact else None
        matched = predicted is not None and map_.alike(dst_after, predicted, footprint) and not map_.alike(
            ref, predicted, footprint)
        checks.append(failing(name, not matched, lambda name=name: with_examples(  # type: ignore[misc]
            f"dst_k and dst_scale hold exactly what a reader with this fault reads "
            f"({name.split('.')[1].replace('_', ' ')})", _differing(map_, differ, dst_after, ref, dst_before))))
    mismatched = int(differ.sum())
    checks.append(failing("bit_exact.bytes", mismatched == 0, lambda: with_examples(
        f"{mismatched} of {int(footprint.sum())} byte(s) of the rows differ from the reference's{pinned_nan(nan)}",
        _differing(map_, differ, dst_after, ref, dst_before))))
    stats: dict[str, Any] = {"rows": case.spec.tokens, "mismatched_bytes": mismatched}
    return Grading(merge_checks(checks), grade_reached([c.name for c in checks if not c.passed]), stats)


def grade_gather(case: GatherCase, cache_before: torch.Tensor, cache_after: torch.Tensor,
                 dst_before: torch.Tensor, dst_after: torch.Tensor, max_ulp: float = 1.0,
                 nan: NanPolicy = ANY_NAN) -> Grading:
    """Grade one call: the ``*_before``/``*_after`` tensors are CPU copies of the case's two storages around it;
    ``nan``: the platform's NaN policy. A failed check names up to ``MAX_EXAMPLES`` places (row, the slot it reads,
    field, element) with the reader's value (or ``not written``) against the contract's."""
    spec = case.spec
    ref, map_ = case.reference_dst(), case.storage_map()
    checks = [_cache_untouched(cache_before, cache_after)]
    footprint = torch.zeros_like(dst_before, dtype=torch.bool)
    footprint[GUARD_BYTES: GUARD_BYTES + spec.tokens * (case.dst_bytes // case.dst_rows)] = True
    stray = (dst_after != dst_before) & ~footprint
    checks.append(failing("read.untouched_rows", not bool(stray.any()), lambda: with_examples(
        f"{int(stray.sum())} byte(s) of dst outside its first {spec.tokens} rows (cu_seq_lens[-1]) changed (dst sits "
        f"between guard zones, with {case.dst_rows - spec.tokens} rows past the sequences)",
        _differing(map_, stray, dst_after, dst_before, dst_before, "untouched"))))
    got, want = _rows(case, dst_after), _rows(case, ref)
    gbits, wbits = got.view(_BITS[got.dtype]), want.view(_BITS[got.dtype])
    differ = map_.mismatched(dst_after, ref, nan) & footprint
    exact = not bool(differ.any())
    for name in case.hypotheses():
        predicted = case.reference_dst(name) if not exact else None
        matched = predicted is not None and map_.alike(dst_after, predicted, footprint) and not map_.alike(
            ref, predicted, footprint)
        checks.append(failing(name, not matched, lambda name=name: with_examples(  # type: ignore[misc]
            f"dst holds exactly what a reader with this fault reads ({name.split('.')[1].replace('_', ' ')})",
            _differing(map_, differ, dst_after, ref, dst_before))))
    if case.tiled() and spec.tokens:
        checks.append(_check("read.tile_scale", True, "") if exact else _tile_scale(case, got, want))
    gnan, wnan = torch.isnan(got.float()), torch.isnan(want.float())
    steps = (_ordered(gbits) - _ordered(wbits)).abs()
    off = (gnan != wnan) | (~wnan & (steps > max_ulp))
    worst = int(steps[~(gnan | wnan)].max()) if bool((~(gnan | wnan)).any()) else 0
    checks.append(failing("read.values", not bool(off.any()), lambda: with_examples(
        f"{int(off.sum())} value(s) are more than {max_ulp:g} unit(s) in the last place of "
        f"{str(got.dtype).removeprefix('torch.')} from the contract's (NaN where it is NaN)",
        _examples(case, map_, off, dst_after, dst_before, ref))))
    mismatched = int(differ.sum())
    checks.append(failing("bit_exact.bytes", mismatched == 0, lambda: with_examples(
        f"{mismatched} of {int(footprint.sum())} byte(s) of dst's rows differ from the reference's{pinned_nan(nan)}",
        _differing(map_, differ, dst_after, ref, dst_before))))
    stats: dict[str, Any] = {"rows": spec.tokens, "mismatched_bytes": mismatched, "max_ulp": worst}
    return Grading(merge_checks(checks), grade_reached([c.name for c in checks if not c.passed]), stats)
