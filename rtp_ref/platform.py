"""Platform tables: load and validate ``platforms/*.toml``, and detect the running target.

A platform file is data only. The loader checks every key against the schema below, so a typo
fails loudly with the file, the key and what is valid, instead of silently taking a default.
Adding a platform is one new file; ``load_platform`` also takes a path to an out-of-tree file.

Every claim a table makes about other projects' code or about hardware (each ``[fp8]``, ``[hardware]``,
``[layout_flags]`` and ``[layout_bytes]`` key, each supported layout, the ``[reader]``, each ``[[deviations]]`` and
each ``[[conventions]]``) can cite its source: ``[sources]`` maps a claim's key (``claim_keys``) to citations, and
``[reader]``, ``[[deviations]]``, ``[[conventions]]`` and a claim stated as a table hold theirs in their own
``source`` text. A malformed citation, or a ``[sources]`` key naming no claim of the table, is refused in every table.
A bundled table must cite every claim (the test suite checks ``Platform.uncited_claims``); a table of the user's may
leave claims uncited, and ``rtp-ref platforms show`` lists them. ``[detect]`` and ``[tolerances]`` are not claims:
they identify a device and state rtp-ref's own policy.

``[[conventions]]`` lists the other writer conventions a table accepts for one write op: where the cache stores the
scale its reader decodes with, writers may compute or apply it differently (AMD AITER's indexer divisor and
reciprocal multiply beside vLLM's on ROCm). Each names the op, the layout flags it sets (only flags whose
``FlagSpec.stored_scale`` says so) and its source; the table's own flags are its first convention.
"""

from __future__ import annotations

import functools
import hashlib
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rtp_ref.errors import RtpRefError
from rtp_ref.fp4.element import E2M1_ELEMENT
from rtp_ref.fp8.elements import ELEMENT_TRAITS, nan_pin_problem
from rtp_ref.fp8.formats import FP8_FORMATS, ConversionMode, Fp8Format
from rtp_ref.grades import GRADES
from rtp_ref.kv.flags import FLAG_SPECS, check_flag_table, check_flag_values
from rtp_ref.kv.layout_records import ALL_LAYOUT_NAMES
from rtp_ref.kv.layout_records import MLA_LAYOUT_NAMES as MLA_LAYOUT_NAMES  # re-exported: one list
from rtp_ref.kv.mha_indexer_records import INDEXER_VARIANTS, MHA_VARIANTS
from rtp_ref.kv.op_names import INDEXER_OP, MHA_OP, MLA_OP
from rtp_ref.kv.reader_convention import TILE_SCALE_READS, ReaderConvention

if TYPE_CHECKING:
    import torch

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

SCHEMA_VERSION = 1
BACKENDS = ("cpu", "cuda", "rocm")
SCALE_FORMATS = ("fp32", "ue8m0")
#: Kinds of conformance case (docs/conformance.md describes each; conformance/matrix.py generates them).
CASE_KINDS = ("random", "edge", "noncontig", "fused", "elem_aligned", "padded", "padding_only", "mismatched_cache",
              "launch", "nan_padding", "nonfinite_nan", "nonfinite_inf", "zero_tile")

FlagValue = bool | int | float | str

#: How a claim is cited: a public file at a commit, with an optional line range, or a heading of one of this project's
#: docs pages (its own measurements, and the facts gathered in docs/sources.md with theirs)
CITATION_FORMS = ("owner/repo@commit:path[#Lfirst[-last]]", "docs/PAGE.md#anchor")
_CITATION = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+@[0-9a-f]{7,40}:[\w./+-]+(?:#L\d+(?:-\d+)?)?"
                       r"|docs/[\w-]+\.md#[a-z0-9-]+")
#: the MHA paged cache's variant names (``[layouts] mha`` lists some of them)
MHA_VARIANT_NAMES = tuple(r.name for r in MHA_VARIANTS)
INDEXER_VARIANT_NAMES = tuple(r.name for r in INDEXER_VARIANTS)
#: the sections whose every key is a claim (``[layouts] supported`` makes one claim per layout)
_CITED_SECTIONS = ("fp8", "hardware", "layout_flags", "layout_bytes")


