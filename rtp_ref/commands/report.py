"""``rtp-ref report merge``: one scoreboard from the reports of several platforms and runners."""

from __future__ import annotations

import argparse
from typing import Any

from rtp_ref.commands._output import VALID_DIR, add_json_flag, given_path, print_json


def _merge(args: argparse.Namespace) -> int:
    # imported here, not to build the parser: the report modules import torch
    from rtp_ref.certify.report import load_report, merge_reports, render_scoreboard, write_scoreboard

    out = None if args.out is None else given_path("--out", args.out, VALID_DIR)
    # Every report is read and validated before anything is written: a bad one leaves no output.
    reports = [load_report(p) for p in args.reports]
    board = merge_reports(reports, [str(p) for p in args.reports])
    if out is not None:
        write_scoreboard(out, board, option="--out")
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
    add_json_flag(p_merge, "the scoreboard as JSON")
    p_merge.set_defaults(func=_merge)
