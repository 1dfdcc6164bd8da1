"""More MLA layouts as data: a TOML table of layout records (``$RTP_REF_LAYOUTS``), read and checked here.

A table holds ``[[layout]]`` entries, each the keys of one ``rtp_ref.kv.records.LayoutRecord``::

    [[layout]]
    name = "fp8_tile64"
    summary = "nope fp8 in tiles of 64 with inline fp32 scales, 16-bit rope"
    kv_split = "k + v != block: the inline scales belong to neither k nor v"
    sources = "where the layout is specified"
    default_dims = [512, 64]              # optional; also fixed_dims (bool), extra_certified_dims, non_finite
    tile_rule = { tile = 64, rule = "pow2_ceil", floor = 1e-4 }   # rule/floor/divisor: a value or a flag name
    # an FP4 layout's tile rule adds fp4 = { rounding = "rne", ceiling = 448.0, amax_division = "mul_one_sixth" }
    # (and payload, negative_zero: a value or a flag name; non_finite_tile), with E2M1 value fields
    fields = [
      { name = "nope", source = "kv_c", element = "fp8", count = "R", scale = "nope_scale" },
      { name = "nope_scale", source = "scale", element = "fp32", count = "tiles" },
      { name = "rope", source = "k_pe", element = "bf16/fp16", count = "P" },
    ]

``placement`` of a field defaults to ``per_token`` (also ``block_trailing``, ``external``, and ``page_segment``,
which makes the record a described layout that no op certifies: rtp_ref.kv.layout_records). Every mistake
raises RtpRefError naming the file, the entry, the key, the value and what is valid; the field table itself
is checked when the layout is built (rtp_ref.kv.layouts), so a table that cannot build is refused there.
"""

from __future__ import annotations

import sys
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import Any

