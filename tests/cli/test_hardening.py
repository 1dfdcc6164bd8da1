"""Bad input to every command, through a real process: exit 2, one clear error line, no traceback,
and no output file left behind or half-written.

Each row of ``BAD_INPUTS`` is one ``rtp-ref`` process, forked from a zygote that has imported torch
(tests/zygote.py). Its arguments may name
the damaged inputs built once per module (``{name}`` placeholders, see ``inputs``) and the test's
own directory (``{tmp}``). A row that asks for an output (``output``) must leave it absent, or,
when the row pre-creates it (``keep``), byte for byte as it was, with no temporary file beside it.

Ctrl-C is the other input every command must take without a traceback: the test at the end
interrupts ``certify --platform all`` (bench's is in tests/bench).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from rtp_ref.kv.golden import make_golden, write_golden
from rtp_ref.platform import load_platform
from tests.certify.reports import case_row, minimal_report
from tests.processes import child_env, interruptible, left_running, marked_processes, run_marker
from tests.zygote import CliZygote

REPO = Path(__file__).resolve().parents[2]
CPU_TOML = REPO / "platforms" / "cpu.toml"
#: what a pre-created output file holds; it must still hold exactly this afterwards
OLD_BYTES = b"an earlier output that a failed command must leave alone\n"


@dataclass(frozen=True)
class Bad:
    """One bad invocation: ``argv`` after ``rtp-ref``, and the text its error line must contain."""

    id: str
    argv: tuple[str, ...]
    message: str
    #: a path the command was asked to write ({placeholders} allowed); it must not appear
    output: str | None = None
    #: pre-create ``output`` with ``OLD_BYTES``; it must be left exactly so
    keep: bool = False
    env: dict[str, str] = field(default_factory=dict)
    #: directories put first on the child's PYTHONPATH ({placeholders} allowed): stand-ins for installed packages
    path: tuple[str, ...] = ()
    #: RLIMIT_FSIZE of the process in bytes: a write past it fails as on a full disk
    file_size_limit: int | None = None


GOLDEN = ("golden", "--layout", "fp8_ds_mla", "--platform", "cpu", "--out", "{tmp}/g.safetensors")
MUTANTS = {"RTP_REF_KERNELS": "tests.mutants.kernels:mutants"}
#: a benchmark small enough to run to its end when a check is missing
BENCH = ("bench", "--platform", "cpu", "--kernel", "torch-eager", "--layout", "fp8", "--tokens", "64")
#: a certification small enough to run to its end when a check is missing
CERTIFY = ("certify", "--platform", "cpu", "--kernel", "reference", "--layout", "auto")
#: memcheck in its runner-test mode, with an executable as the sanitizer (never started: the rows fail first)
MEMCHECK = ("--device", "cpu", "--sanitizer", sys.executable)

BAD_INPUTS = [
    # platforms: files passed as a path, and names
    Bad("platforms-toml-syntax", ("platforms", "show", "{syntax_toml}"), "{syntax_toml}: not a valid TOML file"),
    Bad("platforms-bad-flag-in-file", ("platforms", "show", "{flag_toml}"),
        "[layout_flags]: flag 'lora_alignment' has 3; valid values: strict, round_up"),
    Bad("platforms-missing-file", ("platforms", "show", "{tmp}/none.toml"),
        "platform file '{tmp}/none.toml' cannot be read: No such file or directory"),
    Bad("platforms-unknown-name", ("platforms", "show", "sm90"),
        "unknown platform 'sm90'; known platforms: cpu, cuda-sm100, cuda-sm120, cuda-sm90, rocm-gfx942, rocm-gfx950"),
    # kernels
    Bad("kernels-unknown-op", ("kernels", "--op", "concat_and_cache"),
        "--op 'concat_and_cache': not an op rtp-ref certifies; valid: concat_and_cache_mla, reshape_and_cache_flash, "
        "indexer_k_quant_and_cache, gather_and_maybe_dequant_cache, cp_gather_indexer_k_quant_cache"),
    # fp8
    Bad("fp8-unknown-format", ("fp8", "encode", "--format", "e4m3", "1"), "argument --format: invalid choice: 'e4m3'"),
    Bad("fp8-not-a-number", ("fp8", "encode", "--format", "e4m3fn", "abc"), "'abc' is not a number"),
    Bad("fp8-rule-without-ue8m0", ("fp8", "encode", "--format", "e4m3fn", "--rule", "ceil", "1"),
        "--rule ceil applies only to --format ue8m0"),
    Bad("fp8-mode-with-ue8m0", ("fp8", "encode", "--format", "ue8m0", "--mode", "nonsat", "1"),
        "--mode nonsat applies only to fp8 element formats (e4m3fn, e4m3fnuz, e5m2, e5m2fnuz), not to --format ue8m0"),
    # layouts
    Bad("layouts-unknown-layout", ("layouts", "--platform", "cpu", "--layout", "fp9"),
        "argument --layout: invalid choice: 'fp9' (choose from 'auto', 'fp8', 'fp8_ds_mla'"),
    Bad("layouts-unknown-flag", ("layouts", "--platform", "cpu", "--layout-flag", "scale_rule=pow2_ceil"),
        "unknown layout flag 'scale_rule'; valid flags: compact_fp8_for_sparse, lora_alignment"),
    Bad("layouts-bad-flag-value", ("layouts", "--platform", "cpu", "--layout-flag", "lora_alignment=maybe"),
        "flag 'lora_alignment' has 'maybe'; valid values: strict, round_up"),
    Bad("layouts-zero-heads", ("layouts", "--platform", "cpu", "--family", "mha", "--num-kv-heads", "0"),
        "argument --num-kv-heads: '0' is not valid; valid: an integer >= 1"),
    Bad("layouts-layout-of-another-family", ("layouts", "--platform", "cpu", "--family", "mha", "--layout", "fp8"),
        "--layout fp8: an MLA layout; valid: with --family mla (or no --family)"),
    Bad("layouts-unknown-family", ("layouts", "--platform", "cpu", "--family", "gqa"),
        "argument --family: invalid choice: 'gqa'"),
    Bad("layouts-zero-rank", ("layouts", "--platform", "cpu", "--kv-lora-rank", "0"),
        "argument --kv-lora-rank: '0' is not valid; valid: an integer >= 1"),
    Bad("layouts-negative-rank", ("layouts", "--platform", "cpu", "--kv-lora-rank", "-512"),
        "argument --kv-lora-rank: '-512' is not valid; valid: an integer >= 1"),
    Bad("layouts-zero-rope-dim", ("layouts", "--platform", "cpu", "--rope-dim", "0"),
        "argument --rope-dim: '0' is not valid; valid: an integer >= 1"),
    Bad("layouts-negative-rope-dim", ("layouts", "--platform", "cpu", "--rope-dim", "-1"),
        "argument --rope-dim: '-1' is not valid; valid: an integer >= 1"),
    # golden: nothing may be written, and an earlier file at --out survives
    Bad("golden-bad-platform-file", ("golden", "--layout", "fp8", "--platform", "{syntax_toml}", "--out",
                                     "{tmp}/g.safetensors"),
        "{syntax_toml}: not a valid TOML file", output="{tmp}/g.safetensors", keep=True),
    Bad("golden-negative-seed", (*GOLDEN, "--seed", "-1"), "seed=-1 is not valid; valid: 0..18446744073709551615",
        output="{tmp}/g.safetensors"),
    Bad("golden-too-large", (*GOLDEN, "--num-blocks", "100000000", "--block-size", "1000"),
        "the golden file would hold", output="{tmp}/g.safetensors"),
    Bad("golden-out-dir-missing", ("golden", "--layout", "fp8", "--platform", "cpu", "--out", "{tmp}/no/g.st"),
        "--out '{tmp}/no/g.st' cannot be written: No such file or directory", output="{tmp}/no"),
    Bad("golden-family-variant", ("golden", "--family", "mha", "--layout", "ue8m0", "--platform", "cpu", "--out",
                                  "{tmp}/g.safetensors"),
        "--layout 'ue8m0': not a reshape_and_cache_flash variant; valid: auto, fp8, fp8_e5m2",
        output="{tmp}/g.safetensors"),
    Bad("golden-family-mla-argument", ("golden", "--family", "indexer", "--layout", "none", "--platform", "cpu",
                                       "--kv-lora-rank", "256", "--out", "{tmp}/g.safetensors"),
        "--kv-lora-rank: not an argument of --family indexer", output="{tmp}/g.safetensors"),
    Bad("golden-unsupported-layout", ("golden", "--layout", "fp8_rocm_compact", "--platform", "cuda-sm90", "--out",
                                      "{tmp}/g.safetensors"),
        "--layout 'fp8_rocm_compact': platform cuda-sm90 does not support it; valid: auto, fp8, fp8_ds_mla, "
        "fp8_model1_mla", output="{tmp}/g.safetensors"),
    Bad("golden-out-empty", ("golden", "--layout", "fp8", "--platform", "cpu", "--out", ""),
        "--out '' is not a file name"),
    Bad("golden-disk-full", GOLDEN, "--out '{tmp}/g.safetensors' cannot be written: File too large",
        output="{tmp}/g.safetensors", keep=True, file_size_limit=64 * 1024),
    # golden-check: damaged files, unknown kernels
    Bad("golden-check-truncated", ("golden-check", "{truncated_golden}"),
        "is not a valid safetensors file (Error while deserializing header: incomplete metadata, file not "
        "fully covered); truncated or corrupt?"),
    Bad("golden-check-directory", ("golden-check", "{tmp}"), "golden file '{tmp}' cannot be read: Is a directory"),
    Bad("golden-check-missing-tensor", ("golden-check", "{no_scale_golden}"),
        "lacks tensor 'scale'; valid tensors: kv_c, k_pe, slot_mapping, scale, kv_cache_before, kv_cache_expected"),
    Bad("golden-check-wrong-dtype", ("golden-check", "{f64_scale_golden}"),
        "tensor 'scale' is float64 [1]; valid: float32 [1] (from the metadata)"),
    Bad("golden-check-other-format", ("golden-check", "{format2_golden}"),
        "metadata 'golden_format' is '2'; this rtp-ref reads golden_format '1'"),
    Bad("golden-check-unknown-kernel", ("golden-check", "{golden}", "--kernel", "tritonn"),
        "unknown kernel(s) 'tritonn'; known kernels: reference, torch-eager"),
    Bad("golden-check-unclaimed-layout", ("golden-check", "{golden}", "--kernel", "mutant-non-saturating-cast"),
        "kernel 'mutant-non-saturating-cast' does not claim layout 'fp8_ds_mla'", env=MUTANTS),
    # read-check: damaged files, a table without [reader], a [reader] with an unknown reading
    Bad("read-check-truncated", ("read-check", "{truncated_golden}", "--platform", "cuda-sm100"),
        "is not a valid safetensors file"),
    Bad("read-check-no-reader", ("read-check", "{golden}", "--platform", "{no_reader_toml}"),
        "its table states no [reader]; valid: a table with a [reader] section"),
    Bad("read-check-bad-reader", ("read-check", "{golden}", "--platform", "{bad_reader_toml}"),
        "[reader]: key 'tile_scale' has 'fp16'; valid values: fp32, bf16, e8m0_toward_zero"),
    # check-args, check-plugins: the kit and the report directory are checked before the suite runs
    Bad("check-args-impl-format", ("check-args", "--impl", "my_adapters"),
        "--impl 'my_adapters' is not of the form 'package.module:callable'; valid: an importable MODULE:CALLABLE"),
    Bad("check-plugins-impl-missing", ("check-plugins", "--impl", "no_such_adapter_module:kit"),
        "--impl 'no_such_adapter_module:kit': cannot import 'no_such_adapter_module': ModuleNotFoundError"),
    Bad("check-args-impl-not-callable", ("check-args", "--impl", "json:__name__"),
        "--impl 'json:__name__' names a str; valid: a callable returning a kit"),
    Bad("check-args-report-file", ("check-args", "--report", "{report}"), "is a file; valid: a directory"),
    Bad("check-plugins-examples-zero", ("check-plugins", "--examples", "0"),
        "argument --examples: '0' is not valid; valid: an integer >= 1"),
    # certify: checked before pytest starts, so no report directory appears
    Bad("certify-unknown-platform", ("certify", "--platform", "sm90", "--report", "{tmp}/rep"),
        "unknown platform 'sm90'; known platforms", output="{tmp}/rep"),
    Bad("certify-unknown-kernel", ("certify", "--platform", "cpu", "--kernel", "tritonn", "--report", "{tmp}/rep"),
        "unknown kernel(s) 'tritonn'; known kernels: reference", output="{tmp}/rep"),
    Bad("certify-negative-workers", ("certify", "--platform", "cpu", "-n", "-1", "--report", "{tmp}/rep"),
        "argument -n/--workers: '-1' is not valid; valid: an integer >= 0", output="{tmp}/rep"),
    Bad("certify-jobs-one-platform", ("certify", "--platform", "cpu", "--jobs", "2", "--report", "{tmp}/rep"),
        "--jobs 2: platforms are certified at once only with --platform all", output="{tmp}/rep"),
    Bad("certify-unknown-layout", ("certify", "--platform", "cpu", "--layout", "fp9", "--report", "{tmp}/rep"),
        "--layout 'fp9': unknown layout; valid: auto, fp8", output="{tmp}/rep"),
    Bad("certify-unknown-flag", ("certify", "--platform", "cpu", "--layout-flag", "x=1", "--report", "{tmp}/rep"),
        "unknown layout flag 'x'; valid flags", output="{tmp}/rep"),
    Bad("certify-report-is-a-file", ("certify", "--platform", "cpu", "--kernel", "reference", "--layout", "auto",
                                     "--report", "{tmp}/rep"),
        "--report '{tmp}/rep' is a file; valid: a directory", output="{tmp}/rep", keep=True),
    Bad("certify-report-under-a-file", (*CERTIFY, "--report", "{report}/rep"),
        "--report '{report}/rep' cannot be written: Not a directory; valid: a directory this user can create and "
        "write in"),
    Bad("certify-report-empty", (*CERTIFY, "--report", ""), "--report '': an empty path; valid: a directory"),
    Bad("certify-unsupported-layout", ("certify", "--platform", "cuda-sm90", "--layout", "fp8_rocm_compact",
                                       "--report", "{tmp}/rep"),
        "--layout 'fp8_rocm_compact': platform cuda-sm90 does not support it; valid: auto, fp8, fp8_ds_mla, "
        "fp8_e5m2, fp8_model1_mla, none, ue8m0", output="{tmp}/rep"),
    Bad("certify-wrong-layout-bytes", ("certify", "--platform", "{wrong_bytes_table}", "--report", "{tmp}/rep"),
        "[layout_bytes]: fp8_ds_mla = 600, but the reference layout fp8_ds_mla has 656 bytes per token at "
        "kv_lora_rank 512, rope_dim 64; valid: fp8_ds_mla = 656", output="{tmp}/rep"),
    # report merge: every report is checked before anything is written
    Bad("merge-same-pair-twice", ("report", "merge", "{report}", "{report_copy}", "--out", "{tmp}/board"),
        "both certify kernel reference on layout fp8 of platform cpu; valid: one report per platform, kernel and "
        "layout",
        output="{tmp}/board"),
    Bad("merge-truncated", ("report", "merge", "{report}", "{truncated_report}", "--out", "{tmp}/board"),
        "report '{truncated_report}' is not valid JSON", output="{tmp}/board"),
    Bad("merge-other-schema-version", ("report", "merge", "{v2_report}"),
        "'{v2_report}' has schema_version 2; this rtp-ref reads version 1"),
    Bad("merge-damaged", ("report", "merge", "{report}", "{damaged_report}", "--out", "{tmp}/board"),
        "key 'complete' is 'yes'; valid: true or false", output="{tmp}/board"),
    Bad("merge-out-is-a-file", ("report", "merge", "{report}", "--out", "{tmp}/board"),
        "--out '{tmp}/board' cannot be written", output="{tmp}/board", keep=True),
    Bad("merge-out-empty", ("report", "merge", "{report}", "--out", ""), "--out '': an empty path; valid: a directory"),
    # bench: checked before anything is timed or written
    Bad("bench-unknown-layout", ("bench", "--layout", "fp9", "--report", "{tmp}/rep"),
        "--layout 'fp9': unknown layout; valid: auto, fp8", output="{tmp}/rep"),
    Bad("bench-zero-layers", (*BENCH, "--layers", "0", "--report", "{tmp}/rep"),
        "argument --layers: '0' is not valid; valid: an integer >= 1", output="{tmp}/rep"),
    Bad("bench-negative-tokens", (*BENCH, "-1", "--report", "{tmp}/rep"),
        "argument --tokens: '-1' is not valid; valid: an integer >= 1", output="{tmp}/rep"),
    Bad("bench-report-in-proc", (*BENCH, "--report", "/proc/forbidden/x"),
        "--report '/proc/forbidden/x' cannot be written: "),  # the reason differs for root and other users
    Bad("bench-report-under-a-file", (*BENCH, "--report", "{report}/rep"),
        "--report '{report}/rep' cannot be written: Not a directory"),
    Bad("bench-report-is-a-file", (*BENCH, "--report", "{tmp}/rep"), "--report '{tmp}/rep' is a file",
        output="{tmp}/rep", keep=True),
    Bad("bench-report-empty", (*BENCH, "--report", ""), "--report '': an empty path; valid: a directory"),
    Bad("bench-without-matplotlib", (*BENCH, "--report", "{tmp}/rep"),
        "bench draws bench.png with matplotlib, which cannot be imported (No module named 'matplotlib'); "
        "valid: matplotlib installed, with pip install 'rtp-ref[bench]'", output="{tmp}/rep",
        path=("{no_matplotlib}",)),
    # memcheck: checked before a sanitizer starts (--device cpu, the runner's test mode: any host; more rows
    # in test_memcheck.py)
    Bad("memcheck-unsupported-layout", ("memcheck", *MEMCHECK, "--kernel", "reference", "--platform", "cuda-sm90",
                                        "--layout", "fp8_rocm_compact", "--report", "{tmp}/rep"),
        "--layout 'fp8_rocm_compact': platform cuda-sm90 does not support it; valid: auto, fp8, fp8_ds_mla, "
        "fp8_model1_mla", output="{tmp}/rep"),
    Bad("memcheck-unclaimed-layout", ("memcheck", *MEMCHECK, "--kernel", "mutant-non-saturating-cast",
                                      "--platform", "cpu", "--layout", "fp8_ds_mla"),
        "--layout 'fp8_ds_mla': kernel 'mutant-non-saturating-cast' does not claim it; valid: fp8, "
        "fp8_rocm_compact", env=MUTANTS),
    Bad("memcheck-case-matches-nothing", ("memcheck", *MEMCHECK, "--kernel", "reference", "--case", "t99",
                                          "--report", "{tmp}/rep"),
        "--case 't99': matches no case of the selected layouts; valid: part of a case id, such as "
        "empty-t0-b16-bf16", output="{tmp}/rep"),
    Bad("memcheck-report-is-a-file", ("memcheck", *MEMCHECK, "--kernel", "reference", "--report", "{tmp}/rep"),
        "--report '{tmp}/rep' is a file; valid: a directory", output="{tmp}/rep", keep=True),
]


def _toml_with(path: Path, old: str, new: str) -> Path:
    """cpu.toml with ``old`` replaced by ``new``, written to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = CPU_TOML.read_text()
    assert old in text
    path.write_text(text.replace(old, new))
    return path


