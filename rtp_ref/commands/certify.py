"""``rtp-ref certify``: run the conformance suite through pytest and write the reports."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from importlib import resources
from pathlib import Path
from typing import Any

from rtp_ref.certify.cores import share_cores
from rtp_ref.certify.platform_runs import default_jobs, run_platforms
from rtp_ref.certify.quarantine import DEFAULT_CRASH_LIMIT
from rtp_ref.certify.report import load_report, merge_reports, render_scoreboard, write_scoreboard
from rtp_ref.certify.selection import idle_reason, selection_problem
from rtp_ref.certify.signals import interrupts_held
from rtp_ref.certify.tiers import TIER_CHOICES, TIERS
from rtp_ref.certify.verdict import certification_failed
from rtp_ref.commands._output import (
    INTERRUPTED,
    add_json_flag,
    add_layout_flag,
    non_negative_int,
    positive_int,
    print_json,
    writable_dir,
)
from rtp_ref.errors import RtpRefError
from rtp_ref.kernels.discovery import discover_kernels
from rtp_ref.kv.flags import parse_overrides, resolve_flags
from rtp_ref.kv.layouts import check_layout_bytes
from rtp_ref.ops import OPS, every_variant
from rtp_ref.platform import platform_names, resolve_platform

#: ``--platform all``: every bundled platform table
ALL = "all"


def conformance_dir() -> Path:
    """Where the installed conformance suite lives (``conformance/`` in a source checkout)."""
    try:
        return Path(str(resources.files("rtp_ref.conformance")))
    except ModuleNotFoundError:  # a source checkout on sys.path, not installed
        return Path(__file__).resolve().parents[2] / "conformance"


#: the plugins certify's pytest loads, by module: with autoloading off, nothing else from the environment
SUITE_PLUGINS = ("xdist.plugin", "pytest_timeout", "rtp_ref.pytest_plugin")
#: the environment variables through which a surrounding project could change certify's pytest run
FOREIGN_PYTEST_ENV = ("PYTEST_ADDOPTS", "PYTEST_PLUGINS")


def suite_environment(environ: dict[str, str], workers: int) -> dict[str, str]:
    """``environ`` as certify's pytest (and its ``workers`` xdist workers) must see it: no PYTEST_ADDOPTS or
    PYTEST_PLUGINS of the surrounding project, and no plugin autoloading (the suite's plugins are named
    with -p), so a vendor's pytest setup cannot change the suite's verdicts or stop it from running; the
    CPU cores shared among the workers."""
    env = {k: v for k, v in environ.items() if k not in FOREIGN_PYTEST_ENV}
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    return share_cores(env, workers)


def pytest_arguments(args: argparse.Namespace) -> list[str]:
    """The pytest command line a certify invocation stands for (shown with --dry-run).

    The suite's own configuration file, root and conftest boundary are given explicitly: started from
    a project whose pytest configuration disables xdist, or whose conftest.py fails to import (the ini
    search climbs from an installed suite inside the project's ``.venv`` to the project root), certify
    must run exactly as anywhere else.
    """
    report = Path(args.report)
    suite = conformance_dir()
    argv = [
        str(suite),
        "-c",
        str(suite / "suite.ini"),
        "--rootdir",
        str(suite),
        "--confcutdir",
        str(suite),
        *[arg for plugin in SUITE_PLUGINS for arg in ("-p", plugin)],
        "-p",
        "no:cacheprovider",
        "--platform",
        args.platform,
        "--rtp-report",
        str(report),
        "--junitxml",
        str(report / "junit.xml"),
    ]
    for name in args.kernel:
        argv += ["--kernel", name]
    for name in args.layout:
        argv += ["--layout", name]
    for flag in args.layout_flag:
        argv += ["--layout-flag", flag]
    argv += ["--rtp-tier", args.tier]
    # Every case runs in an xdist worker: a kernel that kills its process (segfault, lost CUDA
    # context) or hangs past the timeout fails that case; xdist starts a fresh worker and goes on.
    argv += [
        "-n",
        str(args.workers),
        "--max-worker-restart",
        str(args.max_restarts),
        "--rtp-crash-limit",
        str(args.crash_limit),
        *(["--rtp-require-input-checks"] if args.require_input_checks else []),
        *(["--rtp-require-hardening"] if args.require_hardening else []),
        "--timeout",
        str(args.case_timeout),
        "--timeout-method",
        "thread",
    ]
    return argv + _pytest_extra(args)[1:]


def _discovered() -> dict[str, Any]:
    """Every kernel found (of every op), by name."""
    return {name: entry.kernel for name, entry in discover_kernels(None, ops=OPS).items()}


def _selected_kernels(args: argparse.Namespace) -> dict[str, Any]:
    """The kernels ``--kernel`` selects (every one found without it), by name; an unknown name raises RtpRefError."""
    return {name: entry.kernel for name, entry in discover_kernels(args.kernel or None, ops=OPS).items()}


def validate_selection(args: argparse.Namespace) -> None:
    """Check platform, flags, kernels, layouts, tier, workers and the report directory (creatable and writable)
    before any case runs; bad input raises RtpRefError.

    (Inside pytest the same mistakes would surface as collection errors and a partial report.) A selection that
    leaves no case to run here (rtp_ref.certify.selection) is bad input too: a --layout no selected kernel
    claims, kernels that cannot run against the table here (no device of theirs; no bind(contract) on an
    emulated table), --tier graph or stream without a CUDA device. With several kernels (or ``--platform all``) it is
    refused only when none of them leaves a case; the suite reports the ones skipped.
    """
    if args.jobs is not None and args.platform != ALL:
        raise RtpRefError(f"--jobs {args.jobs}: platforms are certified at once only with --platform all; "
                          f"valid: leave --jobs out, or --platform all")
    platforms = [resolve_platform(name) for name in (platform_names() if args.platform == ALL else [args.platform])]
    for platform in platforms:
        resolve_flags(platform, parse_overrides(args.layout_flag))
    names = list(dict.fromkeys(v for spec in OPS.values() for v in spec.variants))
    unknown = [name for name in args.layout if name not in names]
    if unknown:
        raise RtpRefError(f"--layout {unknown[0]!r}: unknown layout; valid: {', '.join(names)}")
    for platform in platforms:
        check_layout_bytes(platform)  # an out-of-tree table's stated bytes, like the bundled ones' in the tests
    # a layout is certified only where a table supports it: with `all`, where at least one does
    supported = {layout for platform in platforms for layout in every_variant(platform)}
    refused = [name for name in args.layout if name not in supported]
    if refused:
        where = f"platform {platforms[0].name} does not support it" if len(platforms) == 1 \
            else "no bundled platform supports it"
        raise RtpRefError(f"--layout {refused[0]!r}: {where}; valid: {', '.join(sorted(supported))}")
    problem = selection_problem(_selected_kernels(args), _discovered(), bool(args.kernel), platforms, args.layout,
                                args.tier)
    if problem:  # a run would skip every case, then fail for having run none
        raise RtpRefError(problem)
    if any(platform.name != "cpu" for platform in platforms):
        from rtp_ref.pytest_plugin import gpu_count_problem, visible_gpus  # imports pytest: only when certifying

        gpus = visible_gpus()
        problem = gpu_count_problem(args.workers, gpus)
        if problem:  # before pytest starts, so the message is the command's own
            raise RtpRefError(problem)
        if args.jobs is not None and args.jobs > 1 and gpus:
            # platforms side by side would pin their workers to the same GPUs
            raise RtpRefError(f"--jobs {args.jobs}: {len(gpus)} GPU(s) visible, and platforms certified at once "
                              f"would share them; valid: --jobs 1 on a GPU host (-n spreads workers over the GPUs)")
    # Last, as it touches the file system: pytest would only find out at its end (an INTERNALERROR).
    writable_dir("--report", args.report)


def remove_run_files(report_dir: Path) -> None:
    """Remove what a run keeps in its report directory while it runs (the workers' fault logs and case lists, the
    quarantine file): the controller removes them when it writes the report, but an interrupted run may end before,
    or a worker still shutting down may write after."""
    from rtp_ref.certify.collector import CASE_INDEX_GLOB
    from rtp_ref.certify.faults import LOG_GLOB
    from rtp_ref.certify.quarantine import QUARANTINE_FILE

    for pattern in (LOG_GLOB, CASE_INDEX_GLOB, QUARANTINE_FILE):
        for path in report_dir.glob(pattern):
            path.unlink(missing_ok=True)


def _certify(args: argparse.Namespace) -> int:
    validate_selection(args)
    if args.platform == ALL:
        return _certify_all(args)
    import pytest

    argv = pytest_arguments(args)
    if args.dry_run:
        print("pytest " + " ".join(argv))
        return 0
    env = suite_environment(dict(os.environ), args.workers)
    os.environ.clear()
    os.environ.update(env)
    try:
        if args.json:
            # stdout holds the JSON document only: pytest's own output goes to stderr
            with contextlib.redirect_stdout(sys.stderr):
                status = pytest.main(argv)
        else:
            status = pytest.main(argv)
    finally:  # an interrupted run too: the workers' logs and case lists are the run's, not the report's
        remove_run_files(Path(args.report))
    report_path = Path(args.report) / "report.json"
    if not report_path.exists():
        print(f"rtp-ref: error: no report was written (pytest exit status {int(status)})", file=sys.stderr)
        return 2 if int(status) in (2, 3, 4) else 1
    report = load_report(report_path)
    problem = certification_failed(report)
    if args.json:
        print_json({"report": str(report_path), "summary": report["summary"], "problem": problem})
    else:
        print(f"\nrtp-ref: reports written to {args.report}/ (report.json, report.md, junit.xml)")
        rows = report["summary"]["by_kernel_layout"]
        width = max([16, *(len(row["kernel"]) for row in rows)])
        for row in rows:
            grade = row["min_grade"] or "-"
            # the graph tier's finding, where it ran: the verdict alone hides an unclaimed kernel's "no"
            graph = f"  graph-safe: {row['graph_safe']}" if row.get("graph_safe") else ""
            print(
                f"  {row['kernel']:<{width}} {row['layout']:<18} {row['verdict']:<26} {grade:<10} "
                f"{'/'.join(row['execution'])}{graph}"
            )
        print(f"rtp-ref: {'NOT CERTIFIED: ' + problem if problem else 'all claimed layouts certified'}")
    return 1 if problem else 0


def _platform_argv(args: argparse.Namespace, out: Path, name: str) -> list[str]:
    """The certify command line of platform ``name`` in ``--platform all`` (pytest's extra arguments aside)."""
    argv = [
        sys.executable,
        "-m",
        "rtp_ref.cli",
        "certify",
        "--platform",
        name,
        "--report",
        str(out / name),
        "-n",
        str(args.workers),
        "--case-timeout",
        str(args.case_timeout),
        "--crash-limit",
        str(args.crash_limit),
        "--max-restarts",
        str(args.max_restarts),
        "--tier",
        args.tier,
        *(["--require-input-checks"] if args.require_input_checks else []),
        *(["--require-hardening"] if args.require_hardening else []),
    ]
    supported = every_variant(resolve_platform(name))
    for option, values in (
        ("--kernel", args.kernel),
        ("--layout", [layout for layout in args.layout if layout in supported]),
        ("--layout-flag", args.layout_flag),
    ):
        for value in values:
            argv += [option, value]
    return argv


def _certify_all(args: argparse.Namespace) -> int:
    """Certify every bundled platform, each in its own process and report directory, then merge; a platform
    where the selection leaves nothing to certify here is left out, with a line saying why.

    Ctrl-C stops the platform running, writes the scoreboard of the platforms that finished (marked
    incomplete, naming the others) and returns INTERRUPTED.
    """
    out = Path(args.report)
    selected = _selected_kernels(args)
    idle = {name: reason for name in platform_names()
            if (reason := idle_reason(selected, resolve_platform(name), args.layout, args.tier))}
    names = [name for name in platform_names() if name not in idle]
    for name, reason in idle.items():
        print(f"rtp-ref: platform {name}: {reason}: not certified")
    codes: dict[str, int] = {}
    interrupted = False
    runs = [(name, _platform_argv(args, out, name)) for name in names]
    if args.dry_run:
        for _, argv in runs:
            print(" ".join(argv))
        return 0
    try:
        run_platforms([(name, [*argv, *_pytest_extra(args)]) for name, argv in runs], _jobs(args), args.workers,
                      codes)
    except KeyboardInterrupt:
        interrupted = True
    # A second Ctrl-C while the scoreboard is written is held, then ends the command as interrupted.
    with interrupts_held():
        written = [out / name / "report.json" for name in codes if (out / name / "report.json").exists()]
        unfinished = [name for name in names if name not in codes]
        board = merge_reports([load_report(p) for p in written], [str(p) for p in written], unfinished=unfinished)
        write_scoreboard(out, board, option="--report")
        print(render_scoreboard(board), end="", flush=True)
        if interrupted:
            print(
                f"rtp-ref: interrupted: {out}/scoreboard.md holds the platforms that finished "
                f"({', '.join(codes) or 'none'}) and is marked incomplete",
                file=sys.stderr,
            )
            return INTERRUPTED
        failed = [name for name, code in codes.items() if code != 0]
        print(
            f"rtp-ref: scoreboard written to {out}/scoreboard.md; "
            + (f"NOT CERTIFIED on: {', '.join(failed)}" if failed else "every platform certified")
        )
        return max(codes.values(), default=1) if failed else 0


def _jobs(args: argparse.Namespace) -> int:
    if args.jobs is not None:
        return int(args.jobs)
    from rtp_ref.pytest_plugin import visible_gpus  # imports torch: only when certifying every platform

    return default_jobs(len(visible_gpus()))


def _pytest_extra(args: argparse.Namespace) -> list[str]:
    extra = list(args.pytest_args)
    return extra if not extra or extra[0] == "--" else ["--", *extra]


def register(sub: Any) -> None:
    """Add ``certify``."""
    parser = sub.add_parser(
        "certify",
        help="run the conformance suite and write report.json, report.md and junit.xml",
        description="Certify KV-cache kernels against the reference on a platform. Exits 1 when a claimed "
        "layout fails or nothing ran, 2 on bad input (a selection that leaves nothing to certify here included: a "
        "--layout no selected kernel claims, kernels that cannot run against the table here, --tier graph or stream "
        "without a CUDA device). A stdout that cannot be written (a closed pipe, a full disk) does not stop the run: "
        "the reports are written and the exit status stays the verdict (at least 1 when a full disk or an I/O error "
        "lost the output). Extra arguments after -- go to pytest.",
    )
    parser.add_argument(
        "--platform",
        default="auto",
        help="platform name, .toml path, auto (default: the running device), or all (every "
        "bundled table, each in its own report directory, merged into scoreboard.md)",
    )
    parser.add_argument(
        "--kernel",
        action="append",
        default=[],
        metavar="NAME",
        help="certify only this kernel (repeatable; default: all discovered)",
    )
    parser.add_argument(
        "--layout",
        action="append",
        default=[],
        metavar="LAYOUT",
        help="certify only this layout (repeatable; default: every claimed layout)",
    )
    add_layout_flag(parser)
    parser.add_argument(
        "--tier",
        choices=TIER_CHOICES,
        default=TIERS[0],
        help="regular: every case of every claimed layout (default); large: one case per op and layout whose "
        "cache passes 4 GiB, a strided layer of a pool (32-bit offsets; about 6.5 GiB free on the device); graph: "
        "each op and layout captured in a CUDA graph and replayed with new inputs (CUDA devices only); stream: each "
        "write op and layout called on a non-default stream right after a producer that writes its inputs late "
        "(CUDA devices only); all: every tier, each with its own column in the report",
    )
    parser.add_argument("--report", default="reports", metavar="DIR", help="report directory (default: reports)")
    parser.add_argument(
        "-n",
        "--workers",
        type=non_negative_int,
        default=1,
        metavar="N",
        help="worker processes (default 1); on a GPU host each worker gets its own GPU; 0: the cases run in "
        "certify's own process, without fault isolation (a kernel that crashes or hangs ends the run with no "
        "report), for a debugger's breakpoints and for kernels that cannot crash",
    )
    parser.add_argument(
        "--jobs",
        type=positive_int,
        default=None,
        metavar="J",
        help="with --platform all: certify J platforms at once (default: 1 on a GPU host, else one per CPU core)",
    )
    parser.add_argument(
        "--case-timeout",
        type=positive_int,
        default=600,
        metavar="SECONDS",
        help="a case running longer fails and its worker is replaced (default 600; the first "
        "case of a kernel may include its build)",
    )
    parser.add_argument(
        "--crash-limit",
        type=positive_int,
        default=DEFAULT_CRASH_LIMIT,
        metavar="N",
        help=f"after N crashes or hangs of one kernel on one layout, its remaining cases there fail at once as "
        f"not run (default {DEFAULT_CRASH_LIMIT}); its other layouts still run",
    )
    parser.add_argument(
        "--max-restarts",
        type=positive_int,
        default=64,
        metavar="N",
        help="replace crashed workers at most N times in the whole run (default 64), then stop with a partial "
        "report; workers that die before running any case stop the run after 2",
    )
    parser.add_argument(
        "--require-input-checks",
        action="store_true",
        help="certify only kernels that refuse an out-of-range slot (input checks 'validated' or 'flagged'); "
        "by default input checks are reported, not required (engines own slot validity)",
    )
    parser.add_argument(
        "--require-hardening",
        action="store_true",
        help="certify only kernels whose empty call (no tokens) is clean: it returns, writes nothing and leaves no "
        "device error; by default the hardening column is reported, not required (engines do not make that call)",
    )
    parser.add_argument("--dry-run", action="store_true", help="print the pytest command and stop")
    add_json_flag(parser, "the summary as JSON")
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    parser.set_defaults(func=_certify)
