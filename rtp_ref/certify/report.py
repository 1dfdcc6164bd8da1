"""Certification reports: ``report.json`` (versioned schema), ``report.md``, and the cross-platform merge.

Scoring rules (the ONNX scoreboard's lessons): a skipped or opted-out case is never a pass; a
(kernel, layout) pair with zero cases run is "not run", never "certified"; a known deviation is a
strict xfail and is shown as such, never as a pass.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rtp_ref.cases.checks import rank
from rtp_ref.cases.domain import DOMAIN_KIND
from rtp_ref.cases.input_checks import (
    BAD_INPUT_KIND,
    CRASHED,
    EMPTY_CALL_KIND,
    HARDENED,
    HARDENING_VALUES,
    INPUT_CHECK_VALUES,
    REFUSING,
)
from rtp_ref.certify.tiers import DECLINES, TIERS
from rtp_ref.certify.verdict import failed_at, pair_verdict, verdict_head, weakest_grade
from rtp_ref.errors import RtpRefError
from rtp_ref.kv.non_finite import NON_FINITE_CLASSES
from rtp_ref.ops import MLA_OP, OPS

#: what the execution words mean (the session that writes a report uses the same words)
EXECUTION_MEANING = ("native: the table is this machine's own platform and the kernel runs its conversions as this "
                     "platform does; emulated: another platform's contract (or a software fp8 conversion on a GPU "
                     "table) exercised on this machine")

SCHEMA = "rtp-ref-report"
SCHEMA_VERSION = 1
SCOREBOARD_SCHEMA = "rtp-ref-scoreboard"

#: case kind of the support-matrix check "a layout the kernel does not claim must raise"
UNCLAIMED_KIND = "unclaimed"
#: pytest outcomes a case can have in a report
OUTCOMES = ("passed", "failed", "error", "xfailed", "xpassed", "skipped")

#: scoreboard rows come op by op, in rtp_ref.ops order
_OP_ORDER = {name: i for i, name in enumerate(OPS)}


def _worst(values: Sequence[str], ladder: Sequence[str]) -> str | None:
    return max(values, key=lambda v: ladder.index(v) if v in ladder else -1, default=None)


def input_checks(group: Sequence[Mapping[str, Any]]) -> str | None:
    """The input-checks cell of one (kernel, layout): ``validated``, ``flagged``, ``unchecked`` or ``crashed`` (a
    worker that died on the bad-slot case says crashed), ``not run``, or None for a pair without the case
    (unclaimed)."""
    return _worst([_recorded(c, "input_check") for c in group if c.get("kind") == BAD_INPUT_KIND], INPUT_CHECK_VALUES)


def hardening(group: Sequence[Mapping[str, Any]]) -> str | None:
    """The hardening cell of one (kernel, layout), from its empty calls: the worst of ``clean``, ``refused as
    declared``, ``raised``, ``wrote``, ``device error`` and ``crashed`` (a worker that died on it), ``not run``, or
    None for a pair without them (unclaimed)."""
    return _worst([_recorded(c, "hardening") for c in group if c.get("kind") == EMPTY_CALL_KIND], HARDENING_VALUES)


def _recorded(case: Mapping[str, Any], field: str) -> str:
    """A case's ``field`` (its ``hardening`` or ``input_check`` result), ``not run``, or ``crashed`` without one."""
    if case.get(field):
        return str(case[field])
    if str(case.get("reason", "")).startswith("not run"):
        return "not run"
    return CRASHED  # no record: the worker died on the case


def non_finite_cell(group: Sequence[Mapping[str, Any]]) -> str | None:
    """The non-finite cell of one (kernel, layout) from its non-finite cases (rtp_ref.cases.non_finite_cases), class
    by class: ``nan undefined, inf undefined, zero_tile exact``; None for a layout without a non-finite policy."""
    found = dict(str(c["non_finite"]).split(": ", 1) for c in group if c.get("non_finite"))
    if not found:
        return None
    return ", ".join(f"{cls} {found.get(cls, 'not run')}" for cls in NON_FINITE_CLASSES)


