"""Grade one MHA paged or indexer write against the reference: the MLA write's checks and grades
(rtp_ref.cases.grading), over the op's entries.

The footprint is derived as for the MLA write: the reference writes into two copies of the case storage
filled with different canaries, and a byte belongs to the footprint when it changed in either. A target entry
is one token's bytes: its K and V rows (every head) for the MHA cache, its values (fp8, or ``mxfp4``'s packed E2M1
codes) and block-trailing scales for the indexer. When the bytes are wrong, the case's wrong hypotheses
(rtp_ref.cases.mha_indexer_cases) are written too, and a kernel whose whole storage equals one (any NaN for a NaN)
fails the check named after it.
Where the reference stored a NaN, the platform's NaN policy (rtp_ref.fp8.elements.NanPolicy) says which passes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from rtp_ref.cases.cases import ALT_CANARY, CANARY
from rtp_ref.cases.checks import Check, grade_reached
from rtp_ref.cases.grading import Grading, merge_checks, pinned_nan
from rtp_ref.cases.mha_indexer_cases import IndexerCase, MhaCase, MhaIndexerCase, slot_values
from rtp_ref.cases.storage import StorageMap, kernel_text, slot_width_note, value_text
from rtp_ref.cases.value_checks import MAX_EXAMPLES, ValueNamer, failing, first, fp8_value_checks, with_examples
from rtp_ref.fp8.elements import ANY_NAN, NanPolicy


def _check(name: str, ok: bool, detail: str) -> Check:
    return Check(name, ok, "" if ok else detail)


@dataclass(frozen=True)
class _Images:
    """The case storage after the call, the reference's, and before the call (CPU), with the case's storage map."""

    after: torch.Tensor
    ref: torch.Tensor
    before: torch.Tensor
    map: StorageMap

    def differing(self, mask: torch.Tensor, versus: str = "reference") -> list[str]:
        """Examples for the storage bytes of ``mask`` where the kernel's bytes are not ``versus``'s."""
        want = self.before if versus == "untouched" else self.ref
        return self.map.examples(torch.nonzero(mask).flatten(), self.after, want, self.before, versus)


class _Targets:
    """The written tokens of a case: their index in slot_mapping and their slot, and each one's entry bytes."""

    def __init__(self, case: MhaIndexerCase) -> None:
        self.case = case
        slots = slot_values(case.slot_mapping)
        keep = slots >= 0
        self.tokens = torch.nonzero(keep).flatten()
        self.slots = slots[keep]
        self.blocks = self.slots // case.spec.block_size
        self.rows = self.slots % case.spec.block_size

    def name(self, i: int) -> str:
        """``token 3 (slot 17)`` for target ``i``."""
        return f"token {int(self.tokens[i])} (slot {int(self.slots[i])})"

    def parts(self, storage: torch.Tensor, places: StorageMap) -> dict[str, torch.Tensor]:
        """Each part of every target entry as bytes ``[targets, part bytes]``: each field of the storage map
        (MHA: ``key``/``value``, and ``nvfp4``'s ``key_scale``/``value_scale``), ``values``/``scales`` (indexer)."""
        case = self.case
        if isinstance(case, MhaCase):
            return {f.name: f.bytes_in(storage)[self.slots] for f in places.fields}
        lay, block_size = case.layout, case.spec.block_size
        blocks = case.cache(storage).reshape(case.spec.num_blocks, -1)
        d, t = lay.data_bytes_per_token, lay.trailing_bytes_per_token
        values = blocks[self.blocks[:, None], self.rows[:, None] * d + torch.arange(d)]
        scales = blocks[self.blocks[:, None], block_size * d + self.rows[:, None] * t + torch.arange(t)]
        return {"values": values, "scales": scales}


def _reference(case: MhaIndexerCase, canary: int, hypothesis: str | None = None) -> torch.Tensor:
    storage = torch.full((case.storage.numel(),), canary, dtype=torch.uint8)
    case.reference_on(storage, hypothesis)
    return storage