from rtp_ref.errors import RtpRefError
from rtp_ref.fp8.rules import ScaleRule
from rtp_ref.kv.fields import ELEMENTS, MLA_SOURCES, Placement, Source
from rtp_ref.kv.flags import FLAG_SPECS, FlagKind
from rtp_ref.kv.non_finite import NON_FINITE_CLASSES, NonFinitePolicy
from rtp_ref.kv.records import (
    ELEMENT_FP8,
    NON_FINITE_TILES,
    UNSCALED,
    FieldRecord,
    Fp4Rule,
    LayoutRecord,
    TileRule,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

_RECORD_KEYS = {"name", "summary", "kv_split", "sources", "fields", "tile_rule", "default_dims", "fixed_dims",
                "extra_certified_dims", "non_finite"}
_FIELD_KEYS = {"name", "source", "placement", "element", "count", "scale", "note", "order"}
_RULE_KEYS = {"tile", "rule", "floor", "divisor", "fp4"}
_FP4_KEYS = {"rounding", "ceiling", "amax_division", "payload", "negative_zero", "non_finite_tile"}
_COUNTS = ("R", "P", "tiles")


def load_layout_table(path: str, taken: Collection[str]) -> tuple[LayoutRecord, ...]:
    """The records of the TOML table at ``path``; a name in ``taken`` (a built-in layout) or repeated, an
    unknown key, or a value of the wrong kind raises RtpRefError naming where."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise RtpRefError(f"$RTP_REF_LAYOUTS={path}: cannot read it ({exc.strerror}); valid: a TOML layout table"
                          ) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise RtpRefError(f"$RTP_REF_LAYOUTS={path}: not a valid TOML file: {exc}") from None
    entries = data.get("layout")
    if set(data) != {"layout"} or not isinstance(entries, list) or not entries:
        raise RtpRefError(f"{path}: keys {sorted(data)}; valid: one or more [[layout]] entries and nothing else")
    records: list[LayoutRecord] = []
    for i, entry in enumerate(entries):
        record = _record(f"{path} [[layout]] #{i + 1}", entry)
        if record.name in taken or any(r.name == record.name for r in records):
            raise RtpRefError(f"{path} [[layout]] #{i + 1}: name {record.name!r} is taken; valid: a new name")
        records.append(record)
    return tuple(records)


def _record(where: str, entry: object) -> LayoutRecord:
    table = _table(where, entry, _RECORD_KEYS, required={"name", "summary", "kv_split", "sources", "fields"})
    name = _string(where, table, "name")
    fields = table["fields"]
    if not isinstance(fields, list) or not fields:
        raise RtpRefError(f"{where}: fields = {fields!r}; valid: a list of field tables")
    dims = table.get("default_dims", [512, 64])
    extra = table.get("extra_certified_dims", [])
    fixed = table.get("fixed_dims", False)
    if not isinstance(fixed, bool):
        raise RtpRefError(f"{where}: fixed_dims = {fixed!r}; valid: true or false")
    if not isinstance(extra, list):
        raise RtpRefError(f"{where}: extra_certified_dims = {extra!r}; valid: a list of [R, P] pairs")
    rule = table.get("tile_rule")
    record = LayoutRecord(
        name, _string(where, table, "summary"),
        tuple(_field(f"{where} field #{j + 1}", f) for j, f in enumerate(fields)),
        _string(where, table, "kv_split"), _string(where, table, "sources"),
        tile_rule=None if rule is None else _tile_rule(f"{where} tile_rule", rule),
        default_dims=_dims(where, "default_dims", dims), fixed_dims=fixed,
        extra_certified_dims=tuple(_dims(where, "extra_certified_dims", d) for d in extra),
        non_finite=_non_finite(f"{where} non_finite", table["non_finite"]) if "non_finite" in table else None)
    _check_references(where, record)
    return record


def _check_references(where: str, record: LayoutRecord) -> None:
    """What the fields say of each other: unique names, one ``kv_c`` field of R values and one ``k_pe`` of P,
    every fp8 value naming a scale field, tile-counted scales only with a tile rule (offsets and sizes are
    checked when the layout is built)."""
    names = [f.name for f in record.fields]
    by_name = {f.name: f for f in record.fields}
    if len(set(names)) != len(names):
        raise RtpRefError(f"{where}: field names {names} repeat; valid: one name per field")
    for source, count in ((Source.KV_C, "R"), (Source.K_PE, "P")):
        held = [f for f in record.fields if f.source is source]
        if len(held) != 1 or held[0].count != count:
            raise RtpRefError(f"{where}: needs exactly one {source.value} field with count = {count!r}")
    for f in record.fields:
        scale = by_name.get(f.scale or "")
        if f.element == ELEMENT_FP8 and f.source in (Source.KV_C, Source.K_PE) and f.scale != UNSCALED and (
                scale is None or scale.source is not Source.SCALE):
            raise RtpRefError(f"{where}: fp8 field {f.name!r} declares no scale field (scale = {f.scale!r}); "
                              f"valid: the name of a field with source = 'scale', or {UNSCALED!r}")
        if f.count == "tiles" and record.tile_rule is None:
            raise RtpRefError(f"{where}: field {f.name!r} counts tiles but the layout has no tile_rule; valid: "
                              "add tile_rule = { tile = ..., rule = ..., floor = ... }")
    if (record.tile_rule is None) != (record.non_finite is None):
        raise RtpRefError(f"{where}: non_finite is {'missing' if record.non_finite is None else 'given'} but the "
                          f"layout has {'a' if record.tile_rule else 'no'} tile_rule; valid: a non_finite table "
                          "(nan, inf, zero_tile, source; 'undefined' where no source states it) exactly when the "
                          "layout computes scales (tile_rule)")


def _non_finite(where: str, entry: object) -> NonFinitePolicy:
    """A ``non_finite`` table: what the writer stores for each class (rtp_ref.kv.non_finite), and its source."""
    keys = {*NON_FINITE_CLASSES, "source"}
    table = _table(where, entry, keys, required=keys)
    return NonFinitePolicy(*(_string(where, table, key) for key in (*NON_FINITE_CLASSES, "source")))


def _field(where: str, entry: object) -> FieldRecord:
    table = _table(where, entry, _FIELD_KEYS, required={"name", "source", "element", "count"})
    element = _string(where, table, "element")
    if element != ELEMENT_FP8 and element not in ELEMENTS:
        raise RtpRefError(f"{where}: element = {element!r}; valid: {', '.join([ELEMENT_FP8, *ELEMENTS])}")
    count = table["count"]
    if not (count in _COUNTS or (isinstance(count, int) and not isinstance(count, bool) and count >= 1)):
        raise RtpRefError(f"{where}: count = {count!r}; valid: {', '.join(map(repr, _COUNTS))} or an integer >= 1")
    scale = table.get("scale")
    if scale is not None and not isinstance(scale, str):
        raise RtpRefError(f"{where}: scale = {scale!r}; valid: the name of a scale field, or {UNSCALED!r}")
    order = table.get("order")
    if order is not None and not (isinstance(order, list) and len(order) == 2
                                  and all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in order)):
        raise RtpRefError(f"{where}: order = {order!r}; valid: [rows, cols], two integers >= 1 (scales stored "
                          "transposed)")
    return FieldRecord(_string(where, table, "name"), _choice(where, table, "source", MLA_SOURCES),
                       _choice(where, {"placement": "per_token", **table}, "placement", Placement), element, count,
                       scale, str(table.get("note", "")), order=None if order is None else (order[0], order[1]))


def _tile_rule(where: str, entry: object) -> TileRule:
    table = _table(where, entry, _RULE_KEYS, required={"tile", "rule", "floor"})
    tile = table["tile"]
    if isinstance(tile, bool) or not isinstance(tile, int) or tile < 1:
        raise RtpRefError(f"{where}: tile = {tile!r}; valid: an integer >= 1")
    rule = table["rule"]
    rules = [r.value for r in ScaleRule]
    flags = [n for n, f in FLAG_SPECS.items() if f.choices == tuple(rules)]
    if rule not in rules and rule not in flags:
        raise RtpRefError(f"{where}: rule = {rule!r}; valid: {', '.join(rules + flags)}")
    fp4 = table.get("fp4")
    return TileRule(tile, ScaleRule(rule) if rule in rules else rule, _number(where, table, "floor"),
                    _number(where, {"divisor": "fp8_max_divisor", **table}, "divisor"),
                    None if fp4 is None else _fp4_rule(f"{where} fp4", fp4))


def _fp4_rule(where: str, entry: object) -> Fp4Rule:
    """An FP4 tile rule's conventions (rtp_ref.kv.records.Fp4Rule): their values are checked when the layout is
    built (rtp_ref.fp4 names the valid ones)."""
    table = _table(where, entry, _FP4_KEYS, required={"rounding", "ceiling", "amax_division"})
    ceiling = _number(where, table, "ceiling")
    if isinstance(ceiling, str):
        raise RtpRefError(f"{where}: ceiling = {ceiling!r}; valid: a positive number")
    tile = _choice_text(where, {"non_finite_tile": NON_FINITE_TILES[0], **table}, "non_finite_tile", NON_FINITE_TILES)
    defaults = {"payload": "fp4_value_quotient", "negative_zero": "fp4_negative_zero"}
    return Fp4Rule(_string(where, table, "rounding"), ceiling, _string(where, table, "amax_division"),
                   _string(where, {**defaults, **table}, "payload"),
                   _string(where, {**defaults, **table}, "negative_zero"), tile)


def _choice_text(where: str, table: dict[str, Any], key: str, valid: tuple[str, ...]) -> str:
    value = table[key]
    if value not in valid:
        raise RtpRefError(f"{where}: {key} = {value!r}; valid: {', '.join(valid)}")
    return str(value)


def _number(where: str, table: dict[str, Any], key: str) -> float | str:
    """A positive number, or the name of a number-valued layout flag."""
    value = table[key]
    numbers = [n for n, f in FLAG_SPECS.items() if f.kind is FlagKind.NUMBER]
    if isinstance(value, str) and value in numbers:
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    raise RtpRefError(f"{where}: {key} = {value!r}; valid: a positive number or a layout flag ({', '.join(numbers)})")


def _table(where: str, entry: object, keys: set[str], required: set[str]) -> dict[str, Any]:
    if not isinstance(entry, dict):
        raise RtpRefError(f"{where}: {entry!r} is not a table; valid: a table of {', '.join(sorted(keys))}")
    unknown = sorted(set(entry) - keys)
    missing = sorted(required - set(entry))
    if unknown or missing:
        what = f"unknown key {unknown[0]!r}" if unknown else f"missing key {missing[0]!r}"
        raise RtpRefError(f"{where}: {what}; valid keys: {', '.join(sorted(keys))} (required: "
                          f"{', '.join(sorted(required))})")
    return entry


def _string(where: str, table: dict[str, Any], key: str) -> str:
    value = table[key]
    if not isinstance(value, str) or not value:
        raise RtpRefError(f"{where}: {key} = {value!r}; valid: a non-empty string")
    return value


def _choice(where: str, table: dict[str, Any], key: str, members: Iterable[Source | Placement]) -> Any:
    value = table[key]
    by_value = {m.value: m for m in members}
    if value not in by_value:
        raise RtpRefError(f"{where}: {key} = {value!r}; valid: {', '.join(by_value)}")
    return by_value[value]


def _dims(where: str, key: str, value: object) -> tuple[int, int]:
    if (not isinstance(value, list) or len(value) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in value)):
        raise RtpRefError(f"{where}: {key} = {value!r}; valid: [kv_lora_rank, rope_dim], integers >= 1")
    return value[0], value[1]
