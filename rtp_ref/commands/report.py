"""``rtp-ref report merge``: one scoreboard from the reports of several platforms and runners."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rtp_ref.certify.report import load_report, merge_reports, render_scoreboard
from rtp_ref.commands._output import print_json


def _merge(args: argparse.Namespace) -> int:
    reports = [load_report(p) for p in args.reports]
    board = merge_reports(reports, [str(p) for p in args.reports])
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "scoreboard.json").write_text(json.dumps(board, indent=1) + "\n")
        (out / "scoreboard.md").write_text(render_scoreboard(board))
    if args.json:
        print_json(board)
    else:
        print(render_scoreboard(board), end="")
    return 0


def register(sub: Any) -> None:
    """Add ``report`` with its ``merge`` action."""
    parser = sub.add_parser("report", help="work with certification reports")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    p_merge = actions.add_parser("merge", help="merge report.json files into one scoreboard (markdown and json)")
    p_merge.add_argument("reports", nargs="+", metavar="REPORT.json")
    p_merge.add_argument("--out", metavar="DIR", help="also write scoreboard.json and scoreboard.md into DIR")
    p_merge.add_argument("--json", action="store_true", help="print the scoreboard as JSON")
    p_merge.set_defaults(func=_merge)
