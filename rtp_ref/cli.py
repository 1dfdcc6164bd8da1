"""The ``rtp-ref`` command: a thin dispatcher; each subcommand lives in ``rtp_ref.commands``."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from rtp_ref import __version__
from rtp_ref.commands._output import INTERRUPTED
from rtp_ref.commands._streams import NO_READER, guarded_streams
from rtp_ref.errors import RtpRefError

#: Each subcommand, in help order: the module in rtp_ref.commands that registers it (``register(subparsers)`` adds
#: its parser and sets ``func``, a callable taking the parsed namespace and returning an exit code) and its one-line
#: help. The help is kept here too so that ``rtp-ref --help`` and a run of one command import no other command's
#: module (several import torch: seconds of start-up for ``rtp-ref platforms``); tests/cli/test_cli.py checks that
#: each module registers its command with this help.
COMMANDS: dict[str, tuple[str, str]] = {
    "platforms": ("platforms", "list, show or detect platform tables"),
    "kernels": ("kernels", "list the kernels certify finds here: op, claims, devices, origin"),
    "fp8": ("fp8", "encode/decode fp8 values with the bit-exact reference codec"),
    "layouts": ("layouts", "every KV-cache family's layouts on a platform: MLA field tables, MHA paged and indexer "
                           "sizes"),
    "golden": ("golden", "write a layout's golden vector (inputs and expected cache) as a safetensors file"),
    "golden-check": ("golden_check", "read a golden file back: validate it, re-derive its expected cache, optionally "
                                     "run a kernel on it"),
    "read-check": ("read_check", "what a platform's attention reader sees in a golden file's cache: tile scales and "
                                 "fp8 values it takes differently from what was stored"),
    "certify": ("certify", "run the conformance suite and write report.json, report.md and junit.xml"),
    "report": ("report", "work with certification reports"),
    "bench": ("bench", "kernel time and bandwidth, eager and in a CUDA graph, against the roof"),
    "memcheck": ("memcheck", "run compute-sanitizer over one call of every conformance case of a kernel"),
    "check-args": ("check_suites", "run the args behaviour suite against an implementation of the env/CLI argument "
                                   "parser and its env-to-CLI generator; failures as findings"),
    "check-plugins": ("check_suites", "run the plugins behaviour suite against an implementation of the external "
                                      "model package loading and model registry; failures as findings"),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser. ``command`` None: every subcommand registered in full; else only the modules of that
    subcommand (none when it is no subcommand, or "") in full, the others by name and help alone, enough to list
    them and to refuse an unknown one."""
    parser = argparse.ArgumentParser(
        prog="rtp-ref",
        description="Conformance kit for LLM-inference KV-cache kernels: reference layouts, "
        "bit-exact fp8 numerics and kernel certification.",
    )
    parser.add_argument("--version", action="version", version=f"rtp-ref {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    full = {module for name, (module, _) in COMMANDS.items() if command is None or name == command}
    registered: set[str] = set()
    for name, (module, help_text) in COMMANDS.items():
        if module not in full:
            sub.add_parser(name, help=help_text)
        elif module not in registered:
            importlib.import_module(f"rtp_ref.commands.{module}").register(sub)
            registered.add(module)
    return parser


def chosen_command(argv: Sequence[str]) -> str:
    """The subcommand ``argv`` names (its first word, when no option comes first), or "" for none."""
    return argv[0] if argv and not argv[0].startswith("-") else ""


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``rtp-ref``; returns the exit code (0 ok, 1 a check failed, 2 bad input, 130 interrupted).

    Ctrl-C anywhere (building the parser imports torch, which takes seconds) ends with one line, never
    a traceback; commands that have something to say about an interrupted run (what was written)
    catch it themselves first.

    An output stream that cannot be written never ends a command early: it runs to its end (a certify run
    writes its reports) with the rest of that output dropped, and the exit status is then
    ``exit_status_after_lost_output``'s.
    """
    with guarded_streams() as (stdout, _stderr):
        try:
            code = _run(argv)
        except SystemExit as exc:  # argparse's --help, --version (0) and usage errors (2), after their output
            code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
        return exit_status_after_lost_output(code, stdout.loss())


def _run(argv: Sequence[str] | None) -> int:
    try:
        words = sys.argv[1:] if argv is None else list(argv)
        args = build_parser(chosen_command(words)).parse_args(words)
        code: int = args.func(args)
    except RtpRefError as exc:
        print(f"rtp-ref: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("rtp-ref: interrupted", file=sys.stderr)
        return INTERRUPTED
    return code


def exit_status_after_lost_output(code: int, lost: OSError | None) -> int:
    """The exit status of a command that ended with ``code`` after its stdout stopped taking output with
    ``lost`` (None: it took all of it).

    Printing never turns a failure into a success, nor a command's verdict into another one: a reader that
    went away (a closed pipe, a stdout closed from the start: ``| head``, ``| true``, ``>&-``) leaves ``code``
    as it is, said on stderr in one line only when ``code`` is 1, a check that failed (its findings were in the
    lost output; after ``| head`` of a successful command there is nothing to say, and bad input or an
    interrupt has said why on stderr already). Output a reader wanted and did not get (a full disk, an I/O
    error) is a failure of its own: one line, and at least 1.
    """
    if lost is None:
        return code
    reader_left = lost.errno in NO_READER
    if reader_left and code != 1:
        return code
    print(f"rtp-ref: stdout could not be written ({lost.strerror or lost}); the output after that was dropped",
          file=sys.stderr)
    return code if reader_left else code or 1


if __name__ == "__main__":
    sys.exit(main())
