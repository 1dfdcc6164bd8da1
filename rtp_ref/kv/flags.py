"""Layout flags: the parameters rtp-llm decides at compile time, as typed, injectable values.

Every flag is declared once, on a field of ``LayoutFlags`` (its metadata holds the ``FlagSpec``:
kind, valid values, meaning). Defaults come from the platform file's ``[layout_flags]`` table, which
must state every flag that has no default of its own (a flag added later has one, so older tables stay
valid); ``--layout-flag KEY=VALUE`` (CLI and pytest) overrides them. An unknown key
or a bad value raises RtpRefError listing what is valid. Nothing here depends on the machine, so any
layout can be built on any platform, CPU included.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields, replace
from enum import Enum
from typing import Any, Protocol

from rtp_ref.errors import RtpRefError
from rtp_ref.fp8.formats import FP8_FORMATS, Fp8Format
from rtp_ref.fp8.rules import ScaleRule  # not fp8.scales: loading a platform table needs no torch

#: ``cache_fp8_format``'s value for "the platform's own fp8 format"
PLATFORM_FORMAT = "platform"
#: the choices of the FP4 flags: the values of rtp_ref.fp4's ``PayloadDivision`` and ``NegativeZero`` (spelled here
#: because loading a platform table imports no torch; tests/kv checks they agree)
FP4_VALUE_QUOTIENTS = ("ieee_div", "reciprocal_mul")
FP4_NEGATIVE_ZEROS = ("keep", "positive")
#: the choices of ``nvfp4_v_scale_order``: the values of rtp_ref.kv.nvfp4_page's ``ScaleOrder``
NVFP4_SCALE_ORDERS = ("swizzled_4_token", "linear")
#: the choices of ``padding_slot`` (rtp_ref.kv.padding): which slot values an engine's padding tokens carry
PADDING_SLOTS = ("negative", "zero")


class FlagSource(Protocol):
    """Where layout flags come from: a platform table (rtp_ref.platform.Platform is one), named for errors,
    with its own fp8 format (what ``cache_fp8_format = "platform"`` means)."""

    @property
    def source(self) -> str: ...

    @property
    def layout_flags(self) -> Mapping[str, Any]: ...

    @property
    def element_format(self) -> Fp8Format: ...


class LoraAlignment(str, Enum):
    """What fp8_ds_mla does when ``kv_lora_rank`` is not a multiple of its 128-value scale tile."""

    #: refuse, with a message saying what to change (rtp-llm PR behaviour)
    STRICT = "strict"
    #: allocate ceil(R / 128) scales: the last tile is partial, never under-allocated
    ROUND_UP = "round_up"


class IndexerScaleApply(str, Enum):
    """How the indexer write applies a slice's scale to its values before encoding them."""

    #: ``x / scale`` (vLLM)
    DIVIDE = "divide"
    #: ``x * (1 / scale)``, the reciprocal rounded to fp32 first (AMD AITER)
    RECIPROCAL_MULTIPLY = "reciprocal_multiply"


class FlagKind(str, Enum):
    """How a flag's value is written in a platform file and on the command line."""

    BOOL = "bool"
    NUMBER = "number"
    CHOICE = "choice"