@dataclass(frozen=True)
class Deviation:
    """A known, accepted way a kernel differs from the contract on this platform (a strict xfail)."""

    kernel: str
    layouts: tuple[str, ...]
    check: str
    reason: str
    source: str
    #: case kinds it occurs in (empty: every kind)
    cases: tuple[str, ...] = ()
    #: torch device types the kernel must run on for it to occur (empty: any)
    devices: tuple[str, ...] = ()
    #: the torch release (MAJOR, MINOR) from which it no longer occurs, for a deviation of torch's own behaviour
    #: that a later release changed (None: every release)
    torch_before: tuple[int, int] | None = None


@dataclass(frozen=True)
class Convention:
    """A writer convention a table accepts for ``op`` beside its own flags: ``flags`` (typed layout flags) in place
    of the table's, as ``source`` shows a public writer doing."""

    name: str
    op: str
    flags: Mapping[str, Any]
    source: str

    def text(self) -> str:
        """``NAME (flag=value, ...)``, as a diagnosis names it."""
        shown = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={getattr(v, 'value', v)}"
                          for k, v in self.flags.items())
        return f"{self.name} ({shown})"


@dataclass(frozen=True)
class Platform:
    """One validated platform table. ``source`` is the file it came from, ``sha256`` its bytes' hash."""

    name: str
    description: str
    backend: str
    cuda_capabilities: tuple[str, ...]
    gcn_archs: tuple[str, ...]
    element_format: Fp8Format
    conversion_mode: ConversionMode
    scale_formats: tuple[str, ...]
    supported_layouts: tuple[str, ...]
    #: fp8 formats with a hardware conversion instruction on this target (``[hardware]``)
    fp8_conversion: tuple[str, ...]
    #: the formats Triton converts with that instruction here, and from which Triton release (None: any)
    triton_fp8_conversion: tuple[str, ...]
    triton_fp8_since: tuple[int, int] | None
    #: the NaN pattern the target's conversion instruction writes, per fp8 format, where known (``[hardware] fp8_nan``)
    hardware_nan: Mapping[str, int]
    #: the one NaN pattern that passes ``bit_exact``, per element format, where a reader depends on it (``[fp8]
    #: nan_pins``; a format not pinned takes any of its NaN encodings: rtp_ref.fp8.elements.NanPolicy)
    nan_pins: Mapping[str, int]
    layout_flags: Mapping[str, FlagValue]
    #: bytes per token of each supported layout at R=512/P=64 (model1: 448/64), stated by hand
    layout_bytes: Mapping[str, int]
    numerics_max_ulp: float
    required_grade: str
    #: whether certification needs input checks ``validated`` (``[tolerances] require_input_checks``)
    require_input_checks: bool
    deviations: tuple[Deviation, ...]
    source: str
    sha256: str
    raw: Mapping[str, Any] = field(repr=False, compare=False)
    #: how the target's attention reader interprets a written cache (``[reader]``; None: the table states none)
    reader: ReaderConvention | None = None
    #: the MHA paged cache's variants the target supports (``[layouts] mha``; None: every one, as for a table
    #: written before the list existed)
    mha_variants: tuple[str, ...] | None = None
    #: the indexer cache's variants (``scale_fmt``) the target supports (``[layouts] indexer``; None: every one)
    indexer_variants: tuple[str, ...] | None = None
    #: each claim's key (``claim_keys``, plus ``reader`` and ``deviations.N``) -> its citations (empty: uncited)
    citations: Mapping[str, tuple[str, ...]] = field(default_factory=dict, compare=False)

    def uncited_claims(self) -> list[str]:
        """The keys of this table's claims that cite no source, in table order (none in a bundled table)."""
        return [claim for claim, cited in self.citations.items() if not cited]
    #: whether certification needs a clean empty call (``[tolerances] require_hardening``)
    require_hardening: bool = False
    #: FP4 formats (``e2m1``) the target converts to with one instruction (``[hardware] fp4_conversion``; empty: none,
    #: so an FP4 cache is written there in software, and certified on this table elsewhere in emulation)
    fp4_conversion: tuple[str, ...] = ()
    #: the other writer conventions the table accepts (``[[conventions]]``, in table order)
    conventions: tuple[Convention, ...] = ()

    def conventions_for(self, op: str) -> tuple[Convention, ...]:
        """The conventions this table accepts for ``op``, in table order."""
        return tuple(c for c in self.conventions if c.op == op)