def _untouched(case: MhaIndexerCase, images: _Images, footprint: torch.Tensor) -> list[Check]:
    changed = images.after != images.before
    stray = changed & ~footprint
    checks = [failing("layout.untouched_bytes", not bool(stray.any()), lambda: with_examples(
        f"{int(stray.sum())} byte(s) outside the target entries changed", images.differing(stray, "untouched")))]
    if case.spec.kind == "padding_only":
        checks.append(failing("layout.negative_slots", not bool(changed.any()), lambda: with_examples(
            f"{int(changed.sum())} byte(s) changed although every slot was negative",
            images.differing(changed, "untouched"))))
    if case.reserved_slot is not None:
        sink = changed & images.map.slot_mask(case.reserved_slot)
        checks.append(failing("layout.reserved_slot", not bool(sink.any()), lambda: with_examples(
            f"{int(sink.sum())} byte(s) of slot {case.reserved_slot}, the engine's reserved padding slot, changed",
            images.differing(sink, "untouched"))))
    return checks


def _written(targets: _Targets, got: dict[str, torch.Tensor], want: dict[str, torch.Tensor],
             before: dict[str, torch.Tensor]) -> Check:
    """``layout.slot_mapping``: every target entry changed at least one byte the reference changed."""
    ok = torch.ones(targets.tokens.numel(), dtype=torch.bool)
    for part, g in got.items():
        ref_changed = want[part] != before[part]
        ok &= ((g != before[part]) & ref_changed).any(dim=1) | ~ref_changed.any(dim=1)
    return _check("layout.slot_mapping", bool(ok.all()),
                  f"{int((~ok).sum())} target entr(ies) were never written (the token went elsewhere or nowhere"
                  f"{slot_width_note(targets.case.slot_mapping)}), "
                  f"e.g. {'; '.join(targets.name(i) for i in torch.nonzero(~ok).flatten()[:MAX_EXAMPLES].tolist())}")


def _hypotheses(case: MhaIndexerCase, images: _Images, differ: torch.Tensor, exact: bool) -> list[Check]:
    """One check per wrong hypothesis of the case: failed when the kernel wrote exactly what it predicts and that is
    not the contract's (NaN for NaN alike: rtp_ref.cases.storage.StorageMap.alike; the examples: where the bytes
    differ from the contract's)."""
    checks = []
    for name in case.hypotheses():
        predicted = _reference(case, CANARY, name) if not exact else None
        matched = predicted is not None and images.map.alike(images.after, predicted) and not images.map.alike(
            images.ref, predicted)
        checks.append(failing(name, not matched, lambda name=name: with_examples(  # type: ignore[misc]
            f"the bytes are exactly what a writer with this fault writes "
            f"({name.split('.')[1].replace('_', ' ')})", images.differing(differ))))
    return checks


def _head_order(targets: _Targets, got: dict[str, torch.Tensor], want: dict[str, torch.Tensor],
                itemsize: int) -> Check:
    """``layout.head_order``: an entry holds the reference's elements, but at other places."""
    bad = []
    for part in ("key", "value"):
        g, w = got[part], want[part]
        if itemsize == 2:
            g, w = g.view(torch.int16), w.view(torch.int16)
        differs = (g != w).any(dim=1)
        permuted = differs & (torch.sort(g, dim=1).values == torch.sort(w, dim=1).values).all(dim=1)
        bad += [f"{part} of {targets.name(i)}" for i in torch.nonzero(permuted).flatten().tolist()]
    return _check("layout.head_order", not bad,
                  f"{len(bad)} entr(ies) hold the right values at the wrong places (heads permuted or head and dim "
                  f"exchanged), e.g. {'; '.join(bad[:MAX_EXAMPLES])}")


def _fp8_namer(field: str, targets: _Targets, images: _Images, exact: torch.Tensor) -> ValueNamer:
    """Names value ``[row, col]`` of ``field`` (row: a target) as ``token 3 (slot 17) key head 0 [5]: kernel 1.5
    (0x3c) vs 1.25`` (the exact quotient stands for the contract unless a wanted value is given; a value the
    kernel never wrote is ``not written``)."""
    def name(row: int, col: int, want: str | None) -> str:
        place = images.map.at(field, int(targets.slots[row]), col)
        return (f"{images.map.where(place)}: kernel {kernel_text(place, images.after, images.before)} vs "
                f"{want or f'{float(exact[row, col]):.6g}'}")
    return name


