"""The fp8 value checks every op shares: NaN kept, saturation, the error bound in grid steps, and which fp8
format the bytes really are (``numerics.element_format``, the fnuz-read-as-OCP bug).

A caller gives the stored codes, the exact quotients ``x / scale`` they stand for, and how to name one value
in a message; the checks and their examples are worked out here, once for every op.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from rtp_ref.cases.checks import Check
from rtp_ref.cases.fp8_steps import step_errors
from rtp_ref.fp8 import FP8_FORMATS, decode
from rtp_ref.fp8.formats import ConversionMode, Fp8Format

#: how many example values a failing check names
MAX_EXAMPLES = 3

#: ``(row, column, wanted)`` -> one value named for a message, e.g. ``token 3 (slot 17) nope[5]: kernel 1.5
#: (0x3c) vs contract 1.25, x/stored scale 1.27``; ``wanted`` replaces the contract's value when given
ValueNamer = Callable[[int, int, "str | None"], str]


@dataclass(frozen=True)
class ValueGrade:
    """The checks of one fp8 value field, the worst error in grid steps over its ordinary values, the mask of
    those ordinary values (neither a NaN nor beyond the format's largest finite value) and the decoded codes."""

    checks: list[Check]
    worst_steps: float
    ordinary: torch.Tensor
    #: the stored values, decoded (float64)
    decoded: torch.Tensor


def failing(name: str, ok: bool, detail: Callable[[], str]) -> Check:
    """Check ``name``, whose detail (with its examples) is only worked out when it failed."""
    return Check(name, ok, "" if ok else detail())


def first(mask: torch.Tensor, limit: int = MAX_EXAMPLES) -> list[tuple[int, int]]:
    """(row, column) of the first ``limit`` True entries of a 2-dim mask, row-major."""
    return [(int(r), int(c)) for r, c in torch.nonzero(mask)[:limit].tolist()]


def with_examples(head: str, examples: list[str]) -> str:
    """``head, e.g. A; B; C`` (the head alone when there is nothing to show)."""
    return f"{head}, e.g. {'; '.join(examples[:MAX_EXAMPLES])}" if examples else head


def fp8_value_checks(label: str, codes: torch.Tensor, exact: torch.Tensor, fmt: Fp8Format, mode: ConversionMode,
                     max_ulp: float, name: ValueNamer) -> ValueGrade:
    """Grade fp8 ``codes`` [rows, n] of field ``label`` against the exact quotients ``exact`` (float64, same
    shape) in format ``fmt`` under conversion ``mode``, allowing ``max_ulp`` grid steps.

    Checks, in order: ``numerics.nan`` (a NaN input stored as NaN), ``numerics.saturation`` (satfinite only:
    a quotient beyond +-max stored as +-max), ``numerics.element_format`` (only when the error bound fails
    and the bytes read in another fp8 format are within it) and ``numerics.error_bound``.
    """
    q = decode(codes, fmt).double()
    nan_in = torch.isnan(exact)
    top = fmt.max_value
    over = (exact.abs() > top) & ~nan_in
    lost_nan = nan_in & ~torch.isnan(q)
    checks = [failing("numerics.nan", not bool(lost_nan.any()), lambda: with_examples(
        f"{int(lost_nan.sum())} NaN input(s) were not stored as NaN", [name(r, c, "nan") for r, c in first(lost_nan)]))]
    if mode is ConversionMode.SATFINITE:
        unclamped = over & (q != torch.sign(exact) * top)
        checks.append(failing("numerics.saturation", not bool(unclamped.any()), lambda: with_examples(
            f"{int(unclamped.sum())} value(s) beyond +-{top:g} were not clamped to +-{top:g}",
            [name(r, c, f"{float(torch.sign(exact[r, c])) * top:g}") for r, c in first(unclamped)])))
    ordinary = ~(nan_in | over)
    every = bool(ordinary.all())  # the usual case: no masked copies of tens of millions of values
    if every:
        steps = step_errors(q, exact, fmt.name)
    else:
        steps = torch.zeros_like(exact)
        steps[ordinary] = step_errors(q[ordinary], exact[ordinary], fmt.name)
    off = ordinary & ~(steps <= max_ulp)  # a NaN stored for a number has NaN steps: off too
    worst = float((steps if every else steps[ordinary]).max()) if bool(ordinary.any()) else 0.0
    if bool(off.any()):
        other = [g for g in FP8_FORMATS if g != fmt.name and bool(
            (step_errors(decode(codes, g).double()[ordinary], exact[ordinary], fmt.name) <= max_ulp).all())]
        if other:
            row, col = first(off)[0]
            code = codes[row, col:col + 1]
            checks.append(Check("numerics.element_format", False,
                                f"{label}: the bytes are {other[0]}, not the cache's {fmt.name}, e.g. "
                                f"{name(row, col, None)}: 0x{int(code):02x} is {float(decode(code, other[0])):.6g} "
                                f"as {other[0]}, {float(decode(code, fmt)):.6g} as {fmt.name}"))
    checks.append(failing("numerics.error_bound", not bool(off.any()), lambda: with_examples(
        f"{label}: {int(off.sum())} value(s) off by more than {max_ulp:g} fp8 step(s) of x/scale (worst "
        f"{worst:.3g} steps)", [f"{name(r, c, None)} ({float(steps[r, c]):.3g} steps)" for r, c in first(off)])))
    return ValueGrade(checks, worst, ordinary, q)