# ---------------------------------------------------------------------------------------------
# Schema: key -> (python type description, required, check). A check returns an error string or None.

_Check = Callable[[Any], str | None]


def _one_of(valid: Sequence[object]) -> _Check:
    def check(value: Any) -> str | None:
        return None if value in valid else f"valid values: {', '.join(map(str, valid))}"

    return check


def _each_one_of(valid: tuple[str, ...]) -> _Check:
    def check(value: Any) -> str | None:
        bad = [v for v in value if v not in valid]
        return None if not bad else f"unknown {bad!r}; valid values: {', '.join(valid)}"

    return check


def _positive(value: Any) -> str | None:
    return None if value > 0 else "must be > 0"


def _is_str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class _Key:
    kind: str
    test: Callable[[Any], bool]
    required: bool = True
    check: _Check | None = None


def _nan_table(value: Mapping[str, Any], formats: Sequence[str]) -> str | None:
    """Why ``value`` is not a table of NaN patterns (``{e5m2 = 0x7F, source = "..."}``) of ``formats``, or None."""
    source = value.get("source")
    if not isinstance(source, str) or not source.strip():
        return "needs a 'source' naming where the pattern is shown"
    patterns = {name: code for name, code in value.items() if name != "source"}
    if not patterns:
        return f"names no format; valid formats: {', '.join(formats)}"
    for name, code in patterns.items():
        if name not in formats:
            return f"unknown format {name!r}; valid formats: {', '.join(formats)}"
        if not _is_integer(code):
            return f"{name} = {code!r} is not a bit pattern (an integer such as 0x7F)"
        problem = nan_pin_problem(name, code)
        if problem:
            return problem
    return None


def _patterns(table: Mapping[str, Any] | None) -> dict[str, int]:
    """The format -> NaN pattern entries of a validated ``_nan_table`` (empty for None)."""
    return {name: code for name, code in (table or {}).items() if name != "source"}


def _parse_version(text: str) -> tuple[int, int]:
    """``"3.8"`` -> (3, 8)."""
    major, minor = text.split(".")
    return int(major), int(minor)


def _version(value: Any) -> str | None:
    parts = str(value).split(".")
    if len(parts) == 2 and all(part.isdigit() for part in parts):
        return None
    return "valid: a release as MAJOR.MINOR, e.g. 3.8"


