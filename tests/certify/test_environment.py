"""The rtp-ref a report names (rtp_ref.certify.environment.rtp_ref_build): its version, and from a git checkout
the commit and whether tracked files were changed; nothing, and no failure, for an installed package or where git
is absent or broken."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from rtp_ref import __version__
from rtp_ref.certify.environment import rtp_ref_build

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="these tests make git repositories")


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True,
                          timeout=60).stdout.strip()


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A git repository with one commit: a stand-in rtp_ref package at its top, as in a source checkout."""
    repo = tmp_path / "checkout"
    (repo / "rtp_ref").mkdir(parents=True)
    (repo / "rtp_ref" / "__init__.py").write_text('__version__ = "0.1.0"\n')
    _git(repo, "init", "-q")
    _git(repo, "add", "rtp_ref")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    return repo


def test_a_clean_checkout_names_its_commit(checkout: Path) -> None:
    assert rtp_ref_build(checkout) == {"version": __version__, "commit": _git(checkout, "rev-parse", "HEAD"),
                                       "dirty": False}


def test_a_changed_tracked_file_makes_it_dirty_an_untracked_one_does_not(checkout: Path) -> None:
    (checkout / "notes.txt").write_text("scratch\n")
    assert rtp_ref_build(checkout)["dirty"] is False
    (checkout / "rtp_ref" / "__init__.py").write_text('__version__ = "0.2.0"\n')
    assert rtp_ref_build(checkout)["dirty"] is True


def test_an_installed_package_inside_some_repository_names_no_commit(checkout: Path) -> None:
    """A wheel installed into a project's .venv lies inside the project's repository: not a checkout of
    rtp-ref, so the project's commit must not be named."""
    site = checkout / ".venv" / "lib" / "site-packages"
    (site / "rtp_ref").mkdir(parents=True)
    assert rtp_ref_build(site) == {"version": __version__, "commit": None, "dirty": None}


def test_no_git_or_a_broken_checkout_names_no_commit_and_does_not_fail(
        checkout: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / ".git").write_text("gitdir: /nowhere\n")
    assert rtp_ref_build(broken) == {"version": __version__, "commit": None, "dirty": None}
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # git cannot be found
    assert rtp_ref_build(checkout) == {"version": __version__, "commit": None, "dirty": None}


def test_the_callers_git_variables_cannot_point_it_at_another_repository(
        checkout: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    other = tmp_path / "other"
    other.mkdir()
    _git(other, "init", "-q")
    _git(other, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "other")
    head = _git(checkout, "rev-parse", "HEAD")
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    assert rtp_ref_build(checkout)["commit"] == head
