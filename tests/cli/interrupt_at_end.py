"""A pytest plugin for tests/cli/test_certify_interrupt.py: a Ctrl-C as the run ends, raised from a sessionfinish
hook that runs before the report's (as xdist's shutdown of its workers does, where a late Ctrl-C lands)."""

from __future__ import annotations

import pytest


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Raise KeyboardInterrupt, as a SIGINT arriving now would."""
    raise KeyboardInterrupt