def _toml_without_reader(path: Path) -> Path:
    """cpu.toml without its ``[reader]`` table (the table before ``[tolerances]``), written to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = CPU_TOML.read_text()
    before, rest = text.split("[reader]\n")
    path.write_text(before + rest[rest.index("[tolerances]"):])
    return path


def _rewritten(source: Path, target: Path, change: Callable[[dict[str, torch.Tensor], dict[str, str]], None]) -> Path:
    """``source`` rewritten by the safetensors library after ``change(tensors, metadata)``."""
    with safe_open(str(source), "pt") as handle:
        tensors = {k: handle.get_tensor(k) for k in handle.keys()}  # noqa: SIM118 (not a dict)
        metadata = dict(handle.metadata())
    change(tensors, metadata)
    save_file(tensors, str(target), metadata=metadata)
    return target


def _report(path: Path, **changes: object) -> Path:
    report = minimal_report([case_row("reference", "fp8", "passed")])
    path.write_text(json.dumps({**report, **changes}, indent=1))
    return path


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The damaged (and a few good) input files the table names, built once."""
    root = tmp_path_factory.mktemp("inputs")
    golden = root / "golden.safetensors"
    write_golden(golden, make_golden(load_platform("cpu"), "fp8_ds_mla", tokens=8, num_blocks=1, block_size=8))
    truncated = root / "truncated.safetensors"
    truncated.write_bytes(golden.read_bytes()[:-100])
    report = _report(root / "report.json")
    report_copy = root / "report-again.json"
    report_copy.write_bytes(report.read_bytes())
    truncated_report = root / "truncated.json"
    truncated_report.write_bytes(report.read_bytes()[:200])

    # An environment without the bench extra: the import of matplotlib fails as a missing package does.
    no_matplotlib = root / "no_matplotlib"
    (no_matplotlib / "matplotlib").mkdir(parents=True)
    (no_matplotlib / "matplotlib" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'matplotlib'\", name='matplotlib')\n"
    )

    syntax_toml = root / "syntax.toml"
    syntax_toml.write_text('name = "x"\n[[[\n')
    # an out-of-tree table (named as its file must be) whose hand-written bytes per token are wrong
    (root / "tables").mkdir()
    wrong_bytes_table = root / "tables" / "cuda-sm90.toml"
    wrong_bytes_table.write_text((REPO / "platforms" / "cuda-sm90.toml").read_text()
                                 .replace("fp8_ds_mla = 656", "fp8_ds_mla = 600"))

    def drop_scale(t: dict[str, torch.Tensor], m: dict[str, str]) -> None:
        del t["scale"]

    def f64_scale(t: dict[str, torch.Tensor], m: dict[str, str]) -> None:
        t["scale"] = t["scale"].double()

    def format2(t: dict[str, torch.Tensor], m: dict[str, str]) -> None:
        m["golden_format"] = "2"

    paths = {
        "wrong_bytes_table": str(wrong_bytes_table),
        "report_copy": str(report_copy),
        "syntax_toml": syntax_toml,
        "flag_toml": _toml_with(root / "flag" / "cpu.toml", 'lora_alignment = "strict"', "lora_alignment = 3"),
        "golden": golden,
        "no_reader_toml": _toml_without_reader(root / "no_reader" / "cpu.toml"),
        "bad_reader_toml": _toml_with(root / "bad_reader" / "cpu.toml", 'tile_scale = "fp32"', 'tile_scale = "fp16"'),
        "truncated_golden": truncated,
        "no_scale_golden": _rewritten(golden, root / "no_scale.safetensors", drop_scale),
        "f64_scale_golden": _rewritten(golden, root / "f64.safetensors", f64_scale),
        "format2_golden": _rewritten(golden, root / "format2.safetensors", format2),
        "report": report,
        "truncated_report": truncated_report,
        "v2_report": _report(root / "v2.json", schema_version=2),
        "damaged_report": _report(root / "damaged.json", complete="yes"),
        "no_matplotlib": no_matplotlib,
    }
    return {name: str(path) for name, path in paths.items()}


