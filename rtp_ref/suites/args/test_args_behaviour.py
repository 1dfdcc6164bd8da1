"""Behaviour of an env/CLI argument parser: rtp-llm's contract where it is sound, its bugs fixed.

Everything here goes through the kit (``args_kit``, rtp_ref/suites/args/kit.py), so the module can be run
against another implementation (``RTP_REF_ARGS_IMPL``). Tests named after a bug of
docs/sources.md#rtp-llm-server-arguments or a review finding fail on the emulations of rtp-llm
(rtp_ref/suites/args/rtp_llm_main.py and, with PR #1266, legacy_rtp_llm.py, through their adapters);
tests/args/test_legacy_emulation.py checks that, and rtp_ref/suites/findings.py lists the mapping.
The other tests state the contract both share. A test that needs ``enable_env`` (PR #1266) ends absent on an
implementation without it (rtp_ref/suites/absence.py).
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from rtp_ref.suites.absence import refused_keyword
from rtp_ref.suites.args.generator import (
    OptionRecipe,
    ParserRecipe,
    build_parser,
    generated_tokens,
    run_generator,
)
from rtp_ref.suites.args.helpers import PREFIX, Parse, RootConfig, env_var
from rtp_ref.suites.args.kit import ArgsKit

# -- the contract both implementations keep -------------------------------------------------------


def test_env_name_comes_from_the_first_long_flag(args_kit: ArgsKit) -> None:
    parser = args_kit.new_parser()
    parser.add_argument("-t", "--tp-size", "--tensor-parallel", type=int, dest="tp_size")
    parser.add_argument("--max_seq_len", type=int)
    mappings = parser.get_env_mappings()
    assert mappings["tp_size"] == "TP_SIZE"
    assert mappings["max_seq_len"] == "MAX_SEQ_LEN"


def test_explicit_env_name_is_upper_cased_with_underscores(args_kit: ArgsKit) -> None:
    parser = args_kit.new_parser()
    parser.add_argument_group("model").add_argument("--model_type", env_name="model-type-name")
    assert parser.get_env_mappings()["model_type"] == "MODEL_TYPE_NAME"


def test_prefix_applies_to_derived_and_explicit_names(args_kit: ArgsKit) -> None:
    parser = args_kit.new_parser(env_prefix="rtp_llm")
    group = parser.add_argument_group("model")
    group.add_argument("--tp_size", type=int)
    group.add_argument("--model_type", env_name="my_model")
    mappings = parser.get_env_mappings()
    assert (mappings["tp_size"], mappings["model_type"]) == ("RTP_LLM_TP_SIZE", "RTP_LLM_MY_MODEL")


def test_short_only_option_is_named_after_its_dest(args_kit: ArgsKit) -> None:
    parser = args_kit.new_parser()
    parser.add_argument("-j", type=int, dest="jobs")
    assert parser.get_env_mappings()["jobs"] == "JOBS"


def test_env_value_fills_an_argument_not_on_the_command_line(
    args_kit: ArgsKit, parse: Parse, monkeypatch: pytest.MonkeyPatch
) -> None:
    parser = args_kit.new_parser(env_prefix=PREFIX)
    parser.add_argument_group("parallel").add_argument("--tp_size", type=int, default=1)
    monkeypatch.setenv(env_var("tp_size"), "4")
    assert parse(parser).tp_size == 4


def test_default_applies_when_neither_flag_nor_variable(args_kit: ArgsKit, parse: Parse) -> None:
    parser = args_kit.new_parser(env_prefix=PREFIX)
    parser.add_argument_group("parallel").add_argument("--tp_size", type=int, default=1)
    assert parse(parser).tp_size == 1


def test_separate_token_flag_beats_env(
    args_kit: ArgsKit, parse: Parse, monkeypatch: pytest.MonkeyPatch
) -> None:
    parser = args_kit.new_parser(env_prefix=PREFIX)
    parser.add_argument_group("parallel").add_argument("--tp_size", type=int, default=1)
    monkeypatch.setenv(env_var("tp_size"), "4")
    assert parse(parser, ["--tp_size", "8"]).tp_size == 8


@pytest.mark.parametrize(("word", "expected"), [("yes", True), ("TRUE", True), ("0", False), ("off", False)])
def test_boolean_env_values_use_the_boolean_type(
    args_kit: ArgsKit, parse: Parse, monkeypatch: pytest.MonkeyPatch, word: str, expected: bool
) -> None:
    parser = args_kit.new_parser(env_prefix=PREFIX)
    parser.add_argument_group("run").add_argument("--warm_up", type=args_kit.str2bool, default=not expected)
    monkeypatch.setenv(env_var("warm_up"), word)
    assert parse(parser).warm_up is expected


def test_negative_number_env_value(args_kit: ArgsKit, parse: Parse, monkeypatch: pytest.MonkeyPatch) -> None:
    parser = args_kit.new_parser(env_prefix=PREFIX)
    parser.add_argument_group("run").add_argument("--seed", type=int, default=0)
    monkeypatch.setenv(env_var("seed"), "-3")
    assert parse(parser).seed == -3


def test_bindings_receive_env_and_command_line_values(
    args_kit: ArgsKit, parse: Parse, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = RootConfig()
    parser = args_kit.new_parser(env_prefix=PREFIX, config_root=root)
    group = parser.add_argument_group("model")
    group.add_argument("--tp_size", type=int, default=1, bind_to="model.tp_size")
    group.add_argument("--model_type", default="", bind_to="model.model_type")
    monkeypatch.setenv(env_var("model_type"), "qwen")
    parse(parser, ["--tp_size", "8"])
    assert (root.model.tp_size, root.model.model_type) == (8, "qwen")


def test_alias_with_none_default_leaves_the_canonical_binding(args_kit: ArgsKit, parse: Parse) -> None:
    root = RootConfig()
    parser = args_kit.new_parser(env_prefix=PREFIX, config_root=root)
    group = parser.add_argument_group("model")
    group.add_argument("--max_seq_len", type=int, default=2048, bind_to="model.max_seq_len")
    group.add_argument("--max_length", type=int, default=None, bind_to="model.max_seq_len")
    parse(parser)
    assert root.model.max_seq_len == 2048


#: options the command-line-only tests register beside ``--external_model_packages``
MODEL_TYPE: tuple[str, dict[str, Any]] = ("--model_type", {"default": ""})
TP_SIZE: tuple[str, dict[str, Any]] = ("--tp_size", {"type": int, "default": 1})
MAX_SEQ_LEN: tuple[str, dict[str, Any]] = ("--max_seq_len", {"type": int, "default": 4096})


def _cli_only_parser(args_kit: ArgsKit, *others: tuple[str, dict[str, Any]]) -> Any:
    """A parser with ``others`` (flag, keywords) then ``--external_model_packages``, command line only, in one
    group: the test ends absent when the implementation has no ``enable_env``."""
    parser = args_kit.new_parser(env_prefix=PREFIX)
    group = parser.add_argument_group("model")
    for flag, keywords in others:
        group.add_argument(flag, **keywords)
    with refused_keyword(args_kit, "enable_env", "enable_env"):
        group.add_argument("--external_model_packages", enable_env=False)
    return parser


def test_cli_only_argument_takes_equals_form_and_abbreviation(args_kit: ArgsKit, parse: Parse) -> None:
    parser = _cli_only_parser(args_kit)
    assert parse(parser, ["--external_model=a.b"]).external_model_packages == "a.b"


def test_last_repeated_cli_only_flag_wins(args_kit: ArgsKit, parse: Parse) -> None:
    parser = _cli_only_parser(args_kit)
    args = ["--external_model_packages", "a", "--external_model_packages=b"]
    assert parse(parser, args).external_model_packages == "b"


@pytest.mark.parametrize("args", [[], ["--model_type", "qwen"]], ids=["no-flags", "other-flag"])
def test_cli_only_argument_ignores_env_while_others_read_it(
    args_kit: ArgsKit, parse: Parse, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    """Review P2 (env immunity): the mechanism (no mapping) and the result, with a positive control."""
    parser = _cli_only_parser(args_kit, MODEL_TYPE, TP_SIZE)
    monkeypatch.setenv(env_var("external_model_packages"), "evil.plugin")
    monkeypatch.setenv(env_var("tp_size"), "4")
    namespace = parse(parser, args)
    assert "external_model_packages" not in parser.get_env_mappings()
    assert namespace.external_model_packages is None
    assert namespace.tp_size == 4  # the same path does read the environment


# -- bugs of docs/sources.md#rtp-llm-server-arguments -------------------------------------------------------


def test_equals_form_flag_beats_env(args_kit: ArgsKit, parse: Parse, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bug 1: ``--tp_size=8`` with TP_SIZE=4 gave 4."""
    parser = args_kit.new_parser(env_prefix=PREFIX)
    parser.add_argument_group("parallel").add_argument("--tp_size", type=int, default=1)
    monkeypatch.setenv(env_var("tp_size"), "4")
    assert parse(parser, ["--tp_size=8"]).tp_size == 8


