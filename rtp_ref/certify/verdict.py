"""The whole pass/fail policy, in one place: what a case's grade, the platform's required grade and the
platform's known deviations make of the case (``judge``), what its cases make of a (kernel, layout) pair and of each
tier (``pair_verdict``), and when a run must exit non-zero (``certification_failed``). For a case:

* A case that reaches the required grade passes; if the platform lists a deviation for it, the deviation is stale
  and the case is ``xpassed`` (a failure: the table says the kernel falls short where it does not).
* A case that falls short fails, unless a deviation of the platform covers exactly this shortfall (the case still
  reaches the grade below the deviation's check): then it is ``xfailed``, excused and shown as such, never a pass.
* A case that writes nothing (no tokens, only padding slots) cannot show a deviation.
* Hardening (the out-of-range slot, the empty call: rtp_ref.cases.input_checks) is no write: its case fails only
  where the table or the command line requires it (``judge_hardening``), and decides the pair's verdict only then.
* A case outside the kernel's declared domain that it refused before writing is ``refused``, never a failure; a
  declared domain that leaves out what engines pass fails its pair (``support.declared_domain``).

The engine (rtp_ref.certify.engine) judges every case of every op by it; the report (rtp_ref.certify.report)
renders the pairs' verdicts, and certify's exit status is ``certification_failed``'s.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rtp_ref.cases.checks import GRADES, Check, grade_above, grade_below, grade_reached, reaches
from rtp_ref.cases.input_checks import BAD_INPUT_KIND, EMPTY_CALL_KIND
from rtp_ref.cases.op_cases import DeviationKey
from rtp_ref.certify.tiers import TIERS
from rtp_ref.platform import Deviation, Platform

PASSED, FAILED, XFAILED, XPASSED, REFUSED = "passed", "failed", "xfailed", "xpassed", "refused"
#: a case of a non-finite class its layout leaves undefined (rtp_ref.cases.non_finite_cases): neither pass nor
#: failure, shown as a skip with what the kernel stored
UNDEFINED = "undefined"
#: the grades a case can reach, weakest first, ``none`` (below ``layout``) included
_REACHABLE = (grade_below(GRADES[0]), *GRADES)


def matching_deviation(platform: Platform, kernel: str, device: str, key: DeviationKey) -> int | None:
    """The index of the platform's known deviation covering this kernel's case on ``device``, if any (module doc)."""
    if key.tokens == 0 or key.kind == "padding_only":
        return None
    for i, d in enumerate(platform.deviations):
        if (d.kernel == kernel and key.layout in d.layouts and (not d.cases or key.kind in d.cases)
                and (not d.devices or device in d.devices)
                and (d.torch_before is None or torch_release() < d.torch_before)):
            return i
    return None


def torch_release() -> tuple[int, int]:
    """The running torch's (MAJOR, MINOR): ``2.11.0+cu130`` -> (2, 11)."""
    import torch  # here: the verdict's other rules need no torch

    major, minor = torch.__version__.split(".")[:2]
    return int(major), int(minor)


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


def judge_hardening(check: str, name: str, value: str, detail: str, meets: bool, required: bool) -> Judgement:
    """Judge a hardening case (the out-of-range slot, the empty call) whose column reads ``value``: it passes unless
    it is ``required`` and the value does not meet it (``meets``); then it fails under ``check``."""
    if required and not meets:
        return Judgement(FAILED, f"{check} is required and {name} is {value}: {detail}")
    return Judgement(PASSED, "")


def verdict(outcomes: Iterable[str]) -> str:
    """The verdict for one (kernel, layout) from its cases' outcomes.

    ``failed`` if any case failed, errored or passed unexpectedly (a stale deviation entry);
    ``not run`` if no case ran; ``certified with deviations`` if known deviations occurred;
    otherwise ``certified``.
    """
    counts = Counter(outcomes)
    if counts["failed"] or counts["error"] or counts["xpassed"]:
        return "failed"
    if not (counts["passed"] or counts["xfailed"]):
        return "not run"
    return "certified with deviations" if counts["xfailed"] else "certified"


def weakest_grade(grades: Iterable[str | None]) -> str | None:
    """The weakest of ``grades`` (``none`` or one of GRADES; anything else is ignored), or None."""
    present = set(grades)
    return next((g for g in _REACHABLE if g in present), None)