def _mha_numerics(case: MhaCase, targets: _Targets, got: dict[str, torch.Tensor], images: _Images,
                  max_ulp: float, stats: dict[str, Any]) -> list[Check]:
    fmt = case.layout.element_format
    if fmt is None:
        return []
    checks: list[Check] = []
    for part, x, scale in (("key", case.key, case.k_scale), ("value", case.value, case.v_scale)):
        rows = x.cpu()[targets.tokens].double()
        v = (rows / scale.cpu().double().reshape(1, -1, 1)).flatten(1)
        graded = fp8_value_checks(part, got[part], v, fmt, case.layout.conversion_mode, max_ulp,
                                  _fp8_namer(part, targets, images, v))
        checks += graded.checks
        stats[part] = {"max_error_steps": graded.worst_steps}
    return checks


def _scale_examples(targets: _Targets, images: _Images,
                    field: str = "scale") -> Callable[[torch.Tensor], list[str]]:
    """Names the scales of a ``[targets, scales]`` mask of ``field``: ``token 3 (slot 17) scale[1]: kernel ... vs
    contract ...``."""
    def examples(mask: torch.Tensor) -> list[str]:
        out = []
        for i, j in first(mask):
            place = images.map.at(field, int(targets.slots[i]), j)
            contract = value_text(place.field.element, images.ref[place.positions])
            out.append(f"{images.map.where(place)}: kernel {kernel_text(place, images.after, images.before)} vs "
                       f"contract {contract}")
        return out
    return examples


def _nvfp4_numerics(targets: _Targets, got: dict[str, torch.Tensor], want: dict[str, torch.Tensor],
                    images: _Images) -> list[Check]:
    """``nvfp4``'s scale check: each e4m3 byte of ``key_scale`` and ``value_scale`` the contract's
    (rtp_ref.fp4.nvfp4); the E2M1 codes are graded by their bytes alone (``bit_exact.bytes``)."""
    bad = {part: got[part] != want[part] for part in ("key_scale", "value_scale")}
    count = sum(int(b.sum()) for b in bad.values())

    def examples() -> list[str]:
        named = [e for part, mask in bad.items() for e in _scale_examples(targets, images, part)(mask)]
        return named[:MAX_EXAMPLES]
    return [failing("numerics.scale_value", count == 0, lambda: with_examples(
        f"{count} scale(s) differ from e4m3(g * (amax * (1/6))), g = 1 / k_scale (or v_scale)", examples()))]


def _mxfp4_numerics(targets: _Targets, got: dict[str, torch.Tensor], want: dict[str, torch.Tensor],
                    images: _Images) -> list[Check]:
    """``mxfp4``'s scale check: each ue8m0 byte the contract's (rtp_ref.kv.indexer); its E2M1 codes are graded by
    their bytes alone (``bit_exact.bytes``), as the MLA write's are."""
    bad = got["scales"] != want["scales"]
    return [failing("numerics.scale_value", not bool(bad.any()), lambda: with_examples(
        f"{int(bad.sum())} scale(s) differ from 2^ceil(log2(max(amax, 6 * 2^-126) * (1/6))) (ue8m0, exact)",
        _scale_examples(targets, images)(bad)))]


