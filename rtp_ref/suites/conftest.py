"""The shipped suites' run: rtp-ref's pytest plugin active (its hypothesis profiles, and hypothesis's storage
under rtp-ref's cache, never in the directory the suite runs in)."""

from __future__ import annotations

import pytest

from rtp_ref.pytest_plugin import activate


def pytest_configure(config: pytest.Config) -> None:
    activate(config)
