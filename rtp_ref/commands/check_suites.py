"""``rtp-ref check-args`` and ``rtp-ref check-plugins``: the shipped behaviour suites run against an engine's own
parser or loader (rtp_ref.suites), their failures printed as the findings they pin and what the engine lacks as
absent features, apart."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from rtp_ref.certify.signals import interrupts_held
from rtp_ref.commands._output import add_json_flag, positive_int, print_json, writable_dir
from rtp_ref.suites.run import SUITES, check_impl, run_suite
from rtp_ref.suites.verdict import Verdict, write_report

#: per suite: the protocol an ``--impl`` kit follows, for the help text
_PROTOCOL = {"args": "rtp_ref.suites.args.kit.ArgsKit", "plugins": "rtp_ref.suites.plugins.kit.PluginsKit"}


def _check(args: argparse.Namespace) -> int:
    suite = SUITES[args.suite]
    if args.impl is not None:
        check_impl("--impl", args.impl)
    out = writable_dir("--report", args.report) if args.report else None
    with tempfile.TemporaryDirectory(prefix="rtp-ref-check-") as work:
        junit = Path(work) / "junit.xml"
        outcomes = run_suite(suite, args.impl, junit, examples=args.examples)
        verdict = Verdict(suite.name, args.impl or "reference", tuple(outcomes), args.examples)
        if out is not None:
            with interrupts_held():
                write_report(verdict, junit, out)
    if args.json:
        print_json(verdict.as_json())
    else:
        print(f"rtp-ref check-{suite.name}: the {suite.name} behaviour suite against {verdict.impl}"
              f"{verdict.run_settings}")
        for line in verdict.lines():
            print(line)
        print(verdict.summary())
        if out is not None:
            print(f"rtp-ref: report written to {out}/ (check-{suite.name}.json, check-{suite.name}.md, junit.xml)")
    return 0 if verdict.ok else 1


def register(sub: Any) -> None:
    """Add ``check-args`` and ``check-plugins``."""
    for name, what in (("args", "env/CLI argument parser and its env-to-CLI generator"),
                       ("plugins", "external model package loading and model registry")):
        parser = sub.add_parser(
            f"check-{name}",
            help=f"run the {name} behaviour suite against an implementation of the {what}; failures as findings",
            description=f"Run rtp-ref's {name} behaviour suite (rtp_ref/suites/{name}) in a pytest process of its "
            f"own against --impl (the reference without it) and print each failing test under the bug or review "
            f"finding it pins, each test the implementation cannot run under the feature it lacks (ABSENT: the "
            f"kit's absent_features, or a keyword or flag the implementation refuses), then 'N passed, M failed, "
            f"K absent'. Exits 0 when no test fails and some pass, 1 when any fails (or none passed), 2 on bad "
            f"input. Nothing is written into the current directory. Example: rtp-ref "
            f"check-{name} --impl rtp_ref.suites.{name}.legacy_{'' if name == 'args' else 'plugins_'}adapter"
            f":legacy_{name}_kit",
        )
        parser.add_argument("--impl", metavar="MODULE:CALLABLE",
                            help=f"a callable returning a kit ({_PROTOCOL[name]}) over the implementation to check")
        parser.add_argument("--report", metavar="DIR",
                            help=f"also write check-{name}.json, check-{name}.md and junit.xml into DIR")
        parser.add_argument("--examples", type=positive_int, metavar="N",
                            help="hypothesis examples per property test (default: 60, the ci and dev profiles'); "
                            "fewer for an implementation whose every example is slow (a generator run as a command "
                            "starts a process per example)")
        add_json_flag(parser)
        parser.set_defaults(func=_check, suite=name)