@dataclass(frozen=True)
class FlagSpec:
    """One flag's type, valid values and meaning (``choices`` only for CHOICE flags)."""

    kind: FlagKind
    doc: str
    choices: tuple[str, ...] = ()
    convert: Callable[[str], Any] = str
    #: the flag changes only a scale the cache stores, which its reader decodes with as stored, and the values
    #: divided by it (or only a zero's sign, which a reader decodes alike): writers may differ in it (a platform
    #: table's ``[[conventions]]`` may set only such flags)
    stored_scale: bool = False

    def valid_text(self) -> str:
        """The valid values, as an error message lists them."""
        if self.kind is FlagKind.BOOL:
            return "true or false"
        if self.kind is FlagKind.NUMBER:
            return "a finite number > 0"
        return ", ".join(self.choices)

    def from_toml(self, where: str, name: str, value: Any) -> Any:
        """Check a value read from a platform file and return it typed."""
        if self.kind is FlagKind.BOOL:
            ok = isinstance(value, bool)
        elif self.kind is FlagKind.NUMBER:
            ok = isinstance(value, int | float) and not isinstance(value, bool) and _positive_finite(value)
        else:
            ok = isinstance(value, str) and value in self.choices
        if not ok:
            raise RtpRefError(f"{where}: flag {name!r} has {value!r}; valid values: {self.valid_text()}")
        return self._typed(value)

    def from_text(self, where: str, name: str, text: str) -> Any:
        """Parse a ``KEY=VALUE`` override's value and return it typed."""
        if self.kind is FlagKind.BOOL and text.lower() in ("true", "false"):
            return text.lower() == "true"
        if self.kind is FlagKind.NUMBER:
            try:
                number = float(text)
            except ValueError:
                number = math.nan
            if _positive_finite(number):
                return number
        if self.kind is FlagKind.CHOICE and text in self.choices:
            return self._typed(text)
        raise RtpRefError(f"{where}: flag {name!r} has {text!r}; valid values: {self.valid_text()}")

    def _typed(self, value: Any) -> Any:
        if self.kind is FlagKind.NUMBER:
            return float(value)
        if self.kind is FlagKind.CHOICE:
            return self.convert(value)
        return value


def _positive_finite(value: float) -> bool:
    return math.isfinite(value) and value > 0


def _flag(spec: FlagSpec) -> dict[str, FlagSpec]:
    """Field metadata declaring a flag (read back into ``FLAG_SPECS``)."""
    return {"flag": spec}


def _choice(default: str, choices: tuple[str, ...], doc: str, stored_scale: bool = False) -> Any:
    """A string CHOICE flag's dataclass field: ``default`` among ``choices``, documented by ``doc``."""
    return field(default=default, metadata=_flag(FlagSpec(FlagKind.CHOICE, doc, choices, stored_scale=stored_scale)))


def _convention(default: str, choices: tuple[str, ...], doc: str) -> Any:
    """A string CHOICE flag writers may differ in (``FlagSpec.stored_scale``): a platform table's
    ``[[conventions]]`` may set it."""
    return _choice(default, choices, doc, stored_scale=True)


