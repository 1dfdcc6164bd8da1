"""Grade a kernel's cache write against the reference: named checks, three grades.

Grades, weakest first:

* ``layout``: every byte outside the reference's footprint is unchanged (guard zones, padding rows,
  other entries, pad bytes), every target entry was written, copied fields (bf16/fp16 rope, the
  whole ``auto`` entry) are bit-exact, block-trailing scales sit in their block.
* ``numerics``: scales are finite, positive, of the form the platform requires and equal to the
  contract's value for their tile; every fp8 value decodes to within ``max_ulp`` steps of the fp8
  grid of the exact quotient ``x / scale``; overflow saturates; NaN stays NaN.
* ``bit_exact``: the footprint's bytes equal the reference's.

The footprint is derived, not assumed: the reference writes into two caches filled with different
canaries, and a byte belongs to the footprint when it changed in either. Each check has a name
(``layout.untouched_bytes``...) so a report says exactly which contract a kernel broke.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from rtp_ref.certify.cases import ALT_CANARY, CANARY, GUARD_BYTES, CaseInputs, cache_view
from rtp_ref.fp8 import FP8_FORMATS, decode, decode_table, decode_ue8m0
from rtp_ref.fp8.formats import ConversionMode
from rtp_ref.fp8.scales import ScaleRule
from rtp_ref.kv.cache import gather_entries, reference_write
from rtp_ref.kv.fields import ELEMENT_FP32, ELEMENT_INPUT16, Field, Placement, Source, is_fp8_element
from rtp_ref.kv.layouts import MlaLayout
from rtp_ref.platform import GRADES


@dataclass(frozen=True)
class Check:
    """One named check and its outcome; ``detail`` says what was found when it failed."""

    name: str
    passed: bool
    detail: str = ""


@dataclass
class Grading:
    """All checks of one case, the grade reached, and error statistics."""

    checks: list[Check]
    grade: str
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> list[str]:
        return [c.name for c in self.checks if not c.passed]

    def reaches(self, grade: str) -> bool:
        """True when the case reached ``grade`` (or a stronger one)."""
        order = ["none", *GRADES]
        return order.index(self.grade) >= order.index(grade)


@dataclass
class ReferenceImage:
    """The reference's result for a case: the written storage and the footprint mask (CPU)."""

    storage: torch.Tensor
    footprint: torch.Tensor
    dense_footprint: torch.Tensor | None


