"""Facts about a conformance run that every case shares: platform, execution mode, flags, selection."""

from __future__ import annotations

import shlex
import socket
import sys
import time
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from rtp_ref.certify.environment import collect_environment
from rtp_ref.errors import RtpRefError
from rtp_ref.kernels.discovery import discover_kernels, unavailable_kernels
from rtp_ref.kv.flags import LayoutFlags, resolve_flags
from rtp_ref.platform import Platform, platform_for_device, resolve_platform, this_device


def execution_mode(platform: Platform, device: str | None = None) -> str:
    """``native`` when the platform under test is what runs the kernel, else ``emulated``.

    The cpu table is native for kernels on the CPU device; a GPU table is native when it is this
    machine's GPU, by its ``[detect]`` (so an out-of-tree copy of a bundled table is native too), and,
    given ``device``, the kernel runs there. Emulated means the table's contract (formats, flags, layouts)
    is exercised on other hardware: a ROCm table on a CUDA GPU or the CPU, say. Reports print it on every
    line.
    """
    if platform.backend == "cpu":
        return "native" if device in (None, "cpu") else "emulated"
    if device == "cpu":
        return "emulated"
    try:
        platform_for_device(*this_device(), [platform])
    except RtpRefError:
        return "emulated"
    return "native"


def run_platform(config: pytest.Config) -> Platform:
    """The platform a pytest session tests (``--platform``)."""
    return resolve_platform(config.getoption("rtp_platform"))


def run_flags(config: pytest.Config, platform: Platform) -> LayoutFlags:
    """The platform's layout flags with the session's ``--layout-flag`` overrides applied."""
    return resolve_flags(platform, config.rtp_ref_layout_flags)  # type: ignore[attr-defined]


def run_kernels(config: pytest.Config, cases: list[dict[str, Any]]) -> dict[str, str]:
    """Name -> origin of the kernels a finished run certified, for its report.

    They are discovered again here: the controller of an xdist run collected nothing, so it has no discovery
    of its own to reuse. A discovery that fails now (an entry point that stopped loading, a vendor's kernel
    factory that raises) never raises: the report of the cases that ran must still be written. The kernels
    are then those ``--kernel`` selected, else those the cases name, each with the reason as its origin.
    """
    selected = config.getoption("rtp_kernel") or None
    try:
        return {name: entry.origin for name, entry in discover_kernels(selected).items()}
    except Exception as exc:  # a vendor's own code runs here, so anything it raises, not only RtpRefError
        problem = str(exc) if isinstance(exc, RtpRefError) else f"{type(exc).__name__}: {exc}"
        names = selected or sorted({str(c["kernel"]) for c in cases if c.get("kernel")})
        return dict.fromkeys(names, f"unknown: kernel discovery failed at the end of the run: {problem}")


def describe_run(config: pytest.Config, cases: list[dict[str, Any]], started: float) -> dict[str, Any]:
    """Report fields shared by all cases: platform, environment, the run (when, how long, where, the command
    line), the kernels with their origins (``run_kernels``: a failing discovery is recorded, never raised);
    deviations of the selected kernels no case referred to are listed as unmatched. ``started``: the run's
    start, seconds since the epoch."""
    platform = run_platform(config)
    flags = run_flags(config, platform)
    used = {c["deviation"] for c in cases if c.get("deviation") is not None}
    kernels = run_kernels(config, cases)
    finished = time.time()
    return {
        "run": {
            "started": datetime.fromtimestamp(started, timezone.utc).isoformat(timespec="seconds"),
            "finished": datetime.fromtimestamp(finished, timezone.utc).isoformat(timespec="seconds"),
            "duration_s": round(finished - started, 1),
            "host": socket.gethostname(),
            "command": shlex.join(["rtp-ref" if Path(sys.argv[0]).name in ("rtp-ref", "cli.py") else sys.argv[0],
                                   *sys.argv[1:]]),
        },
        "kernels": [{"name": name, "origin": origin} for name, origin in kernels.items()],
        "unavailable_kernels": [{"name": name, "reason": reason} for name, reason in unavailable_kernels().items()
                                if not config.getoption("rtp_kernel") or name in config.getoption("rtp_kernel")],
        "platform": {
            "name": platform.name,
            "source": platform.source,
            "sha256": platform.sha256,
            "execution": execution_mode(platform),
            "element_format": platform.element_format.name,
            "conversion_mode": platform.conversion_mode.value,
            "required_grade": platform.required_grade,
            "require_input_checks": platform.require_input_checks or bool(config.getoption("rtp_require_input_checks")),
            "table": platform.raw,
        },
        "environment": collect_environment(),
        "flags": flags.as_dict(),
        "selection": {
            "kernels": config.getoption("rtp_kernel") or "all",
            "layouts": config.getoption("rtp_layout") or "all claimed",
            "layout_flag_overrides": dict(config.rtp_ref_layout_flags),  # type: ignore[attr-defined]
        },
        "unmatched_deviations": [asdict(d) for i, d in enumerate(platform.deviations)
                                 if i not in used and d.kernel in kernels],
    }