def _error_line(stderr: str) -> str:
    """The error line: stderr's last line; anything before it may only be argparse's usage text."""
    lines = stderr.rstrip("\n").split("\n")
    for line in lines[:-1]:
        assert line.startswith(("usage: ", " ")), f"stderr has more than an error line:\n{stderr}"
    return lines[-1]


@pytest.mark.parametrize("bad", [pytest.param(b, id=b.id) for b in BAD_INPUTS])
def test_bad_input_exits_2_with_one_clear_line(bad: Bad, inputs: dict[str, str], tmp_path: Path,
                                               cli_zygote: CliZygote) -> None:
    values = {**inputs, "tmp": str(tmp_path)}
    argv = [arg.format(**values) for arg in bad.argv]
    output = Path(bad.output.format(**values)) if bad.output else None
    if output is not None and bad.keep:
        output.write_bytes(OLD_BYTES)
    before = sorted(os.listdir(tmp_path))
    # From the repository, tests.mutants is importable for the rows that name its kernels.
    env = child_env(*(path.format(**values) for path in bad.path), REPO, **bad.env)
    done = cli_zygote.run(argv, env, tmp_path, file_size_limit=bad.file_size_limit)
    assert "Traceback" not in done.stderr + done.stdout, done.stderr
    assert done.returncode == 2, f"exit {done.returncode}\nstdout: {done.stdout}\nstderr: {done.stderr}"
    assert done.stdout == "", "an error must not print a result"
    line = _error_line(done.stderr)
    assert line.startswith("rtp-ref") and ": error: " in line, line
    assert bad.message.format(**values) in line
    if output is not None:
        if bad.keep:
            assert output.read_bytes() == OLD_BYTES, f"{output} was changed"
        else:
            assert not output.exists(), f"{output} was written"
        assert sorted(os.listdir(tmp_path)) == before, "a file was left behind"


