"""The ``rtp-ref`` command: help on every level, fp8 and platforms output, errors exit 2."""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from rtp_ref.cli import build_parser, main
from rtp_ref.commands._output import writable_dir


def _all_command_paths(parser: argparse.ArgumentParser, prefix: list[str]) -> list[list[str]]:
    paths = [prefix]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                paths += _all_command_paths(sub, [*prefix, name])
    return paths


@pytest.mark.parametrize(
    "path", _all_command_paths(build_parser(), []), ids=lambda p: " ".join(p) or "rtp-ref"
)
def test_help_on_every_level(path: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*path, "--help"]) == 0
    assert "usage: rtp-ref" in capsys.readouterr().out


def test_fp8_encode_issue_example(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                "fp8",
                "encode",
                "--format",
                "e4m3fn",
                "--mode",
                "satfinite",
                "1000",
                "inf",
                "nan",
                "300",
                "-31.7406",
            ]
        )
        == 0
    )
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[1:] for line in lines] == [
        ["0x7e", "01111110", "448"],
        ["0x7e", "01111110", "448"],
        ["0x7f", "01111111", "nan"],
        ["0x79", "01111001", "288"],
        ["0xe0", "11100000", "-32"],
    ]


def test_fp8_encode_json_fnuz(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["fp8", "encode", "--format", "e4m3fnuz", "--json", "1000", "inf", "nan", "300", "-31.7406"])
        == 0
    )
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["input"] for r in rows] == ["1000", "inf", "nan", "300", "-31.7406"]
    assert [r["value"] for r in rows] == [240.0, 240.0, "nan", 240.0, -32.0]
    assert [r["bits"] for r in rows] == ["0x7f", "0x7f", "0x80", "0x7f", "0xe8"]


def test_fp8_decode_and_ue8m0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fp8", "decode", "--format", "e5m2", "--json", "0x7c", "0b01111011", "1"]) == 0
    values = [json.loads(line)["value"] for line in capsys.readouterr().out.splitlines()]
    assert values == ["inf", 57344.0, math.ldexp(1, -16)]
    assert main(["fp8", "encode", "--format", "ue8m0", "--rule", "ceil", "--json", "0.3", "4"]) == 0
    values = [json.loads(line)["value"] for line in capsys.readouterr().out.splitlines()]
    assert values == [0.5, 4.0]