_TOP: dict[str, _Key] = {
    "schema_version": _Key(
        "integer", lambda v: isinstance(v, int) and not isinstance(v, bool), check=_one_of([SCHEMA_VERSION])
    ),
    "name": _Key("string", lambda v: isinstance(v, str)),
    "description": _Key("string", lambda v: isinstance(v, str)),
    "backend": _Key("string", lambda v: isinstance(v, str), check=_one_of(BACKENDS)),
}
_SECTIONS: dict[str, dict[str, _Key]] = {
    "detect": {
        "cuda_capabilities": _Key("list of strings", _is_str_list, required=False),
        "gcn_archs": _Key("list of strings", _is_str_list, required=False),
    },
    "fp8": {
        "element_format": _Key("string", lambda v: isinstance(v, str), check=_one_of(sorted(FP8_FORMATS))),
        "conversion_mode": _Key(
            "string", lambda v: isinstance(v, str), check=_one_of([m.value for m in ConversionMode])
        ),
        "scale_formats": _Key("list of strings", _is_str_list, check=_each_one_of(SCALE_FORMATS)),
        # a NaN pattern per element format that a reader depends on, with the source showing that reader; none is
        # pinned in a bundled table, so any NaN encoding of a format passes
        "nan_pins": _Key("table of format = NaN pattern, and source", lambda v: isinstance(v, dict), required=False,
                         check=lambda v: _nan_table(v, [n for n, t in ELEMENT_TRAITS.items() if t.nan is not None])),
    },
    "layouts": {
        "supported": _Key("list of strings", _is_str_list, check=_each_one_of(MLA_LAYOUT_NAMES)),
        # the MHA paged cache's variants (every one where the key is absent): NVFP4 needs an FP4-converting GPU's
        # readers
        "mha": _Key("list of strings", _is_str_list, required=False, check=_each_one_of(MHA_VARIANT_NAMES)),
        # the DeepSeek indexer cache's scale formats (every one where the key is absent): mxfp4 needs its reader
        "indexer": _Key("list of strings", _is_str_list, required=False, check=_each_one_of(INDEXER_VARIANT_NAMES)),
    },
    # Bytes per token of each supported layout at R=512/P=64 (model1 448/64), written by hand from the
    # kernels' sources: an independent statement that tests/kv compares with what rtp_ref.kv derives.
    "layout_bytes": {
        name: _Key("integer", _is_integer, required=False, check=_positive) for name in MLA_LAYOUT_NAMES
    },
    "tolerances": {
        "numerics_max_ulp": _Key("number", _is_number, check=_positive),
        "required_grade": _Key("string", lambda v: isinstance(v, str), check=_one_of(GRADES)),
        # true: a kernel must refuse bad arguments (an out-of-range slot) to be certified; engines usually
        # own slot validity, so no bundled table asks for it
        "require_input_checks": _Key("boolean", lambda v: isinstance(v, bool), required=False),
        # true: a kernel's empty call (no tokens) must return cleanly; engines do not make it, so no bundled table asks
        "require_hardening": _Key("boolean", lambda v: isinstance(v, bool), required=False),
    },
}
#: ``[hardware]``, optional (a table without it, written before it existed, means "no instruction"): the fp8
#: formats the target converts to with one instruction, what the CUDA C++ kernels may use (fp8_conversion)
#: and what Triton emits it for (triton_fp8_conversion, from release triton_fp8_since)
_HARDWARE: dict[str, _Key] = {
    "fp8_conversion": _Key("list of strings", _is_str_list, check=_each_one_of(tuple(sorted(FP8_FORMATS)))),
    "triton_fp8_conversion": _Key("list of strings", _is_str_list, check=_each_one_of(tuple(sorted(FP8_FORMATS)))),
    "triton_fp8_since": _Key("string", lambda v: isinstance(v, str), required=False, check=_version),
    # the FP4 element formats the target converts to with one instruction (E2M1: sm_100a and later, CDNA4)
    "fp4_conversion": _Key("list of strings", _is_str_list, required=False, check=_each_one_of((E2M1_ELEMENT.name,))),
    # what the instruction writes for a NaN input, per format of fp8_conversion, with the source that shows it
    "fp8_nan": _Key("table of format = NaN pattern, and source", lambda v: isinstance(v, dict), required=False,
                    check=lambda v: _nan_table(v, sorted(FP8_FORMATS))),
}
#: ``[reader]``, optional: the target's attention reader (``ReaderConvention``)
_READER: dict[str, _Key] = {
    "name": _Key("string", lambda v: isinstance(v, str) and v.strip() != ""),
    "tile_scale": _Key("string", lambda v: isinstance(v, str), check=_one_of(TILE_SCALE_READS)),
    "element_format": _Key("string", lambda v: isinstance(v, str), check=_one_of(sorted(FP8_FORMATS))),
    "source": _Key("string", lambda v: isinstance(v, str) and v.strip() != ""),
    # the layouts this reader reads: MLA layouts, described ones included (rtp_ref.kv.layout_records)
    "reads": _Key("list of strings", _is_str_list, required=False, check=_each_one_of(ALL_LAYOUT_NAMES)),
}
_DEVIATION: dict[str, _Key] = {
    "kernel": _Key("string", lambda v: isinstance(v, str)),
    "layouts": _Key("list of strings", _is_str_list, check=_each_one_of(MLA_LAYOUT_NAMES)),
    "check": _Key("string", lambda v: isinstance(v, str), check=_one_of(GRADES)),
    "reason": _Key("string", lambda v: isinstance(v, str) and v.strip() != ""),
    "source": _Key("string", lambda v: isinstance(v, str) and v.strip() != ""),
    "cases": _Key("list of strings", _is_str_list, required=False, check=_each_one_of(CASE_KINDS)),
    "devices": _Key("list of strings", _is_str_list, required=False, check=_each_one_of(("cpu", "cuda"))),
    "torch_before": _Key("string", lambda v: isinstance(v, str), required=False, check=_version),
}
#: ops a convention may name: the writes (a reader has no writer convention)
CONVENTION_OPS = (MLA_OP, MHA_OP, INDEXER_OP)
_CONVENTION: dict[str, _Key] = {
    "name": _Key("string", lambda v: isinstance(v, str) and v.strip() != ""),
    "op": _Key("string", lambda v: isinstance(v, str), check=_one_of(CONVENTION_OPS)),
    "flags": _Key("table of layout flags", lambda v: isinstance(v, dict) and bool(v)),
    "source": _Key("string", lambda v: isinstance(v, str) and bool(citations_in(v))),
}
# layout_flags: names, types and values belong to the KV room (rtp_ref.kv.flags.check_flag_table).
_OPEN_SECTIONS = ("layout_flags",)


