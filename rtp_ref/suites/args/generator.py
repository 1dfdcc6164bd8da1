"""The env -> CLI generator under test, called as a function or run as a command, and the parsers it is given.

Real generators come in two shapes. Some are a function of ``(parser, environ)``; others (rtp-llm's
``generate_args_from_env_clean.py``) are a command that builds the server's parser itself, reads ``os.environ``,
prints the command line and exits. A kit names its generator as one of the two (``FunctionGenerator``,
``CommandGenerator`` in rtp_ref/suites/args/kit.py); the generator tests reach it only through ``run_generator``.

The tests give a generator the parser they need as data, a ``ParserRecipe``, because a command builds its parser
in its own process: the recipe travels in ``$RTP_REF_SUITE_PARSER`` as JSON, and the command (an adapter's few
lines around the engine's own entry point) builds it there and lets the engine's code do the rest: with
``parser_from_environment`` where the engine's generator asks a function for its parser, with
``add_recipe_options`` where it builds the parser inline and then calls a function to register the options.
"""

from __future__ import annotations

import io
import json
import locale
import os
import shlex
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from rtp_ref.suites.args.kit import ArgsKit, CommandGenerator, FunctionGenerator

RECIPE_ENV = "RTP_REF_SUITE_PARSER"

#: argument types a recipe can name; ``str2bool`` is the kit's own boolean type, no name means a string
_TYPES: dict[str, Callable[[str], Any]] = {"int": int, "float": float}


@dataclass(frozen=True)
class OptionRecipe:
    """One ``add_argument`` call: the flag and the keywords that matter to a generator, as JSON-able data."""

    flag: str
    type: str | None = None  # "int", "float", "str2bool", or None for a string
    default: Any = None
    nargs: str | None = None
    choices: tuple[str, ...] | None = None
    action: str | None = None

    def keywords(self, str2bool: Callable[..., Any]) -> dict[str, Any]:
        """The ``add_argument`` keywords, ``str2bool`` standing for the type named ``"str2bool"``."""
        if self.action is not None:
            return {"action": self.action}
        keywords: dict[str, Any] = {"default": self.default}
        if self.type == "str2bool":
            keywords["type"] = str2bool
        elif self.type is not None:
            keywords["type"] = _TYPES[self.type]
        if self.nargs is not None:
            keywords["nargs"] = self.nargs
        if self.choices is not None:
            keywords["choices"] = list(self.choices)
        return keywords


@dataclass(frozen=True)
class ParserRecipe:
    """A parser with an ``env_prefix`` and one argument group of options."""

    env_prefix: str
    options: tuple[OptionRecipe, ...]
    group: str = "model"

    def to_json(self) -> str:
        """The recipe as JSON text (what ``$RTP_REF_SUITE_PARSER`` holds)."""
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ParserRecipe:
        """The recipe ``to_json`` wrote."""
        data = json.loads(text)
        options = tuple(
            OptionRecipe(**{**option, "choices": None if option["choices"] is None else tuple(option["choices"])})
            for option in data["options"]
        )
        return cls(data["env_prefix"], options, data["group"])


def build_parser(kit: ArgsKit, recipe: ParserRecipe) -> Any:
    """A parser of ``kit``'s implementation with the recipe's options, registered in one group."""
    parser = kit.new_parser(env_prefix=recipe.env_prefix)
    add_recipe_options(parser, recipe, kit.str2bool)
    return parser


def add_recipe_options(parser: Any, recipe: ParserRecipe, str2bool: Callable[..., Any]) -> None:
    """Register the recipe's options, in one group, on a parser someone else built: a generator command that
    builds the server's parser inline calls the engine's group-registering function on it, and an adapter puts
    this in that function's place (the parser's variable prefix is set the engine's way, before)."""
    group = parser.add_argument_group(recipe.group)
    for option in recipe.options:
        group.add_argument(option.flag, **option.keywords(str2bool))


def recipe_from_environment(environ: Mapping[str, str] = os.environ) -> ParserRecipe:
    """In a generator command's own process: the recipe the test described, from ``$RTP_REF_SUITE_PARSER``.
    KeyError when the command was not started by the suite."""
    return ParserRecipe.from_json(environ[RECIPE_ENV])


def parser_from_environment(kit: ArgsKit, environ: Mapping[str, str] = os.environ) -> Any:
    """In a generator command's own process: the parser the test described, built by ``kit`` from the recipe
    in ``$RTP_REF_SUITE_PARSER``. KeyError when the command was not started by the suite."""
    return build_parser(kit, recipe_from_environment(environ))


@dataclass(frozen=True)
class GeneratorRun:
    """One run of a generator: exit code, what it printed, and the tokens (stdout split as shell words)."""

    code: int
    stdout: str
    stderr: str

    @property
    def tokens(self) -> list[str]:
        """The command line it printed, as tokens."""
        return shlex.split(self.stdout)


def run_generator(kit: ArgsKit, recipe: ParserRecipe, environ: Mapping[str, str]) -> GeneratorRun:
    """Run ``kit``'s generator for the parser ``recipe`` describes and the variables ``environ``."""
    generator = kit.generator
    if isinstance(generator, CommandGenerator):
        return _run_command(generator, recipe, environ)
    stdout, stderr = io.StringIO(), io.StringIO()
    code = generator.main(build_parser(kit, recipe), environ, stdout, stderr)
    return GeneratorRun(code, stdout.getvalue(), stderr.getvalue())


def generated_tokens(kit: ArgsKit, recipe: ParserRecipe, environ: Mapping[str, str]) -> list[str]:
    """The tokens ``kit``'s generator gives for ``environ``: its function's result, or the command's output
    when it exits 0. AssertionError, with what it printed, when the command fails."""
    generator = kit.generator
    if isinstance(generator, FunctionGenerator):
        return generator.tokens(build_parser(kit, recipe), environ)
    run = _run_command(generator, recipe, environ)
    assert run.code == 0, f"the generator command exited {run.code}: {run.stderr.strip()[-500:]}"
    return run.tokens


def _run_command(generator: CommandGenerator, recipe: ParserRecipe, environ: Mapping[str, str]) -> GeneratorRun:
    env = {**os.environ, **environ, RECIPE_ENV: recipe.to_json()}
    try:
        done = subprocess.run(list(generator.argv), env=env, stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=generator.timeout_s, check=False)
    except subprocess.TimeoutExpired as exc:  # a generator that hangs is a finding, like one that exits 0 on error
        raise AssertionError(f"the generator command {generator.argv} did not exit in {generator.timeout_s:g} s; "
                             f"stderr: {_text(exc.stderr)[-500:]}") from None
    return GeneratorRun(done.returncode, _text(done.stdout), _text(done.stderr))


def _text(output: bytes | None) -> str:
    """A command's output as text, decoded as the locale's but with no newline translation (``text=True`` would
    turn a value's carriage return into a newline)."""
    return (output or b"").decode(locale.getpreferredencoding(False), errors="replace")

