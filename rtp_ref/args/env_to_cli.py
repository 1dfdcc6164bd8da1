"""Environment -> command line: the flags that say what a parser's environment variables say.

Parsing the generated tokens with those variables unset gives the namespace that parsing ``[]``
with them set gives (rtp_ref/suites/args/test_args_properties.py checks this over random parsers). Unlike
rtp-llm's ``generate_args_from_env_clean.py`` it writes string values, writes booleans as the flag
itself, leaves unset variables out, never writes command-line-only arguments, and fails (exit 2)
on a malformed value instead of printing the error and exiting 0.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Mapping
from typing import TextIO

from rtp_ref.args.parser import EnvArgumentParser


def env_to_cli(parser: EnvArgumentParser, environ: Mapping[str, str] | None = None) -> list[str]:
    """The command-line tokens equivalent to the set variables of ``environ`` (default ``os.environ``).

    One ``--flag=VALUE`` (one value), ``--flag V1 V2`` (several) or ``--flag`` / ``--no-flag``
    (booleans) per set variable, in registration order. A malformed value raises
    ``argparse.ArgumentError`` naming the argument, the variable and the value.
    """
    return [token for value in parser.read_environment(environ) for token in value.form.tokens]


def write_command_line(
    parser: EnvArgumentParser, environ: Mapping[str, str] | None, stdout: TextIO, stderr: TextIO
) -> int:
    """Print ``env_to_cli``'s tokens as one shell-quoted line and return 0.

    On a malformed value, print the error to ``stderr`` and return 2.
    """
    try:
        tokens = env_to_cli(parser, environ)
    except argparse.ArgumentError as err:
        print(f"{parser.prog}: error: {err}", file=stderr)
        return 2
    print(shlex.join(tokens), file=stdout)
    return 0
