"""``rtp-ref report merge``: one scoreboard from the reports of several platforms and runners."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
from pathlib import Path
from typing import Any

from rtp_ref.certify.report import load_report, merge_reports, render_scoreboard
from rtp_ref.commands._output import add_json_flag, print_json
from rtp_ref.errors import RtpRefError


def write_scoreboard(out: Path, board: dict[str, Any]) -> None:
    """Write ``scoreboard.json`` and ``scoreboard.md`` into ``out`` (created if needed).

    Both files are written to temporary names first and renamed only once both are complete, so a
    failed write (disk full, ``out`` is a file) leaves no half-written scoreboard; a directory this
    call created is removed again. Errors raise RtpRefError naming ``--out``.
    """
    texts = {"scoreboard.json": json.dumps(board, indent=1) + "\n", "scoreboard.md": render_scoreboard(board)}
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
        raise RtpRefError(f"--out {str(out)!r} cannot be written: {exc.strerror or exc}; valid: a directory") from exc


def _merge(args: argparse.Namespace) -> int:
    # Every report is read and validated before anything is written: a bad one leaves no output.
    reports = [load_report(p) for p in args.reports]
    board = merge_reports(reports, [str(p) for p in args.reports])
    if args.out:
        write_scoreboard(Path(args.out), board)
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
