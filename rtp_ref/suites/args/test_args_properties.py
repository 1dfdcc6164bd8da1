"""Properties over random parsers, command lines and environments (hypothesis), through the kit.

Each test checks one property, so a failure is labelled by the property that broke (rtp_ref/suites/findings.py
maps each to its bug), whatever example the random draw found:

* precedence, ``test_command_line_beats_env_beats_default[...]``: every value is the command line's if given,
  else the variable's if set, else the default, through both entry points; one property per way of giving a
  value (a separate token, the ``=`` form, an abbreviated flag, a list variable, a ``store_true`` variable, a
  variable whose value starts with ``-``), each over the values that are plain in every other way;
* round trip, ``test_generated_command_line_round_trips[...]``: parsing the env -> CLI generator's output, with
  the variables unset, gives each option the value its variable held (the default when unset); one property per
  kind of value (numbers, strings, booleans, lists).
"""

from __future__ import annotations

import argparse
import re
import string
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from rtp_ref.suites.args.generator import OptionRecipe, ParserRecipe, build_parser, generated_tokens
from rtp_ref.suites.args.helpers import PREFIX, env_var
from rtp_ref.suites.args.kit import ArgsKit

# The autouse environment fixture runs once per test, not per example: each example sets and
# restores its own variables and resets the kit itself. One bug per report, and no "explain" phase
# (it traces every line and takes seconds): the emulations of rtp-llm run these to fail them.
_SETTINGS = settings(
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    report_multiple_bugs=False,
    phases=[phase for phase in Phase if phase is not Phase.explain],
)

TRUE_WORDS = ("1", "true", "yes", "on", "T")
FALSE_WORDS = ("0", "false", "no", "off", "F")


def _reads_as_option(text: str) -> bool:
    """argparse would take ``text`` for an option: a dash word that is not a plain negative number."""
    return len(text) > 1 and text.startswith("-") and not re.fullmatch(r"-\d+|-\d*\.\d+", text)


@dataclass(frozen=True)
class Kind:
    """One kind of argument: how to register it, its values, and how a value is written in a variable."""

    name: str
    values: st.SearchStrategy[Any]
    option: Callable[[str, Any], OptionRecipe]
    flag_only: bool = False  # store_true: a value of False cannot be written on the command line

    def env_text(self, value: Any, draw: Callable[[st.SearchStrategy[Any]], Any]) -> str:
        if isinstance(value, bool):
            return str(draw(st.sampled_from(TRUE_WORDS if value else FALSE_WORDS)))
        if isinstance(value, list):
            return " ".join(str(v) for v in value)
        return str(value)


def _scalar(type_: str | None = None, **extra: Any) -> Callable[[str, Any], OptionRecipe]:
    def option(flag: str, default: Any) -> OptionRecipe:
        return OptionRecipe(flag, type=type_, default=default, **extra)

    return option


def _store_true(flag: str, default: Any) -> OptionRecipe:
    return OptionRecipe(flag, action="store_true")


#: surrogates cannot be encoded (and an environment cannot hold them)
_SURROGATES: tuple[Literal["Cs"]] = ("Cs",)
_ANY_TEXT = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=_SURROGATES, exclude_characters="\x00"), max_size=10
).filter(lambda s: s != "--")  # argparse reads a lone "--" value as the end of options, on any path
_PLAIN_TEXT = _ANY_TEXT.filter(lambda s: not _reads_as_option(s))
_DASH_TEXT = _ANY_TEXT.map(lambda s: f"-{s}").filter(_reads_as_option)
_PLAIN_FLOAT = st.floats(allow_nan=False, allow_infinity=False, width=32).filter(
    lambda v: not _reads_as_option(str(v)))
#: floats, the exponent-form negatives argparse reads as options (``-1e-05``) drawn from a few (cheap to shrink:
#: a generator command runs once per example)
_ANY_FLOAT = _PLAIN_FLOAT | st.sampled_from([-1e-05, -2.5e-07, -1e-30, -1e16])
_CHOICES = ("red", "green", "blue")