def test_equals_form_flag_beats_env_alias_in_bindings(
    args_kit: ArgsKit, parse: Parse, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bug 1: the ``=`` flag landed in the env binding pass, so a deprecated alias set in env beat it."""
    root = RootConfig()
    parser = args_kit.new_parser(env_prefix=PREFIX, config_root=root)
    group = parser.add_argument_group("model")
    group.add_argument("--max_seq_len", type=int, default=None, bind_to="model.max_seq_len")
    group.add_argument(
        "--max_length", type=int, default=None, bind_to="model.max_seq_len"
    )  # deprecated alias
    monkeypatch.setenv(env_var("max_length"), "7")
    parse(parser, ["--max_seq_len=5"])
    assert root.model.max_seq_len == 5


def test_abbreviated_flag_beats_env(args_kit: ArgsKit, parse: Parse, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bug 2: ``--tp_s 8`` was not seen as given."""
    parser = args_kit.new_parser(env_prefix=PREFIX)
    parser.add_argument_group("parallel").add_argument("--tp_size", type=int, default=1)
    monkeypatch.setenv(env_var("tp_size"), "4")
    assert parse(parser, ["--tp_s", "8"]).tp_size == 8


def _assert_names(stderr: str, *needles: str) -> None:
    """The error line (argparse prints the usage above it, which names every flag) names each needle."""
    lines = stderr.strip().splitlines()
    message = lines[-1] if lines else ""
    missing = [needle for needle in needles if needle not in message]
    assert not missing, f"error {message!r} does not name {missing}"


@pytest.mark.parametrize("args", [[], ["--model_type", "qwen"]], ids=["no-flags", "other-flag"])
def test_malformed_int_env_value_fails_fast(
    args_kit: ArgsKit, parse: Parse, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    """Bug 3: a bad int exited in env mode but was silently dropped in CLI mode."""
    parser = args_kit.new_parser(env_prefix=PREFIX)
    group = parser.add_argument_group("model")
    group.add_argument("--model_type", default="")
    group.add_argument("--max_seq_len", type=int, default=4096)
    monkeypatch.setenv(env_var("max_seq_len"), "abc")
    code, message = parse.exit(parser, args)
    assert code == 2
    _assert_names(message, env_var("max_seq_len"), "--max_seq_len", "'abc'")


def test_malformed_boolean_env_value_fails_fast(
    args_kit: ArgsKit, parse: Parse, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bug 3: a bad str2bool value exited with a message that lacked the variable or the flag."""
    parser = args_kit.new_parser(env_prefix=PREFIX)
    parser.add_argument_group("run").add_argument("--warm_up", type=args_kit.str2bool, default=False)
    monkeypatch.setenv(env_var("warm_up"), "maybe")
    code, message = parse.exit(parser)
    assert code == 2
    _assert_names(message, env_var("warm_up"), "warm_up", "'maybe'")


def test_env_value_outside_choices_is_rejected(
    args_kit: ArgsKit, parse: Parse, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bug 4: the CLI-mode env fill skipped ``choices`` (CHOICE=zzz was accepted)."""
    parser = args_kit.new_parser(env_prefix=PREFIX)
    parser.add_argument_group("model").add_argument("--act_type", choices=["bf16", "fp16"], default="bf16")
    monkeypatch.setenv(env_var("act_type"), "zzz")
    code, message = parse.exit(parser)
    assert code == 2
    _assert_names(message, env_var("act_type"), "--act_type", "'zzz'")


def _exclusive_parser(args_kit: ArgsKit) -> Any:
    parser = args_kit.new_parser(env_prefix=PREFIX)
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--local_path")
    group.add_argument("--remote_url")
    return parser


def test_env_values_obey_mutual_exclusion(
    args_kit: ArgsKit, parse: Parse, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bug 4: the CLI-mode env fill bypassed mutually exclusive groups."""
    parser = _exclusive_parser(args_kit)
    monkeypatch.setenv(env_var("local_path"), "/ckpt")
    monkeypatch.setenv(env_var("remote_url"), "s3://ckpt")
    code, message = parse.exit(parser)
    assert code == 2
    _assert_names(message, env_var("local_path"), env_var("remote_url"))


def test_command_line_member_of_exclusive_group_masks_env(
    args_kit: ArgsKit, parse: Parse, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bug 4: a member given on the command line plus another member's variable set both."""
    parser = _exclusive_parser(args_kit)
    monkeypatch.setenv(env_var("remote_url"), "s3://ckpt")
    namespace = parse(parser, ["--local_path", "/ckpt"])
    assert (namespace.local_path, namespace.remote_url) == ("/ckpt", None)


@pytest.mark.parametrize(("text", "expected"), [("1 2", [1, 2]), ("7", [7])], ids=["two", "one"])
def test_env_list_values_are_split_and_converted(
    args_kit: ArgsKit, parse: Parse, monkeypatch: pytest.MonkeyPatch, text: str, expected: list[int]
) -> None:
    """Bug 5: the CLI-mode env fill ignored nargs (``"1"`` -> scalar 1, ``"1 2"`` dropped)."""
    parser = args_kit.new_parser(env_prefix=PREFIX)
    parser.add_argument_group("run").add_argument("--device_ids", type=int, nargs="+")
    monkeypatch.setenv(env_var("device_ids"), text)
    assert parse(parser).device_ids == expected


@pytest.mark.parametrize(("word", "expected"), [("1", True), ("0", False)], ids=["1", "0"])
def test_store_true_reads_env_as_a_boolean(
    args_kit: ArgsKit, parse: Parse, monkeypatch: pytest.MonkeyPatch, word: str, expected: bool
) -> None:
    """Bug 6: CLI mode stored the string '0' (truthy); env mode failed with unrecognized arguments."""
    parser = args_kit.new_parser(env_prefix=PREFIX)
    parser.add_argument_group("run").add_argument("--enable_debug", action="store_true")
    monkeypatch.setenv(env_var("enable_debug"), word)
    assert parse(parser).enable_debug is expected


def test_env_value_starting_with_a_dash_is_a_value(
    args_kit: ArgsKit, parse: Parse, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bug 7: ``--foo`` as an env value failed in env mode and passed in CLI mode."""
    parser = args_kit.new_parser(env_prefix=PREFIX)
    parser.add_argument_group("run").add_argument("--extra_flags", default="")
    monkeypatch.setenv(env_var("extra_flags"), "--foo")
    assert parse(parser).extra_flags == "--foo"


def test_help_variable_is_ignored(args_kit: ArgsKit, parse: Parse, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bug 8 / review P3: a HELP variable printed help and exited 0 (env mode) or set ns.help."""
    parser = args_kit.new_parser(env_prefix=PREFIX)
    monkeypatch.setenv(env_var("help"), "1")
    assert not hasattr(parse(parser), "help")


def test_version_variable_is_ignored(
    args_kit: ArgsKit, parse: Parse, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bug 8: with ``--version`` added, a VERSION variable printed the version and exited."""
    parser = args_kit.new_parser(env_prefix=PREFIX, version="1.2.3")
    monkeypatch.setenv(env_var("version"), "1")
    assert not hasattr(parse(parser), "version")


def test_control_actions_have_no_env_variable(args_kit: ArgsKit) -> None:
    """Bug 8 / review P3: -h/--help (and --version) were registered as HELP (VERSION) mappings."""
    parser = args_kit.new_parser(version="1.2.3")
    assert {"help", "version"}.isdisjoint(parser.get_env_mappings())


def test_positional_is_not_filled_from_env(
    args_kit: ArgsKit, parse: Parse, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bug 9: positionals got a mapping, ignored in env mode and filled in CLI mode."""
    parser = args_kit.new_parser(env_prefix=PREFIX)
    parser.add_argument("checkpoint", nargs="?")
    monkeypatch.setenv(env_var("checkpoint"), "/from/env")
    assert parse(parser).checkpoint is None


def test_short_option_beats_env(args_kit: ArgsKit, parse: Parse, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bug 9: short options were never seen as given."""
    parser = args_kit.new_parser(env_prefix=PREFIX)
    parser.add_argument_group("parallel").add_argument("-t", "--tp_size", type=int, default=1)
    monkeypatch.setenv(env_var("tp_size"), "4")
    assert parse(parser, ["-t", "8"]).tp_size == 8


def test_tokens_after_double_dash_are_not_flags(
    args_kit: ArgsKit, parse: Parse, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bug 9: tokens after ``--`` were still scanned as flags."""
    parser = args_kit.new_parser(env_prefix=PREFIX)
    parser.add_argument("files", nargs="*")
    parser.add_argument_group("parallel").add_argument("--tp_size", type=int, default=1)
    monkeypatch.setenv(env_var("tp_size"), "4")
    namespace = parse(parser, ["--", "--tp_size"])
    assert (namespace.tp_size, namespace.files) == (4, ["--tp_size"])


def test_parsers_do_not_share_env_mappings(
    args_kit: ArgsKit, parse: Parse, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bug 10 / review P2: a class-level mapping of another parser defeated enable_env=False."""
    args_kit.new_parser(env_prefix=PREFIX).add_argument_group("a").add_argument("--external_model_packages")
    parser = _cli_only_parser(args_kit)
    monkeypatch.setenv(env_var("external_model_packages"), "evil.plugin")
    assert "external_model_packages" not in parser.get_env_mappings()
    assert parse(parser).external_model_packages is None


def test_reused_parser_forgets_the_previous_command_line(
    args_kit: ArgsKit, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bug 10: ``_cli_provided_args`` went stale when a parser was reused."""
    root = RootConfig()
    parser = args_kit.new_parser(env_prefix=PREFIX, config_root=root)
    group = parser.add_argument_group("model")
    group.add_argument("--max_seq_len", type=int, default=1024, bind_to="model.max_seq_len")
    group.add_argument("--max_length", type=int, default=None, bind_to="model.max_seq_len")
    parser.parse_args(["--max_seq_len", "5"])
    monkeypatch.setenv(env_var("max_length"), "7")
    monkeypatch.setattr("sys.argv", ["prog"])
    parser.parse_args()
    assert root.model.max_seq_len == 7


def test_parse_known_args_reads_env(args_kit: ArgsKit, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bug 10: parse_known_args skipped the environment."""
    parser = args_kit.new_parser(env_prefix=PREFIX)
    parser.add_argument_group("parallel").add_argument("--tp_size", type=int, default=1)
    monkeypatch.setenv(env_var("tp_size"), "4")
    namespace, extras = parser.parse_known_args(["--unknown"])
    assert (namespace.tp_size, extras) == (4, ["--unknown"])


def test_parsers_keep_their_own_variable_names(
    args_kit: ArgsKit, parse: Parse, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bug 10: the class-level mappings let a later parser rename an earlier parser's variable."""
    first = args_kit.new_parser(env_prefix=PREFIX)
    first.add_argument_group("model").add_argument("--model_type", env_name="first_model", default="")
    second = args_kit.new_parser(env_prefix=PREFIX)
    second.add_argument_group("model").add_argument("--model_type", env_name="second_model", default="")
    monkeypatch.setenv(env_var("first_model"), "qwen")
    assert first.get_env_mappings()["model_type"] == env_var("first_model")
    assert parse(first).model_type == "qwen"


def test_parser_level_enable_env_false_is_command_line_only(
    args_kit: ArgsKit, parse: Parse, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bug 12 / review P2: parser-level enable_env=False was not passed to the group and had no effect."""
    parser = args_kit.new_parser(env_prefix=PREFIX)
    with refused_keyword(args_kit, "enable_env", "enable_env"):
        parser.add_argument("--external_model_packages", enable_env=False)
    monkeypatch.setenv(env_var("external_model_packages"), "evil.plugin")
    assert "external_model_packages" not in parser.get_env_mappings()
    assert parse(parser).external_model_packages is None


@pytest.mark.parametrize("where", ["parser", "group"])
def test_enable_env_false_with_env_name_is_an_error(args_kit: ArgsKit, where: str) -> None:
    """Bug 12: enable_env=False silently dropped an explicit env_name."""
    parser = args_kit.new_parser(env_prefix=PREFIX)
    container = parser if where == "parser" else parser.add_argument_group("model")
    with refused_keyword(args_kit, "enable_env", "enable_env"), pytest.raises(ValueError, match="enable_env"):
        container.add_argument("--external_model_packages", enable_env=False, env_name="PLUGINS")


# -- review findings about the command-line-only argument ----------------------------------------


def test_cli_only_variable_that_is_set_is_logged(
    args_kit: ArgsKit, parse: Parse, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Review P2: a set EXTERNAL_MODEL_PACKAGES was dropped without a word."""
    parser = _cli_only_parser(args_kit)
    monkeypatch.setenv(env_var("external_model_packages"), "evil.plugin")
    with caplog.at_level(logging.WARNING):
        parse(parser)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any(
        env_var("external_model_packages") in m and "--external_model_packages" in m for m in warnings
    ), warnings


def test_cli_only_flag_does_not_make_bad_env_values_silent(
    args_kit: ArgsKit, parse: Parse, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review P2: passing only the CLI-only flag switched every env value to the silent CLI mode."""
    parser = _cli_only_parser(args_kit, MODEL_TYPE, MAX_SEQ_LEN)
    monkeypatch.setenv(env_var("model_type"), "qwen")
    monkeypatch.setenv(env_var("max_seq_len"), "abc")
    code, message = parse.exit(parser, ["--external_model_packages", "atom.plugin"])
    assert code == 2
    _assert_names(message, env_var("max_seq_len"), "'abc'")


def test_cli_only_dest_cannot_get_a_variable_later(args_kit: ArgsKit) -> None:
    """Review P2: CLI-only was the absence of a mapping, which a later registration could fill."""
    parser = _cli_only_parser(args_kit)
    with pytest.raises(ValueError, match="external_model_packages"):
        parser.add_argument_group("compat").add_argument("--plugins", dest="external_model_packages")
    assert "external_model_packages" not in parser.get_env_mappings()


# -- the env -> CLI generator (docs/sources.md#rtp-llm-server-arguments) ------------------------------------


#: the parser the generator tests give the generator (as data: a generator command builds it in its own process)
GENERATOR_PARSER = ParserRecipe(PREFIX, (
    OptionRecipe("--model_type", default=""),
    OptionRecipe("--tp_size", type="int", default=1),
    OptionRecipe("--warm_up", type="str2bool", default=False),
))


def test_generator_writes_string_values(args_kit: ArgsKit) -> None:
    """Section 2: string arguments were never emitted."""
    tokens = generated_tokens(args_kit, GENERATOR_PARSER, {env_var("model_type"): "qwen"})
    assert build_parser(args_kit, GENERATOR_PARSER).parse_args(tokens).model_type == "qwen"


def test_generator_writes_set_booleans(args_kit: ArgsKit) -> None:
    """Section 2: a str2bool whose variable was set was dropped (WARM_UP=1 -> nothing)."""
    tokens = generated_tokens(args_kit, GENERATOR_PARSER, {env_var("warm_up"): "1"})
    assert build_parser(args_kit, GENERATOR_PARSER).parse_args(tokens).warm_up is True


def test_generator_leaves_unset_variables_out(args_kit: ArgsKit) -> None:
    """Section 2 (coverage): only what a variable sets is written. rtp-llm's generator writes every unset
    argument's default (``--warm_up 0``, ``--tp_size 1``) unless given its own ``--only-env-vars``, as production
    runs it and as an adapter passes it: that is its design, not a bug."""
    assert generated_tokens(args_kit, GENERATOR_PARSER, {}) == []


def test_generator_command_fails_on_a_malformed_value(args_kit: ArgsKit) -> None:
    """Bug 13 / section 2: the generator printed errors and still exited 0."""
    run = run_generator(args_kit, GENERATOR_PARSER, {env_var("tp_size"): "abc"})
    assert run.code != 0, f"exit 0, printed {run.stdout!r}"
    _assert_names(run.stderr, env_var("tp_size"), "'abc'")


def test_a_bind_to_that_is_no_binding_is_refused_at_registration(args_kit: ArgsKit) -> None:
    """§6: ``bind_to=123`` was accepted by ``add_argument`` and only logged when the bindings were applied."""
    group = args_kit.new_parser(env_prefix=PREFIX, config_root=RootConfig()).add_argument_group("model")
    with pytest.raises(Exception, match="123"):
        group.add_argument("--tp_size", type=int, default=1, bind_to=123)


IDS_PARSER = ParserRecipe(PREFIX, (OptionRecipe("--ids", type="int", nargs="+", default=[1, 2]),))


def test_generator_writes_nargs_values_as_separate_tokens(args_kit: ArgsKit) -> None:
    """§6: an ``nargs`` option's variable was ignored (its default written instead), and a list default was
    written as one token, ``--ids [1, 2]``, which no parser reads back."""
    tokens = generated_tokens(args_kit, IDS_PARSER, {env_var("ids"): "3 4"})
    assert tokens == ["--ids", "3", "4"], tokens
    assert build_parser(args_kit, IDS_PARSER).parse_args(tokens).ids == [3, 4]
    unset = generated_tokens(args_kit, IDS_PARSER, {})
    assert not any("[" in token for token in unset), unset


def test_str2bool_error_names_the_bad_value(args_kit: ArgsKit) -> None:
    """§6: the boolean type's error said "Boolean value expected." without the value it got."""
    with pytest.raises(Exception, match="maybe"):
        args_kit.str2bool("maybe")


def test_a_subcommand_option_reads_its_variable_or_subcommands_are_refused(
        args_kit: ArgsKit, monkeypatch: pytest.MonkeyPatch) -> None:
    """§6: options of subparsers were never env-mapped, silently. Either outcome is sound: the subcommand's
    option reads its variable, or ``add_subparsers`` refuses at once (the reference: one parser a subcommand)."""
    parser = args_kit.new_parser(env_prefix=PREFIX)
    try:
        subcommands = parser.add_subparsers(dest="command")
    except Exception as exc:  # refused loudly, naming what to do instead
        assert "subcommand" in str(exc), exc
        return
    subcommands.add_parser("serve").add_argument("--port", type=int, default=1)
    monkeypatch.setenv(env_var("port"), "9")
    assert parser.parse_args(["serve"]).port == 9


def test_the_kit_passes_the_implementations_own_boolean_type(args_kit: ArgsKit) -> None:
    """The kit protocol: ``str2bool`` is the implementation's object itself, the same on every access (real
    generators compare ``type is str2bool``; a wrapping method would be a new object each time)."""
    assert args_kit.str2bool is args_kit.str2bool
    assert getattr(args_kit.str2bool, "__self__", None) is None, "str2bool is a bound method, not the type itself"
