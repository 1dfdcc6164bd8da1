"""Every op's conformance cases (``OpCases``), one module per op, found by scanning this package: a module that
defines ``CASES`` is an op's (adding an op's cases is one new module here, and no other file)."""

from __future__ import annotations

import importlib
import pkgutil

from rtp_ref.certify.opcases.base import OpCases
from rtp_ref.errors import RtpRefError


def _scan() -> dict[str, OpCases]:
    found: dict[str, OpCases] = {}
    for module in pkgutil.iter_modules(__path__):
        cases = getattr(importlib.import_module(f"{__name__}.{module.name}"), "CASES", None)
        if isinstance(cases, OpCases):
            found[cases.op] = cases
    return found


#: op name -> its conformance cases
OP_CASES: dict[str, OpCases] = _scan()


def op_cases_of(op: str) -> OpCases:
    """The conformance cases of ``op``; an op without a module here raises RtpRefError naming those that have one."""
    try:
        return OP_CASES[op]
    except KeyError:
        raise RtpRefError(f"no conformance cases for op {op!r}; ops with cases: {', '.join(OP_CASES)}") from None