INT = Kind("int", st.integers(-(10**6), 10**6), _scalar("int"))
FLOAT = Kind("float", _PLAIN_FLOAT, _scalar("float"))
TEXT = Kind("str", _PLAIN_TEXT, _scalar())
BOOL = Kind("bool", st.booleans(), _scalar("str2bool"))
CHOICE = Kind("choice", st.sampled_from(_CHOICES), _scalar(choices=_CHOICES))
INTS = Kind("ints", st.lists(st.integers(-99, 99), min_size=1, max_size=3), _scalar("int", nargs="+"))
FLAG = Kind("flag", st.booleans(), _store_true, flag_only=True)
DASH_TEXT = Kind("dash-str", _DASH_TEXT, _scalar())
ANY_FLOAT = Kind("any-float", _ANY_FLOAT, _scalar("float"))
ANY_TEXT = Kind("any-str", _ANY_TEXT, _scalar())
#: kinds whose values are plain in every way the precedence properties vary
PLAIN = (INT, FLOAT, TEXT, BOOL, CHOICE)


@dataclass(frozen=True)
class Spec:
    name: str
    kind: Kind
    default: Any

    @property
    def flag(self) -> str:
        return f"--{self.name}"


@st.composite
def specs(draw: Callable[[st.SearchStrategy[Any]], Any], kinds: Sequence[Kind]) -> list[Spec]:
    names = draw(
        st.lists(
            st.text(string.ascii_lowercase, min_size=1, max_size=3).map(lambda s: f"a{s}_x"),
            min_size=1,
            max_size=5,
            unique=True,
        )
    )
    out = []
    for name in names:
        kind = draw(st.sampled_from(kinds))
        default = False if kind.flag_only else draw(st.none() | kind.values)
        out.append(Spec(name, kind, default))
    return out


def _recipe(chosen: Sequence[Spec]) -> ParserRecipe:
    return ParserRecipe(PREFIX, tuple(spec.kind.option(spec.flag, spec.default) for spec in chosen), "random")


def _abbreviation(flag: str, flags: Sequence[str]) -> str | None:
    for end in range(3, len(flag)):
        prefix = flag[:end]
        if prefix not in flags and [f for f in flags if f.startswith(prefix)] == [flag]:
            return prefix
    return None


def _cli_tokens(spec: Spec, value: Any, form: str, flags: Sequence[str]) -> list[str]:
    """``value`` for ``spec`` written in ``form`` (separate / equals / abbreviated, a separate token)."""
    flag = (_abbreviation(spec.flag, flags) or spec.flag) if form == "abbreviated" else spec.flag
    if spec.kind.flag_only:
        return [flag] if value else []
    if isinstance(value, list):
        return [flag, *map(str, value)]
    text = str(value).lower() if isinstance(value, bool) else str(value)
    return [f"{flag}={text}"] if form == "equals" else [flag, text]


def _parse(prop: str, parser: Any, argv: list[str], environ: dict[str, str], via_sys_argv: bool
           ) -> argparse.Namespace:
    with pytest.MonkeyPatch.context() as patch:
        for name, text in environ.items():
            patch.setenv(name, text)
        try:
            if via_sys_argv:
                patch.setattr(sys, "argv", ["prog", *argv])
                parsed: argparse.Namespace = parser.parse_args()
            else:
                parsed = parser.parse_args(argv)
            return parsed
        except SystemExit as exc:
            pytest.fail(f"property {prop!r} broke: the parser exited with {exc.code} for argv={argv} "
                        f"environ={environ}")


@dataclass(frozen=True)
class Precedence:
    """One precedence property: the kinds of its options and how its command-line values are written (None: no
    value on the command line, the environment alone against the defaults)."""

    kinds: tuple[Kind, ...]
    form: str | None


