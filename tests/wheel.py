"""A real wheel of this source tree, for tests that need what users install rather than the checkout."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def build_wheel(tmp_path: Path) -> Path:
    """Build rtp-ref's wheel from a copy of the sources (no network, no build isolation); its path."""
    source = tmp_path / "src"
    source.mkdir(parents=True)
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(REPO / name, source / name)
    for folder in ("rtp_ref", "platforms", "conformance"):
        shutil.copytree(REPO / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                    "-q", "-w", str(tmp_path / "dist"), str(source)], check=True)
    (wheel,) = (tmp_path / "dist").glob("rtp_ref-*.whl")
    return wheel
