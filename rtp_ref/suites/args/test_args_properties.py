"""Properties over random parsers, command lines and environments (hypothesis), through the kit.

* precedence: every value is the command line's if given (in any form argparse accepts: separate
  token, ``=``, abbreviation), else the variable's if set, else the default, through both entry
  points;
* round trip: parsing the env -> CLI generator's output without the variables gives the namespace
  that parsing with them gives.

Both fail on the emulation of rtp-llm (bugs 1, 2, 5, 6, 7 and section 2).
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
# (it traces every line and takes seconds): the emulation of rtp-llm runs these to fail them.
_SETTINGS = settings(
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    report_multiple_bugs=False,
    phases=[phase for phase in Phase if phase is not Phase.explain],
)

TRUE_WORDS = ("1", "true", "yes", "on", "T")
FALSE_WORDS = ("0", "false", "no", "off", "F")


@dataclass(frozen=True)
class Kind:
    """One kind of argument: how to register it, its values, and how to write a value."""

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
_TEXT = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=_SURROGATES, exclude_characters="\x00"), max_size=10
).filter(lambda s: s != "--")  # argparse reads a lone "--" value as the end of options, on any path

KINDS = (
    Kind("int", st.integers(-(10**6), 10**6), _scalar("int")),
    Kind("float", st.floats(allow_nan=False, allow_infinity=False, width=32), _scalar("float")),
    Kind("str", _TEXT, _scalar()),
    Kind("bool", st.booleans(), _scalar("str2bool")),
    Kind("choice", st.sampled_from(["red", "green", "blue"]), _scalar(choices=("red", "green", "blue"))),
    Kind("ints", st.lists(st.integers(-99, 99), min_size=1, max_size=3), _scalar("int", nargs="+")),
    Kind("flag", st.booleans(), _store_true, flag_only=True),
)


@dataclass(frozen=True)
class Spec:
    name: str
    kind: Kind
    default: Any

    @property
    def flag(self) -> str:
        return f"--{self.name}"


@st.composite
def specs(draw: Callable[[st.SearchStrategy[Any]], Any]) -> list[Spec]:
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
        kind = draw(st.sampled_from(KINDS))
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


def _reads_as_option(text: str) -> bool:
    """argparse would take ``text`` for an option: a dash word that is not a plain negative number."""
    return len(text) > 1 and text.startswith("-") and not re.fullmatch(r"-\d+|-\d*\.\d+", text)


def _cli_tokens(spec: Spec, value: Any, form: str, flags: Sequence[str]) -> list[str]:
    """``value`` for ``spec`` written in ``form`` (separate / equals / abbreviated)."""
    flag = (_abbreviation(spec.flag, flags) or spec.flag) if form == "abbreviated" else spec.flag
    if spec.kind.flag_only:
        return [flag] if value else []
    if isinstance(value, list):
        return [flag, *map(str, value)]
    text = str(value).lower() if isinstance(value, bool) else str(value)
    if form == "equals" or _reads_as_option(text):
        return [f"{flag}={text}"]
    return [flag, text]


def _parse(parser: Any, argv: list[str], environ: dict[str, str], via_sys_argv: bool) -> argparse.Namespace:
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
            pytest.fail(f"parser exited with {exc.code} for argv={argv} environ={environ}")


@_SETTINGS
@given(data=st.data())
def test_command_line_beats_env_beats_default(args_kit: ArgsKit, data: st.DataObject) -> None:
    """Bugs 1, 2, 5, 6, 7 over random parsers, argv forms and both entry points."""
    args_kit.reset()
    chosen = data.draw(specs())
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
        if data.draw(st.booleans(), label=f"{spec.name} on the command line"):
            value = data.draw(spec.kind.values, label=f"{spec.name} value")
            form = data.draw(st.sampled_from(["separate", "equals", "abbreviated"]), label="form")
            tokens = _cli_tokens(spec, value, form, flags)
            if tokens:
                argv += tokens
                expected[spec.name] = value
    namespace = _parse(parser, argv, environ, data.draw(st.booleans(), label="via sys.argv"))
    assert {s.name: getattr(namespace, s.name) for s in chosen} == expected


@_SETTINGS
@given(data=st.data())
def test_generated_command_line_round_trips(args_kit: ArgsKit, data: st.DataObject) -> None:
    """Section 2: the generator's output parses to what the environment parses to."""
    args_kit.reset()
    chosen = data.draw(specs())
    recipe = _recipe(chosen)
    parser = build_parser(args_kit, recipe)
    environ = {}
    for spec in chosen:
        if data.draw(st.booleans(), label=f"{spec.name} in env"):
            value = data.draw(spec.kind.values, label=f"{spec.name} value")
            environ[env_var(spec.name)] = spec.kind.env_text(value, data.draw)
    via_sys_argv = data.draw(st.booleans(), label="via sys.argv")
    from_env = _parse(parser, [], environ, via_sys_argv)
    tokens = generated_tokens(args_kit, recipe, environ)
    from_cli = _parse(parser, tokens, {}, via_sys_argv)
    assert vars(from_cli) == vars(from_env), tokens
