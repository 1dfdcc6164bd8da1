"""The pass/fail policy of one case, in one place: what a case's grade, the platform's required grade and the
platform's known deviations make of it.

* A case that reaches the required grade passes; if the platform lists a deviation for it, the deviation is stale
  and the case is ``xpassed`` (a failure: the table says the kernel falls short where it does not).
* A case that falls short fails, unless a deviation of the platform covers exactly this shortfall (the case still
  reaches the grade below the deviation's check): then it is ``xfailed``, excused and shown as such, never a pass.
* A case that writes nothing (no tokens, only padding slots) cannot show a deviation.

The engine (rtp_ref.certify.engine) applies it to every case of every op; the report's pair, tier and exit-status
rules (rtp_ref.certify.report) read the outcomes it gives.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from rtp_ref.certify.checks import Check, grade_below, reaches
from rtp_ref.platform import Deviation, Platform

PASSED, FAILED, XFAILED, XPASSED, REFUSED = "passed", "failed", "xfailed", "xpassed", "refused"


class CaseKey(Protocol):
    """What a deviation is matched on: the case's variant, kind and tokens."""

    @property
    def layout(self) -> str: ...

    @property
    def kind(self) -> str: ...

    @property
    def tokens(self) -> int: ...


def matching_deviation(platform: Platform, kernel: str, device: str, key: CaseKey) -> int | None:
    """The index of the platform's known deviation covering this kernel's case on ``device``, if any (module doc)."""
    if key.tokens == 0 or key.kind == "padding_only":
        return None
    for i, d in enumerate(platform.deviations):
        if (d.kernel == kernel and key.layout in d.layouts and (not d.cases or key.kind in d.cases)
                and (not d.devices or device in d.devices)):
            return i
    return None


@dataclass(frozen=True)
class Judgement:
    """A case's outcome (``passed``, ``failed``, ``xfailed``, ``xpassed``) and what to say about it."""

    outcome: str
    message: str

    @property
    def failed(self) -> bool:
        """Whether the case fails its pair (a stale deviation does too)."""
        return self.outcome in (FAILED, XPASSED)


def _failed_lines(checks: list[Check]) -> str:
    return "\n".join(f"  {c.name}: {c.detail}" for c in checks if not c.passed)


def judge(grade: str, checks: list[Check], name: str, platform: Platform, deviation: int | None,
          told: str = "") -> Judgement:
    """Judge a case that reached ``grade`` with ``checks`` (module doc); ``told``: a line to add (the diagnosis)."""
    required = platform.required_grade
    if reaches(grade, required):
        if deviation is None:
            return Judgement(PASSED, "")
        d: Deviation = platform.deviations[deviation]
        return Judgement(XPASSED, f"{name} reached {grade!r} although the platform lists a known deviation for "
                                  f"{d.check} here ({d.reason} [{d.source}]): the deviation is stale")
    message = (f"{name} reached grade {grade!r}, platform {platform.name} requires {required!r}; failed checks:\n"
               f"{_failed_lines(checks)}{told}")
    if deviation is None:
        return Judgement(FAILED, message)
    d = platform.deviations[deviation]
    if reaches(grade, grade_below(d.check)):  # the grade a deviation for its check must still reach
        return Judgement(XFAILED, f"known deviation: {d.reason} [{d.source}]: {message}")
    return Judgement(FAILED, f"the deviation for {d.check} does not cover grade {grade!r}: {message}")


def not_covered(platform: Platform, deviation: int | None) -> str:
    """The prefix of a failure that a known deviation of the case does not excuse ("" without one)."""
    if deviation is None:
        return ""
    return f"the deviation for {platform.deviations[deviation].check} does not cover this: "
