"""Shared output helpers: every data-printing command takes ``--json``."""

from __future__ import annotations

import argparse
import json
import math
from typing import Any


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
