"""The ``rtp-ref`` command: a thin dispatcher; each subcommand lives in ``rtp_ref.commands``."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from rtp_ref import __version__
from rtp_ref.commands._output import INTERRUPTED
from rtp_ref.errors import RtpRefError

#: Subcommand modules, in help order. Each defines ``register(subparsers)`` which adds its parser
#: and sets ``func`` (a callable taking the parsed namespace and returning an exit code).
COMMAND_MODULES = ("platforms", "fp8", "layouts", "golden", "golden_check", "read_check", "certify", "report", "bench",
                   "memcheck", "check_suites")


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
    """
    try:
        args = build_parser().parse_args(argv)
        code: int = args.func(args)
    except RtpRefError as exc:
        print(f"rtp-ref: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. `rtp-ref fp8 table | head`
        return 0
    except KeyboardInterrupt:
        print("rtp-ref: interrupted", file=sys.stderr)
        return INTERRUPTED
    return code


if __name__ == "__main__":
    sys.exit(main())