def _validate_table(where: str, table: Mapping[str, Any], keys: Mapping[str, _Key]) -> None:
    for key in table:
        if key not in keys:
            raise RtpRefError(f"{where}: unknown key {key!r}; valid keys: {', '.join(keys)}")
    for key, spec in keys.items():
        if key not in table:
            if spec.required:
                raise RtpRefError(f"{where}: missing required key {key!r} ({spec.kind})")
            continue
        value = table[key]
        if not spec.test(value):
            raise RtpRefError(f"{where}: key {key!r} has {value!r}; expected a {spec.kind}")
        problem = spec.check(value) if spec.check else None
        if problem:
            raise RtpRefError(f"{where}: key {key!r} has {value!r}; {problem}")


def _validate(path: str, data: Mapping[str, Any]) -> None:
    allowed = [*_TOP, *_SECTIONS, "hardware", "reader", *_OPEN_SECTIONS, "deviations", "conventions", "sources"]
    for key in data:
        if key not in allowed:
            raise RtpRefError(f"{path}: unknown key {key!r}; valid keys: {', '.join(allowed)}")
    _validate_table(path, {k: v for k, v in data.items() if k in _TOP}, _TOP)
    for section, keys in _SECTIONS.items():
        table = data.get(section)
        if not isinstance(table, dict):
            raise RtpRefError(f"{path}: missing table [{section}] (keys: {', '.join(keys)})")
        _validate_table(f"{path} [{section}]", table, keys)
    if "hardware" in data:
        if not isinstance(data["hardware"], dict):
            raise RtpRefError(f"{path}: [hardware] must be a table (keys: {', '.join(_HARDWARE)})")
        _validate_table(f"{path} [hardware]", data["hardware"], _HARDWARE)
        unconverted = set(_patterns(data["hardware"].get("fp8_nan"))) - set(data["hardware"]["fp8_conversion"])
        if unconverted:
            raise RtpRefError(f"{path} [hardware]: key 'fp8_nan' names {', '.join(sorted(unconverted))}, which "
                              f"fp8_conversion does not list: a NaN of an instruction the target lacks")
    if "reader" in data:
        if not isinstance(data["reader"], dict):
            raise RtpRefError(f"{path}: [reader] must be a table (keys: {', '.join(_READER)})")
        _validate_table(f"{path} [reader]", data["reader"], _READER)
    check_flag_table(f"{path} [layout_flags]", data.get("layout_flags"))
    stated, supported = set(data["layout_bytes"]), set(data["layouts"]["supported"])
    if stated != supported:
        raise RtpRefError(
            f"{path} [layout_bytes]: must state the bytes per token of exactly the supported layouts; "
            f"missing: {', '.join(sorted(supported - stated)) or 'none'}; "
            f"not supported: {', '.join(sorted(stated - supported)) or 'none'}"
        )
    deviations = data.get("deviations", [])
    if not isinstance(deviations, list):
        raise RtpRefError(f"{path}: 'deviations' must be an array of tables ([[deviations]])")
    for i, dev in enumerate(deviations):
        if not isinstance(dev, dict):
            raise RtpRefError(f"{path} [[deviations]] #{i + 1}: expected a table")
        _validate_table(f"{path} [[deviations]] #{i + 1}", dev, _DEVIATION)
    _validate_conventions(path, data.get("conventions", []))
    detect = data["detect"]
    if data["backend"] == "cuda" and not detect.get("cuda_capabilities"):
        raise RtpRefError(f"{path} [detect]: backend 'cuda' needs key 'cuda_capabilities' (e.g. [\"9.0\"])")
    if data["backend"] == "rocm" and not detect.get("gcn_archs"):
        raise RtpRefError(f"{path} [detect]: backend 'rocm' needs key 'gcn_archs' (e.g. [\"gfx942\"])")


