"""Which contract a failing kernel follows: the reference re-run under known alternative contracts.

A failed ``numerics`` or ``bit_exact`` grade says *that* a kernel's bytes are wrong; a vendor needs
to know *which* contract its kernel implements instead. ``diagnose_contract`` re-runs the reference
writer under a small, fixed set of alternatives of the platform's ``WriteContract`` and reports
the first one that reproduces every byte of the kernel's write on the reference footprint.

The set is generated from data, not listed per layout:

* one variation per alternative value of each layout flag (``FLAG_SPECS``: the other choices of a
  choice flag, the other side of a bool, the ``NUMBER_FLAG_VALUES`` of a number flag), kept only
  when it changes the layout's field table (so ``model1_scale_floor`` is tried for fp8_model1_mla
  only, and no flag at all for the per-tensor layouts);
* every other fp8 element format and the other conversion mode (layouts with fp8 fields);
* the inputs' 16-bit patterns read as the other 16-bit float type, for the tile-scale computation
  only (a kernel that took the amax of an fp16 input's raw bits as bf16) and for everything;
* then every combination of variations of two or three different flags (``ds_mla_scale_rule`` with
  ``ds_mla_scale_floor`` is one writer's convention against another's);
* then the contract of every bundled platform table (a kernel bound to the wrong table).

Alternatives that describe the same contract as an earlier one, or as the platform's, are dropped.

Variations come first, so the reported alternative is the smallest change that explains the bytes;
at most ``MAX_ALTERNATIVES`` are tried. Everything runs on the CPU and only for failed cases.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

import torch

from rtp_ref.cases.cases import CaseInputs, cache_view
from rtp_ref.contract import WriteContract
from rtp_ref.errors import RtpRefError
from rtp_ref.fp8 import FLT_MIN, FP8_FORMATS, ConversionMode
from rtp_ref.kv.cache import gather_entries
from rtp_ref.kv.entries import encode_entries, encode_tiled
from rtp_ref.kv.fields import Source, is_fp8_element
from rtp_ref.kv.flags import FLAG_SPECS, FlagKind
from rtp_ref.kv.layouts import MlaLayout
from rtp_ref.platform import all_platforms

#: The values public writers use for each number flag (the flag docs in rtp_ref.kv.flags name them):
#: tile-scale floors FLT_MIN (rtp-llm, vLLM) and 1e-4 (FlashMLA); divisors 448 and 224 (vLLM on gfx942).
NUMBER_FLAG_VALUES: dict[str, tuple[float, ...]] = {
    "ds_mla_scale_floor": (1e-4, FLT_MIN),
    "model1_scale_floor": (1e-4, FLT_MIN),
    "fp8_max_divisor": (448.0, 224.0),
}
#: Reference writes per diagnosis, at most (beyond it the last alternatives, platform tables first, are dropped).
MAX_ALTERNATIVES = 20
#: Combinations of flag variations tried, by size (pairs and triples).
_COMBINATION_SIZES = (2, 3)

_OTHER_16BIT = {torch.bfloat16: torch.float16, torch.float16: torch.bfloat16}
_DTYPE_TEXT = {torch.bfloat16: "bf16", torch.float16: "fp16"}


@dataclass(frozen=True)
class Diagnosis:
    """What ``diagnose_contract`` found for one case.

    ``platform`` is the platform's contract in words (``key=value, ...``, only the parts that apply
    to the layout); ``follows_platform`` whether the kernel's bytes are the platform contract's
    (then nothing else was tried); ``match`` the alternative that reproduces the kernel's bytes, in
    the same words, or None; ``scales_match`` (only without a full match) the contract whose scale
    bytes alone match, or None; ``tried`` the number of alternatives compared; ``summary`` one line
    naming only the parts that differ.
    """

    platform: str
    follows_platform: bool
    match: str | None
    scales_match: str | None
    tried: int
    summary: str


@dataclass(frozen=True)
class _Candidate:
    """One contract to re-run the reference under: the write contract and how the inputs are read."""

    contract: WriteContract
    #: the dtype the inputs' 16-bit patterns are read as when computing tile scales
    scale_inputs: torch.dtype
    #: ... and when quantizing (or copying) the values
    value_inputs: torch.dtype


def _value_text(value: object) -> str:
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "FLT_MIN" if value == FLT_MIN else f"{value:g}"
    return str(value)


def _has_fp8(layout: MlaLayout) -> bool:
    """Whether the layout stores values in its fp8 format (a scale field's own element is no such value)."""
    return any(is_fp8_element(f.element) for f in layout.fields if f.source in (Source.KV_C, Source.K_PE))


def _has_tile_scales(layout: MlaLayout) -> bool:
    return any(f.tile_scale is not None for f in layout.fields)


def _geometry(layout: MlaLayout) -> tuple[tuple[str, str, int, int], ...]:
    """Where each field's bytes sit: alternatives must share it to be compared byte for byte."""
    return tuple((f.name, f.placement.value, f.offset, f.size) for f in layout.fields)


def _layout_or_none(contract: WriteContract, name: str, dims: tuple[int, int]) -> MlaLayout | None:
    try:
        return contract.layout(name, *dims)
    except RtpRefError:  # an alternative this R/P cannot be built under (lora_alignment=strict)
        return None


def _flag_values(name: str, current: object) -> list[object]:
    spec = FLAG_SPECS[name]
    if spec.kind is FlagKind.BOOL:
        return [not current]
    if spec.kind is FlagKind.CHOICE:
        return [v for v in (spec.convert(c) for c in spec.choices) if v != current]
    return [v for v in NUMBER_FLAG_VALUES.get(name, ()) if v != current]


def _flag_changes(base: WriteContract, layout: MlaLayout, dims: tuple[int, int]) -> dict[str, list[object]]:
    """Flag name -> the alternative values that change this layout's field table (same byte geometry)."""
    changes: dict[str, list[object]] = {}
    for name in FLAG_SPECS:
        for value in _flag_values(name, getattr(base.flags, name)):
            alt = _with_flags(base, {name: value})
            built = _layout_or_none(alt, layout.name, dims)
            if built is not None and built.fields != layout.fields and _geometry(built) == _geometry(layout):
                changes.setdefault(name, []).append(value)
    return changes


def _with_flags(contract: WriteContract, values: dict[str, object]) -> WriteContract:
    return dataclasses.replace(contract, flags=dataclasses.replace(contract.flags, **values))  # type: ignore[arg-type]


def _candidates(base: _Candidate, layout: MlaLayout, dims: tuple[int, int],
                flags: dict[str, list[object]]) -> list[tuple[_Candidate, MlaLayout]]:
    """The alternatives with their layouts, single variations first (see the module doc).

    Only alternatives whose layout builds with the same byte geometry and whose description differs
    from every earlier one (and the platform's) are kept, at most MAX_ALTERNATIVES.
    """
    c = base.contract
    out = [dataclasses.replace(base, contract=_with_flags(c, {n: v})) for n, values in flags.items() for v in values]
    if _has_fp8(layout):
        out += [dataclasses.replace(base, contract=dataclasses.replace(c, element_format=fmt))
                for fmt in FP8_FORMATS.values() if fmt != c.element_format]
        out += [dataclasses.replace(base, contract=dataclasses.replace(c, conversion_mode=mode))
                for mode in ConversionMode if mode is not c.conversion_mode]
        other = _OTHER_16BIT[base.value_inputs]
        if _has_tile_scales(layout):
            out.append(dataclasses.replace(base, scale_inputs=other))
        out.append(dataclasses.replace(base, scale_inputs=other, value_inputs=other))
    for size in _COMBINATION_SIZES:
        for names in itertools.combinations(flags, size):
            for values in itertools.product(*(flags[n] for n in names)):
                out.append(dataclasses.replace(base, contract=_with_flags(c, dict(zip(names, values, strict=True)))))
    # a kernel bound to another platform's table differs in several parts at once
    out += [dataclasses.replace(base, contract=WriteContract.for_platform(p)) for p in all_platforms()]
    seen = [_aspects(base, layout, list(flags))]
    kept: list[tuple[_Candidate, MlaLayout]] = []
    for cand in out:
        alt = _layout_or_none(cand.contract, layout.name, dims)
        aspects = _aspects(cand, layout, list(flags))
        if alt is not None and _geometry(alt) == _geometry(layout) and aspects not in seen:
            seen.append(aspects)
            kept.append((cand, alt))
    return kept[:MAX_ALTERNATIVES]


def _aspects(cand: _Candidate, layout: MlaLayout, flag_names: Sequence[str]) -> dict[str, str]:
    """The parts of a candidate that apply to the layout, as ``name -> value`` text."""
    out: dict[str, str] = {}
    if _has_fp8(layout):
        out["element_format"] = cand.contract.element_format.name
        out["conversion_mode"] = cand.contract.conversion_mode.value
    for name in flag_names:
        out[name] = _value_text(getattr(cand.contract.flags, name))
    if _has_tile_scales(layout):
        out["scale_inputs_as"] = _DTYPE_TEXT[cand.scale_inputs]
    if _has_fp8(layout):
        out["value_inputs_as"] = _DTYPE_TEXT[cand.value_inputs]
    return out


def _words(aspects: dict[str, str], only: Sequence[str] | None = None) -> str:
    return ", ".join(f"{k}={v}" for k, v in aspects.items() if only is None or k in only)


def _differing(found: dict[str, str], platform: dict[str, str]) -> tuple[str, str]:
    """Both descriptions, naming only the parts in which they differ."""
    keys = [k for k in found if found[k] != platform[k]]
    return _words(found, keys), _words(platform, keys)


def _entries(layout: MlaLayout, kv_c: torch.Tensor, k_pe: torch.Tensor, scale: torch.Tensor,
             cand: _Candidate) -> torch.Tensor:
    """The reference's entries under ``cand`` (``layout`` is the candidate contract's layout)."""
    values = {Source.KV_C: kv_c.view(cand.value_inputs), Source.K_PE: k_pe.view(cand.value_inputs)}
    entries = encode_entries(layout, values[Source.KV_C], values[Source.K_PE], scale)
    if cand.scale_inputs == cand.value_inputs:
        return entries
    # A kernel that took the tile amax of the bits read as another type, then divided the values by
    # those scales: the reference's formulas, with the scales computed from the reinterpreted bits.
    for s_field in layout.fields:
        if s_field.tile_scale is None:
            continue
        v_field = next(v for v in layout.fields if v.scale_field == s_field.name)
        x = values[v_field.source]
        codes, stored = encode_tiled(layout, v_field, x, x.view(cand.scale_inputs))
        start = layout.entry_offset(s_field)
        entries[:, start:start + s_field.size] = stored
        start = layout.entry_offset(v_field)
        entries[:, start:start + v_field.size] = codes
    return entries


def _written_columns(layout: MlaLayout) -> tuple[torch.Tensor, torch.Tensor]:
    """Entry byte indices a writer writes (every field but pad), and which of them hold scales."""
    fields = [f for f in layout.entry_fields if f.source is not Source.PAD]
    columns = torch.cat([torch.arange(layout.entry_offset(f), layout.entry_offset(f) + f.size) for f in fields])
    scales = torch.cat([torch.full((f.size,), f.source is Source.SCALE) for f in fields])
    return columns, scales


def diagnose_contract(layout_name: str, dims: tuple[int, int], contract: WriteContract, inputs: CaseInputs,
                      after: torch.Tensor) -> Diagnosis:
    """Name the contract a kernel's write follows, among the platform's and the module doc's alternatives.

    ``layout_name`` and ``dims`` (R, P) are the case's, ``contract`` the platform's, ``inputs`` the
    case's arguments (any device; read on the CPU) and ``after`` the kernel's storage after the call
    (uint8, the shape of ``inputs.storage``). A match is every byte of the reference footprint equal
    (every byte but pad of every target entry); without one, ``scales_match`` names the first
    contract (the platform's first) whose scale bytes alone are equal. Any kernel output is accepted
    (NaNs, untouched canaries, random bytes); an ``after`` of the wrong shape or dtype raises
    ValueError, an R/P the layout refuses RtpRefError.
    """
    layout = contract.layout(layout_name, *dims)
    kernel = after.detach().cpu()
    if kernel.shape != inputs.storage.shape or kernel.dtype != torch.uint8:
        raise ValueError(f"after: {kernel.dtype} {list(kernel.shape)}; valid: uint8 {list(inputs.storage.shape)} "
                         "(the case storage after the kernel call)")
    kv_c, k_pe, slots, scale = (t.cpu() for t in (inputs.kv_c, inputs.k_pe, inputs.slot_mapping, inputs.scale))
    keep = slots >= 0
    kv_c, k_pe, targets = kv_c[:slots.shape[0]][keep], k_pe[:slots.shape[0]][keep], slots[keep]
    # Compared entry by entry rather than as whole storage images: the footprint is exactly the
    # written bytes of the target entries, and entry-sized tensors keep each candidate a few ms.
    columns, scale_columns = _written_columns(layout)
    num_blocks, block_size = inputs.kv_cache.shape[:2]
    view = cache_view(layout, kernel, num_blocks, block_size, kv_c.dtype, inputs.padded_rows)
    got = gather_entries(layout, view, targets)[:, columns]
    base = _Candidate(contract, kv_c.dtype, kv_c.dtype)
    flags = _flag_changes(contract, layout, dims)
    platform_aspects = _aspects(base, layout, list(flags))
    platform = _words(platform_aspects) or "no numerics parameters (16-bit values copied)"
    want = _entries(layout, kv_c, k_pe, scale, base)[:, columns]
    if torch.equal(got, want):
        return Diagnosis(platform, True, None, None, 0,
                         "the kernel's bytes on the footprint follow this table's contract")
    has_scales = bool(scale_columns.any())

    def scales_equal(want: torch.Tensor) -> bool:
        return has_scales and torch.equal(got[:, scale_columns], want[:, scale_columns])

    scale_match = base if scales_equal(want) else None
    candidates = _candidates(base, layout, dims, flags)
    for tried, (cand, alt_layout) in enumerate(candidates, start=1):
        want = _entries(alt_layout, kv_c, k_pe, scale, cand)[:, columns]
        if torch.equal(got, want):
            aspects = _aspects(cand, layout, list(flags))
            found, required = _differing(aspects, platform_aspects)
            return Diagnosis(platform, False, _words(aspects), None, tried,
                             f"the kernel follows {found}; this table requires {required}")
        if scale_match is None and scales_equal(want):
            scale_match = cand
    summary = f"matches no known contract (tried {len(candidates)})"
    if scale_match is None:
        return Diagnosis(platform, False, None, None, len(candidates), summary)
    aspects = _aspects(scale_match, layout, list(flags))
    found, required = _differing(aspects, platform_aspects)
    scales_text = f"its scale bytes follow {found} (this table requires {required})" if found \
        else "its scale bytes follow this table's contract"
    return Diagnosis(platform, False, None, _words(aspects), len(candidates), f"{summary}; {scales_text}")
