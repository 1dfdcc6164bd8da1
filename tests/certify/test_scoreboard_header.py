"""scoreboard.md's header: when it was written, by which versions, the command line, a working relative link to each
merged report, and a legend of exactly the words its cells use."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import torch

from rtp_ref import __version__
from rtp_ref.certify.collector import write_report
from rtp_ref.certify.report import merge_reports, render_scoreboard
from tests.certify.reports import case_row, minimal_report
from tests.processes import child_env
from tests.zygote import shared_zygote

#: a link's target in markdown, bare or in angle brackets
LINK = re.compile(r"\]\(<?([^)>]+)>?\)")


def _reports(root: Path) -> list[Path]:
    """Three report.json files as a merge finds them: two certify report directories (report.md beside each) and
    a lone report.json copied elsewhere (no report.md)."""
    cpu = minimal_report([case_row("k", "fp8", "passed"), case_row("j", "auto", "passed"),
                          case_row("k", "fp8", "passed", None, tier="graph", graph_safe="yes", graph_checks={})])
    gpu = minimal_report([case_row("k", "fp8", "failed", grade="layout")], name="cuda-sm90")
    gpu["environment"]["device"] = "NVIDIA H200"
    rocm = minimal_report([case_row("k", "fp8", "passed")], name="rocm-gfx942", complete=False)
    write_report(cpu, root / "reports" / "cpu")
    write_report(gpu, root / "reports" / "cuda-sm90")
    (root / "copied").mkdir()
    (root / "copied" / "rocm.json").write_text(json.dumps(rocm))
    return [root / "reports" / "cpu" / "report.json", root / "reports" / "cuda-sm90" / "report.json",
            root / "copied" / "rocm.json"]


def test_report_merge_writes_a_dated_versioned_header_with_links_that_resolve(tmp_path: Path) -> None:
    sources = [str(p.relative_to(tmp_path)) for p in _reports(tmp_path)]  # relative to the command's directory
    out = tmp_path / "board dir" / "deeper"  # two levels away from the reports, a space in its path
    argv = ["report", "merge", *sources, "--out", str(out)]
    proc = shared_zygote().run(argv, child_env(), tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    board = (out / "scoreboard.md").read_text()
    head, table = board.split("\n| op | kernel | layout |", 1)
    assert re.search(rf"^- written \d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00 \(UTC\) by rtp-ref {re.escape(__version__)}"
                     rf"\b.*, torch {re.escape(torch.__version__)}, triton \S", head, re.M), head
    assert f"- command: `rtp-ref report merge {' '.join(sources)} --out '{out}'`" in head
    # each link resolves from scoreboard.md's directory: to report.md where there is one, else to report.json
    targets = {(out / target).resolve() for target in LINK.findall(head)}
    assert targets == {tmp_path / "reports" / "cpu" / "report.md", tmp_path / "reports" / "cuda-sm90" / "report.md",
                       tmp_path / "copied" / "rocm.json"}
    assert all(t.is_file() for t in targets)
    assert "[cuda-sm90 (native)](../../reports/cuda-sm90/report.md): device NVIDIA H200" in head
    assert " cuda-sm90 (native) | " in table.splitlines()[0]  # the header comes before the table, not in it
    assert "- written" not in proc.stdout  # the printed scoreboard is the table alone, as before


def _legend(board: dict[str, Any], out: Path) -> str:
    text = render_scoreboard(board, out)
    return text[text.index("- legend:"):text.index("| op |")]


def test_the_legend_explains_each_word_the_cells_use_and_no_other(tmp_path: Path) -> None:
    reports = [json.loads(p.read_text()) for p in _reports(tmp_path)]
    legend = _legend(merge_reports(reports, ["a", "b", "c"]), tmp_path)
    # cells: certified (bit_exact), failed at numerics, incomplete, `-` (j on the GPU tables); graph-safe: yes
    for word in ("certified", "failed", "incomplete", "bit_exact", "numerics", "yes"):
        assert f"  - `{word}`: " in legend, word
    assert "`PLATFORM (...), graph-safe`" in legend and "`-`: no verdict in that column" in legend
    for word in ("certified with deviations", "raises as required", "not run", "declined", "layout", "for ... only"):
        assert f"  - `{word}`: " not in legend, word
    # a board of one certified pair: no failure, no graph column, no empty cell to explain
    alone = _legend(merge_reports([minimal_report([case_row("k", "fp8", "passed")])], ["a"]), tmp_path)
    assert "  - `failed`: " not in alone and "graph-safe" not in alone and "`-`" not in alone
    assert "  - `certified`: " in alone