def graph_safety(group: Sequence[Mapping[str, Any]]) -> str | None:
    """The graph-safe cell of one (kernel, layout) from its graph-tier cases: ``yes`` (every scenario exact),
    ``no (graph.new_values, ...)``, ``declined`` (the kernel declares ``graph_safe = False``), ``not run``; None
    when the graph tier did not run."""
    cases = [c for c in group if c.get("tier") == "graph"]
    if not cases:
        return None
    failed = sorted({check for c in cases for check in c.get("graph_checks") or {}})
    if failed:
        return f"no ({', '.join(failed)})"
    if any(c.get("outcome") in ("failed", "error") for c in cases):
        return "no (crashed)"
    if all(c.get("graph_safe") == "yes" for c in cases):
        return "yes"
    if any(DECLINES in str(c.get("reason", "")) for c in cases):
        return "declined"
    return "not run"




def summarise(cases: Sequence[Mapping[str, Any]], input_checks_required: bool = False,
              hardening_required: bool = False) -> dict[str, Any]:
    """Totals and one row per (kernel, layout): its op, verdict, weakest grade reached, the weakest grade a failing
    case fell short of (``failed_at``), outcome counts, input checks, hardening (the empty call), the declared
    domain (what the kernel's ``input_domain`` leaves out) and the cases refused as declared.

    The verdict is about the write; the out-of-range-slot case decides it only when ``input_checks_required``, the
    empty call only when ``hardening_required``. ``conventions``: the writer conventions of the table
    (``[[conventions]]``) that some of the pair's cases passed under, instead of the table's own flags.
    A pair some of whose cases the run never reached is ``incomplete: N of M cases ran``, and
    ``failed; incomplete: N of M cases ran`` when the cases that ran failed.
    """
    totals = Counter(c["outcome"] for c in cases)
    rows: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for c in cases:
        layout = c.get("layout") or "-"
        if c.get("kind") == UNCLAIMED_KIND:
            layout = f"{layout} (unclaimed)"
        rows.setdefault((c.get("kernel") or "-", layout), []).append(c)
    table = []
    for (kernel, layout), group in sorted(rows.items()):
        pair = pair_verdict(kernel, layout.endswith("(unclaimed)"), group, input_checks_required, hardening_required)
        ran = [c for c in pair.judged if c["outcome"] in ("passed", "failed", "xfailed", "xpassed") and c.get("grade")]
        failed_checks = sorted({name for c in pair.judged for name in c.get("failed_checks", [])})
        table.append({
            "kernel": kernel,
            "layout": layout,
            # each tier's own verdict (rtp_ref.pytest_plugin.TIERS): "verdict" is the pair's over all of them
            "tiers": pair.tiers,
            # the op of the kernel's cases (records written before ops existed are the MLA write's)
            "op": next((c["op"] for c in group if c.get("op")), MLA_OP),
            "verdict": pair.verdict,
            # the regular tier's grades, when it ran: the large tier's verdict is in "tiers"
            "min_grade": weakest_grade(c["grade"] for c in
                                  ([c for c in ran if c.get("tier", TIERS[0]) == TIERS[0]] or ran)),
            "failed_at": failed_at(pair.run_cases),
            "execution": sorted({c.get("execution", "native") for c in group}),
            "counts": dict(Counter(c["outcome"] for c in group)),
            "failed_checks": failed_checks,
            "input_checks": input_checks(group),
            "hardening": hardening(group),
            "domain": next((c["domain"] for c in group if c.get("kind") == DOMAIN_KIND and c.get("domain")), None),
            "conventions": sorted({c["convention"] for c in group if c.get("convention")}),
            "graph_safe": graph_safety(group),
            "non_finite": non_finite_cell(group),
            "refused": sorted({f"{c['kind']} ({c['refused']})" for c in group if c.get("refused")}),
        })
    return {"total": len(cases), "outcomes": {o: totals.get(o, 0) for o in OUTCOMES}, "by_kernel_layout": table}


