"""Report scoring rules, the markdown and merge views, and report-file validation."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from rtp_ref.certify.collector import json_safe, write_report
from rtp_ref.certify.report import (
    SCHEMA_VERSION,
    build_report,
    load_report,
    merge_reports,
    render_markdown,
    render_scoreboard,
)
from rtp_ref.certify.tiers import declined_reason
from rtp_ref.certify.verdict import certification_failed, verdict
from rtp_ref.errors import RtpRefError
from tests.certify.reports import case_row, minimal_report
from tests.zygote import shared_zygote

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("outcomes", "expected"),
    [
        (["passed", "passed"], "certified"),
        (["passed", "xfailed"], "certified with deviations"),
        (["passed", "failed"], "failed"),
        (["passed", "xpassed"], "failed"),  # a stale deviation entry must be removed, not ignored
        (["passed", "error"], "failed"),
        (["skipped", "skipped"], "not run"),  # an opt-out is never a pass
        ([], "not run"),
    ],
)
def test_verdict_rules(outcomes: list[str], expected: str) -> None:
    assert verdict(outcomes) == expected


def test_summary_keeps_grades_and_failed_checks_apart() -> None:
    report = minimal_report(
        [
            case_row("k", "fp8", "passed"),
            case_row("k", "fp8", "failed", grade="layout", failed_checks=["numerics.saturation"]),
            case_row("k", "auto", "passed"),
            case_row("k", "auto", "passed", kind="unclaimed", grade=None),
        ]
    )
    rows = {(r["kernel"], r["layout"]): r for r in report["summary"]["by_kernel_layout"]}
    assert rows[("k", "fp8")]["verdict"] == "failed"
    assert rows[("k", "fp8")]["min_grade"] == "layout"
    assert rows[("k", "fp8")]["failed_checks"] == ["numerics.saturation"]
    assert rows[("k", "auto")]["verdict"] == "certified"
    assert rows[("k", "auto (unclaimed)")]["verdict"] == "raises as required"
    assert certification_failed(report) == "1 kernel/layout pair(s) failed: k/fp8"
    md = render_markdown(report)
    assert "| k | fp8 | failed | layout | - | - | native |" in md and "numerics.saturation" in md


@pytest.mark.parametrize(
    ("cases", "complete", "problem"),
    [
        ([], True, "0 cases ran"),
        ([case_row("k", "fp8", "skipped", grade=None)], True, "0 cases ran"),
        ([case_row("k", "fp8", "passed")], False, "did not complete"),
        ([case_row("k", "fp8", "passed")], True, None),
    ],
)
def test_certification_fails_on_nothing_run_or_incomplete(
    cases: list[dict[str, Any]], complete: bool, problem: str | None
) -> None:
    found = certification_failed(minimal_report(cases, complete=complete))
    assert (found is None) if problem is None else (problem in (found or ""))


def test_write_and_load_round_trip_with_non_finite_stats(tmp_path: Path) -> None:
    report = minimal_report([case_row("k", "fp8", "passed", error_stats={"max_abs_error": float("nan")})])
    write_report(report, tmp_path)
    loaded = load_report(tmp_path / "report.json")
    assert loaded["cases"][0]["error_stats"]["max_abs_error"] == "nan"
    assert json_safe({"a": [float("inf"), -float("inf"), 1.5]}) == {"a": ["inf", "-inf", 1.5]}
    assert (tmp_path / "report.md").read_text().startswith("# rtp-ref certification: cpu (native)")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            '{"schema": "rtp-ref-report", "schema_version": 99}',
            "schema_version 99; this rtp-ref reads version 1",
        ),
        ('{"schema": "something-else"}', "is not an rtp-ref report"),
        ('{"schema": "rtp-ref-report", "schema_version": 1, "platform": {}}', "lacks key 'environment'"),
        ('{"schema": "rtp-ref-rep', "is not valid JSON"),
    ],
)
def test_load_report_rejects_other_schemas_and_damage(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "report.json"
    path.write_text(content)
    with pytest.raises(RtpRefError, match=message):
        load_report(path)


def test_merge_builds_one_scoreboard(tmp_path: Path) -> None:
    a = minimal_report([case_row("triton", "fp8", "passed")], name="cuda-sm90")
    b = minimal_report([case_row("triton", "fp8", "failed", grade="layout")], name="rocm-gfx942")
    c = minimal_report([case_row("triton", "fp8", "passed")], name="cpu", complete=False)
    board = merge_reports([a, b, c], ["a.json", "b.json", "c.json"])
    verdicts = {r["platform"]: r["verdict"] for r in board["rows"]}
    assert verdicts == {"cuda-sm90": "certified", "rocm-gfx942": "failed", "cpu": "incomplete"}
    md = render_scoreboard(board)
    assert "| triton | fp8 | incomplete | certified (bit_exact) | failed at numerics |" in md
    assert board["schema_version"] == SCHEMA_VERSION
    json.dumps(board)


def test_the_suite_generates_exactly_the_case_kinds_deviations_may_name() -> None:
    """A deviation's ``cases`` list is checked against CASE_KINDS; the MLA write, which has every kind, must generate
    each of them for its ``auto`` layout (the cache-dtype mismatch is ``auto``'s alone; the non-finite classes are the
    dynamic-scale layouts' alone) and every other kind for every layout, on the CPU and on a GPU, and besides them only
    the empty call, which is hardening: never graded, so no deviation can name it. The other write ops' kinds are
    among them."""
    from rtp_ref.cases.cases import MISMATCHED_CACHE_KIND
    from rtp_ref.cases.input_checks import EMPTY_CALL_KIND
    from rtp_ref.cases.non_finite_cases import NON_FINITE_KINDS
    from rtp_ref.kv.layout_records import layout_record
    from rtp_ref.ops import MLA_OP, OPS, WRITE_OPS
    from rtp_ref.platform import CASE_KINDS, MLA_LAYOUT_NAMES

    assert EMPTY_CALL_KIND not in CASE_KINDS
    generated: set[str] = set()
    for device in ("cpu", "cuda"):
        for layout in MLA_LAYOUT_NAMES:
            kinds = {key.kind for key in OPS[MLA_OP].cases.keys(layout, device)}
            generated |= kinds
            expected = {*CASE_KINDS, EMPTY_CALL_KIND} - ({MISMATCHED_CACHE_KIND} if layout != "auto" else set())
            if layout_record(layout).non_finite is None:
                expected -= set(NON_FINITE_KINDS)
            assert kinds == expected, layout
        for op in WRITE_OPS:
            for variant in OPS[op].variants:
                assert {key.kind for key in OPS[op].cases.keys(variant, device)} <= {*CASE_KINDS, EMPTY_CALL_KIND}
    assert generated == {*CASE_KINDS, EMPTY_CALL_KIND}


def test_a_pair_whose_cases_did_not_all_run_is_incomplete_never_certified() -> None:
    """An interrupted or stopped run: the cases it never reached make their pair "incomplete", while cases a
    pair's own crashes skipped (quarantine) are that pair's failure."""
    report = minimal_report([
        case_row("k", "auto", "passed"),
        case_row("k", "auto", "passed", seed=1),
        case_row("k", "auto", "error", None, reason="not run: stopped: maximum crashed workers reached: 64"),
        case_row("q", "fp8", "failed", None, reason="not run: q/fp8 crashed 2 times (limit 2, --crash-limit)"),
        case_row("q", "fp8", "passed"),
    ], complete=False)
    rows = {(r["kernel"], r["layout"]): r["verdict"] for r in report["summary"]["by_kernel_layout"]}
    assert rows[("k", "auto")] == "incomplete: 2 of 3 cases ran"
    assert rows[("q", "fp8")] == "failed"
    assert certification_failed(report) == "the run did not complete; the report is partial"


def test_scoreboard_cells_say_what_they_mean() -> None:
    from rtp_ref.certify.report import cell_text

    assert cell_text("certified", "bit_exact", None) == "certified (bit_exact)"
    assert cell_text("certified with deviations", "layout", None) == "certified with deviations: reaches layout"
    assert cell_text("failed", "layout", "numerics") == "failed at numerics"
    assert cell_text("failed", "none", "layout") == "failed at layout"
    assert cell_text("failed", "bit_exact", None) == "failed"  # no case fell short of a grade (a stale deviation)
    assert cell_text("incomplete: 2 of 23 cases ran", None, None) == "incomplete: 2 of 23 cases ran"
    assert cell_text("failed; incomplete: 2 of 23 cases ran", "none", "layout") == \
        "failed at layout; incomplete: 2 of 23 cases ran"


def _cells(board: dict[str, Any]) -> dict[tuple[str, str], str]:
    """(kernel, layout) -> the scoreboard cell of a one-platform board, as render_scoreboard writes it (its
    columns: op, kernel, layout, then the platform)."""
    rows = [line.split(" | ") for line in render_scoreboard(board).splitlines() if line.startswith("| ")][1:]
    return {(row[1], row[2]): row[3].removesuffix(" |") for row in rows}


def test_a_failed_cell_names_the_weakest_grade_a_failing_case_did_not_reach() -> None:
    """Not the grade above the pair's weakest grade: an excused (xfailed) case may be the weakest; a crash
    records no grade at all; a case that reached its required grade fell short of none."""
    report = minimal_report([
        case_row("k", "fp8", "passed"),
        case_row("k", "fp8", "xfailed", grade="layout", deviation=0),  # a known deviation, not a failure
        case_row("k", "fp8", "failed", grade="numerics", required_grade="bit_exact"),
        case_row("c", "fp8", "passed"),
        case_row("c", "fp8", "failed", grade=None, failed_checks=["support.worker_died"]),  # its worker died
        case_row("n", "fp8", "passed", grade="numerics", required_grade="numerics"),
        case_row("n", "fp8", "error", grade="numerics", required_grade="numerics", reason="teardown"),
    ])
    assert _cells(merge_reports([report], ["r.json"])) == {
        ("k", "fp8"): "failed at bit_exact",
        ("c", "fp8"): "failed at layout",
        ("n", "fp8"): "failed",
    }


def test_an_incomplete_pair_with_failures_shows_the_failure() -> None:
    """A pair that failed before the run stopped is failed and incomplete, in the report and on the
    scoreboard; a failed pair of a partial report stays failed there, never merely "incomplete"."""
    report = minimal_report([
        case_row("k", "auto", "failed", grade="none", failed_checks=["support.kernel_raised"]),
        case_row("k", "auto", "passed", seed=1),
        case_row("k", "auto", "error", None, failed_checks=["support.not_run"], reason="not run: interrupted"),
        case_row("q", "fp8", "failed", grade="layout", failed_checks=["numerics.saturation"]),
        case_row("p", "fp8", "passed"),
    ], complete=False)
    rows = {(r["kernel"], r["layout"]): r["verdict"] for r in report["summary"]["by_kernel_layout"]}
    assert rows[("k", "auto")] == "failed; incomplete: 2 of 3 cases ran"
    assert "### k / auto: failed; incomplete: 2 of 3 cases ran" in render_markdown(report)
    assert _cells(merge_reports([report], ["r.json"])) == {
        ("k", "auto"): "failed at layout; incomplete: 2 of 3 cases ran",
        ("q", "fp8"): "failed at numerics; incomplete",
        ("p", "fp8"): "incomplete",
    }


def test_a_published_report_says_when_where_what_and_how(tmp_path: Path) -> None:
    """A real certify run of an emulated table with --json: stdout is the JSON document alone, and report.md
    has the run's time, host and command line, each kernel's origin, the table's full sha256, what native and
    emulated mean, and no "(suite) native" on an emulated table."""
    import hashlib

    from tests.processes import child_env

    out = tmp_path / "rep"
    proc = shared_zygote().run(["certify", "--platform", "rocm-gfx942", "--kernel", "reference", "--layout", "auto",
                                "--report", str(out), "--json", "-n", "0"], child_env(), tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert json.loads(proc.stdout)["problem"] is None  # nothing but the document on stdout
    md = (out / "report.md").read_text()
    sha = hashlib.sha256((REPO / "platforms" / "rocm-gfx942.toml").read_bytes()).hexdigest()
    assert f"sha256 `{sha}`" in md
    assert "- kernel reference: builtin (rtp-ref " in md
    assert re.search(r"- run 20\d\d-\d\d-\d\dT[\d:]+\+00:00 to .* s\) on host .+: `rtp-ref certify --platform "
                     r"rocm-gfx942 --kernel reference --layout auto --report \S+ --json -n 0`", md), md
    assert "- native: the table is this machine's own platform" in md
    assert "| (suite) | (all) | certified | - | - | - | emulated |" in md


@pytest.mark.parametrize(("build", "line"), [
    ({"version": "0.9.0", "commit": "0123456789abcdef" * 2 + "01234567", "dirty": False},
     "- rtp-ref 0.9.0 (git commit 0123456789ab, clean), torch "),
    ({"version": "0.9.0", "commit": "0123456789abcdef" * 2 + "01234567", "dirty": True},
     "- rtp-ref 0.9.0 (git commit 0123456789ab, with uncommitted changes), torch "),
    ({"version": "0.9.0", "commit": None, "dirty": None}, "- rtp-ref 0.9.0, torch "),  # a wheel, or no git
    (None, "- rtp-ref 0.8.0, torch "),  # a report of an rtp-ref that did not record its build
])
def test_the_header_names_the_rtp_ref_that_ran(build: dict[str, Any] | None, line: str) -> None:
    report = minimal_report([case_row("k", "auto", "passed")])
    report["environment"]["rtp_ref"] = "0.8.0"
    if build is not None:
        report["run"]["rtp_ref"] = build
    assert line in render_markdown(report)


def test_the_scoreboard_names_each_rows_op_op_by_op() -> None:
    """Rows come op by op in rtp_ref.ops order (the MLA write first), each naming its op; a record without
    an op (a report of an older rtp-ref) is the MLA write's."""
    report = minimal_report([
        case_row("a-indexer", "none", "passed", op="indexer_k_quant_and_cache"),
        case_row("z-mha", "fp8", "passed", op="reshape_and_cache_flash"),
        case_row("m", "fp8", "passed"),
    ])
    lines = [line for line in render_scoreboard(merge_reports([report], ["r.json"])).splitlines()
             if line.startswith("| ") and "---" not in line][1:]
    assert [line.split(" | ")[:2] for line in lines] == [
        ["| concat_and_cache_mla", "m"], ["| reshape_and_cache_flash", "z-mha"], ["| indexer_k_quant_and_cache",
                                                                                  "a-indexer"]]


def test_a_selection_of_one_op_has_no_row_for_the_others(tmp_path: Path) -> None:
    """Certifying one op's kernel leaves the MLA write's and the support matrix's parameter sets empty: they
    are dropped, not reported as a skipped case in a row of their own ("- - not run")."""
    from tests.mutants.test_mutation_score import certify

    report = certify("rocm-gfx942", ["reference-indexer"], tmp_path / "report", ["-n", "1"], kernels_env="")
    assert report["_exit_code"] == 0
    rows = {(r["kernel"], r["layout"], r["verdict"]) for r in report["summary"]["by_kernel_layout"]}  # type: ignore[index]
    # gfx942's table lists the indexer's fp8 formats, not mxfp4 ([layouts] indexer)
    assert rows == {("(suite)", "(all)", "certified"), ("reference-indexer", "none", "certified"),
                    ("reference-indexer", "ue8m0", "certified")}


def test_each_tier_has_its_own_verdict_column() -> None:
    """A run of both tiers (``--tier all``) keeps each one's verdict: the row's is over every case, report.md has
    a large-tier column, and the scoreboard gives the large tier columns of its own; a large-only report fills
    only its large column."""
    both = minimal_report([case_row("k", "fp8", "passed"), case_row("k", "fp8", "failed", "none", tier="large")])
    (row,) = [r for r in both["summary"]["by_kernel_layout"] if r["kernel"] == "k"]
    assert (row["verdict"], row["tiers"]) == ("failed", {"regular": "certified", "large": "failed"})
    assert "| k | fp8 | failed | bit_exact | failed |" in render_markdown(both)
    large_only = minimal_report([case_row("k", "auto", "passed", tier="large")], name="cuda-sm90")
    board = render_scoreboard(merge_reports([both, large_only], ["a.json", "b.json"]))
    header = next(line for line in board.splitlines() if line.startswith("| op |"))
    assert header == ("| op | kernel | layout | cpu (native) | cpu (native), large tier | "
                      "cuda-sm90 (native), large tier |")
    assert "| concat_and_cache_mla | k | fp8 | certified (bit_exact) | failed | - |" in board
    assert "| concat_and_cache_mla | k | auto | - | - | certified |" in board


def test_the_graph_tier_is_a_graph_safe_column() -> None:
    """The graph tier's cases give the pair a graph-safe cell (in report.md and the scoreboard, a column of their
    own): ``yes`` when every scenario was exact; ``no (checks)`` for a kernel tried without claiming it, which
    still certifies (its cases passed); ``declined`` for one that declares graph_safe = False."""
    cases = [case_row("k", "fp8", "passed"),
             case_row("k", "fp8", "passed", None, tier="graph", graph_safe="yes", graph_checks={}),
             case_row("u", "fp8", "passed"),
             case_row("u", "fp8", "passed", None, tier="graph", graph_safe="no",
                      graph_checks={"graph.new_values": "12 wrote what the inputs held at capture time give"}),
             case_row("d", "fp8", "passed"),
             case_row("d", "fp8", "skipped", None, tier="graph", reason=declined_reason("d"))]
    report = minimal_report(cases, name="cuda-sm90")
    rows = {r["kernel"]: r for r in report["summary"]["by_kernel_layout"]}
    assert {k: (rows[k]["verdict"], rows[k]["graph_safe"]) for k in "kud"} == {
        "k": ("certified", "yes"), "u": ("certified", "no (graph.new_values)"), "d": ("certified", "declined")}
    assert "| u | fp8 | certified | bit_exact | no (graph.new_values) |" in render_markdown(report)
    board = render_scoreboard(merge_reports([report], ["a.json"]))
    assert "| cuda-sm90 (native) | cuda-sm90 (native), graph-safe |" in board
    assert "| concat_and_cache_mla | u | fp8 | certified (bit_exact) | no (graph.new_values) |" in board
    # a kernel claiming graph_safe whose replay failed fails the pair through its case's outcome
    failing = minimal_report([case_row("c", "fp8", "passed"), case_row(
        "c", "fp8", "failed", None, tier="graph", graph_safe="no", graph_checks={"graph.capture": "sync"},
        failed_checks=["graph.capture"])])
    (row,) = [r for r in failing["summary"]["by_kernel_layout"] if r["kernel"] == "c"]
    assert (row["verdict"], row["graph_safe"], row["failed_at"]) == ("failed", "no (graph.capture)", None)


def _hardening_cases(empty_outcome: str, **empty: Any) -> list[dict[str, Any]]:
    return [
        case_row("r", "fp8", "passed", case="random-t37"),
        case_row("r", "fp8", "passed", grade=None, kind="random", case="random-i64",
                 refused="block_table int64, declared int32"),
        case_row("r", "fp8", "passed", grade=None, kind="domain", case="declared-domain",
                 domain="block_table int32, dst bf16"),
        case_row("r", "fp8", empty_outcome, grade=None, kind="empty", case="empty-t0", **empty),
    ]


def test_hardening_and_the_declared_domain_stand_beside_the_verdict() -> None:
    report = minimal_report(_hardening_cases("passed", hardening="device error",
                                             hardening_detail="the empty call left a device error: CUDA error"))
    (row,) = [r for r in report["summary"]["by_kernel_layout"] if r["kernel"] == "r"]
    assert (row["verdict"], row["min_grade"], row["hardening"], row["domain"]) == \
        ("certified", "bit_exact", "device error", "block_table int32, dst bf16")
    md = render_markdown(report)
    assert ("| r | fp8 | certified for block_table int32, dst bf16 only (refuses random (block_table int64, declared "
            "int32), as declared) | bit_exact | - | device error | native |") in md
    assert "- r/fp8 empty-t0: device error: the empty call left a device error: CUDA error" in md
    board = render_scoreboard(merge_reports([report], ["a"]))
    assert "| r | fp8 | certified (bit_exact) for block_table int32, dst bf16 only |" in board


def test_the_empty_call_decides_the_verdict_only_where_hardening_is_required() -> None:
    # a worker that died on the empty call: the hardening column says crashed, the write stays certified
    cases = _hardening_cases("failed", failed_checks=["support.worker_died"])
    report = minimal_report(cases)
    (row,) = [r for r in report["summary"]["by_kernel_layout"] if r["kernel"] == "r"]
    assert (row["verdict"], row["hardening"]) == ("certified", "crashed")
    required = build_report(**{**_report_args(report), "platform": {**report["platform"], "require_hardening": True}})
    (row,) = [r for r in required["summary"]["by_kernel_layout"] if r["kernel"] == "r"]
    assert (row["verdict"], row["failed_checks"]) == ("failed", ["support.worker_died"])


def _report_args(report: dict[str, Any]) -> dict[str, Any]:
    return {"platform": report["platform"], "environment": report["environment"], "flags": report["layout_flags"],
            "selection": report["selection"], "cases": report["cases"], "unmatched_deviations": [],
            "complete": True, "exit_status": 0}