def _validate_conventions(path: str, conventions: Any) -> None:
    """Each ``[[conventions]]`` entry: its keys, a unique name, flags that change only stored scales (a reader
    decodes with the stored scale; any other flag changes what the reader sees, so it is no convention)."""
    if not isinstance(conventions, list):
        raise RtpRefError(f"{path}: 'conventions' must be an array of tables ([[conventions]])")
    names: set[tuple[str, str]] = set()
    for i, entry in enumerate(conventions):
        where = f"{path} [[conventions]] #{i + 1}"
        if not isinstance(entry, dict):
            raise RtpRefError(f"{where}: expected a table")
        _validate_table(where, entry, _CONVENTION)
        if (entry["op"], entry["name"]) in names:
            raise RtpRefError(f"{where}: convention {entry['name']!r} of {entry['op']} is listed twice")
        names.add((entry["op"], entry["name"]))
        check_flag_values(f"{where} flags", entry["flags"])
        seen = [name for name in entry["flags"] if not FLAG_SPECS[name].stored_scale]
        if seen:
            valid = ", ".join(n for n, spec in FLAG_SPECS.items() if spec.stored_scale)
            raise RtpRefError(f"{where} flags: {', '.join(seen)} change(s) what a reader sees, not only a stored "
                              f"scale; valid flags: {valid}")


def claim_keys(data: Mapping[str, Any]) -> list[str]:
    """The ``[sources]`` keys of a validated table's claims, in table order: ``SECTION.KEY`` for each key of
    ``[fp8]``, ``[hardware]``, ``[layout_flags]`` and ``[layout_bytes]``, ``layouts.NAME`` for each supported layout,
    ``layouts.mha.NAME`` for each MHA variant listed, ``layouts.indexer.NAME`` for each indexer variant listed.
    (``[reader]`` and each ``[[deviations]]`` cite in their own ``source``.)"""
    keys = [f"{section}.{key}" for section in _CITED_SECTIONS for key in data.get(section, {})]
    return keys + [f"layouts.{name}" for name in data["layouts"]["supported"]] + [
        f"layouts.mha.{name}" for name in data["layouts"].get("mha", ())] + [
        f"layouts.indexer.{name}" for name in data["layouts"].get("indexer", ())]


def citations_in(text: str) -> tuple[str, ...]:
    """The citations (``CITATION_FORMS``) a free text holds, in order."""
    return tuple(m.group(0) for m in _CITATION.finditer(text))


def _citations(path: str, data: Mapping[str, Any]) -> dict[str, tuple[str, ...]]:
    """Every claim's citations; a ``[sources]`` key naming no claim, or a value that is not one or more
    citations, raises RtpRefError naming the file, the key and what is valid."""
    table = data.get("sources", {})
    if not isinstance(table, dict):
        raise RtpRefError(f"{path}: [sources] must be a table of claim = citation(s)")
    claims = claim_keys(data)
    for key, value in table.items():
        if key not in claims:
            raise RtpRefError(f"{path} [sources]: key {key!r} names no claim of this table; valid keys: "
                              f"{', '.join(claims)}")
        values = [value] if isinstance(value, str) else value
        bad = ([repr(value)] if not isinstance(values, list) or not values else
               [repr(v) for v in values if not isinstance(v, str) or not _CITATION.fullmatch(v)])
        if bad:
            raise RtpRefError(f"{path} [sources] {key!r}: {bad[0]} is not a citation; valid: one or a list of "
                              f"{' or '.join(CITATION_FORMS)}")
    cited = {key: tuple([table[key]] if isinstance(table.get(key), str) else table.get(key, ())) for key in claims}
    for key in claims:  # a claim stated as a table may cite in its own `source` text, as [reader] does
        section, _, name = key.partition(".")
        value = data.get(section, {}).get(name) if section != "layouts" else None
        if isinstance(value, dict) and isinstance(value.get("source"), str):
            cited[key] += citations_in(value["source"])
    if "reader" in data:
        cited["reader"] = citations_in(data["reader"]["source"])
    for i, deviation in enumerate(data.get("deviations", [])):
        cited[f"deviations.{i + 1}"] = citations_in(deviation["source"])
    for i, convention in enumerate(data.get("conventions", [])):
        cited[f"conventions.{i + 1}"] = citations_in(convention["source"])
    return cited