def _reached(case: Mapping[str, Any]) -> str | None:
    """The grade a case reached: its ``grade``, else what its failed checks leave (a worker that died records
    no grade, only ``support.worker_died``); None when a check is unknown to this version."""
    if case.get("grade"):
        return str(case["grade"])
    try:
        return grade_reached(list(case.get("failed_checks", [])))
    except ValueError:
        return None


def failed_at(cases: Iterable[Mapping[str, Any]]) -> str | None:
    """The weakest grade that a failing case (outcome ``failed`` or ``error``) did not reach although it was
    required to (its ``required_grade``, else every grade): ``numerics`` when some case reached ``layout``
    but not ``numerics``. None when no failing case fell short of a grade (a stale deviation, say)."""
    missed = set()
    for c in cases:
        reached = _reached(c) if c["outcome"] in ("failed", "error") else None
        required = c.get("required_grade") or GRADES[-1]
        if reached is not None and reached in _REACHABLE and required in GRADES and not reaches(reached, required):
            missed.add(grade_above(reached))
    return weakest_grade(missed)


def verdict_head(verdict_text: str) -> str:
    """A row's verdict without what follows ``; `` (``failed`` of ``failed; incomplete: 2 of 3 cases ran``)."""
    return verdict_text.split("; ", 1)[0]


@dataclass(frozen=True)
class PairVerdict:
    """One (kernel, layout)'s verdict over its cases, each tier's, the cases that judge it (``judged``: the
    out-of-range-slot case only where input checks are required) and those of them the run reached."""

    verdict: str
    tiers: dict[str, str]
    judged: list[Mapping[str, Any]]
    run_cases: list[Mapping[str, Any]]


def pair_verdict(kernel: str, unclaimed: bool, group: Sequence[Mapping[str, Any]],
                 input_checks_required: bool, hardening_required: bool = False) -> PairVerdict:
    """The verdict of one (kernel, layout) from its case records ``group``: ``verdict`` of the cases the run reached,
    ``raises as required`` for an unclaimed layout that raised, and ``incomplete: N of M cases ran`` (``failed;
    incomplete: ...`` when those that ran failed) where the run stopped before some of them; the same per tier.
    The write's verdict; the out-of-range-slot case decides it only when ``input_checks_required``, the empty call
    only when ``hardening_required``."""
    excluded = {kind for kind, required in ((BAD_INPUT_KIND, input_checks_required),
                                            (EMPTY_CALL_KIND, hardening_required)) if not required}
    judged = [c for c in group if c.get("kind") not in excluded]
    # cases the run never reached (it stopped, or was interrupted) judge nothing: their pair is incomplete;
    # those its own crashes skipped (quarantine, "not run: kernel/layout crashed ...") are its failure
    run_cases = [c for c in judged if not str(c.get("reason", "")).startswith("not run: ")
                 or str(c["reason"]).startswith(f"not run: {kernel}/")]
    result = verdict(c["outcome"] for c in run_cases)
    if unclaimed and result == "certified":
        result = "raises as required"
    if len(run_cases) < len(judged):
        incomplete = f"incomplete: {len(run_cases)} of {len(judged)} cases ran"
        result = f"{result}; {incomplete}" if result == "failed" else incomplete
    tiers = {tier: verdict(c["outcome"] for c in run_cases if c.get("tier", TIERS[0]) == tier)
             for tier in TIERS if any(c.get("tier", TIERS[0]) == tier for c in run_cases)}
    return PairVerdict(result, tiers, judged, run_cases)


def certification_failed(report: Mapping[str, Any]) -> str | None:
    """Why the run must exit non-zero (a claimed layout failed, nothing ran, incomplete), or None."""
    summary = report["summary"]
    if not report["complete"]:
        why = report.get("stop_reason")
        return f"the run did not complete ({why}); the report is partial" if why else \
            "the run did not complete; the report is partial"
    if summary["total"] - summary["outcomes"]["skipped"] == 0:
        return "0 cases ran: nothing was certified"
    failed = [f"{r['kernel']}/{r['layout']}" for r in summary["by_kernel_layout"]
              if verdict_head(r["verdict"]) == "failed"]
    if failed:
        return f"{len(failed)} kernel/layout pair(s) failed: {', '.join(failed)}"
    return None


def not_covered(platform: Platform, deviation: int | None) -> str:
    """The prefix of a failure that a known deviation of the case does not excuse ("" without one)."""
    if deviation is None:
        return ""
    return f"the deviation for {platform.deviations[deviation].check} does not cover this: "
