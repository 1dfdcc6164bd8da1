"""An emulation of rtp-llm's env -> CLI generator, ``generate_args_from_env_clean.py``, bugs included.

Written for this test suite from the behaviour spec (``docs/sources.md#rtp-llm-server-arguments``, the generator
at rtp-llm HEAD ``4b8d39cd5``; PR #1266 does not change it) and, for its flags and how it builds its parser, the
public file (alibaba/rtp-llm ``rtp_llm/server/server_args/generate_args_from_env_clean.py``: ``main`` and
``generate_args_list``); it is not rtp-llm's code, and its messages are English. Like rtp-llm's, it builds
the server's parser inline (``EnvArgumentParser(...)``, then ``init_all_group_args`` looked up by name when it
runs), reads ``os.environ``, takes its own flags (``--only-env-vars``: leave out what no variable sets;
``--quiet``: print the command line only; rtp-llm's ``--output-file``, ``--set-env`` and ``--export-env`` only add
outputs and are left out) and exits 0 even after an error. Net effect: string values are never written, a set
``str2bool`` variable with a default is dropped, a value that does not convert silently gives the default.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Sequence
from typing import Any

from rtp_ref.suites.args.rtp_llm_main import EnvArgumentParser, PyEnvConfigs, str2bool


def get_all_arguments_from_parser(parser: EnvArgumentParser) -> list[tuple[str, str, Any, Any]]:
    """19-49: ``(long option, variable, default, type)`` of every mapped action with a ``--`` flag; no type
    counts as ``str``."""
    mappings = parser.get_env_mappings()
    found = []
    for action in parser._actions:
        long = next((o for o in action.option_strings if o.startswith("--")), None)
        if action.dest in mappings and long is not None:
            found.append((long, mappings[action.dest], action.default, action.type or str))
    return found


def read_env_value(env_name: str, default: Any, arg_type: Any) -> Any:
    """52-75: the default when the variable is unset; converts bool/int/float, anything else (``str2bool``
    included) stays a string; a value that does not convert gives the default, silently."""
    raw = os.environ.get(env_name)
    if raw is None:
        return default
    try:
        if arg_type is bool:
            return raw.lower() in ("true", "1", "yes", "on")
        if arg_type in (int, float):
            return arg_type(raw)
        return str(raw)
    except (ValueError, TypeError):
        return default


def format_argument_pair(long_option: str, value: Any) -> list[str]:
    """78-104: a string value is dropped; booleans print as 1/0; ``None`` leaves the bare flag."""
    if isinstance(value, str):
        return []
    if value is None:
        return [long_option]
    return [long_option, ("1" if value else "0") if isinstance(value, bool) else str(value)]


def _convert_none_default(raw: str, arg_type: Any) -> Any:
    """136-165: an argument with a ``None`` default converts as bool/int/float/str2bool/str."""
    if arg_type is bool:
        return raw.lower() in ("true", "1", "yes", "on")
    if arg_type in (int, float):
        return arg_type(raw)
    if arg_type is str2bool:
        return str2bool(raw)
    return str(raw)


def generate_args_list(only_env_vars: bool = False) -> list[str]:
    """107-182: the server's parser built here, then one pair per mapped option (no root config: no bindings)."""
    parser = EnvArgumentParser(description="RTP LLM")
    from rtp_ref.suites.args.rtp_llm_main import init_all_group_args  # looked up when it runs, as rtp-llm's is

    init_all_group_args(parser, PyEnvConfigs())
    args: list[str] = []
    for long_option, env_name, default, arg_type in get_all_arguments_from_parser(parser):
        if long_option == "--help" or default == argparse.SUPPRESS:  # 130
            continue
        is_set = os.environ.get(env_name) is not None
        if default is None:
            if not is_set:
                continue
            try:
                value = _convert_none_default(os.environ[env_name], arg_type)
            except (ValueError, TypeError):
                continue  # a value that does not convert: the argument is left out, silently
        else:
            value = read_env_value(env_name, default, arg_type)
            if only_env_vars and not is_set:
                continue
        if isinstance(value, str) and value == "":
            continue
        args += format_argument_pair(long_option, value)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """185-249: its flags, the list (with a header unless ``--quiet``); an error is printed and the exit code is
    still 0."""
    flags = argparse.ArgumentParser(description="generate RTP LLM arguments from the environment")
    flags.add_argument("--only-env-vars", action="store_true", help="only arguments whose variable is set")
    flags.add_argument("--quiet", action="store_true", help="print the argument list only")
    options = flags.parse_args(argv)
    if not options.quiet:
        print("reading arguments from the environment...")
    try:
        args = generate_args_list(only_env_vars=options.only_env_vars)
        if not options.quiet:
            print(f"\nfound {len(args)} arguments:")
            for number, arg in enumerate(args, 1):
                print(f"{number:3d}. {arg}")
            print("\nfull argument list:")
        print(" ".join(args))
    except Exception as exc:
        print(f"error: {exc}")
        traceback.print_exc()
    return 0


if __name__ == "__main__":
    sys.exit(main())