@dataclass(frozen=True)
class LayoutFlags:
    """The typed layout flags; build with ``resolve_flags``. ``FLAG_SPECS`` describes each one."""

    compact_fp8_for_sparse: bool = field(
        metadata=_flag(
            FlagSpec(
                FlagKind.BOOL,
                "rtp-llm's *sparse* fp8 MLA spec uses fp8_rocm_compact (true) or fp8_ds_mla (false); "
                "rtp-llm decides this with #if USING_ROCM, the reference takes it as a parameter",
            )
        )
    )
    lora_alignment: LoraAlignment = field(
        metadata=_flag(
            FlagSpec(
                FlagKind.CHOICE,
                "fp8_ds_mla with kv_lora_rank % 128 != 0: strict refuses with an actionable message, "
                "round_up allocates ceil(R/128) scales",
                tuple(a.value for a in LoraAlignment),
                LoraAlignment,
            )
        )
    )
    ds_mla_scale_rule: ScaleRule = field(
        metadata=_flag(
            FlagSpec(
                FlagKind.CHOICE,
                "fp8_ds_mla tile scale: amax_div = max(amax/divisor, floor); pow2_ceil = the next power of two of that",
                tuple(r.value for r in ScaleRule),
                ScaleRule,
            )
        )
    )
    ds_mla_scale_floor: float = field(
        metadata=_flag(
            FlagSpec(FlagKind.NUMBER, "smallest fp8_ds_mla tile scale (FLT_MIN in rtp-llm/vLLM, 1e-4 in FlashMLA)",
                     stored_scale=True)
        )
    )
    model1_scale_floor: float = field(
        metadata=_flag(FlagSpec(FlagKind.NUMBER, "smallest fp8_model1_mla tile scale before the power-of-two ceil",
                                stored_scale=True))
    )
    fp8_max_divisor: float = field(
        metadata=_flag(
            FlagSpec(FlagKind.NUMBER, "the fp8 maximum a tile's amax is divided by (448; 224 in vLLM on gfx942)",
                     stored_scale=True)
        )
    )
    cache_fp8_format: str = field(
        metadata=_flag(
            FlagSpec(
                FlagKind.CHOICE,
                "the fp8 format the cache's fp8 values are stored in: platform (the table's [fp8] element_format) "
                "or a format of its own (DeepSeek V4 on MI300 keeps one cache in e4m3fnuz, another in e4m3fn)",
                (PLATFORM_FORMAT, *FP8_FORMATS),
            )
        )
    )
    indexer_scale_apply: IndexerScaleApply = field(
        default=IndexerScaleApply.DIVIDE,
        metadata=_flag(
            FlagSpec(
                FlagKind.CHOICE,
                "how the indexer write applies a slice's scale: divide (x / scale, vLLM) or reciprocal_multiply "
                "(x * (1 / scale) in fp32, AMD AITER); default divide",
                tuple(a.value for a in IndexerScaleApply),
                IndexerScaleApply,
                stored_scale=True,
            )
        ),
    )

    fp4_value_quotient: str = _convention(
        "ieee_div",
        FP4_VALUE_QUOTIENTS,
        "how an FP4 layout divides a value by its tile's scale before rounding it to E2M1: ieee_div (x / s, "
        "DeepSeek V4.1, sglang PR #39123) or reciprocal_mul (x * (1/s), the reciprocal rounded to float32, "
        "which can land on the other side of an E2M1 tie); default ieee_div",
    )
    fp4_negative_zero: str = _convention(
        "keep",
        FP4_NEGATIVE_ZEROS,
        "what an FP4 layout stores for a -0.0 quotient: keep (code 0x8: sglang's torch reference, FlashMLA, "
        "ml_dtypes) or positive (code 0x0: sglang's newer kernel adds +0.0 first, PR #39123); a reader "
        "decodes both as zero; default keep",
    )

    nvfp4_value_quotient: str = _convention(
        "reciprocal_mul",
        FP4_VALUE_QUOTIENTS,
        "how the NVFP4 MHA cache divides a value by its block's decode scale s: reciprocal_mul (x * (1/s), "
        "vLLM's and TensorRT-LLM's writers) or ieee_div (x / s); default reciprocal_mul",
    )
    nvfp4_v_scale_order: str = _choice(
        "swizzled_4_token",
        NVFP4_SCALE_ORDERS,
        "the order of the NVFP4 MHA cache's V scales in a block (rtp_ref.kv.nvfp4_page): swizzled_4_token "
        "(each 4 tokens' scales of a head stored transposed, as SM100's trtllm-gen attention reads them, and "
        "vLLM's writer stores them on every GPU, vLLM #50084) or linear (SM120/121's readers, vLLM #55976); "
        "the K scales are linear on both; default swizzled_4_token",
    )

    padding_slot: str = _choice(
        "negative",
        PADDING_SLOTS,
        "the engine's padding convention (rtp_ref.kv.padding): negative (a negative slot writes nothing: "
        "vLLM, rtp-llm) or zero (slot 0 is also padding, a reserved sink no write may change, real tokens "
        "from slot 1: sglang's store_cache reserved_skip_index=0, sglang #32477); default negative",
    )

    def cache_format(self, platform_format: Fp8Format) -> Fp8Format:
        """The format the cache's fp8 values are stored in, on a platform whose own is ``platform_format``."""
        return platform_format if self.cache_fp8_format == PLATFORM_FORMAT else FP8_FORMATS[self.cache_fp8_format]

    def as_dict(self) -> dict[str, bool | float | str]:
        """Flag name -> plain value (enums as their strings), in declaration order."""
        out: dict[str, bool | float | str] = {}
        for name in FLAG_SPECS:
            value = getattr(self, name)
            out[name] = value.value if isinstance(value, Enum) else value
        return out

    def as_text(self) -> str:
        """``name=value, ...`` with values as a platform file writes them (true/false, numbers, names)."""
        shown = []
        for name, value in self.as_dict().items():
            text = (
                ("true" if value else "false")
                if isinstance(value, bool)
                else (f"{value:g}" if isinstance(value, float) else value)
            )
            shown.append(f"{name}={text}")
        return ", ".join(shown)


