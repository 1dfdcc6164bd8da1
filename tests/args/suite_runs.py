"""Run chosen tests of a shipped suite against a kit of the test tree (tests.args.broken_kits,
tests.plugins.broken_kits), in the suite's own pytest process, as ``rtp-ref check-*`` runs it."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pytest

from rtp_ref.suites.run import SUITES, Outcome, run_suite

ROOT = Path(__file__).resolve().parents[2]


def kits_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Give a suite's child process this test tree's ``tests`` package (its kits) on ``PYTHONPATH``."""
    # The kits live in this test tree: the child gets its ``tests`` package on its path, not the checkout, whose
    # rtp_ref would shadow the installed one the suite runs from (tox installs a wheel: two rtp_ref.suites conftests)
    kits = tmp_path / "kits-path"
    kits.mkdir()
    (kits / "tests").symlink_to(ROOT / "tests", target_is_directory=True)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(kits), os.environ.get("PYTHONPATH")])))


def outcomes_of(suite: str, impl: str, tests: Sequence[str], tmp_path: Path,
                monkeypatch: pytest.MonkeyPatch) -> dict[str, Outcome]:
    """Each of ``tests`` (``module::name[params]``) run against ``impl``, by test id."""
    kits_on_path(tmp_path, monkeypatch)
    found = run_suite(SUITES[suite], impl, tmp_path / "junit.xml", tests=tests)
    return {o.test: o for o in found}
