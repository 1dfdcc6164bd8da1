"""Facts about a conformance run that every case shares: platform, execution mode, flags, selection, the kernels
with their origins, the command as typed and the rtp-ref that ran."""

from __future__ import annotations

import os
import shlex
import socket
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from rtp_ref.certify.environment import collect_environment, rtp_ref_build
from rtp_ref.errors import RtpRefError
from rtp_ref.kernels.discovery import discover_kernels, unavailable_kernels
from rtp_ref.kv.flags import LayoutFlags, resolve_flags
from rtp_ref.ops import OPS
from rtp_ref.platform import Platform, platform_for_device, resolve_platform, this_device

#: the command line the user typed, handed by ``rtp-ref certify --platform all`` to each platform's child process
#: (whose own command line names one platform and a report directory of its own)
TYPED_COMMAND_ENV = "RTP_REF_TYPED_COMMAND"


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


@dataclass(frozen=True)
class RunKernels:
    """The kernels of a run with their origins (name -> origin, ``KernelEntry.origin``), as discovered when the
    run started, or why that discovery failed (``failure``, already phrased as the kernels' origin)."""

    origins: Mapping[str, str] = field(default_factory=dict)
    failure: str | None = None

    def for_report(self, selected: Sequence[str], cases: Sequence[Mapping[str, Any]]) -> dict[str, str]:
        """Name -> origin for the report: the discovered kernels; after a failed discovery, the kernels
        ``selected`` (``--kernel``), else those the cases name, each with the failure as its origin."""
        if self.failure is None:
            return dict(self.origins)
        names = list(selected) or sorted({str(c["kernel"]) for c in cases if c.get("kernel")})
        return dict.fromkeys(names, self.failure)


def discover_run_kernels(config: pytest.Config) -> RunKernels:
    """The kernels a run certifies (``--kernel``, else every one), of every op, as the suite discovers them,
    with their origins: called when the run starts, before any kernel runs, so that a vendor module that breaks
    during the run cannot take its kernels' origins with it (the controller of an xdist run collects nothing,
    so it has no discovery of the suite's to read them from).

    Never raises: the run's own collection reports a broken discovery, and the report of the cases that ran
    must still be written; the reason is then every kernel's origin.
    """
    try:
        discovered = discover_kernels(config.getoption("rtp_kernel") or None, ops=OPS)
    except Exception as exc:  # a vendor's own code runs here, so anything it raises, not only RtpRefError
        problem = str(exc) if isinstance(exc, RtpRefError) else f"{type(exc).__name__}: {exc}"
        return RunKernels(failure=f"unknown: kernel discovery failed when the run started: {problem}")
    return RunKernels({name: entry.origin for name, entry in discovered.items()})


def run_command(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> str:
    """The run's command line as the user typed it: ``$RTP_REF_TYPED_COMMAND`` when set (``environ``, default
    this process's), else ``argv`` (default ``sys.argv``) shell-quoted, its program named ``rtp-ref`` when it
    is rtp-ref's entry point or ``rtp_ref/cli.py``."""
    typed = (os.environ if environ is None else environ).get(TYPED_COMMAND_ENV)
    if typed:
        return typed
    program, *args = sys.argv if argv is None else argv
    return shlex.join(["rtp-ref" if Path(program).name in ("rtp-ref", "cli.py") else program, *args])


def describe_run(config: pytest.Config, cases: list[dict[str, Any]], started: float,
                 kernels_found: RunKernels) -> dict[str, Any]:
    """Report fields shared by all cases: platform, environment, the run (when, how long, where, the command
    line as typed: ``run_command``, the rtp-ref that ran: ``rtp_ref_build``), the kernels with their origins
    (``kernels_found``: ``discover_run_kernels`` at the run's start, a failed discovery as every kernel's
    origin); deviations of the selected kernels no case referred to are listed as unmatched. ``started``: the
    run's start, seconds since the epoch."""
    platform = run_platform(config)
    flags = run_flags(config, platform)
    used = {c["deviation"] for c in cases if c.get("deviation") is not None}
    kernels = kernels_found.for_report(config.getoption("rtp_kernel") or [], cases)
    finished = time.time()
    return {
        "run": {
            "started": datetime.fromtimestamp(started, timezone.utc).isoformat(timespec="seconds"),
            "finished": datetime.fromtimestamp(finished, timezone.utc).isoformat(timespec="seconds"),
            "duration_s": round(finished - started, 1),
            "host": socket.gethostname(),
            "command": run_command(),
            "rtp_ref": rtp_ref_build(),
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
            "require_hardening": platform.require_hardening or bool(config.getoption("rtp_require_hardening")),
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
