"""Shared output helpers: every data-printing command takes ``--json``; commands that write files check
their output paths before any long work (and hold Ctrl-C while they write: rtp_ref.certify.signals)."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

from rtp_ref.errors import RtpRefError

#: the exit status after Ctrl-C, as a shell reports a process ended by SIGINT
INTERRUPTED = 130
#: what a directory argument may be
VALID_DIR = "a directory this user can create and write in (created if missing)"


def positive_int(text: str) -> int:
    """An argparse ``type``: an integer >= 1. Anything else is argparse's error line naming the option, the
    value and what is valid (exit 2)."""
    return _int_at_least(text, 1)


def non_negative_int(text: str) -> int:
    """An argparse ``type``: an integer >= 0, else argparse's one-line error (exit 2), as ``positive_int``."""
    return _int_at_least(text, 0)


def _int_at_least(text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer; valid: an integer >= {minimum}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"{text!r} is not valid; valid: an integer >= {minimum}")
    return value


def add_json_flag(parser: argparse.ArgumentParser, what: str = "machine-readable JSON instead of text") -> None:
    """Add the ``--json`` flag every data-printing command takes; its help says ``print <what>``."""
    parser.add_argument("--json", action="store_true", help=f"print {what}")


def add_layout_flag(parser: argparse.ArgumentParser) -> None:
    """Add ``--layout-flag KEY=VALUE`` (repeatable), the layout-flag override every platform command takes."""
    parser.add_argument(
        "--layout-flag",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a layout flag of the platform table (repeatable)",
    )


def json_number(value: float) -> float | str:
    """A float as JSON allows it: finite numbers as numbers; NaN and infinities as strings."""
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def print_json(obj: Any) -> None:
    """Print one JSON document (strict JSON: no NaN literals)."""
    print(json.dumps(obj, allow_nan=False, sort_keys=False))


def given_path(option: str, value: str, valid: str) -> Path:
    """``value``, the argument of ``option``, as a Path; an empty one raises RtpRefError naming ``valid``.

    ``Path("")`` is the current directory, so an empty argument (an unset shell variable) would
    otherwise write into wherever the command was started.
    """
    if not value:
        raise RtpRefError(f"{option} '': an empty path; valid: {valid}")
    return Path(value)


def writable_dir(option: str, value: str) -> Path:
    """``value``, the directory argument of ``option``, once it is known to be creatable and writable.

    Called before any long work, so a run cannot end by failing to write its results. The directory
    is created, a probe file written and removed, and every directory the check created removed
    again: the file system is left as it was (the command creates the directory when it writes).
    Raises RtpRefError naming ``option``, ``value`` and what is valid when the path is empty, a file,
    or cannot be created or written.
    """
    path = given_path(option, value, VALID_DIR)
    created: list[Path] = []  # deepest first: the order they can be removed in
    try:
        if path.exists() and not path.is_dir():
            raise RtpRefError(f"{option} {value!r} is a file; valid: {VALID_DIR}")
        missing = path
        while not missing.exists():
            created.append(missing)
            missing = missing.parent
        path.mkdir(parents=True, exist_ok=True)
        handle, probe = tempfile.mkstemp(prefix=".rtp-ref-probe-", dir=path)
        try:
            os.write(handle, b"probe")
        finally:
            os.close(handle)
            os.unlink(probe)
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename and exc.filename != value else ""
        raise RtpRefError(
            f"{option} {value!r} cannot be written: {exc.strerror or exc}{where}; valid: {VALID_DIR}"
        ) from None
    finally:
        for directory in created:
            with contextlib.suppress(OSError):  # not ours to remove any more, or not created at all
                directory.rmdir()
    return path