def test_every_command_has_bad_input_rows() -> None:
    from rtp_ref.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    commands = set(sub.choices)
    assert {"check-args", "check-plugins", "read-check", "certify"} <= commands
    assert commands - {b.argv[0] for b in BAD_INPUTS} == set()


def _unnamed(marker: dict[str, str], report: Path) -> list[int]:
    """The run's processes whose command line does not name its report: its xdist workers, which a search
    by command line would miss."""
    found = []
    for pid in marked_processes(marker):
        try:
            cmdline = (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:  # it ended meanwhile
            continue
        if str(report) not in cmdline:
            found.append(pid)
    return found


def test_ctrl_c_during_certify_all_writes_the_scoreboard_of_what_finished(tmp_path: Path) -> None:
    from rtp_ref.platform import platform_names

    first, second, *rest = platform_names()
    report = tmp_path / "rep"
    marker = run_marker()  # every process of the run carries it, whatever its command line
    proc = subprocess.Popen(
        [sys.executable, "-m", "rtp_ref.cli", "certify", "--platform", "all", "--kernel", "reference", "--layout",
         "auto", "--report", str(report), "--jobs", "1"],  # one at a time: the second starts after the first
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env(REPO, **marker), cwd=tmp_path,
        preexec_fn=interruptible,
    )
    watchdog = threading.Timer(120, proc.kill)  # a run that never gets to the second platform fails, not hangs
    watchdog.start()
    try:
        assert proc.stdout is not None  # stdout=PIPE
        # The second platform starts once the first platform's process has ended, its report written.
        for line in proc.stdout:
            if line == f"rtp-ref: certifying platform {second}\n":
                break
        assert (report / first / "report.json").exists()
        # Interrupt once the second platform's xdist worker is up, so that the check at the end must see it.
        deadline = time.monotonic() + 60
        while not _unnamed(marker, report) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _unnamed(marker, report), "the second platform's xdist worker never started"
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        watchdog.cancel()
    assert "Traceback" not in stdout + stderr, stderr
    assert proc.returncode == 130, f"exit {proc.returncode}\nstdout: {stdout}\nstderr: {stderr}"
    assert stderr.endswith(
        f"rtp-ref: interrupted: {report}/scoreboard.md holds the platforms that finished ({first}) and is marked "
        "incomplete\n"
    ), stderr
    unfinished = [second, *rest]
    incomplete = f"INCOMPLETE: the run stopped before these platforms finished: {', '.join(unfinished)}"
    board = json.loads((report / "scoreboard.json").read_text())
    assert (board["complete"], board["unfinished"]) == (False, unfinished)
    assert {row["platform"] for row in board["rows"]} == {first}
    assert (first, "reference", "auto", "certified") in {
        (row["platform"], row["kernel"], row["layout"], row["verdict"]) for row in board["rows"]
    }
    markdown = (report / "scoreboard.md").read_text()
    assert f"| {first} (native) |" in markdown and markdown.rstrip("\n").endswith(incomplete), markdown
    assert stdout.rstrip("\n").endswith(incomplete), "the printed scoreboard ends saying it is incomplete"
    assert left_running(marker) == [], "processes of the interrupted run (its xdist worker too) were left running"


TRITON_HERE_NEEDS = ("triton: not available here: torch sees no GPU and TRITON_INTERPRET is not set (set "
                     "TRITON_INTERPRET=1 to run it on the CPU)")


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU host the triton kernel is available")
@pytest.mark.parametrize("command", ["certify", "golden-check"])
def test_a_kernel_that_cannot_run_here_is_named_with_the_reason_not_unknown(
        command: str, inputs: dict[str, str], tmp_path: Path) -> None:
    argv = ["certify", "--platform", "cpu", "--kernel", "triton", "--report", str(tmp_path / "rep")] \
        if command == "certify" else ["golden-check", inputs["golden"], "--kernel", "triton"]
    proc = subprocess.run([sys.executable, "-m", "rtp_ref.cli", *argv], env=child_env(TRITON_INTERPRET="0"),
                          capture_output=True, text=True, timeout=300, check=False)
    assert (proc.returncode, proc.stderr) == (2, f"rtp-ref: error: {TRITON_HERE_NEEDS}\n")
    assert not (tmp_path / "rep").exists()


def test_a_report_lists_the_kernels_that_could_not_run(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "rtp_ref.cli", "certify", "--platform", "cpu", "--layout", "auto",
                           "--report", str(tmp_path)], env=child_env(TRITON_INTERPRET="0"),
                          capture_output=True, text=True, timeout=600, check=False)
    report = json.loads((tmp_path / "report.json").read_text())
    names = {k["name"] for k in report["unavailable_kernels"]}
    assert "cuda" in names or torch.cuda.is_available(), proc.stdout[-2000:]
    md = (tmp_path / "report.md").read_text()
    for k in report["unavailable_kernels"]:
        assert f"- kernel {k['name']}: not certified, not available here: {k['reason']}" in md
