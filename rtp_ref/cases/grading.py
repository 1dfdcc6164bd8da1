"""Grade a kernel's cache write against the reference: named checks, three grades.

Grades, weakest first:

* ``layout``: every byte outside the reference's footprint is unchanged (guard zones, padding rows,
  other entries, pad bytes), every target entry was written, copied fields (bf16/fp16 rope, the
  whole ``auto`` entry) are bit-exact, block-trailing scales sit in their block.
* ``numerics``: scales are finite, positive, of the form the platform requires and equal to the
  contract's value for their tile; every fp8 value decodes to within ``max_ulp`` steps of the fp8
  grid of the exact quotient ``x / scale``; overflow saturates; NaN stays NaN.
* ``bit_exact``: the footprint's bytes equal the reference's, where the reference stored a NaN any NaN encoding of
  the element's format the platform's NaN policy accepts (rtp_ref.fp8.elements.NanPolicy).

The footprint is derived, not assumed: the reference writes into two caches filled with different
canaries, and a byte belongs to the footprint when it changed in either. Each check has a name
(``layout.untouched_bytes``...) so a report says exactly which contract a kernel broke.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import torch

from rtp_ref.cases.cases import ALT_CANARY, CANARY, GUARD_BYTES, CaseInputs, cache_view
from rtp_ref.cases.checks import Check, grade_reached, reaches
from rtp_ref.cases.storage import StorageMap, field_places, kernel_text, slot_namer, slot_width_note, value_text
from rtp_ref.cases.value_checks import MAX_EXAMPLES, ValueGrade, failing, first, fp8_value_checks, with_examples
from rtp_ref.fp8.elements import ANY_NAN, ElementTraits, NanPolicy, dtype_element, element_bits
from rtp_ref.fp8.scales import ScaleRule
from rtp_ref.kv.cache import gather_entries, reference_write_each
from rtp_ref.kv.fields import ELEMENT_INPUT16, Field, Placement, Source, field_element, is_fp8_element, value_bits
from rtp_ref.kv.layouts import MlaLayout


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
        return reaches(self.grade, grade)


@dataclass
class ReferenceImage:
    """The reference's result for a case: the written storage and the footprint mask (CPU)."""

    storage: torch.Tensor
    footprint: torch.Tensor
    dense_footprint: torch.Tensor | None