PRECEDENCE = {
    "separate-token": Precedence(PLAIN, "separate"),
    "equals-form": Precedence(PLAIN, "equals"),
    "abbreviated": Precedence(PLAIN, "abbreviated"),
    "list-values": Precedence((INTS,), "separate"),
    "store-true": Precedence((FLAG,), "separate"),
    # bug 7 is the environment's alone: a command-line value would only make the failing case rarer to draw
    "dash-values": Precedence((DASH_TEXT,), None),
}


@pytest.mark.parametrize("prop", PRECEDENCE)
@_SETTINGS
@given(data=st.data())
def test_command_line_beats_env_beats_default(args_kit: ArgsKit, prop: str, data: st.DataObject) -> None:
    """Bugs 1, 2, 5, 6 and 7, one per property, over random parsers and both entry points."""
    args_kit.reset()
    rule = PRECEDENCE[prop]
    chosen = data.draw(specs(rule.kinds))
    parser = build_parser(args_kit, _recipe(chosen))
    flags = ["-h", "--help", *(s.flag for s in chosen)]
    argv: list[str] = []
    environ: dict[str, str] = {}
    expected: dict[str, Any] = {}
    for spec in chosen:
        expected[spec.name] = spec.default
        if data.draw(st.booleans(), label=f"{spec.name} in env"):
            value = data.draw(spec.kind.values, label=f"{spec.name} env value")
            environ[env_var(spec.name)] = spec.kind.env_text(value, data.draw)
            expected[spec.name] = value if not spec.kind.flag_only or value else spec.default
        if rule.form is not None and data.draw(st.booleans(), label=f"{spec.name} on the command line"):
            value = data.draw(spec.kind.values, label=f"{spec.name} value")
            tokens = _cli_tokens(spec, value, rule.form, flags)
            if tokens:
                argv += tokens
                expected[spec.name] = value
    namespace = _parse(prop, parser, argv, environ, data.draw(st.booleans(), label="via sys.argv"))
    got = {s.name: getattr(namespace, s.name) for s in chosen}
    assert got == expected, f"property {prop!r} broke: argv={argv} environ={environ}"


#: each example runs the implementation's generator, for a command generator a process of its own: no shrinking,
#: which would run it hundreds of times more on an implementation that fails; the failing example is reported as
#: drawn, under its property's label
_ROUND_TRIP_SETTINGS = settings(_SETTINGS, phases=[p for p in Phase if p not in (Phase.shrink, Phase.explain)])

ROUND_TRIP = {
    "numbers": (INT, ANY_FLOAT),
    "strings": (ANY_TEXT, CHOICE),
    "booleans": (BOOL, FLAG),
    "lists": (INTS,),
}


@pytest.mark.parametrize("prop", ROUND_TRIP)
@_ROUND_TRIP_SETTINGS
@given(data=st.data())
def test_generated_command_line_round_trips(args_kit: ArgsKit, prop: str, data: st.DataObject) -> None:
    """Section 2 and §6, one property per kind of value: the generator's output, parsed with the variables
    unset, gives every option its variable's value, and the default where none is set."""
    args_kit.reset()
    chosen = data.draw(specs(ROUND_TRIP[prop]))
    recipe = _recipe(chosen)
    parser = build_parser(args_kit, recipe)
    environ = {}
    expected: dict[str, Any] = {}
    for spec in chosen:
        expected[spec.name] = spec.default
        if data.draw(st.booleans(), label=f"{spec.name} in env"):
            value = data.draw(spec.kind.values, label=f"{spec.name} value")
            environ[env_var(spec.name)] = spec.kind.env_text(value, data.draw)
            expected[spec.name] = value
    tokens = generated_tokens(args_kit, recipe, environ)
    namespace = _parse(prop, parser, tokens, {}, data.draw(st.booleans(), label="via sys.argv"))
    got = {s.name: getattr(namespace, s.name) for s in chosen}
    assert got == expected, f"property {prop!r} broke: environ={environ} gave {tokens}"
