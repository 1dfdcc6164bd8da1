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

#: Subcommand modules, in help order. Each defines ``register(subparsers)`` which adds its parser
#: and sets ``func`` (a callable taking the parsed namespace and returning an exit code).
COMMAND_MODULES = ("platforms", "kernels", "fp8", "layouts", "golden", "golden_check", "read_check", "certify",
                   "report", "bench", "memcheck", "check_suites")


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser, with every subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="rtp-ref",
        description="Conformance kit for LLM-inference KV-cache kernels: reference layouts, "
        "bit-exact fp8 numerics and kernel certification.",
    )
    parser.add_argument("--version", action="version", version=f"rtp-ref {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(f"rtp_ref.commands.{name}").register(sub)
    return parser


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
        args = build_parser().parse_args(argv)
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
