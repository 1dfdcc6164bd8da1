"""Fixtures of the plugins tests (the shipped suite's and rtp-ref's own reference tests): the implementation
under test, a registry, and real packages on disk."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rtp_ref.suites.plugins.helpers import PackageDir
from rtp_ref.suites.plugins.kit import PluginsKit, load_plugins_kit


@pytest.fixture(scope="session")
def plugins_kit() -> PluginsKit:
    """The plugins implementation under test: ``$RTP_REF_PLUGINS_IMPL``, else the reference."""
    return load_plugins_kit()


@pytest.fixture
def packages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plugins_kit: PluginsKit
) -> Iterator[PackageDir]:
    """Packages written under tmp_path and importable; afterwards the imports, ``sys.path`` and the
    process-wide model registry are as before."""
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    with plugins_kit.isolated_default_registry() as registry:
        package_dir = PackageDir(root, registry)
        yield package_dir
    package_dir.forget_imports()


@pytest.fixture
def registry(plugins_kit: PluginsKit) -> Iterator[object]:
    """A new, empty registry of the implementation, asked for inside ``isolated_default_registry``: a kit over one
    process-wide registry may hand that one out emptied, and it is as before afterwards."""
    with plugins_kit.isolated_default_registry():
        yield plugins_kit.new_registry()


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    """An empty checkpoint directory; tests write its config.json."""
    path = tmp_path / "ckpt"
    path.mkdir()
    return path