def _cpu_inputs(inputs: CaseInputs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    return inputs.kv_c.cpu(), inputs.k_pe.cpu(), inputs.slot_mapping.cpu(), inputs.scale.cpu()


def _write_on(layout: MlaLayout, inputs: CaseInputs, canary: int, padded_rows: int) -> torch.Tensor:
    kv_c, k_pe, slots, scale = _cpu_inputs(inputs)
    storage = torch.full_like(inputs.storage, canary, device="cpu")
    num_blocks, block_size = inputs.kv_cache.shape[:2]
    view = cache_view(layout, storage, num_blocks, block_size, kv_c.dtype, padded_rows)
    reference_write(layout, kv_c, k_pe, view, slots, scale)
    return storage


def reference_image(layout: MlaLayout, inputs: CaseInputs) -> ReferenceImage:
    """Run the reference writer on canary-filled copies of the case's storage (see module doc)."""
    a = _write_on(layout, inputs, CANARY, inputs.padded_rows)
    b = _write_on(layout, inputs, ALT_CANARY, inputs.padded_rows)
    footprint = (a != CANARY) | (b != ALT_CANARY)
    dense = None
    if inputs.padded_rows:
        da = _write_on(layout, inputs, CANARY, 0)
        db = _write_on(layout, inputs, ALT_CANARY, 0)
        dense = (da != CANARY) | (db != ALT_CANARY)
    return ReferenceImage(a, footprint, dense)


def _where(storage_bytes: int, positions: torch.Tensor, limit: int = 4) -> str:
    """Human description of byte positions in a case storage: guard zones or cache offsets."""
    out = []
    for pos in positions[:limit].tolist():
        if pos < GUARD_BYTES:
            out.append(f"guard byte {pos - GUARD_BYTES} (before the cache)")
        elif pos >= storage_bytes - GUARD_BYTES:
            out.append(f"guard byte +{pos - (storage_bytes - GUARD_BYTES)} (after the cache)")
        else:
            out.append(f"cache byte {pos - GUARD_BYTES}")
    more = positions.numel() - limit
    return ", ".join(out) + (f" and {more} more" if more > 0 else "")


def _untouched_checks(kind: str, before: torch.Tensor, after: torch.Tensor,
                      ref: ReferenceImage) -> list[Check]:
    changed = after != before
    stray = changed & ~ref.footprint
    stray_pos = torch.nonzero(stray).flatten()
    n = before.numel()
    checks = [Check("layout.untouched_bytes", stray_pos.numel() == 0,
                    f"{stray_pos.numel()} byte(s) outside the target entries changed: {_where(n, stray_pos)}")]
    near = ref.footprint.clone()
    near[1:] |= ref.footprint[:-1]
    near[:-1] |= ref.footprint[1:]
    bounds = torch.nonzero(stray & near).flatten()
    checks.append(Check("layout.entry_bounds", bounds.numel() == 0,
                        f"{bounds.numel()} byte(s) right next to a target entry changed: {_where(n, bounds)}"))
    if ref.dense_footprint is not None:
        dense = torch.nonzero(stray & ref.dense_footprint).flatten()
        checks.append(Check("layout.block_stride", dense.numel() == 0,
                            f"{dense.numel()} stray byte(s) sit where entries would be if blocks were not "
                            f"padded (kv_cache.stride(0) ignored): {_where(n, dense)}"))
    if kind == "padding_only":
        moved = torch.nonzero(changed).flatten()
        checks.append(Check("layout.negative_slots", moved.numel() == 0,
                            f"every slot was negative, yet {moved.numel()} byte(s) changed: {_where(n, moved)}"))
    return checks


def _field_bytes(layout: MlaLayout, entries: torch.Tensor, f: Field) -> torch.Tensor:
    start = layout.entry_offset(f)
    return entries[:, start:start + f.size]


def _scale_values(f: Field, raw: torch.Tensor) -> torch.Tensor:
    if f.element == ELEMENT_FP32:
        return raw.contiguous().view(torch.float32)
    return decode_ue8m0(raw)


def _grid(fmt_name: str) -> torch.Tensor:
    table = decode_table(fmt_name).double()
    grid: torch.Tensor = torch.unique(table[torch.isfinite(table)])  # sorted; +0 and -0 collapse
    return grid


def _step_errors(q: torch.Tensor, v: torch.Tensor, fmt_name: str) -> torch.Tensor:
    """|q - v| in units of the fp8 grid spacing around v (float64)."""
    grid = _grid(fmt_name)
    idx = torch.searchsorted(grid, v.contiguous(), right=True).clamp(1, grid.numel() - 1)
    spacing = grid[idx] - grid[idx - 1]
    return (q - v).abs() / spacing


class _NumericsCase:
    """Numerics checks of one fp8 value field, kernel entries against reference entries."""

    def __init__(self, layout: MlaLayout, f: Field, x: torch.Tensor, k_entries: torch.Tensor,
                 r_entries: torch.Tensor, scale_arg: torch.Tensor, max_ulp: float) -> None:
        self.layout, self.f, self.max_ulp = layout, f, max_ulp
        self.x = x.double()
        self.codes = _field_bytes(layout, k_entries, f)
        self.scale_field = layout.field(f.scale_field or "")
        self.tile = self.scale_field.tile_scale.tile if self.scale_field.tile_scale else f.count
        if self.scale_field.placement is Placement.EXTERNAL:
            self.k_scales = scale_arg.double().reshape(1, 1).expand(x.shape[0], 1)
            self.r_scales = self.k_scales
        else:
            self.k_scales = _scale_values(self.scale_field, _field_bytes(layout, k_entries, self.scale_field)).double()
            self.r_scales = _scale_values(self.scale_field, _field_bytes(layout, r_entries, self.scale_field)).double()

    def per_value_scale(self) -> torch.Tensor:
        return self.k_scales.repeat_interleave(self.tile, dim=1)[:, : self.f.count]

    def scale_checks(self) -> list[Check]:
        spec = self.scale_field.tile_scale
        if spec is None:
            return []
        k, r = self.k_scales, self.r_scales
        name = self.scale_field.name
        checks = [Check("numerics.scale_positive", bool((torch.isfinite(k) & (k > 0)).all()),
                        f"{name}: {int((~(torch.isfinite(k) & (k > 0))).sum())} scale(s) are zero, negative, "
                        f"inf or NaN (e.g. a missing floor on an all-zero tile)")]
        if spec.rule is ScaleRule.POW2_CEIL:
            mantissa, _ = torch.frexp(k)
            bad = ~((mantissa == 0.5) | ~torch.isfinite(k))
            checks.append(Check("numerics.scale_form", not bool(bad.any()),
                                f"{name}: {int(bad.sum())} scale(s) are not powers of two; the platform's "
                                f"readers truncate them (rule pow2_ceil)"))
        # pow2_ceil scales are exact; amax_div allows the last bit (x * (1/d) versus x / d)
        equal = k == r if spec.rule is ScaleRule.POW2_CEIL else (k - r).abs() <= r.abs() * 2.0**-22
        ok = bool(equal.all())
        checks.append(Check("numerics.scale_value", ok,
                            f"{name}: {int((~equal).sum())} scale(s) differ from the contract "
                            f"({spec.formula()}); e.g. kernel {k[~equal][:3].tolist()} vs {r[~equal][:3].tolist()}"))
        permuted = torch.equal(torch.sort(k, dim=1).values, torch.sort(r, dim=1).values)
        checks.append(Check("layout.scale_order", ok or not permuted,
                            f"{name}: the right scales sit in the wrong tiles (order differs from the layout)"))
        return checks

    def value_checks(self) -> tuple[list[Check], dict[str, float]]:
        fmt = self.layout.element_format
        s = self.per_value_scale()
        v = self.x / s
        q = decode(self.codes, fmt).double()
        nan_in = torch.isnan(v)
        top = fmt.max_value
        over = (v.abs() > top) & ~nan_in
        checks = [Check("numerics.nan", bool(torch.isnan(q[nan_in]).all()),
                        f"{int((~torch.isnan(q[nan_in])).sum())} NaN input(s) were not stored as NaN")]
        if self.layout.conversion_mode is ConversionMode.SATFINITE:
            want = torch.sign(v[over]) * top
            checks.append(Check("numerics.saturation", bool((q[over] == want).all()),
                                f"{int((q[over] != want).sum())} value(s) beyond +-{top:g} were not clamped to "
                                f"+-{top:g} (got e.g. {q[over][q[over] != want][:3].tolist()})"))
        normal = ~(nan_in | over)
        steps = _step_errors(q[normal], v[normal], fmt.name)
        ok = bool((steps <= self.max_ulp).all()) if steps.numel() else True
        worst = float(steps.max()) if steps.numel() else 0.0
        if ok:
            checks.append(Check("numerics.error_bound", True))
        else:
            other = [g for g in FP8_FORMATS if g != fmt.name
                     and bool((_step_errors(decode(self.codes, g).double()[normal], v[normal], fmt.name)
                               <= self.max_ulp).all())]
            if other:
                checks.append(Check("numerics.element_format", False,
                                    f"{self.f.name}: the bytes are {other[0]}, not the platform's {fmt.name}"))
            checks.append(Check("numerics.error_bound", False,
                                f"{self.f.name}: {int((steps > self.max_ulp).sum())} value(s) off by more than "
                                f"{self.max_ulp:g} fp8 step(s) of x/scale (worst {worst:.3g} steps)"))
        abs_err = ((q[normal] - v[normal]).abs() * s[normal]).max().item() if steps.numel() else 0.0
        return checks, {"max_error_steps": worst, "max_abs_error": abs_err}


def _written(k_entries: torch.Tensor, r_entries: torch.Tensor, before: torch.Tensor) -> torch.Tensor:
    """Per target: True when the kernel changed at least one byte the reference changed."""
    ref_changed = r_entries != before
    return ((k_entries != before) & ref_changed).any(dim=1) | ~ref_changed.any(dim=1)


def grade_write(layout: MlaLayout, kind: str, inputs: CaseInputs, before: torch.Tensor, after: torch.Tensor,
                ref: ReferenceImage, max_ulp: float) -> Grading:
    """Grade one kernel call. ``before``/``after`` are CPU copies of the case storage around the call."""
    checks = _untouched_checks(kind, before, after, ref)
    kv_c, k_pe, slots, scale = _cpu_inputs(inputs)
    tokens = slots.shape[0]
    keep = slots >= 0
    targets = slots[keep]
    num_blocks, block_size = inputs.kv_cache.shape[:2]
    views = [cache_view(layout, s, num_blocks, block_size, kv_c.dtype, inputs.padded_rows)
             for s in (after, ref.storage, before)]
    k_entries, r_entries, b_entries = (gather_entries(layout, v, targets) for v in views)
    written = _written(k_entries, r_entries, b_entries)
    checks.append(Check("layout.slot_mapping", bool(written.all()),
                        f"{int((~written).sum())} target entr(ies) were never written, e.g. slot(s) "
                        f"{targets[~written][:4].tolist()} (the token went elsewhere or nowhere)"))
    stats: dict[str, Any] = {"targets": int(targets.numel()), "tokens": tokens}
    values = {Source.KV_C: kv_c[:tokens][keep], Source.K_PE: k_pe[:tokens][keep]}
    for f in layout.entry_fields:
        if f.element == ELEMENT_INPUT16:
            same = torch.equal(_field_bytes(layout, k_entries, f), _field_bytes(layout, r_entries, f))
            checks.append(Check(f"layout.{f.name}_exact", same,
                                f"{f.name}: the {f.element} values must be copied bit for bit"))
        if f.placement is Placement.BLOCK_TRAILING and f.source is Source.SCALE:
            ok = _written(_field_bytes(layout, k_entries, f), _field_bytes(layout, r_entries, f),
                          _field_bytes(layout, b_entries, f))
            checks.append(Check("layout.block_scales", bool(ok.all()),
                                f"{f.name}: {int((~ok).sum())} token(s) have no scale bytes at their block-trailing "
                                f"position (block_size * {layout.data_bytes_per_token} + t * "
                                f"{layout.trailing_bytes_per_token})"))
    for f in layout.fields:
        if is_fp8_element(f.element) and f.source in values:
            case = _NumericsCase(layout, f, values[f.source], k_entries, r_entries, scale, max_ulp)
            checks += case.scale_checks()
            value_checks, field_stats = case.value_checks()
            checks += value_checks
            stats[f.name] = field_stats
    mismatched = int((after[ref.footprint] != ref.storage[ref.footprint]).sum())
    stats["mismatched_bytes"] = mismatched
    checks.append(Check("bit_exact.bytes", mismatched == 0,
                        f"{mismatched} of {int(ref.footprint.sum())} written byte(s) differ from the reference"))
    return Grading(_merge(checks), _grade(checks), stats)


def _merge(checks: list[Check]) -> list[Check]:
    """One entry per check name: failed if any instance failed (details joined)."""
    merged: dict[str, Check] = {}
    for c in checks:
        prev = merged.get(c.name)
        if prev is None:
            merged[c.name] = c
        elif not c.passed:
            detail = c.detail if prev.passed else f"{prev.detail}; {c.detail}"
            merged[c.name] = Check(c.name, False, detail)
    return list(merged.values())


def _grade(checks: list[Check]) -> str:
    def ok(prefixes: tuple[str, ...]) -> bool:
        return all(c.passed for c in checks if c.name.startswith(prefixes))

    if not ok(("layout.", "support.")):
        return "none"
    if not ok(("numerics.",)):
        return "layout"
    return "bit_exact" if ok(("bit_exact.",)) else "numerics"