def _indexer_numerics(case: IndexerCase, targets: _Targets, got: dict[str, torch.Tensor],
                      want: dict[str, torch.Tensor], images: _Images, max_ulp: float,
                      stats: dict[str, Any]) -> list[Check]:
    lay = case.layout
    if lay.fp4 is not None:
        return _mxfp4_numerics(targets, got, want, images)
    k = got["scales"].contiguous().view(torch.float32).double()
    r = want["scales"].contiguous().view(torch.float32).double()
    examples = _scale_examples(targets, images)

    expected_positive = torch.isfinite(r) & (r > 0)
    bad = expected_positive & ~(torch.isfinite(k) & (k > 0))
    checks = [failing("numerics.scale_positive", not bool(bad.any()), lambda: with_examples(
        f"{int(bad.sum())} scale(s) are zero, negative, inf or NaN", examples(bad)))]
    if case.spec.layout == "ue8m0":
        mantissa, _ = torch.frexp(k)
        not_pow2 = torch.isfinite(k) & (mantissa != 0.5)
        checks.append(failing("numerics.scale_form", not bool(not_pow2.any()), lambda: with_examples(
            f"{int(not_pow2.sum())} scale(s) are not powers of two (scale_fmt ue8m0)", examples(not_pow2))))
        equal = (k == r) | (torch.isnan(k) & torch.isnan(r))
    else:
        equal = ((k - r).abs() <= r.abs() * 2.0**-22) | (k == r) | (torch.isnan(k) & torch.isnan(r))
    checks.append(failing("numerics.scale_value", bool(equal.all()), lambda: with_examples(
        f"{int((~equal).sum())} scale(s) differ from max(amax, 1e-4) / {lay.scale_divisor:g}"
        f"{' raised to a power of two' if case.spec.layout == 'ue8m0' else ''}", examples(~equal))))
    x = case.k.cpu()[targets.tokens].double()
    v = x / k.repeat_interleave(lay.quant_block_size, dim=1)
    graded = fp8_value_checks("k", got["values"], v, lay.element_format, lay.conversion_mode, max_ulp,
                              _fp8_namer("k", targets, images, v))
    stats["k"] = {"max_error_steps": graded.worst_steps}
    return checks + graded.checks


def footprint(case: MhaIndexerCase, written: torch.Tensor | None = None) -> torch.Tensor:
    """The bytes of the case storage the reference writes: those it changes in either of two canary fillings
    (``written``: the reference's write into the ``CANARY`` filling, where the caller has it already)."""
    first = _reference(case, CANARY) if written is None else written
    return (first != CANARY) | (_reference(case, ALT_CANARY) != ALT_CANARY)


def grade_mha_indexer_write(case: MhaIndexerCase, before: torch.Tensor, after: torch.Tensor, max_ulp: float,
                            nan: NanPolicy = ANY_NAN) -> Grading:
    """Grade one call: ``before``/``after`` are CPU copies of the case storage around it (module doc); where the
    reference stored a NaN, ``nan`` (the platform's NaN policy) says which NaN passes. A failed check names up to
    ``MAX_EXAMPLES`` places (token, slot, field, element) with the kernel's value (or ``not written``) against the
    contract's."""
    ref = _reference(case, CANARY)
    written = footprint(case, ref)
    images = _Images(after, ref, before, case.storage_map())
    checks = _untouched(case, images, written)
    targets = _Targets(case)
    got, want, was = (targets.parts(image, images.map) for image in (after, ref, before))
    checks.append(_written(targets, got, want, was))
    differ = images.map.mismatched(after, ref, nan) & written
    exact = not bool(differ.any()) and not bool((after != before)[~written].any())
    checks += _hypotheses(case, images, differ, exact)
    stats: dict[str, Any] = {"targets": int(targets.tokens.numel()), "tokens": case.spec.tokens}
    if isinstance(case, MhaCase):
        checks.append(_head_order(targets, got, want, case.itemsize))
        if case.layout.element_format is None and case.layout.fp4 is None:
            for part in ("key", "value"):
                places = images.map.field(part)
                copied = torch.zeros_like(differ)
                places.view_in(copied).copy_(places.view_in(differ))
                tokens = int(places.bytes_in(differ)[targets.slots].any(dim=1).sum())
                checks.append(failing(f"layout.{part}_exact", not bool(copied.any()),
                                      lambda part=part, copied=copied, tokens=tokens: with_examples(  # type: ignore[misc]
                                          f"{part}: {tokens} token(s) are not copied bit for bit{pinned_nan(nan)}",
                                          images.differing(copied))))
        checks += _mha_numerics(case, targets, got, images, max_ulp, stats) if case.layout.fp4 is None else \
            _nvfp4_numerics(targets, got, want, images)
    elif targets.tokens.numel():
        checks += _indexer_numerics(case, targets, got, want, images, max_ulp, stats)
    mismatched = int(differ.sum())
    stats["mismatched_bytes"] = mismatched
    checks.append(failing("bit_exact.bytes", mismatched == 0, lambda: with_examples(
        f"{mismatched} of {int(written.sum())} written byte(s) differ from the reference{pinned_nan(nan)}",
        images.differing(differ))))
    return Grading(merge_checks(checks), grade_reached([c.name for c in checks if not c.passed]), stats)
