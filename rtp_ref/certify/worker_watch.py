"""End a run in seconds when the environment, not a kernel, kills the xdist workers.

A worker that dies before it reports any case died of its environment (a plugin or conftest that
fails to import, a device it cannot open, an option the workers reject), and its replacement will
die the same way: xdist would respawn workers until its restart cap, for minutes, with no report.
After ``limit`` such deaths the controller stops the run and the report says why, naming the error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rtp_ref.certify.faults import collection_deaths

#: workers that die before running any case, after which the run is stopped
DEFAULT_IDLE_DEATH_LIMIT = 2


def _last_line(error: object) -> str:
    lines = [ln.strip() for ln in str(error).splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "no error text"


class WorkerWatch:
    """Controller-side plugin: counts workers that died before running a case; stops the run at ``limit``.

    ``stop_reason`` is set once the run is being stopped, for the report.
    """

    def __init__(self, config: pytest.Config, out_dir: Path, limit: int = DEFAULT_IDLE_DEATH_LIMIT) -> None:
        self.config = config
        self.out_dir = out_dir
        self.limit = limit
        self.ran: set[str] = set()
        self.idle_deaths: list[tuple[str, str]] = []
        self.stop_reason: str | None = None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        node = getattr(report, "node", None)  # xdist sets it on the controller: the worker that sent it
        if node is not None:
            self.ran.add(node.gateway.id)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object) -> None:
        worker = node.gateway.id
        if error is None or worker in self.ran:
            return
        self.idle_deaths.append((worker, _last_line(error)))
        if len(self.idle_deaths) >= self.limit and self.stop_reason is None:
            workers = ", ".join(w for w, _ in self.idle_deaths)
            # xdist only knows "Not properly terminated"; the fault logs know the fatal error and its place
            what = next(iter(collection_deaths(self.out_dir)), self.idle_deaths[0][1])
            self.stop_reason = (f"stopped: {len(self.idle_deaths)} xdist workers ({workers}) died before running any "
                                f"case, so the environment is at fault, not a kernel: {what}")
            dsession = self.config.pluginmanager.getplugin("dsession")
            if dsession is not None:
                dsession.shouldstop = self.stop_reason  # xdist ends its loop with Interrupted(reason)
                # ... but it replaces the dead worker first, and replacements of replacements, unless its
                # restart budget is spent (xdist has no public way to say "no more workers")
                if hasattr(dsession, "_max_worker_restart"):
                    dsession._max_worker_restart = 0

    def xdist_stop_reason(self) -> str | None:
        """xdist's own reason for ending early (its restart cap), if it gave one."""
        dsession = self.config.pluginmanager.getplugin("dsession")
        summary = getattr(dsession, "_summary_report", None)
        return f"stopped: {summary}" if summary else None
