"""Installing an example vendor package as its users do: pip builds it, into a private target directory.

pip builds in the source tree it is given: setuptools leaves ``build/`` and ``<package>.egg-info`` there,
and a stale egg-info in the checkout makes ``RTP_REF_KERNELS`` discovery find two kernels of one name.
So the example is copied first, without any earlier build's outputs, and the checkout is checked untouched.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _mtimes(tree: Path) -> dict[Path, int]:
    """Every path under ``tree`` with its modification time: a build writing there changes one or adds one."""
    return {p.relative_to(tree): p.stat().st_mtime_ns for p in tree.rglob("*")}


def install_example(name: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """pip-install ``examples/<name>`` (no network, no build isolation) from a copy; the target directory."""
    example = EXAMPLES / name
    before = _mtimes(example)
    source = tmp_path_factory.mktemp("example") / name
    shutil.copytree(example, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    target = tmp_path_factory.mktemp("site")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index", "--quiet",
         "--target", str(target), str(source)],
        capture_output=True, text=True, check=False, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    after = _mtimes(example)
    written = sorted(str(p) for p in after if before.get(p) != after[p])
    assert not written, f"installing {name} wrote into examples/{name}: {', '.join(written)}"
    return target
