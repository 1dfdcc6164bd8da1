"""The generator half of the args kit protocol (rtp_ref/suites/args/generator.py): parsers given as data, the
generator as a function or as a real command, and the emulated engine's own generator command."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rtp_ref.suites.args.generator import OptionRecipe, ParserRecipe, build_parser, generated_tokens, run_generator
from rtp_ref.suites.args.kit import CommandGenerator, Generator, ReferenceArgsKit
from rtp_ref.suites.args.reference_command import ReferenceCommandArgsKit
from rtp_ref.suites.args.rtp_llm_main_adapter import RtpLlmMainArgsKit
from tests.processes import child_env

RECIPE = ParserRecipe("RTPT", (
    OptionRecipe("--model_type", default="é x"),
    OptionRecipe("--ratio", type="float", default=0.1),
    OptionRecipe("--ids", type="int", nargs="+", default=[1, -2]),
    OptionRecipe("--colour", choices=("red", "blue"), default="red"),
    OptionRecipe("--warm_up", type="str2bool", default=None),
    OptionRecipe("--fast", action="store_true"),
), "random")


def test_a_recipe_survives_its_json_form() -> None:
    assert ParserRecipe.from_json(RECIPE.to_json()) == RECIPE
    assert RECIPE.to_json().isascii()  # it travels in an environment variable


def test_a_recipe_builds_the_parser_it_describes() -> None:
    parser = build_parser(ReferenceArgsKit(), RECIPE)
    parsed = parser.parse_args(["--ids", "3", "--fast", "--warm_up", "yes"])
    assert (parsed.model_type, parsed.ratio, parsed.ids, parsed.colour, parsed.warm_up, parsed.fast) == (
        "é x", 0.1, [3], "red", True, True)
    with pytest.raises(SystemExit):
        parser.parse_args(["--colour", "green"])


@pytest.mark.parametrize("environ", [
    {},
    {"RTPT_MODEL_TYPE": "-odd 'quoted' value", "RTPT_IDS": "4 -5", "RTPT_FAST": "1", "RTPT_WARM_UP": "off"},
    {"RTPT_MODEL_TYPE": "carriage\rreturn\r\nnewline\n\ttab é"},  # no newline translation on the way back
    {"RTPT_RATIO": "abc"},
    {"RTPT_COLOUR": "green"},
])
def test_the_reference_generator_gives_the_same_run_as_a_function_and_as_a_command(environ: dict[str, str]) -> None:
    """The command form is a real ``python -m rtp_ref.args`` process; both forms must agree on exit code and
    tokens, malformed values included."""
    function, command = ReferenceArgsKit(), ReferenceCommandArgsKit()
    in_process, spawned = run_generator(function, RECIPE, environ), run_generator(command, RECIPE, environ)
    assert (spawned.code, spawned.tokens) == (in_process.code, in_process.tokens), spawned.stderr
    if in_process.code == 0:
        assert generated_tokens(command, RECIPE, environ) == generated_tokens(function, RECIPE, environ)
    else:
        assert in_process.code == 2 and "RTPT_" in spawned.stderr
        with pytest.raises(AssertionError, match="exited 2"):
            generated_tokens(command, RECIPE, environ)


class _HangingKit(ReferenceArgsKit):
    generator: Generator = CommandGenerator((sys.executable, "-c", "import time; time.sleep(60)"), timeout_s=1)


def test_a_generator_command_that_never_exits_fails_its_test_in_bounded_time() -> None:
    with pytest.raises(AssertionError, match="did not exit in 1 s"):
        run_generator(_HangingKit(), RECIPE, {})


def test_a_generator_command_needs_a_command() -> None:
    with pytest.raises(ValueError, match="argv is empty"):
        CommandGenerator(())


def _engine_generator(*flags: str, **environ: str) -> subprocess.CompletedProcess[str]:
    """The emulated engine's generator run as production runs it: its own parser, the process environment."""
    return subprocess.run([sys.executable, "-m", "rtp_ref.suites.args.rtp_llm_generator", *flags],
                          env=child_env(**environ), capture_output=True, text=True, timeout=60, check=False)


def test_the_emulated_engine_generator_turns_a_malformed_value_into_the_default_silently() -> None:
    """§6, faithful to rtp-llm: ``TP_SIZE=abc`` gives ``--tp_size 1``, nothing on stderr, exit 0; a string is
    never written; a good value is."""
    bad = _engine_generator("--quiet", TP_SIZE="abc", MODEL_TYPE="qwen")
    assert (bad.returncode, bad.stdout.split(), bad.stderr) == (0, ["--tp_size", "1"], "")
    good = _engine_generator("--quiet", TP_SIZE="4")
    assert (good.returncode, good.stdout.split()) == (0, ["--tp_size", "4"])


def test_the_emulated_engine_generator_needs_its_own_flags_to_print_a_command_line_of_set_variables() -> None:
    """Why the adapters pass ``--only-env-vars --quiet``: without them every unset option's default is written
    (by design, not a bug), and a header and a numbered list come before the command line."""
    bare = _engine_generator()
    assert bare.returncode == 0 and bare.stdout.splitlines()[0] == "reading arguments from the environment..."
    assert bare.stdout.splitlines()[-1].split() == ["--tp_size", "1"]
    flagged = _engine_generator("--only-env-vars", "--quiet")
    assert (flagged.returncode, flagged.stdout.split()) == (0, [])


def test_an_adapter_puts_the_test_parser_into_a_generator_that_builds_its_own_inline() -> None:
    """The main branch's adapter, run as the command: the engine generator builds its parser inline and calls
    ``init_all_group_args``, which the adapter replaced by the recipe's options under the recipe's prefix."""
    kit = RtpLlmMainArgsKit()
    environ = {"RTPT_RATIO": "0.5", "RTPT_IDS": "4", "RTPT_MODEL_TYPE": "dropped: a string"}
    assert generated_tokens(kit, RECIPE, environ) == ["--ratio", "0.5", "--ids", "4"]
    assert generated_tokens(kit, RECIPE, {}) == []