def parse_platform(text: bytes, source: str) -> Platform:
    """Parse and validate one platform file's bytes; ``source`` names it in every error."""
    try:
        data = tomllib.loads(text.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise RtpRefError(f"{source}: not a valid TOML file: {exc}") from exc
    _validate(source, data)
    fp8 = data["fp8"]
    hardware = data.get("hardware", {})
    return Platform(
        name=data["name"],
        description=data["description"],
        backend=data["backend"],
        cuda_capabilities=tuple(data["detect"].get("cuda_capabilities", ())),
        gcn_archs=tuple(data["detect"].get("gcn_archs", ())),
        element_format=FP8_FORMATS[fp8["element_format"]],
        conversion_mode=ConversionMode(fp8["conversion_mode"]),
        scale_formats=tuple(fp8["scale_formats"]),
        supported_layouts=tuple(data["layouts"]["supported"]),
        mha_variants=tuple(data["layouts"]["mha"]) if "mha" in data["layouts"] else None,
        indexer_variants=tuple(data["layouts"]["indexer"]) if "indexer" in data["layouts"] else None,
        fp8_conversion=tuple(hardware.get("fp8_conversion", ())),
        fp4_conversion=tuple(hardware.get("fp4_conversion", ())),
        triton_fp8_conversion=tuple(hardware.get("triton_fp8_conversion", ())),
        triton_fp8_since=_parse_version(hardware["triton_fp8_since"]) if "triton_fp8_since" in hardware else None,
        hardware_nan=_patterns(hardware.get("fp8_nan")),
        nan_pins=_patterns(fp8.get("nan_pins")),
        layout_flags=dict(data["layout_flags"]),
        layout_bytes=dict(data["layout_bytes"]),
        numerics_max_ulp=float(data["tolerances"]["numerics_max_ulp"]),
        required_grade=data["tolerances"]["required_grade"],
        require_input_checks=bool(data["tolerances"].get("require_input_checks", False)),
        deviations=tuple(
            Deviation(d["kernel"], tuple(d["layouts"]), d["check"], d["reason"], d["source"], tuple(d.get("cases", ())),
                      tuple(d.get("devices", ())),
                      _parse_version(d["torch_before"]) if "torch_before" in d else None)
            for d in data.get("deviations", [])
        ),
        source=source,
        sha256=hashlib.sha256(text).hexdigest(),
        raw=data,
        reader=_reader(data.get("reader")),
        citations=_citations(source, data),
        require_hardening=bool(data["tolerances"].get("require_hardening", False)),
        conventions=tuple(Convention(c["name"], c["op"], check_flag_values(source, c["flags"]), c["source"])
                          for c in data.get("conventions", [])),
    )


def _reader(table: Mapping[str, Any] | None) -> ReaderConvention | None:
    if table is None:
        return None
    return ReaderConvention(table["name"], table["tile_scale"], FP8_FORMATS[table["element_format"]],
                            table["source"], tuple(table.get("reads", ())))


def _bundled_files() -> dict[str, Any]:
    try:
        root: Any = resources.files("rtp_ref.platform_tables")
    except ModuleNotFoundError:  # a source checkout on sys.path, not installed: the files themselves
        root = Path(__file__).resolve().parent.parent / "platforms"
    return {p.name[: -len(".toml")]: p for p in root.iterdir() if p.name.endswith(".toml")}


def platform_names() -> list[str]:
    """Names of the bundled platform tables, sorted."""
    return sorted(_bundled_files())


def load_platform(name_or_path: str) -> Platform:
    """Load a bundled platform by name (``cuda-sm90``) or any platform file by path (``x/y.toml``).

    The file name must match the ``name`` key, so a table cannot masquerade as another.
    """
    if name_or_path.endswith(".toml") or "/" in name_or_path:
        path = Path(name_or_path)
        try:
            text = path.read_bytes()
        except OSError as exc:
            raise RtpRefError(f"platform file {name_or_path!r} cannot be read: {exc.strerror}") from exc
        source, stem = str(path), path.stem
    else:
        files = _bundled_files()
        if name_or_path not in files:
            raise RtpRefError(
                f"unknown platform {name_or_path!r}; known platforms: {', '.join(sorted(files))} "
                "(or pass a path to a .toml platform file)"
            )
        text = files[name_or_path].read_bytes()
        source, stem = f"platforms/{name_or_path}.toml", name_or_path
    platform = parse_platform(text, source)
    if platform.name != stem:
        raise RtpRefError(f"{source}: key 'name' is {platform.name!r} but the file is named {stem!r}.toml")
    return platform


def all_platforms() -> list[Platform]:
    """Every bundled platform table, validated, sorted by name."""
    return [load_platform(n) for n in platform_names()]


def platform_for_device(backend: str, arch: str, platforms: list[Platform] | None = None) -> Platform:
    """The platform whose ``[detect]`` matches a device.

    ``backend`` is ``cuda`` (``arch`` = ``"major.minor"`` compute capability), ``rocm`` (``arch`` =
    gcnArchName such as ``gfx942:sramecc+:xnack-``; features after ``:`` are ignored) or ``cpu``.
    An unknown GPU raises RtpRefError listing the known platforms: never a silent CPU fallback.
    """
    tables = platforms if platforms is not None else all_platforms()
    if backend == "cpu":
        matches = [p for p in tables if p.backend == "cpu"]
    elif backend == "cuda":
        matches = [p for p in tables if arch in p.cuda_capabilities]
    elif backend == "rocm":
        base = arch.split(":", 1)[0]
        matches = [p for p in tables if base in p.gcn_archs]
    else:
        raise RtpRefError(f"unknown backend {backend!r}; valid backends: {', '.join(BACKENDS)}")
    if len(matches) != 1:
        known = ", ".join(
            f"{p.name} ({'/'.join(p.cuda_capabilities or p.gcn_archs) or p.backend})" for p in tables
        )
        what = "no platform table matches" if not matches else "several platform tables match"
        raise RtpRefError(
            f"{what} the {backend} device {arch!r}; known platforms: {known}. "
            "Pass --platform NAME to choose one, or add a platforms/<name>.toml for this device."
        )
    return matches[0]


def this_device(index: int = 0) -> tuple[str, str]:
    """``(backend, arch)`` of GPU ``index`` (default: device 0, the one torch would use), as
    ``platform_for_device`` takes them: ``("cpu", "")`` when torch sees no GPU."""
    import torch

    if not torch.cuda.is_available():
        return "cpu", ""
    props = torch.cuda.get_device_properties(index)
    if torch.version.hip:
        return "rocm", str(props.gcnArchName)
    return "cuda", f"{props.major}.{props.minor}"


@functools.cache
def gpu_platform(index: int) -> Platform | None:
    """The bundled table of GPU ``index``: None when torch sees no GPU or no table matches it (cached: a
    process's GPUs do not change). What a kernel reads its GPU's ``[hardware]`` from."""
    try:
        platform = platform_for_device(*this_device(index))
    except RtpRefError:
        return None
    return None if platform.backend == "cpu" else platform


def gpu_index(device: torch.device | None = None) -> int:
    """The index of GPU ``device``; for None or an index-less ``cuda``, torch's current device (0 without a GPU)."""
    import torch

    if device is not None and device.index is not None:
        return device.index
    return torch.cuda.current_device() if torch.cuda.is_available() else 0


def detect_platform(platforms: list[Platform] | None = None) -> Platform:
    """Platform of the device torch would use (device 0), or ``cpu`` when torch sees no GPU."""
    return platform_for_device(*this_device(), platforms)


def resolve_platform(name: str) -> Platform:
    """``auto`` -> detect_platform(); anything else -> load_platform(name)."""
    return detect_platform() if name == "auto" else load_platform(name)
