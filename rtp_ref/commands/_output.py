"""Shared output helpers: every data-printing command takes ``--json``."""

from __future__ import annotations

import argparse
import json
import math
from typing import Any


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    """Add the ``--json`` flag every data-printing command takes."""
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON instead of text")


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
