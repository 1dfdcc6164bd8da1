"""Shared by the plugins tests: real packages written to disk."""

from __future__ import annotations

import importlib
import sys
import uuid
from pathlib import Path
from typing import Any


class PackageDir:
    """A directory on ``sys.path`` where a test writes real packages for real imports."""

    def __init__(self, root: Path, registry: Any) -> None:
        self.root = root
        self.registry = registry  # the process-wide registry plugins register into
        self.created: list[str] = []

    def write(self, source: str) -> str:
        """Write a package whose ``__init__.py`` is ``source``; returns its (unique) name."""
        name = f"rtpref_test_plugin_{uuid.uuid4().hex[:12]}"
        package = self.root / name
        package.mkdir()
        (package / "__init__.py").write_text(source, encoding="utf-8")
        importlib.invalidate_caches()  # the path finder may have listed the directory already
        self.created.append(name)
        return name

    def forget_imports(self) -> None:
        """Drop the written packages (and their submodules) from ``sys.modules``."""
        for module in list(sys.modules):
            if module.split(".", 1)[0] in self.created:
                del sys.modules[module]
