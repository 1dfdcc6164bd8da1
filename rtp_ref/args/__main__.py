"""``python -m rtp_ref.args MODULE:CALLABLE``: print the flags equivalent to the environment.

The callable returns the ``EnvArgumentParser`` whose variables are translated. Exit 0 with one
shell-quoted line on stdout; exit 2 with a message on stderr for a bad factory or a malformed value.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from rtp_ref.args.env_to_cli import write_command_line
from rtp_ref.args.objects import resolve_object
from rtp_ref.args.parser import EnvArgumentParser
from rtp_ref.errors import RtpRefError

PROG = "python -m rtp_ref.args"


def _load_parser(spec: str) -> EnvArgumentParser:
    factory = resolve_object(spec)
    if not callable(factory):
        raise RtpRefError(f"{spec!r} is not callable")
    parser = factory()
    if not isinstance(parser, EnvArgumentParser):
        raise RtpRefError(f"{spec!r} returned {type(parser).__name__}, not an EnvArgumentParser")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command (module doc); returns the exit code."""
    cli = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0] if __doc__ else None)
    cli.add_argument(
        "parser_factory",
        metavar="MODULE:CALLABLE",
        help="a callable returning the EnvArgumentParser whose environment variables to translate",
    )
    spec = cli.parse_args(argv).parser_factory
    try:
        parser = _load_parser(spec)
    except RtpRefError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    return write_command_line(parser, os.environ, sys.stdout, sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