@pytest.mark.parametrize(("given", "bits", "note"), [
    ("-0.3", "0xff", "a scale cannot be negative"),
    ("0", "0x00", "ue8m0 has no zero"),
    ("1e-40", "0x00", "below 2^-127"),  # a float32 subnormal, under the smallest scale 2^-127 (~5.9e-39)
    ("inf", "0xff", "past 2^127"),
    ("nan", "0xff", "NaN in"),
    ("0.3", "0x7e", None),  # 2^-1 = 0.5 >= 0.3 (ceil): a scale like any other, nothing to say
])
def test_ue8m0_says_why_an_input_is_no_scale(capsys: pytest.CaptureFixture[str], given: str, bits: str,
                                            note: str | None) -> None:
    """ue8m0 (OCP MX v1.0 E8M0) has no sign, zero or infinity: an input it cannot hold is named, not just 0xff."""
    assert main(["fp8", "encode", "--format", "ue8m0", "--json", "--", given]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["bits"] == bits
    assert (note is None and "note" not in row) or (note is not None and row["note"].startswith(note)), row
    assert main(["fp8", "encode", "--format", "ue8m0", "--", given]) == 0
    line = capsys.readouterr().out
    assert (note in line) if note else ("(" not in line), line


def test_fp8_input_dtype_rounds_first(capsys: pytest.CaptureFixture[str]) -> None:
    # 448.9 as bf16 is 448 (8 significant bits), as float32 it stays above 448 and still rounds to 448;
    # 0.1 shows the difference: bf16(0.1) = 0.10009765625 -> e5m2 0.09375 either way, so use 465.
    assert (
        main(
            [
                "fp8",
                "encode",
                "--format",
                "e4m3fn",
                "--mode",
                "nonsat",
                "--json",
                "--input-dtype",
                "bfloat16",
                "465",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["value"] == 448.0  # bf16(465) = 464, a tie -> even 448
    assert main(["fp8", "encode", "--format", "e4m3fn", "--mode", "nonsat", "--json", "465"]) == 0
    assert json.loads(capsys.readouterr().out)["value"] == "nan"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["fp8", "encode", "--format", "e4m3fn", "abc"], "'abc' is not a number"),
        (["fp8", "encode", "--format", "e4m3", "1"], "invalid choice: 'e4m3'"),
        (["fp8", "decode", "--format", "e4m3fn", "256"], "'256' is outside 0..255"),
        (["platforms", "show", "sm90"], "unknown platform 'sm90'; known platforms"),
        (["nonsense"], "invalid choice: 'nonsense'"),
    ],
)
def test_errors_exit_2_with_a_message(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2  # argparse's own usage errors too
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_platforms_list_and_show(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["platforms", "--json"]) == 0
    tables = json.loads(capsys.readouterr().out)
    assert {t["name"]: t["fp8"]["element_format"] for t in tables}["rocm-gfx942"] == "e4m3fnuz"
    assert main(["platforms", "show", "cuda-sm90"]) == 0
    assert "e4m3fn (max 448)" in capsys.readouterr().out
    assert main(["platforms", "show", "rocm-gfx942"]) == 0
    assert "e4m3fnuz (max 240)" in capsys.readouterr().out
    assert main(["platforms", "detect", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["name"]


def test_console_script_runs_as_a_real_process() -> None:
    """The installed entry point, in a real process: an error is one line on stderr, exit 2."""
    ok = subprocess.run(
        [sys.executable, "-m", "rtp_ref.cli", "fp8", "encode", "--format", "e4m3fn", "1000"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert ok.returncode == 0 and "448" in ok.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "rtp_ref.cli", "platforms", "show", "nope"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 2 and bad.stderr.startswith("rtp-ref: error: unknown platform 'nope'")
    assert "Traceback" not in bad.stderr


def test_ctrl_c_in_any_command_is_one_line_and_exit_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The backstop for commands without their own Ctrl-C handling (the real-process tests are in
    tests/bench and tests/cli/test_hardening.py)."""

    def interrupted(args: argparse.Namespace) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr("rtp_ref.commands.layouts._layouts", interrupted)
    assert main(["layouts"]) == 130
    assert capsys.readouterr() == ("", "rtp-ref: interrupted\n")


def test_a_checked_report_directory_is_left_as_it_was(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b"
    assert writable_dir("--report", str(target)) == target
    assert list(tmp_path.iterdir()) == [], "the check created and left something"
    (tmp_path / "kept").mkdir()
    writable_dir("--report", str(tmp_path / "kept"))
    assert [p.name for p in tmp_path.iterdir()] == ["kept"] and list((tmp_path / "kept").iterdir()) == []


def test_each_command_module_registers_its_command_with_the_listed_help() -> None:
    """``rtp-ref --help`` lists the commands from rtp_ref.cli.COMMANDS without importing their modules: the help
    there must be the one each module gives its command."""
    import argparse

    from rtp_ref.cli import COMMANDS

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert {action.dest: action.help for action in sub._choices_actions} == \
        {name: help_text for name, (_, help_text) in COMMANDS.items()}


@pytest.mark.parametrize("argv", [["platforms"], ["--help"], ["kernels", "--help"], ["fp8", "--help"],
                                  ["check-args", "--help"], ["report", "--help"]], ids=" ".join)
def test_commands_that_need_no_tensors_do_not_import_torch(argv: list[str]) -> None:
    """Building the parser of one command imports only that command's module (torch takes seconds to import)."""
    import subprocess
    import sys

    probe = ("import contextlib, io, sys\nfrom rtp_ref.cli import main\n"
             "with contextlib.redirect_stdout(io.StringIO()):\n    code = main(sys.argv[1:])\n"
             "print(code, 'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.stdout.split() == ["0", "False"], done.stdout + done.stderr