def build_report(
    *,
    platform: Mapping[str, Any],
    environment: Mapping[str, Any],
    flags: Mapping[str, Any],
    selection: Mapping[str, Any],
    cases: Sequence[Mapping[str, Any]],
    unmatched_deviations: Sequence[Mapping[str, Any]],
    complete: bool,
    exit_status: int,
    stop_reason: str | None = None,
    run: Mapping[str, Any] | None = None,
    kernels: Sequence[Mapping[str, Any]] = (),
    unavailable_kernels: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """Assemble a report document. ``complete`` is false when the run was interrupted or stopped early
    (``stop_reason`` says why) or some collected case never ran."""
    summary = summarise(cases, bool(platform.get("require_input_checks")), bool(platform.get("require_hardening")))
    return {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "platform": dict(platform),
        "environment": dict(environment),
        "run": dict(run or {}),
        "kernels": list(kernels),
        "unavailable_kernels": list(unavailable_kernels),
        "layout_flags": dict(flags),
        "selection": dict(selection),
        "complete": complete,
        "stop_reason": stop_reason,
        "pytest_exit_status": exit_status,
        "summary": summary,
        "unmatched_deviations": list(unmatched_deviations),
        "cases": list(cases),
    }


def _fmt_counts(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{n} {o}" for o, n in counts.items() if n)


def _rtp_ref_text(run: Mapping[str, Any], env: Mapping[str, Any]) -> str:
    """The rtp-ref that wrote a report: its version, and from a git checkout its commit and whether the tree
    had uncommitted changes (``run.rtp_ref``; a report without one names the environment's version only)."""
    build = run.get("rtp_ref") or {}
    version = build.get("version", env.get("rtp_ref"))
    commit = build.get("commit")
    if not commit:
        return str(version)
    return f"{version} (git commit {commit[:12]}, {'with uncommitted changes' if build.get('dirty') else 'clean'})"


def render_markdown(report: Mapping[str, Any]) -> str:
    """A publishable markdown summary of one report."""
    large_ran = any("large" in r.get("tiers", {}) for r in report["summary"]["by_kernel_layout"])
    graph_ran = any(r.get("graph_safe") for r in report["summary"]["by_kernel_layout"])
    stream_ran = any("stream" in r.get("tiers", {}) for r in report["summary"]["by_kernel_layout"])
    non_finite_ran = any(r.get("non_finite") for r in report["summary"]["by_kernel_layout"])
    p = report["platform"]
    env = report["environment"]
    run = report.get("run") or {}
    lines = [
        f"# rtp-ref certification: {p['name']} ({p['execution']})",
        "",
        f"- {EXECUTION_MEANING}",
        f"- run {run.get('started', '-')} to {run.get('finished', '-')} ({run.get('duration_s', '-')} s) on host "
        f"{run.get('host', '-')}: `{run.get('command', '-')}`",
        f"- rtp-ref {_rtp_ref_text(run, env)}, torch {env.get('torch')}, triton {env.get('triton')}, "
        f"device {env.get('device')} ({env.get('device_arch') or 'cpu'}), driver {env.get('driver') or '-'}",
        f"- platform table `{p['source']}` sha256 `{p['sha256']}`; "
        f"fp8 {p['element_format']} {p['conversion_mode']}; required grade {p['required_grade']}",
        f"- layout flags: {', '.join(f'{k}={v}' for k, v in report['layout_flags'].items())}",
        *[f"- kernel {k['name']}: {k['origin']}" for k in report.get("kernels", [])],
        *[f"- kernel {k['name']}: not certified, not available here: {k['reason']}"
          for k in report.get("unavailable_kernels", [])],
        f"- cases: {report['summary']['total']} ({_fmt_counts(report['summary']['outcomes'])})"
        + ("" if report["complete"] else " — **INCOMPLETE RUN**"
           + (f" ({report['stop_reason']})" if report.get("stop_reason") else "")),
        "",
        # the large-address, graph and stream tiers get their own columns when they ran
        "| kernel | layout | verdict | weakest grade | " + ("large tier | " if large_ran else "")
        + ("graph-safe | " if graph_ran else "") + ("stream tier | " if stream_ran else "")
        + ("non-finite | " if non_finite_ran else "")
        + "input checks | hardening | execution | cases | failed checks |",
        "|---|---|---|---|" + ("---|" if large_ran else "") + ("---|" if graph_ran else "")
        + ("---|" if stream_ran else "") + ("---|" if non_finite_ran else "") + "---|---|---|---|---|",
    ]
    for r in report["summary"]["by_kernel_layout"]:
        refused = f" (refuses {'; '.join(r['refused'])}, as declared)" if r.get("refused") else ""
        large = f"{r.get('tiers', {}).get('large', 'not run')} | " if large_ran else ""
        large += f"{r.get('graph_safe') or 'not run'} | " if graph_ran else ""
        large += f"{r.get('tiers', {}).get('stream', 'not run')} | " if stream_ran else ""
        large += f"{r.get('non_finite') or '-'} | " if non_finite_ran else ""
        lines.append(
            f"| {r['kernel']} | {r['layout']} | {verdict_with_domain(r['verdict'], r.get('domain'))}"
            f"{with_conventions(r.get('conventions'))}{refused} | "
            f"{r['min_grade'] or '-'} | {large}{r.get('input_checks') or '-'} | {r.get('hardening') or '-'} | "
            f"{'/'.join(r['execution'])} | {_fmt_counts(r['counts'])} | {', '.join(r['failed_checks']) or '-'} |"
        )
    checked = [c for c in report["cases"]
               if c.get("kind") == BAD_INPUT_KIND and _recorded(c, "input_check") not in REFUSING]
    if checked:
        lines += ["", "## Input checks not validated (an out-of-range slot: slot == capacity)", ""]
        lines += [f"- {c.get('kernel')}/{c.get('layout')}: "
                  + (f"{c['input_check']}: {c.get('input_check_detail', '')}" if c.get("input_check")
                     else str(c.get("reason", _recorded(c, "input_check")))) for c in checked]
    hardened = [c for c in report["cases"]
                if c.get("kind") == EMPTY_CALL_KIND and _recorded(c, "hardening") not in HARDENED]
    if hardened:
        lines += ["", "## Hardening: empty calls that were not clean (no tokens; engines do not make this call)", ""]
        lines += [f"- {c.get('kernel')}/{c.get('layout')} {c.get('case', '')}: "
                  + (f"{c['hardening']}: {c.get('hardening_detail', '')}" if c.get("hardening")
                     else str(c.get("reason", _recorded(c, "hardening")))) for c in hardened]
    undefined = [c for c in report["cases"] if str(c.get("non_finite", "")).endswith(": undefined")]
    if undefined:
        lines += ["", "## Non-finite inputs the layout leaves undefined (what each kernel stored; neither pass nor "
                  "failure)", ""]
        lines += [f"- {c.get('kernel')}/{c.get('layout')} {c.get('case', '')}: {c.get('non_finite_stored', '')}"
                  for c in undefined]
    lines += _diagnosis_lines(report)
    failures = [c for c in report["cases"] if c["outcome"] in ("failed", "error", "xpassed")]
    if failures:
        lines += ["", "## Failures", ""]
        lines += [f"- `{c['nodeid']}`: {c.get('reason', '')}" for c in failures[:200]]
    if report["unmatched_deviations"]:
        lines += ["", "## Known-deviation entries that matched no case", ""]
        lines += [f"- {d['kernel']} on {', '.join(d['layouts'])} ({d['check']}): {d['reason']}"
                  for d in report["unmatched_deviations"]]
    return "\n".join(lines) + "\n"


def with_conventions(conventions: Sequence[str] | None) -> str:
    """What follows a verdict whose cases passed under a writer convention the table accepts: `` (convention:
    AITER)``; nothing where every case followed the table's own flags."""
    return f" (convention: {', '.join(conventions)})" if conventions else ""


def verdict_with_domain(verdict_text: str, domain: str | None) -> str:
    """A verdict with the kernel's declared domain beside it: ``certified for block_table int32, dst bf16 only``,
    ``failed (declared domain: ...)``; the verdict alone without one."""
    if not domain:
        return verdict_text
    return f"{verdict_text} for {domain} only" if verdict_text == "certified" else \
        f"{verdict_text} (declared domain: {domain})"


def _followed(summary: str) -> set[str] | None:
    """The contract parts a diagnosis says the kernel follows (``a=b, c=d; this table...``), or None."""
    head = "the kernel follows "
    return set(summary[len(head):].split(";", 1)[0].split(", ")) if summary.startswith(head) else None


def _most_specific(summaries: set[str]) -> list[str]:
    """Diagnoses of a pair's cases, without those another one contains: a case without an all-zero tile cannot
    tell the scale floor, so it names only the rule that another case names together with the floor."""
    parts = {s: _followed(s) for s in summaries}
    return sorted(s for s, mine in parts.items()
                  if not any(mine is not None and other is not None and mine < other for other in parts.values()))


def _diagnosis_lines(report: Mapping[str, Any]) -> list[str]:
    """Per failed (or excused) pair: each failed check once with the first case's example values, the contract
    its bytes follow instead (``diagnosis``), and the reason of every deviation applied."""
    deviations = report["platform"].get("table", {}).get("deviations", [])
    out: list[str] = []
    for row in report["summary"]["by_kernel_layout"]:
        if verdict_head(row["verdict"]) not in ("failed", "certified with deviations"):
            continue
        layout = row["layout"].removesuffix(" (unclaimed)")
        group = [c for c in report["cases"] if c.get("kernel") == row["kernel"] and c.get("layout") == layout
                 and (c.get("kind") == UNCLAIMED_KIND) == row["layout"].endswith("(unclaimed)")]
        out += ["", f"### {row['kernel']} / {row['layout']}: {row['verdict']}", ""]
        for name in sorted(row["failed_checks"], key=lambda n: (rank(n), n)):
            first: Mapping[str, Any] = next((c for c in group if name in c.get("failed_checks", [])), {})
            detail = (first.get("checks") or {}).get(name) or first.get("reason") or ""
            out.append(f"- `{name}` ({first.get('case') or first.get('kind', '')}): {detail}"[:700])
        for summary in _most_specific({str(c["diagnosis"]) for c in group if c.get("diagnosis")}):
            out.append(f"- contract: {summary}")
        for index in sorted({c["deviation"] for c in group if isinstance(c.get("deviation"), int)}):
            if 0 <= index < len(deviations):
                d = deviations[index]
                out.append(f"- known deviation ({d.get('check')}): {d.get('reason')} [{d.get('source')}]")
    return ["", "## Diagnosis", *out] if out else []


def load_report(path: str | Path) -> dict[str, Any]:
    """Read and validate a report.json; wrong schema or version is an RtpRefError naming the file."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise RtpRefError(f"report {str(path)!r} cannot be read: {exc.strerror}") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RtpRefError(f"report {str(path)!r} is not valid JSON ({exc}); truncated?") from exc
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise RtpRefError(f"{str(path)!r} is not an rtp-ref report (expected \"schema\": \"{SCHEMA}\")")
    if data.get("schema_version") != SCHEMA_VERSION:
        raise RtpRefError(
            f"{str(path)!r} has schema_version {data.get('schema_version')!r}; this rtp-ref reads version "
            f"{SCHEMA_VERSION} (re-run `rtp-ref certify` with this version, or merge with a matching one)"
        )
    for key in ("platform", "environment", "summary", "cases", "complete"):
        if key not in data:
            raise RtpRefError(f"{str(path)!r} lacks key {key!r}; the file is damaged or partial")
    problem = _shape_problem(data)
    if problem:
        raise RtpRefError(f"{str(path)!r}: {problem}; the file is damaged or was edited by hand")
    return data


def _shape_problem(data: Mapping[str, Any]) -> str | None:
    """What is wrong with the parts of a report that rtp-ref reads back (merge, certify), or None."""
    if not isinstance(data["complete"], bool):
        return f"key 'complete' is {data['complete']!r}; valid: true or false"
    for key in ("platform", "environment", "summary"):
        if not isinstance(data[key], dict):
            return f"key {key!r} is not an object"
    if not isinstance(data["cases"], list):
        return "key 'cases' is not a list"
    for key in ("name", "execution"):
        if not isinstance(data["platform"].get(key), str):
            return f"platform.{key} is not a string"
    rows = data["summary"].get("by_kernel_layout")
    if not isinstance(rows, list):
        return "summary.by_kernel_layout is not a list"
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or not all(isinstance(row.get(k), str) for k in ("kernel", "layout", "verdict")):
            return f"summary.by_kernel_layout[{i}] lacks a string kernel, layout or verdict"
        for key in ("min_grade", "failed_at"):
            if not isinstance(row.get(key), str | None):
                return f"summary.by_kernel_layout[{i}].{key} is not a string or null"
    return None


def merge_reports(
    reports: Sequence[Mapping[str, Any]], sources: Sequence[str], unfinished: Sequence[str] = ()
) -> dict[str, Any]:
    """One scoreboard across platforms and kernels: a row per (platform, kernel, layout).

    ``unfinished`` names the platforms the run meant to certify but did not finish (it was
    interrupted): the scoreboard is then ``complete: false`` and lists them, so a partial scoreboard
    cannot pass for a whole one. A row of a partial report is ``incomplete`` (``_partial_verdict``).
    """
    rows = []
    seen: dict[tuple[str, str, str], str] = {}
    for report, source in zip(reports, sources, strict=True):
        p = report["platform"]
        for r in report["summary"]["by_kernel_layout"]:
            key = (p["name"], r["kernel"], r["layout"])
            if key in seen and r["kernel"] != "(suite)":
                # the last report would silently win, so the order of the arguments would decide the verdict
                raise RtpRefError(f"reports {seen[key]!r} and {source!r} both certify kernel {key[1]} on layout "
                                  f"{key[2]} of platform {key[0]}; valid: one report per platform, kernel and layout "
                                  f"(merge the newer one, or certify the kernel under another name)")
            seen[key] = source
            rows.append({
                "platform": p["name"],
                "execution": p["execution"],
                "op": r.get("op", MLA_OP),  # a report of an older rtp-ref: the MLA write
                "kernel": r["kernel"],
                "layout": r["layout"],
                "verdict": r["verdict"] if report["complete"] else _partial_verdict(r["verdict"]),
                "min_grade": r["min_grade"],
                "failed_at": r.get("failed_at"),  # None in a report of an older rtp-ref
                "tiers": {t: v if report["complete"] else _partial_verdict(v) for t, v in r.get("tiers", {}).items()},
                "graph_safe": r.get("graph_safe"),  # None where the graph tier did not run
                "domain": r.get("domain"),  # None where the kernel declares no input domain
                "device": report["environment"].get("device"),
                "source": source,
            })
    rows.sort(key=lambda r: (_OP_ORDER.get(r["op"], len(_OP_ORDER)), r["kernel"], r["layout"], r["platform"]))
    return {"schema": SCOREBOARD_SCHEMA, "schema_version": SCHEMA_VERSION, "sources": list(sources),
            "complete": not unfinished, "unfinished": list(unfinished), "rows": rows}


def _partial_verdict(verdict_text: str) -> str:
    """A row's verdict on the scoreboard when its report is partial: a failure stands (a case that failed
    failed however the run ended), anything else is only ``incomplete``; a verdict that says how
    incomplete its pair is stays as it is."""
    if "incomplete" in verdict_text:
        return verdict_text
    return "failed; incomplete" if verdict_text == "failed" else "incomplete"


def cell_text(verdict_text: str, min_grade: str | None, failed_at_grade: str | None) -> str:
    """A scoreboard cell that says what it means: ``certified (bit_exact)``, ``certified with deviations:
    reaches numerics``, ``failed at numerics`` (``failed_at_grade``: the weakest grade a failing case did not
    reach, see ``failed_at``), ``failed at layout; incomplete: 2 of 23 cases ran``, or the verdict."""
    if verdict_text == "certified" and min_grade:
        return f"certified ({min_grade})"
    if verdict_text == "certified with deviations" and min_grade:
        return f"certified with deviations: reaches {min_grade}"
    head, sep, rest = verdict_text.partition("; ")
    if head == "failed" and failed_at_grade:
        return f"failed at {failed_at_grade}{sep}{rest}"
    return verdict_text


#: the scoreboard's words, each with how to spot it in a verdict cell and what it means (its legend, which lists the
#: words a scoreboard uses)
_VERDICT_WORDS: tuple[tuple[str, str, str], ...] = (
    ("certified", r"^certified(?! with)", "every case of the pair ran and passed; in brackets the weakest grade the "
     "cases reached"),
    ("certified with deviations", r"^certified with deviations", "every case passed, or failed as a known deviation "
     "in the platform table says it does (a strict expected failure, shown as such, never as a pass); `reaches G`: "
     "the weakest grade reached"),
    ("failed", r"^failed", "a case failed; `failed at G`: G is the weakest grade a failing case did not reach (none "
     "named when the failing case reached no grade: it raised, crashed or hung)"),
    ("incomplete", r"incomplete", "the run did not reach every case of the pair (`N of M cases ran`), or the report is "
     "of a run that stopped early: what ran is no verdict on the rest"),
    ("not run", r"^not run", "no case of the pair ran: never a pass"),
    ("raises as required", r"^raises as required", "a layout the kernel does not claim, called: it raised, as it "
     "must"),
    ("for ... only", r" for .+ only$", "the kernel declares an input domain (the values it takes, e.g. an int32 block "
     "table); the verdict holds for those values only"),
    ("layout", r"\blayout\b", "the weakest of the three grades: every byte is where the layout puts it, nothing "
     "else changed, the kernel ran"),
    ("numerics", r"\bnumerics\b", "the middle grade: `layout`'s checks pass and every value and scale is within the "
     "platform's bounds"),
    ("bit_exact", r"\bbit_exact\b", "the strongest grade: every byte equals the reference's"),
)
#: the graph-safe column's words
_GRAPH_WORDS: tuple[tuple[str, str, str], ...] = (
    ("yes", r"^yes$", "every CUDA-graph scenario wrote exactly what the same calls write eagerly"),
    ("no (checks)", r"^no", "a scenario failed the named checks (a capture that failed, values fixed at capture)"),
    ("declined", r"^declined$", "the kernel declares `graph_safe = False`; not tried"),
    ("not run", r"^not run$", "the graph tier's cases of the pair did not run"),
)


def _scoreboard_cells(board: Mapping[str, Any]) -> dict[tuple[str, str, str], dict[str, str]]:
    """(op, kernel, layout) -> column -> cell text: a column per platform (``PLATFORM (execution)``), per tier
    beyond the regular one that ran (``..., large tier``) and for the graph tier (``..., graph-safe``)."""
    cells: dict[tuple[str, str, str], dict[str, str]] = {}
    for r in board["rows"]:
        key = (r.get("op", MLA_OP), r["kernel"], r["layout"])
        column = f"{r['platform']} ({r['execution']})"
        tiers = r.get("tiers") or {}
        # each tier that ran has its own column; a report without the regular tier has no regular column
        if "regular" in tiers or not tiers:
            # with several tiers the row's verdict is over all: the regular column shows the regular tier's
            regular = tiers["regular"] if len(tiers) > 1 else r["verdict"]
            shown = cell_text(regular, r["min_grade"], r.get("failed_at"))
            cells.setdefault(key, {})[column] = f"{shown} for {r['domain']} only" if r.get("domain") else shown
        if "large" in tiers:
            cells.setdefault(key, {})[f"{column}, large tier"] = tiers["large"]
        if r.get("graph_safe"):
            cells.setdefault(key, {})[f"{column}, graph-safe"] = r["graph_safe"]
    return cells


def _link(text: str, target: str) -> str:
    """A markdown link; a target with a space or a bracket goes in angle brackets, as CommonMark requires."""
    return f"[{text}](<{target}>)" if any(c in target for c in " ()<>") else f"[{text}]({target})"


def _report_links(board: Mapping[str, Any], out: Path) -> list[str]:
    """A line per merged report: its platforms, a link relative to ``out`` to its report.md (beside its
    report.json; the report.json itself where there is no report.md), and the device it ran on."""
    lines = []
    for source in board["sources"]:
        mine = [r for r in board["rows"] if r["source"] == source]
        names = sorted({f"{r['platform']} ({r['execution']})" for r in mine}) or [Path(source).name]
        markdown = Path(source).parent / "report.md"
        target = markdown if markdown.is_file() else Path(source)
        relative = Path(os.path.relpath(target.resolve(), out.resolve())).as_posix()
        devices = sorted({str(r.get("device")) for r in mine})
        lines.append(f"  - {_link(', '.join(names), relative)}: device {', '.join(devices) or '-'}")
    return lines


def _used(words: Sequence[tuple[str, str, str]], texts: Sequence[str]) -> list[str]:
    """Legend lines of the ``words`` some of ``texts`` use."""
    return [f"  - `{word}`: {meaning}" for word, pattern, meaning in words
            if any(re.search(pattern, t) for t in texts)]


def _legend(cells: Mapping[tuple[str, str, str], Mapping[str, str]]) -> list[str]:
    """The legend of a scoreboard: its columns, then every word its cells use, and only those."""
    by_column: dict[str, list[str]] = {}
    for row in cells.values():
        for column, text in row.items():
            by_column.setdefault(column, []).append(text)
    verdicts = [t for c, texts in by_column.items() if not c.endswith(", graph-safe") for t in texts]
    graph = [t for c, texts in by_column.items() if c.endswith(", graph-safe") for t in texts]
    tiers = sorted({c.rsplit(", ", 1)[1] for c in by_column if c.endswith(" tier")})
    lines = ["- legend:", "  - op, kernel, layout: the op the kernel implements, the kernel's name, the layout or "
             "variant (`(unclaimed)` after it: one the kernel does not claim, which it must refuse by raising)"]
    if any(key[1] == "(suite)" for key in cells):
        lines.append("  - `(suite)` / `(all)`: the suite's own cases, of no kernel")
    lines.append(f"  - `PLATFORM (native)`, `PLATFORM (emulated)`: the verdict on that platform's table; "
                 f"{EXECUTION_MEANING}")
    lines += [f"  - `PLATFORM (...), {tier}`: the {tier.removesuffix(' tier')} tier's own verdict"
              + (" (caches past 4 GiB: 32-bit offsets)" if tier == "large tier" else "") for tier in tiers]
    if graph:
        lines.append("  - `PLATFORM (...), graph-safe`: the kernel's calls captured and replayed in a CUDA graph")
    if any(len(row) < len(by_column) for row in cells.values()):
        lines.append("  - `-`: no verdict in that column (the kernel was not certified there, or not in that tier)")
    lines += [*_used(_VERDICT_WORDS, verdicts), *_used(_GRAPH_WORDS, graph)]
    return lines


def _writer_versions() -> str:
    """The rtp-ref (with its git commit from a checkout), torch and triton of this process."""
    import torch

    from rtp_ref.certify.environment import rtp_ref_build

    try:
        import triton

        triton_version = str(triton.__version__)
    except ImportError:
        triton_version = "not installed"
    return f"rtp-ref {_rtp_ref_text({'rtp_ref': rtp_ref_build()}, {})}, torch {torch.__version__}, triton " \
        f"{triton_version}"


def _scoreboard_header(board: Mapping[str, Any], cells: Mapping[tuple[str, str, str], Mapping[str, str]],
                       out: Path) -> list[str]:
    """scoreboard.md's header: when it was written (UTC), by which rtp-ref, torch and triton, the command line,
    a link to each merged report (relative to ``out``, where scoreboard.md is written) with the device it ran on,
    and the legend."""
    # imported here: the session module imports pytest and kernel discovery, which merging reports does not need
    from rtp_ref.certify.session import run_command

    return [
        f"- written {datetime.now(timezone.utc).isoformat(timespec='seconds')} (UTC) by {_writer_versions()}",
        f"- command: `{run_command()}`",
        "- reports (each names the rtp-ref, torch, triton and device that certified it):",
        *_report_links(board, out),
        *_legend(cells),
        "",
    ]


def render_scoreboard(board: Mapping[str, Any], out: Path | None = None) -> str:
    """The scoreboard as a markdown table: ops, kernels and layouts down (the ops in rtp_ref.ops order),
    platforms across, the large-address tier and the graph-safe column of each platform in columns of their own, a
    kernel's declared domain beside its verdict (``certified (bit_exact) for block_table int32 only``); an incomplete
    scoreboard says so in its last line, with the platforms it lacks. With ``out``, the directory scoreboard.md is
    written to, a header comes before the table: ``_scoreboard_header``."""
    cells = _scoreboard_cells(board)
    platforms = sorted({p for by_platform in cells.values() for p in by_platform})
    lines = ["# rtp-ref scoreboard", "", *(_scoreboard_header(board, cells, out) if out is not None else []),
             "| op | kernel | layout | " + " | ".join(platforms) + " |", "|---|---|---|" + "---|" * len(platforms)]
    for (op, kernel, layout), by_platform in sorted(cells.items(), key=lambda item: (
            _OP_ORDER.get(item[0][0], len(_OP_ORDER)), item[0][1], item[0][2])):
        shown = "" if kernel == "(suite)" else op
        lines.append(f"| {shown} | {kernel} | {layout} | "
                     + " | ".join(by_platform.get(p, "-") for p in platforms) + " |")
    if not board["complete"]:
        lines += ["", f"INCOMPLETE: the run stopped before these platforms finished: {', '.join(board['unfinished'])}"]
    return "\n".join(lines) + "\n"


def write_scoreboard(out: Path, board: Mapping[str, Any], option: str) -> None:
    """Write ``scoreboard.json`` and ``scoreboard.md`` into ``out`` (created if needed), scoreboard.md with its
    header (``render_scoreboard``: when, which versions, the command line, links to the reports, the legend).

    Both files are written to temporary names first and renamed only once both are complete, so a
    failed write (disk full, ``out`` is a file) leaves no half-written scoreboard; a directory this
    call created is removed again. Errors raise RtpRefError naming ``option``, the command line option
    that gave ``out``.
    """
    texts = {"scoreboard.json": json.dumps(board, indent=1) + "\n", "scoreboard.md": render_scoreboard(board, out)}
    created = not out.exists()
    temporary = {name: out / f".{name}.{os.getpid()}.tmp" for name in texts}
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, text in texts.items():
            temporary[name].write_text(text)
        for name, tmp in temporary.items():
            tmp.replace(out / name)
    except OSError as exc:
        # Best effort: when ``out`` is not a directory there is nothing of ours to remove.
        with contextlib.suppress(OSError):
            for tmp in temporary.values():
                tmp.unlink(missing_ok=True)
            if created:
                out.rmdir()
        problem = exc.strerror or exc
        raise RtpRefError(f"{option} {str(out)!r} cannot be written: {problem}; valid: a directory") from exc
