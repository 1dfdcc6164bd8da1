"""The reference parser's own contract, beyond what the behaviour suite states for any implementation:
registration errors, required and exclusive arguments with env values, sources, bindings, help,
the env -> CLI forms and the ``python -m rtp_ref.args`` command.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rtp_ref.args import (
    ArgSource,
    BindingError,
    EnvArgumentParser,
    derive_env_name,
    env_to_cli,
    resolve_object,
    str2bool,
)
from rtp_ref.errors import RtpRefError
from rtp_ref.suites.args.helpers import PREFIX, RootConfig, env_var, optional_int


def _parser(**kwargs: object) -> EnvArgumentParser:
    return EnvArgumentParser(prog="prog", env_prefix=PREFIX, **kwargs)


# -- names ------------------------------------------------------------------------------------------


def test_non_portable_derived_name_is_an_error_that_suggests_env_name() -> None:
    with pytest.raises(RtpRefError, match=rf"'{PREFIX}_TP\.SIZE'.*env_name="):
        _parser().add_argument("--tp.size", type=int)


def test_explicit_env_name_rescues_a_flag_without_a_portable_name() -> None:
    parser = _parser()
    parser.add_argument("--tp.size", type=int, env_name="tp_size")
    assert parser.get_env_mappings() == {"tp.size": f"{PREFIX}_TP_SIZE"}


def test_bad_prefix_is_rejected() -> None:
    with pytest.raises(RtpRefError, match="env_prefix '9lives'"):
        EnvArgumentParser(env_prefix="9lives")


def test_derive_env_name_rules() -> None:
    assert derive_env_name(["-m", "--max-seq-len"], "max_seq_len") == "MAX_SEQ_LEN"
    assert derive_env_name(["-m"], "max_seq_len", prefix="RTP") == "RTP_MAX_SEQ_LEN"
    assert derive_env_name(["--x"], "x", env_name="my-name", prefix="RTP") == "RTP_MY_NAME"
    assert derive_env_name(["++opt"], "opt", prefix_chars="+") == "OPT"


# -- registration errors ----------------------------------------------------------------------------


def test_positional_takes_no_env_name() -> None:
    with pytest.raises(RtpRefError, match="positional arguments have no environment variable"):
        _parser().add_argument("checkpoint", env_name="CKPT")


@pytest.mark.parametrize("option", [{"env_name": "HELP_ME"}, {"bind_to": "model.help"}])
def test_control_actions_take_no_env_name_or_binding(option: dict[str, str]) -> None:
    parser = _parser(add_help=False)
    with pytest.raises(RtpRefError, match="control action"):
        parser.add_argument("-h", "--help", action="help", **option)


@pytest.mark.parametrize(
    ("flags", "kwargs", "kind"),
    [
        (["-v", "--verbose"], {"action": "count"}, "count"),
        (["--include"], {"action": "append"}, "append"),
        (["--rest"], {"nargs": argparse.REMAINDER}, "nargs='...'"),
    ],
)
def test_options_without_a_single_value_form_must_be_command_line_only(
    flags: list[str], kwargs: dict[str, object], kind: str
) -> None:
    with pytest.raises(RtpRefError, match=rf"{kind}.*enable_env=False"):
        _parser().add_argument(*flags, **kwargs)


def test_command_line_only_counter_still_counts_and_warns(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    parser = _parser()
    parser.add_argument("-v", "--verbose", action="count", default=0, enable_env=False)
    monkeypatch.setenv(env_var("verbose"), "3")
    with caplog.at_level(logging.WARNING):
        outcome = parser.parse_with_sources(["-vv"])
    assert (outcome.namespace.verbose, outcome.sources["verbose"]) == (2, ArgSource.CLI)
    assert parser.parse_with_sources([]).sources["verbose"] is ArgSource.DEFAULT
    assert env_var("verbose") in caplog.text


def test_type_bool_is_rejected_in_favour_of_str2bool() -> None:
    with pytest.raises(RtpRefError, match="str2bool"):
        _parser().add_argument("--warm_up", type=bool)


def test_one_variable_cannot_fill_two_dests() -> None:
    parser = _parser()
    parser.add_argument("--model_type", env_name="model")
    with pytest.raises(RtpRefError, match=rf"{PREFIX}_MODEL already fills 'model_type'"):
        parser.add_argument("--model_name", env_name="model")


def test_alias_of_a_dest_must_keep_its_variable() -> None:
    parser = _parser()
    parser.add_argument("--tp_size", type=int)
    parser.add_argument("--tp", type=int, dest="tp_size", env_name="tp_size")  # same variable: fine
    with pytest.raises(RtpRefError, match=rf"already reads environment variable {PREFIX}_TP_SIZE"):
        parser.add_argument("--tensor_parallel", type=int, dest="tp_size")


def test_command_line_only_alias_cannot_take_back_an_env_dest() -> None:
    parser = _parser()
    parser.add_argument("--tp_size", type=int)
    with pytest.raises(RtpRefError, match="cannot take that back"):
        parser.add_argument("--tp", type=int, dest="tp_size", enable_env=False)


def test_parents_subparsers_and_intermixed_parsing_are_refused() -> None:
    with pytest.raises(RtpRefError, match="parents"):
        EnvArgumentParser(parents=[argparse.ArgumentParser(add_help=False)])
    parser = _parser()
    with pytest.raises(RtpRefError, match="subcommands"):
        parser.add_subparsers()
    with pytest.raises(RtpRefError, match="intermixed"):
        parser.parse_intermixed_args([])


# -- values from the environment --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "text", "expected"),
    [
        ({"action": argparse.BooleanOptionalAction, "default": True}, "no", False),
        ({"action": argparse.BooleanOptionalAction}, "yes", True),
        ({"action": "store_const", "const": "fast"}, "1", "fast"),
        ({"action": "store_false"}, "true", False),
        ({"nargs": "*"}, "", []),
        ({"nargs": 2, "type": int}, "3 4", [3, 4]),
        ({"nargs": "+"}, "'a b' c", ["a b", "c"]),
        ({"nargs": "?", "const": "c"}, "", ""),
        ({"nargs": 1}, "-x", ["-x"]),
    ],
)
def test_env_value_forms(
    monkeypatch: pytest.MonkeyPatch, kwargs: dict[str, object], text: str, expected: object
) -> None:
    parser = _parser()
    parser.add_argument("--opt", **kwargs)
    monkeypatch.setenv(env_var("opt"), text)
    assert parser.parse_args([]).opt == expected


@pytest.mark.parametrize(
    ("kwargs", "text", "reason"),
    [
        ({"nargs": 2, "type": int}, "3", "expected 2 values, got 1"),
        ({"nargs": "+"}, "", "expected at least one value"),
        ({"nargs": "+"}, "a 'b", "cannot split"),
        ({"nargs": "+"}, "a --b", "'--b' would be read as an option"),
        ({"action": "store_true"}, "maybe", "expected a boolean"),
    ],
)
def test_env_value_form_errors(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    kwargs: dict[str, object],
    text: str,
    reason: str,
) -> None:
    parser = _parser()
    parser.add_argument("--opt", **kwargs)
    monkeypatch.setenv(env_var("opt"), text)
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args([])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"argument --opt: invalid value in environment variable {env_var('opt')}={text!r}: " in error
    assert reason in error


def test_malformed_variable_is_ignored_when_the_flag_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    """An operator can override a broken variable on the command line."""
    parser = _parser()
    parser.add_argument("--tp_size", type=int, default=1)
    monkeypatch.setenv(env_var("tp_size"), "abc")
    assert parser.parse_args(["--tp_size", "2"]).tp_size == 2


def test_exit_on_error_false_raises_argument_error(monkeypatch: pytest.MonkeyPatch) -> None:
    parser = EnvArgumentParser(prog="prog", env_prefix=PREFIX, exit_on_error=False)
    parser.add_argument("--tp_size", type=int, default=1)
    monkeypatch.setenv(env_var("tp_size"), "abc")
    with pytest.raises(argparse.ArgumentError, match=env_var("tp_size")):
        parser.parse_args([])


def test_string_default_is_converted_like_argparse() -> None:
    parser = _parser()
    parser.add_argument("--tp_size", type=int, default="2")
    assert parser.parse_args([]).tp_size == 2


def test_suppressed_default_leaves_the_attribute_out_unless_given(monkeypatch: pytest.MonkeyPatch) -> None:
    parser = _parser()
    parser.add_argument("--seed", type=int, default=argparse.SUPPRESS)
    assert not hasattr(parser.parse_args([]), "seed")
    monkeypatch.setenv(env_var("seed"), "7")
    assert parser.parse_args([]).seed == 7


def test_short_only_option_reads_its_dest_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    parser = _parser()
    parser.add_argument("-j", type=int, dest="jobs", default=1)
    monkeypatch.setenv(env_var("jobs"), "8")
    assert parser.parse_args([]).jobs == 8
    assert parser.parse_args(["-j3"]).jobs == 3


def test_sources_and_extras_are_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    parser = _parser()
    parser.add_argument("--tp_size", type=int, default=1)
    parser.add_argument("--model_type", default="")
    parser.add_argument("--seed", type=int, default=0)
    outcome = parser.parse_with_sources(
        ["--tp_size=2", "--unknown"], environ={env_var("model_type"): "qwen", env_var("tp_size"): "9"}
    )
    assert vars(outcome.namespace) == {"tp_size": 2, "model_type": "qwen", "seed": 0}
    assert dict(outcome.sources) == {
        "tp_size": ArgSource.CLI,
        "model_type": ArgSource.ENV,
        "seed": ArgSource.DEFAULT,
    }
    assert outcome.extras == ["--unknown"]


def test_caller_namespace_attributes_rank_with_the_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    parser = _parser()
    parser.add_argument("--tp_size", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model_type", default="")
    monkeypatch.setenv(env_var("seed"), "5")
    namespace = argparse.Namespace(tp_size=3, seed=4, model_type="kept")
    parser.parse_args(["--model_type", "qwen"], namespace=namespace)
    assert vars(namespace) == {"tp_size": 3, "seed": 5, "model_type": "qwen"}


# -- required and mutually exclusive arguments -----------------------------------------------------


def test_required_option_may_come_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = _parser()
    parser.add_argument("--ckpt_path", required=True)
    with pytest.raises(SystemExit):
        parser.parse_args([])
    assert f"--ckpt_path (or environment variable {env_var('ckpt_path')})" in capsys.readouterr().err
    monkeypatch.setenv(env_var("ckpt_path"), "/ckpt")
    assert parser.parse_args([]).ckpt_path == "/ckpt"
    assert parser.parse_args(["--ckpt_path", "/cli"]).ckpt_path == "/cli"


def test_required_exclusive_group_may_be_satisfied_by_the_environment(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = _parser()
    group = parser.add_argument_group("source").add_mutually_exclusive_group(required=True)
    group.add_argument("--local_path")
    group.add_argument("--remote_url")
    with pytest.raises(SystemExit):
        parser.parse_args([])
    assert env_var("remote_url") in capsys.readouterr().err
    monkeypatch.setenv(env_var("remote_url"), "s3://x")
    assert parser.parse_args([]).remote_url == "s3://x"


def test_exclusive_member_on_the_command_line_logs_the_ignored_variable(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    parser = _parser()
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--local_path")
    group.add_argument("--remote_url")
    monkeypatch.setenv(env_var("remote_url"), "s3://x")
    with caplog.at_level(logging.WARNING):
        parser.parse_args(["--local_path", "/x"])
    assert f"{env_var('remote_url')} is ignored: --local_path" in caplog.text


# -- bindings ---------------------------------------------------------------------------------------


def test_binding_precedence_is_command_line_env_default_for_one_field(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root = RootConfig()
    parser = _parser(config_root=root)
    parser.add_argument("--max_seq_len", type=int, default=1024, bind_to="model.max_seq_len")
    parser.add_argument("--max_length", type=int, default=None, bind_to="model.max_seq_len")
    parser.parse_args([])
    assert root.model.max_seq_len == 1024
    monkeypatch.setenv(env_var("max_length"), "7")
    parser.parse_args([])
    assert root.model.max_seq_len == 7
    parser.parse_args(["--max_length", "9"])
    assert root.model.max_seq_len == 9


def test_binding_forms_tuple_and_list() -> None:
    root = RootConfig()
    other = RootConfig()
    parser = _parser(config_root=root)
    parser.add_argument("--tp_size", type=int, default=1, bind_to=["model.tp_size", (other.model, "tp_size")])
    parser.parse_args(["--tp_size", "4"])
    assert (root.model.tp_size, other.model.tp_size) == (4, 4)


def test_bindings_apply_only_with_a_config_root() -> None:
    target = RootConfig()
    parser = _parser()
    parser.add_argument("--tp_size", type=int, default=1, bind_to=(target.model, "tp_size"))
    parser.parse_args(["--tp_size", "4"])
    assert target.model.tp_size == 1


def test_two_variables_giving_one_field_different_values_is_an_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = _parser(config_root=RootConfig())
    parser.add_argument("--max_seq_len", type=int, bind_to="model.max_seq_len")
    parser.add_argument("--max_length", type=int, bind_to="model.max_seq_len")
    monkeypatch.setenv(env_var("max_seq_len"), "5")
    monkeypatch.setenv(env_var("max_length"), "7")
    with pytest.raises(SystemExit):
        parser.parse_args([])
    error = capsys.readouterr().err
    assert env_var("max_seq_len") in error and env_var("max_length") in error


def test_explicit_none_from_the_environment_is_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    root = RootConfig()
    parser = _parser(config_root=root)
    parser.add_argument("--max_seq_len", type=optional_int, default=None, bind_to="model.max_seq_len")
    parser.parse_args([])
    assert root.model.max_seq_len == 4096  # a None default is "no opinion"
    monkeypatch.setenv(env_var("max_seq_len"), "none")
    parser.parse_args([])
    assert root.model.max_seq_len is None


def test_explicit_none_from_the_command_line_is_bound() -> None:
    """The reference's choice (the suites accept rtp-llm's, which skips every None: its alias design)."""
    root = RootConfig()
    parser = _parser(config_root=root)
    parser.add_argument("--max_seq_len", type=optional_int, default=4096, bind_to="model.max_seq_len")
    parser.parse_args(["--max_seq_len", "none"])
    assert root.model.max_seq_len is None


@pytest.mark.parametrize("spec", ["model..x", "model.max-len", ("model", "x"), 5, []])
def test_malformed_bind_spec_is_rejected_at_registration(spec: object) -> None:
    with pytest.raises(BindingError, match="--tp_size"):
        _parser(config_root=RootConfig()).add_argument("--tp_size", bind_to=spec)


@pytest.mark.parametrize(
    ("spec", "message"), [("nope.tp_size", "has no 'nope'"), ("model.tp", "does not exist")]
)
def test_unresolvable_binding_target_is_an_error(spec: str, message: str) -> None:
    parser = _parser(config_root=RootConfig())
    parser.add_argument("--tp_size", type=int, default=1, bind_to=spec)
    with pytest.raises(BindingError, match=message):
        parser.parse_args([])


# -- help, generator, command -----------------------------------------------------------------------


def test_help_shows_variables_and_command_line_only(capsys: pytest.CaptureFixture[str]) -> None:
    parser = _parser()
    parser.add_argument("--tp_size", type=int, help="tensor parallel size")
    parser.add_argument("--external_model_packages", enable_env=False)
    parser.print_help()
    out = " ".join(capsys.readouterr().out.split())
    assert f"tensor parallel size [env {env_var('tp_size')}]" in out
    assert "[command line only]" in out


def test_generator_forms() -> None:
    parser = _parser()
    parser.add_argument("--model_type")
    parser.add_argument("--ids", type=int, nargs="+")
    parser.add_argument("--debug", action="store_true")
    parser.add_argument("--cache", action=argparse.BooleanOptionalAction)
    parser.add_argument("--external_model_packages", enable_env=False)
    environ = {
        env_var("model_type"): "-odd",
        env_var("ids"): "1 -2",
        env_var("debug"): "0",
        env_var("cache"): "off",
        env_var("external_model_packages"): "evil",
    }
    assert env_to_cli(parser, environ) == ["--model_type=-odd", "--ids", "1", "-2", "--no-cache"]


def test_str2bool_words_and_error() -> None:
    assert [str2bool(w) for w in ("Yes", " on ", "t", "1", "No", "off", "F", "0")] == [True] * 4 + [False] * 4
    with pytest.raises(argparse.ArgumentTypeError, match="expected a boolean, got 'maybe'"):
        str2bool("maybe")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_colon", "form"),
        ("rtp_ref.suites.args.no_such_module:x", "cannot import"),
        ("rtp_ref.suites.args.helpers:nope", "no attribute"),
    ],
)
def test_resolve_object_errors(spec: str, message: str) -> None:
    with pytest.raises(RtpRefError, match=message):
        resolve_object(spec)


def _run_command(rootdir: Path, spec: str, environ: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rtp_ref.args", spec],
        cwd=rootdir,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_command_prints_the_flags_and_fails_on_bad_input(pytestconfig: pytest.Config) -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith(f"{PREFIX}_")}
    spec = "rtp_ref.suites.args.helpers:demo_parser"
    good = _run_command(
        pytestconfig.rootpath, spec, {**base, env_var("model_type"): "qwen 2", env_var("tp_size"): "2"}
    )
    assert (good.returncode, good.stdout) == (0, "'--model_type=qwen 2' --tp_size=2\n")
    bad = _run_command(pytestconfig.rootpath, spec, {**base, env_var("tp_size"): "two"})
    assert bad.returncode == 2
    assert f"{env_var('tp_size')}='two'" in bad.stderr
    missing = _run_command(pytestconfig.rootpath, "rtp_ref.suites.args.helpers:nope", base)
    assert missing.returncode == 2
    assert "no attribute" in missing.stderr


@pytest.mark.parametrize(("raw", "nargs", "expected"), [("--", None, "--"), ("--", "?", "--"), ("-x", None, "-x")])
def test_an_env_value_of_dashes_is_a_value(monkeypatch: pytest.MonkeyPatch, raw: str, nargs: int | str | None,
                                           expected: object) -> None:
    # argparse drops '--' (the command line's end of options) from an option's strings: CPython 3.11 parsed
    # X=-- as []; the args suite's property test drew it (§1 bug 7)
    monkeypatch.setenv("RTPT_DASH", raw)
    parser = EnvArgumentParser(prog="x", env_prefix="RTPT")
    parser.add_argument("--dash", nargs=nargs, default="unset")
    assert parser.parse_args([]).dash == expected
