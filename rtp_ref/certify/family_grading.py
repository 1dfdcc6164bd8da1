"""Grade one MHA paged or indexer write against the reference: the MLA write's checks and grades
(rtp_ref.certify.grading), over the family's entries.

The footprint is derived as for the MLA write: the reference writes into two copies of the case storage
filled with different canaries, and a byte belongs to the footprint when it changed in either. A target entry
is one token's bytes: its K and V rows (every head) for the MHA cache, its fp8 values and block-trailing
scales for the indexer. When the bytes are wrong, the case's wrong hypotheses (rtp_ref.certify.family_cases)
are written too, and a kernel whose whole storage equals one fails the check named after it.
"""

from __future__ import annotations

from typing import Any

import torch

from rtp_ref.certify.cases import ALT_CANARY, CANARY
from rtp_ref.certify.checks import Check, grade_reached
from rtp_ref.certify.family_cases import FamilyCase, IndexerCase, MhaCase
from rtp_ref.certify.grading import Grading
from rtp_ref.certify.value_checks import MAX_EXAMPLES, ValueNamer, first, fp8_value_checks
from rtp_ref.fp8 import decode
from rtp_ref.fp8.formats import Fp8Format


#: failed checks name at most this many examples
def _check(name: str, ok: bool, detail: str) -> Check:
    return Check(name, ok, "" if ok else detail)


class _Targets:
    """The written tokens of a case: their index in slot_mapping and their slot, and each one's entry bytes."""

    def __init__(self, case: FamilyCase) -> None:
        self.case = case
        slots = case.slot_mapping.cpu()
        keep = slots >= 0
        self.tokens = torch.nonzero(keep).flatten()
        self.slots = slots[keep]
        self.blocks = self.slots // case.spec.block_size
        self.rows = self.slots % case.spec.block_size

    def name(self, i: int) -> str:
        """``token 3 (slot 17)`` for target ``i``."""
        return f"token {int(self.tokens[i])} (slot {int(self.slots[i])})"

    def parts(self, storage: torch.Tensor) -> dict[str, torch.Tensor]:
        """Each part of every target entry as bytes ``[targets, part bytes]``: ``key``/``value`` (MHA),
        ``values``/``scales`` (indexer)."""
        case = self.case
        if isinstance(case, MhaCase):
            kc, vc = case.caches(storage)
            entry = case.spec.heads * case.spec.width * case.itemsize
            return {name: c[self.blocks, self.rows].contiguous().view(torch.uint8).reshape(-1, entry)
                    for name, c in (("key", kc), ("value", vc))}
        lay, block_size = case.layout, case.spec.block_size
        blocks = case.cache(storage).reshape(case.spec.num_blocks, -1)
        d, n = lay.head_dim, lay.scales_per_token
        values = blocks[self.blocks[:, None], self.rows[:, None] * d + torch.arange(d)]
        scales = blocks[self.blocks[:, None], block_size * d + self.rows[:, None] * 4 * n + torch.arange(4 * n)]
        return {"values": values, "scales": scales}


def _reference(case: FamilyCase, canary: int, hypothesis: str | None = None) -> torch.Tensor:
    storage = torch.full((case.storage.numel(),), canary, dtype=torch.uint8)
    case.reference_on(storage, hypothesis)
    return storage


def _untouched(case: FamilyCase, before: torch.Tensor, after: torch.Tensor, footprint: torch.Tensor) -> list[Check]:
    changed = after != before
    stray = torch.nonzero(changed & ~footprint).flatten()
    checks = [_check("layout.untouched_bytes", stray.numel() == 0,
                     f"{stray.numel()} byte(s) outside the target entries changed, e.g. storage byte(s) "
                     f"{stray[:MAX_EXAMPLES].tolist()} of {before.numel()} (the caches sit between guard zones)")]
    if case.spec.kind == "padding_only":
        n = int(changed.sum())
        checks.append(_check("layout.negative_slots", n == 0, f"{n} byte(s) changed although every slot was negative"))
    return checks


def _written(targets: _Targets, got: dict[str, torch.Tensor], want: dict[str, torch.Tensor],
             before: dict[str, torch.Tensor]) -> Check:
    """``layout.slot_mapping``: every target entry changed at least one byte the reference changed."""
    ok = torch.ones(targets.tokens.numel(), dtype=torch.bool)
    for part, g in got.items():
        ref_changed = want[part] != before[part]
        ok &= ((g != before[part]) & ref_changed).any(dim=1) | ~ref_changed.any(dim=1)
    return _check("layout.slot_mapping", bool(ok.all()),
                  f"{int((~ok).sum())} target entr(ies) were never written (the token went elsewhere or nowhere), "
                  f"e.g. {'; '.join(targets.name(i) for i in torch.nonzero(~ok).flatten()[:MAX_EXAMPLES].tolist())}")


def _hypotheses(case: FamilyCase, after: torch.Tensor, exact: bool) -> list[Check]:
    """One check per wrong hypothesis of the case: failed when the kernel wrote exactly what it predicts."""
    checks = []
    for name in case.hypotheses():
        matched = not exact and torch.equal(after, _reference(case, CANARY, name))
        checks.append(_check(name, not matched, f"the bytes are exactly what a writer with this fault writes "
                                                f"({name.split('.')[1].replace('_', ' ')})"))
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