#: Flag name -> its spec, in declaration order.
FLAG_SPECS: dict[str, FlagSpec] = {f.name: f.metadata["flag"] for f in fields(LayoutFlags)}
#: The flags a platform table may leave out (each has a default of its own), and that default.
FLAG_DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(LayoutFlags) if f.default is not MISSING}


def _unknown(where: str, name: str) -> RtpRefError:
    return RtpRefError(f"{where}: unknown layout flag {name!r}; valid flags: {', '.join(FLAG_SPECS)}")


def check_flag_table(where: str, table: Any) -> LayoutFlags:
    """Validate a platform file's ``[layout_flags]`` table: every flag without a default present, no unknown key.

    ``where`` names the file and table in every error (e.g. ``platforms/cpu.toml [layout_flags]``).
    """
    if not isinstance(table, Mapping):
        raise RtpRefError(f"{where}: expected a table of layout flags ({', '.join(FLAG_SPECS)})")
    missing = [name for name in FLAG_SPECS if name not in table and name not in FLAG_DEFAULTS]
    values = check_flag_values(where, table)
    if missing:
        raise RtpRefError(f"{where}: missing layout flag(s) {', '.join(missing)}; every flag without a default "
                          f"must be stated")
    return LayoutFlags(**values)


def check_flag_values(where: str, table: Mapping[str, Any]) -> dict[str, Any]:
    """Validate some flags as a platform file states them (``{name: value}``): each a known flag with a valid value;
    returns them typed. RtpRefError names ``where``, the flag and what is valid."""
    for name in table:
        if name not in FLAG_SPECS:
            raise _unknown(where, name)
    return {name: FLAG_SPECS[name].from_toml(where, name, value) for name, value in table.items()}


def with_values(flags: LayoutFlags, values: Mapping[str, Any]) -> LayoutFlags:
    """``flags`` with the typed ``values`` (``check_flag_values``'s result) in place of their own."""
    return replace(flags, **values)


def parse_overrides(assignments: Sequence[str]) -> dict[str, str]:
    """``["KEY=VALUE", ...]`` (``--layout-flag``, repeatable) -> {key: raw value}; later ones win.

    Only the syntax is checked here; ``apply_overrides`` checks names and values.
    """
    overrides: dict[str, str] = {}
    for text in assignments:
        key, sep, value = text.partition("=")
        if not sep or not key.strip():
            raise RtpRefError(f"--layout-flag {text!r}: expected KEY=VALUE, e.g. lora_alignment=round_up")
        overrides[key.strip()] = value.strip()
    return overrides


def resolve_flags(platform: FlagSource, overrides: Mapping[str, str] | None = None) -> LayoutFlags:
    """The platform's layout flags with ``overrides`` (raw ``KEY=VALUE`` strings) applied on top.

    The clamp follows the cache's format: overriding ``cache_fp8_format`` with a format other than the
    platform's, and not ``fp8_max_divisor`` too, divides by that format's largest value (a cache kept in
    e4m3fn on gfx942 clamps at 448, not at the platform's 224).
    """
    overrides = overrides or {}
    flags = apply_overrides(check_flag_table(f"{platform.source} [layout_flags]", platform.layout_flags), overrides)
    cache_format = flags.cache_format(platform.element_format)
    if "cache_fp8_format" in overrides and "fp8_max_divisor" not in overrides and (
            cache_format != platform.element_format):
        return replace(flags, fp8_max_divisor=float(cache_format.max_value))
    return flags


def apply_overrides(flags: LayoutFlags, overrides: Mapping[str, str]) -> LayoutFlags:
    """``flags`` with each ``--layout-flag KEY=VALUE`` applied (values as typed on the command line)."""
    values = {name: getattr(flags, name) for name in FLAG_SPECS}
    for name, text in overrides.items():
        if name not in FLAG_SPECS:
            raise _unknown("--layout-flag", name)
        values[name] = FLAG_SPECS[name].from_text("--layout-flag", name, text)
    return LayoutFlags(**values)