def _cpu_inputs(inputs: CaseInputs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    # an int32 mapping names the same slots: the reference and the grader work with them as int64
    return inputs.kv_c.cpu(), inputs.k_pe.cpu(), inputs.slot_mapping.cpu().to(torch.int64), inputs.scale.cpu()


def _canary_storages(layout: MlaLayout, inputs: CaseInputs, canaries: tuple[int, ...],
                     padded_rows: int) -> list[torch.Tensor]:
    """CPU copies of the case's storage, one filled with each canary, each written by the reference (the tokens
    encoded once for all of them)."""
    kv_c, k_pe, slots, scale = _cpu_inputs(inputs)
    storages = [torch.full_like(inputs.storage, canary, device="cpu") for canary in canaries]
    num_blocks, block_size = inputs.kv_cache.shape[:2]
    views = [cache_view(layout, storage, num_blocks, block_size, kv_c.dtype, padded_rows) for storage in storages]
    reference_write_each(layout, kv_c, k_pe, views, slots, scale)
    return storages


def reference_image(layout: MlaLayout, inputs: CaseInputs) -> ReferenceImage:
    """Run the reference writer on canary-filled copies of the case's storage (see module doc)."""
    a, b = _canary_storages(layout, inputs, (CANARY, ALT_CANARY), inputs.padded_rows)
    footprint = (a != CANARY) | (b != ALT_CANARY)
    dense = None
    if inputs.padded_rows:
        da, db = _canary_storages(layout, inputs, (CANARY, ALT_CANARY), 0)
        dense = (da != CANARY) | (db != ALT_CANARY)
    return ReferenceImage(a, footprint, dense)


#: each failed check's detail stays one line of about this length
MAX_DETAIL = 400


def element_of(layout: MlaLayout, f: Field, input_dtype: torch.dtype) -> ElementTraits:
    """The element format of field ``f``'s values as the platform's readers see them: the inputs' 16-bit type, or
    the field's element (an fp8 value field's is the layout's fp8 format, resolved when the layout was built)."""
    if f.element == ELEMENT_INPUT16:
        return dtype_element(input_dtype)
    return field_element(f.element)


def mla_storage_map(layout: MlaLayout, inputs: CaseInputs) -> StorageMap:
    """The MLA case storage as the shared locator (rtp_ref.cases.storage) reads it: every entry field of every
    slot (blocks of ``block_size + padded_rows`` rows: every token's per-token bytes, then every token's
    block-trailing bytes, then the padding rows), named by token and slot; a padding row's byte by its block."""
    num_blocks, block_size = inputs.kv_cache.shape[:2]
    rows, entry = block_size + inputs.padded_rows, layout.bytes_per_token
    data, trailing = layout.data_bytes_per_token, layout.trailing_bytes_per_token
    layer = torch.empty(inputs.storage.numel(), dtype=torch.uint8)
    blocks = layer[GUARD_BYTES: GUARD_BYTES + num_blocks * rows * entry].view(num_blocks, rows * entry)
    areas = {Placement.PER_TOKEN: blocks[:, : block_size * data].view(num_blocks, block_size, data),
             Placement.BLOCK_TRAILING: blocks[:, block_size * data: block_size * entry].view(num_blocks, block_size,
                                                                                             trailing)}
    fields = [field_places(f.name, areas[f.placement][:, :, f.offset: f.offset + f.size], layer,
                           element_of(layout, f, inputs.kv_c.dtype), 2) for f in layout.entry_fields]

    def padding_row(pos: int) -> str | None:
        block, within = divmod(pos - GUARD_BYTES, rows * entry)
        return f"cache byte {pos - GUARD_BYTES} (padding row of block {block})" if within >= block_size * entry \
            else None

    return StorageMap(layer.numel(), fields, [("the cache", GUARD_BYTES, GUARD_BYTES + num_blocks * rows * entry)],
                      slot_namer(inputs.slot_mapping, inputs.reserved_slot), padding_row)


@dataclass(frozen=True)
class _Locator:
    """Names places in a case storage and the values there, for the examples of a failed check: the target entries
    (``rows``: (token index in slot_mapping, slot), in grading order), the storage map of every byte, and the
    storage after and before the call (CPU)."""

    layout: MlaLayout
    input_dtype: torch.dtype
    rows: list[tuple[int, int]]
    places: StorageMap
    after: torch.Tensor
    before: torch.Tensor

    def row(self, i: int) -> str:
        """``token 3 (slot 17)`` for target entry ``i``."""
        token, slot = self.rows[i]
        return f"token {token} (slot {slot})"

    def kernel(self, f: Field, row: int, index: int) -> str:
        """What the kernel left in element ``index`` of field ``f`` of target entry ``row``: its value and bytes, or
        ``not written`` where it left the canary."""
        place = self.places.at(f.name, self.rows[row][1], index)
        return kernel_text(place, self.after, self.before)

    def value(self, f: Field, raw: torch.Tensor) -> str:
        """``0.015625 (0x3c800000)``: decoded value and bytes of one element of field ``f``."""
        return value_text(element_of(self.layout, f, self.input_dtype), raw)

    def differing(self, positions: torch.Tensor, got: torch.Tensor, want: torch.Tensor, before: torch.Tensor,
                  versus: str = "contract") -> list[str]:
        """Examples for storage bytes where ``got`` is not ``want``: one per element, the kernel's value (or ``not
        written``) against ``versus``'s (a stray byte's ``untouched`` value as bytes only: it is a canary)."""
        return self.places.examples(positions, got, want, before, versus)


def _untouched_checks(kind: str, before: torch.Tensor, after: torch.Tensor, ref: ReferenceImage,
                      loc: _Locator, reserved: int | None) -> list[Check]:
    changed = after != before
    stray = changed & ~ref.footprint

    def found(name: str, mask: torch.Tensor, head: str) -> Check:
        pos = torch.nonzero(mask).flatten()
        return failing(name, pos.numel() == 0, lambda: with_examples(
            f"{pos.numel()} {head}", loc.differing(pos, after, before, before, "untouched")))

    checks = [found("layout.untouched_bytes", stray, "byte(s) outside the target entries changed")]
    near = ref.footprint.clone()
    near[1:] |= ref.footprint[:-1]
    near[:-1] |= ref.footprint[1:]
    checks.append(found("layout.entry_bounds", stray & near, "byte(s) right next to a target entry changed"))
    if ref.dense_footprint is not None:
        checks.append(found("layout.block_stride", stray & ref.dense_footprint,
                            "stray byte(s) sit where entries would be if blocks were not padded "
                            "(kv_cache.stride(0) ignored)"))
    if kind == "padding_only":
        checks.append(found("layout.negative_slots", changed, "byte(s) changed although every slot was negative"))
    if reserved is not None:
        checks.append(found("layout.reserved_slot", changed & loc.places.slot_mask(reserved),
                            f"byte(s) of slot {reserved}, the engine's reserved padding slot, changed"))
    return checks


def _field_bytes(layout: MlaLayout, entries: torch.Tensor, f: Field) -> torch.Tensor:
    start = layout.entry_offset(f)
    return entries[:, start:start + f.size]


def _element(raw: torch.Tensor, f: Field, row: int, index: int) -> torch.Tensor:
    """The bytes of element ``index`` of field bytes ``raw`` ([rows, f.size]) in row ``row`` (of a format narrower
    than a byte: the byte ``index``, its unit)."""
    size = max(1, value_bits(f.element) // 8)
    return raw[row, index * size:(index + 1) * size]


def _scale_values(f: Field, raw: torch.Tensor) -> torch.Tensor:
    """The values of scale field ``f``'s bytes ``raw`` ``[rows, f.size]`` (float64), by its element's traits."""
    return field_element(f.element).values(raw)


class _NumericsCase:
    """Numerics checks of one fp8 value field, kernel entries against reference entries."""

    def __init__(self, layout: MlaLayout, f: Field, x: torch.Tensor, k_entries: torch.Tensor,
                 r_entries: torch.Tensor, scale_arg: torch.Tensor, max_ulp: float, loc: _Locator) -> None:
        self.layout, self.f, self.max_ulp, self.loc = layout, f, max_ulp, loc
        self.x = x.double()
        self.codes = _field_bytes(layout, k_entries, f)
        self.r_codes = _field_bytes(layout, r_entries, f)
        # an unscaled field's values are the inputs converted: a scale of 1 (rtp_ref.kv.records.UNSCALED)
        self.scale_field = None if f.unscaled else layout.field(f.scale_field or "")
        spec = self.scale_field.tile_scale if self.scale_field else None
        self.tile = spec.tile if spec else f.count
        if self.scale_field is None or self.scale_field.placement is Placement.EXTERNAL:
            one = torch.ones(1) if self.scale_field is None else scale_arg
            self.k_scales = one.double().reshape(1, 1).expand(x.shape[0], 1)
            self.r_scales = self.k_scales
        else:
            # scales in tile order (a field may store them in another: Field.order)
            self.k_raw = self.scale_field.to_natural_order(_field_bytes(layout, k_entries, self.scale_field))
            self.r_raw = self.scale_field.to_natural_order(_field_bytes(layout, r_entries, self.scale_field))
            self.k_scales = _scale_values(self.scale_field, self.k_raw).double()
            self.r_scales = _scale_values(self.scale_field, self.r_raw).double()

    def per_value_scale(self) -> torch.Tensor:
        return self.k_scales.repeat_interleave(self.tile, dim=1)[:, : self.f.count]

    def _scale_example(self, row: int, i: int, contract: bool = True) -> str:
        """``token 3 (slot 17) nope_scale[1]: kernel 0.0123 (0x3c49ba5e) vs contract 0.015625 (...)``: the scale of
        tile ``i``, wherever the field stores it."""
        s = self.scale_field
        assert s is not None, "only a scaled field has scale examples"
        text = f"{self.loc.row(row)} {s.name}[{i}]: kernel {self.loc.kernel(s, row, s.stored_index(i))}"
        return f"{text} vs contract {self.loc.value(s, _element(self.r_raw, s, row, i))}" if contract else text

    def _value_example(self, row: int, col: int, v: torch.Tensor, want: str | None = None) -> str:
        """``token 3 (slot 17) nope[5]: kernel 1.5 (0x3c) vs contract 1.25 (0x3a), x/stored scale 1.27``:
        the stored value against ``want`` (default: the reference's code), and the exact quotient."""
        f, loc = self.f, self.loc
        want = want or loc.value(f, self.r_codes[row, col:col + 1])
        return (f"{loc.row(row)} {f.name}[{col}]: kernel {loc.kernel(f, row, col)} vs contract "
                f"{want}, x/stored scale {float(v[row, col]):.6g}")

    def scale_checks(self) -> list[Check]:
        spec = self.scale_field.tile_scale if self.scale_field else None
        if spec is None or self.scale_field is None:
            return []
        k, r = self.k_scales, self.r_scales
        name = self.scale_field.name
        # where the contract itself stores a NaN scale (a layout whose non-finite policy defines one for a tile
        # holding NaN or inf: rtp_ref.kv.non_finite), the kernel's must be a NaN too
        contract_nan = r.isnan() & k.isnan()
        # and where its tile rule has no floor, a zero amax / 6 stores a zero scale (rtp_ref.fp4.scales.ScaleTraits)
        contract_zero = (r == 0) & (k == 0) if spec.floor == 0 else torch.zeros_like(contract_nan)
        positive = (torch.isfinite(k) & (k > 0)) | contract_nan | contract_zero
        checks = [failing("numerics.scale_positive", bool(positive.all()), lambda: with_examples(
            f"{name}: {int((~positive).sum())} scale(s) are zero, negative, inf or NaN (e.g. a missing floor on an "
            f"all-zero tile)", [self._scale_example(*rc, contract=False) for rc in first(~positive)]))]
        if spec.rule is ScaleRule.POW2_CEIL:
            mantissa, _ = torch.frexp(k)
            bad = ~((mantissa == 0.5) | ~torch.isfinite(k))
            checks.append(failing("numerics.scale_form", not bool(bad.any()), lambda: with_examples(
                f"{name}: {int(bad.sum())} scale(s) are not powers of two; the platform's readers truncate them "
                f"(rule pow2_ceil)", [self._scale_example(*rc) for rc in first(bad)])))
        # pow2_ceil scales are exact; amax_div allows the last bit (x * (1/d) versus x / d)
        equal = (k == r if spec.rule is ScaleRule.POW2_CEIL else (k - r).abs() <= r.abs() * 2.0**-22) | contract_nan
        ok = bool(equal.all())
        checks.append(failing("numerics.scale_value", ok, lambda: with_examples(
            f"{name}: {int((~equal).sum())} scale(s) differ from the contract ({spec.formula()})",
            [self._scale_example(*rc) for rc in first(~equal)])))
        permuted = torch.equal(torch.sort(k, dim=1).values, torch.sort(r, dim=1).values)

        def order() -> str:
            row = int(torch.nonzero((~equal).any(dim=1))[0])
            shown = [" ".join(f"{v:.4g}" for v in t[row, :8].tolist()) for t in (k, r)]
            return (f"{name}: the right scales sit in the wrong tiles (order differs from the layout), e.g. "
                    f"{self.loc.row(row)}: kernel [{shown[0]}] vs contract [{shown[1]}]")

        checks.append(failing("layout.scale_order", ok or not permuted, order))
        return checks

    def value_checks(self) -> tuple[list[Check], dict[str, float]]:
        s = self.per_value_scale()
        spec = self.scale_field.tile_scale if self.scale_field else None
        # the contract's quotient: x / s, or under a rule of reciprocal multiplies x * float32(1 / s) (where 1 / s
        # overflows, as for a subnormal scale, that is inf or NaN, as the writer's own multiply makes it)
        if spec is not None and spec.reciprocal_payload:
            single = s.float()  # the reciprocal in float32, as the contract rounds it (in float64 it cannot overflow)
            v = self.x * (torch.ones_like(single) / single).double()
        else:
            v = self.x / s
        if spec is not None and spec.floor == 0:
            # a rule with no floor stores the values of a tile whose scale is 0 as zeros (b12x's rope skips the
            # reciprocal there): their quotient is 0, not the 0 / 0 the division would make
            v = torch.where(s == 0, torch.zeros_like(v), v)
        graded: ValueGrade = fp8_value_checks(
            self.f.name, self.codes, v, self.layout.element_format, self.layout.conversion_mode, self.max_ulp,
            lambda r, c, want: self._value_example(r, c, v, want))
        ordinary, q = graded.ordinary, graded.decoded
        error = (q - v).abs() * s
        abs_err = float(error.max() if bool(ordinary.all()) else error[ordinary].max()) if bool(ordinary.any()) else 0.0
        return graded.checks, {"max_error_steps": graded.worst_steps, "max_abs_error": abs_err}


def _tile_scaled(layout: MlaLayout, f: Field) -> bool:
    """Whether value field ``f``'s scale is a tile scale the writer computes."""
    return f.scale_field is not None and layout.field(f.scale_field).tile_scale is not None


def _written(k_entries: torch.Tensor, r_entries: torch.Tensor, before: torch.Tensor) -> torch.Tensor:
    """Per target: True when the kernel changed at least one byte the reference changed."""
    ref_changed = r_entries != before
    return ((k_entries != before) & ref_changed).any(dim=1) | ~ref_changed.any(dim=1)


def _copy_check(layout: MlaLayout, f: Field, k_entries: torch.Tensor, r_entries: torch.Tensor,
                loc: _Locator, nan: NanPolicy) -> Check:
    """``layout.<field>_exact``: a 16-bit field must be a bit-for-bit copy of the input, a NaN any NaN ``nan``
    accepts."""
    got, want = _field_bytes(layout, k_entries, f), _field_bytes(layout, r_entries, f)
    element = element_of(layout, f, loc.input_dtype)
    same = nan.matches(element, *(element_bits(b.reshape(-1, element.size)) for b in (want, got)))
    differ = ~same.reshape(got.shape[0], f.count)

    def detail() -> str:
        return with_examples(f"{f.name}: {int(differ.sum())} {f.element} value(s) are not copied bit for bit"
                             f"{pinned_nan(nan)}",
                         [f"{loc.row(r)} {f.name}[{i}]: kernel {loc.kernel(f, r, i)} vs contract "
                          f"{loc.value(f, _element(want, f, r, i))}" for r, i in first(differ)])

    return failing(f"layout.{f.name}_exact", not bool(differ.any()), detail)


def _block_scales_check(layout: MlaLayout, f: Field, entries: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
                        loc: _Locator) -> Check:
    """``layout.block_scales``: every target's block-trailing scale bytes were written (entries: kernel,
    reference, before)."""
    ok = _written(*(_field_bytes(layout, e, f) for e in entries))
    return failing("layout.block_scales", bool(ok.all()), lambda: with_examples(
        f"{f.name}: {int((~ok).sum())} token(s) have no scale bytes at their block-trailing position "
        f"(block_size * {layout.data_bytes_per_token} + t * {layout.trailing_bytes_per_token})",
        [loc.row(i) for i in torch.nonzero(~ok).flatten()[:MAX_EXAMPLES].tolist()]))


def grade_write(layout: MlaLayout, kind: str, inputs: CaseInputs, before: torch.Tensor, after: torch.Tensor,
                ref: ReferenceImage, max_ulp: float, nan: NanPolicy = ANY_NAN) -> Grading:
    """Grade one kernel call. ``before``/``after`` are CPU copies of the case storage around the call; ``nan`` is
    the platform's NaN policy (which NaN encodings pass where the reference stored a NaN).

    A failed check's detail is one line: what was found, then up to ``MAX_EXAMPLES`` examples naming
    the token (its position in slot_mapping) and slot, the field and index, and the kernel's value
    against the contract's (bytes in hex, decoded where the field holds numbers).
    """
    kv_c, k_pe, slots, scale = _cpu_inputs(inputs)
    tokens = slots.shape[0]
    keep = slots >= 0
    targets = slots[keep]
    num_blocks, block_size = inputs.kv_cache.shape[:2]
    loc = _Locator(layout, kv_c.dtype, list(zip(torch.nonzero(keep).flatten().tolist(), targets.tolist(), strict=True)),
                   mla_storage_map(layout, inputs), after, before)
    checks = _untouched_checks(kind, before, after, ref, loc, inputs.reserved_slot)
    views = [cache_view(layout, s, num_blocks, block_size, kv_c.dtype, inputs.padded_rows)
             for s in (after, ref.storage, before)]
    k_entries, r_entries, b_entries = (gather_entries(layout, v, targets) for v in views)
    written = _written(k_entries, r_entries, b_entries)
    checks.append(failing("layout.slot_mapping", bool(written.all()), lambda: with_examples(
        f"{int((~written).sum())} target entr(ies) were never written (the token went elsewhere or nowhere"
        f"{slot_width_note(inputs.slot_mapping)})",
        [loc.row(i) for i in torch.nonzero(~written).flatten()[:MAX_EXAMPLES].tolist()])))
    stats: dict[str, Any] = {"targets": int(targets.numel()), "tokens": tokens}
    values = {Source.KV_C: kv_c[:tokens][keep], Source.K_PE: k_pe[:tokens][keep]}
    for f in layout.entry_fields:
        if f.element == ELEMENT_INPUT16:
            checks.append(_copy_check(layout, f, k_entries, r_entries, loc, nan))
        if f.placement is Placement.BLOCK_TRAILING and f.source is Source.SCALE:
            checks.append(_block_scales_check(layout, f, (k_entries, r_entries, b_entries), loc))
    for f in layout.fields:
        # every scaled value field's scales are checked; its values by the fp8 checks where they are fp8 (E2M1
        # values are graded by their bytes alone)
        if f.source in values and (is_fp8_element(f.element) or _tile_scaled(layout, f)):
            case = _NumericsCase(layout, f, values[f.source], k_entries, r_entries, scale, max_ulp, loc)
            checks += case.scale_checks()
            if is_fp8_element(f.element):
                value_checks, field_stats = case.value_checks()
                checks += value_checks
                stats[f.name] = field_stats
    differ = loc.places.mismatched(after, ref.storage, nan) & ref.footprint
    mismatched = int(differ.sum())
    stats["mismatched_bytes"] = mismatched
    checks.append(failing("bit_exact.bytes", mismatched == 0, lambda: with_examples(
        f"{mismatched} of {int(ref.footprint.sum())} written byte(s) differ from the reference{pinned_nan(nan)}",
        loc.differing(torch.nonzero(differ).flatten(), after, ref.storage, before))))
    return Grading(merge_checks(checks), _grade(checks), stats)


def pinned_nan(nan: NanPolicy) -> str:
    """`` (the table pins NaN: e5m2 0x7f)`` for a failed ``bit_exact.bytes`` detail; "" without pins."""
    return f" ({nan.describe()})" if nan.pins else ""


def _clip(detail: str) -> str:
    """``detail`` cut to MAX_DETAIL characters at the last example that fits."""
    if len(detail) <= MAX_DETAIL:
        return detail
    cut = max(detail.rfind("; ", 0, MAX_DETAIL - 4), detail.rfind(" | ", 0, MAX_DETAIL - 4))
    return f"{detail[:cut if cut > 0 else MAX_DETAIL - 4]} ..."


def merge_checks(checks: list[Check]) -> list[Check]:
    """One entry per check name, in first-seen order: failed if any instance failed (details joined by `` | ``),
    each detail clipped to ``MAX_DETAIL`` characters at an example's end."""
    merged: dict[str, Check] = {}
    for c in checks:
        prev = merged.get(c.name)
        if prev is None:
            merged[c.name] = c
        elif not c.passed:
            detail = c.detail if prev.passed else f"{prev.detail} | {c.detail}"
            merged[c.name] = Check(c.name, False, detail)
    return [dataclasses.replace(c, detail=_clip(c.detail)) for c in merged.values()]


def _grade(checks: list[Check]) -> str:
    return grade_reached([c.name for c in checks if not c.passed])