def _fp8_namer(label: str, codes: torch.Tensor, exact: torch.Tensor, fmt: Fp8Format,
               where: list[str]) -> ValueNamer:
    """Names value ``[row, col]`` of field ``label`` as ``token 3 (slot 17) key[5]: kernel 1.5 (0x3c) vs 1.25``
    (``where`` names each row; the exact quotient stands for the contract unless a wanted value is given)."""
    def name(row: int, col: int, want: str | None) -> str:
        code = int(codes[row, col])
        return (f"{where[row]} {label}[{col}]: kernel {float(decode(codes[row, col:col + 1], fmt)):.6g} "
                f"(0x{code:02x}) vs {want or f'{float(exact[row, col]):.6g}'}")
    return name


def _mha_numerics(case: MhaCase, targets: _Targets, got: dict[str, torch.Tensor], max_ulp: float,
                  stats: dict[str, Any]) -> list[Check]:
    fmt = case.layout.element_format
    if fmt is None:
        return []
    checks: list[Check] = []
    where = [targets.name(i) for i in range(targets.tokens.numel())]
    for part, x, scale in (("key", case.key, case.k_scale), ("value", case.value, case.v_scale)):
        rows = x.cpu()[targets.tokens].double()
        v = (rows / scale.cpu().double().reshape(1, -1, 1)).flatten(1)
        graded = fp8_value_checks(part, got[part], v, fmt, case.layout.conversion_mode, max_ulp,
                                  _fp8_namer(part, got[part], v, fmt, where))
        checks += graded.checks
        stats[part] = {"max_error_steps": graded.worst_steps}
    return checks


def _indexer_numerics(case: IndexerCase, targets: _Targets, got: dict[str, torch.Tensor],
                      want: dict[str, torch.Tensor], max_ulp: float, stats: dict[str, Any]) -> list[Check]:
    lay = case.layout
    k = got["scales"].contiguous().view(torch.float32).double()
    r = want["scales"].contiguous().view(torch.float32).double()
    where = [targets.name(i) for i in range(targets.tokens.numel())]

    def examples(mask: torch.Tensor) -> str:
        return "; ".join(f"{where[i]} scale[{j}]: kernel {float(k[i, j]):.6g} vs contract {float(r[i, j]):.6g}"
                         for i, j in first(mask))

    expected_positive = torch.isfinite(r) & (r > 0)
    bad = expected_positive & ~(torch.isfinite(k) & (k > 0))
    checks = [_check("numerics.scale_positive", not bool(bad.any()),
                     f"{int(bad.sum())} scale(s) are zero, negative, inf or NaN, e.g. {examples(bad)}")]
    if case.spec.layout == "ue8m0":
        mantissa, _ = torch.frexp(k)
        not_pow2 = torch.isfinite(k) & (mantissa != 0.5)
        checks.append(_check("numerics.scale_form", not bool(not_pow2.any()),
                             f"{int(not_pow2.sum())} scale(s) are not powers of two (scale_fmt ue8m0), "
                             f"e.g. {examples(not_pow2)}"))
        equal = (k == r) | (torch.isnan(k) & torch.isnan(r))
    else:
        equal = ((k - r).abs() <= r.abs() * 2.0**-22) | (k == r) | (torch.isnan(k) & torch.isnan(r))
    checks.append(_check("numerics.scale_value", bool(equal.all()),
                         f"{int((~equal).sum())} scale(s) differ from max(amax, 1e-4) / {lay.scale_divisor:g}"
                         f"{' raised to a power of two' if case.spec.layout == 'ue8m0' else ''}, e.g. "
                         f"{examples(~equal)}"))
    x = case.k.cpu()[targets.tokens].double()
    v = x / k.repeat_interleave(lay.quant_block_size, dim=1)
    graded = fp8_value_checks("k", got["values"], v, lay.element_format, lay.conversion_mode, max_ulp,
                              _fp8_namer("k", got["values"], v, lay.element_format, where))
    stats["k"] = {"max_error_steps": graded.worst_steps}
    return checks + graded.checks


def grade_family_write(case: FamilyCase, before: torch.Tensor, after: torch.Tensor, max_ulp: float) -> Grading:
    """Grade one call: ``before``/``after`` are CPU copies of the case storage around it (module doc)."""
    ref = _reference(case, CANARY)
    footprint = (ref != CANARY) | (_reference(case, ALT_CANARY) != ALT_CANARY)
    checks = _untouched(case, before, after, footprint)
    targets = _Targets(case)
    got, want, was = targets.parts(after), targets.parts(ref), targets.parts(before)
    checks.append(_written(targets, got, want, was))
    differ = (after != ref) & footprint
    exact = not bool(differ.any()) and not bool((after != before)[~footprint].any())
    checks += _hypotheses(case, after, exact)
    stats: dict[str, Any] = {"targets": int(targets.tokens.numel()), "tokens": case.spec.tokens}
    if isinstance(case, MhaCase):
        itemsize = case.itemsize
        checks.append(_head_order(targets, got, want, itemsize))
        if case.layout.element_format is None:
            for part in ("key", "value"):
                same = torch.equal(got[part], want[part])
                checks.append(_check(f"layout.{part}_exact", same,
                                     f"{part}: {int((got[part] != want[part]).any(dim=1).sum())} token(s) are not "
                                     f"copied bit for bit"))
        checks += _mha_numerics(case, targets, got, max_ulp, stats)
    elif targets.tokens.numel():
        checks += _indexer_numerics(case, targets, got, want, max_ulp, stats)
    mismatched = int(differ.sum())
    stats["mismatched_bytes"] = mismatched
    checks.append(_check("bit_exact.bytes", mismatched == 0,
                         f"{mismatched} of {int(footprint.sum())} written byte(s) differ from the reference"))
    return Grading(checks, grade_reached([c.name for c in checks if not c.passed]), stats)
