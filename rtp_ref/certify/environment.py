"""What a report records about the machine it ran on and the rtp-ref that ran (so results can be compared across
runs)."""

from __future__ import annotations

import hashlib
import os
import platform as pyplatform
import shutil
import subprocess
from pathlib import Path
from typing import Any

from rtp_ref import __version__
from rtp_ref.kv.layout_records import BUILTIN_LAYOUTS, LAYOUTS_ENV, MLA_LAYOUT_NAMES


def _nvidia_driver() -> str | None:
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines()[0] if out.stdout.strip() else None


#: how long one git query may take before the commit is recorded as unknown
GIT_TIMEOUT_S = 20


def _git(checkout: Path, *args: str) -> str | None:
    """``git ARGS`` run in ``checkout`` (its stdout), or None when git is absent, fails or times out. The
    caller's ``GIT_*`` variables are left out, so that they cannot point git at another repository, and git takes
    no optional lock (``status`` would otherwise refresh the index of a tree someone is working in)."""
    git = shutil.which("git")
    if git is None:
        return None
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["GIT_OPTIONAL_LOCKS"] = "0"
    try:
        out = subprocess.run([git, "-C", str(checkout), *args], capture_output=True, text=True, env=env,
                             timeout=GIT_TIMEOUT_S, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout


def rtp_ref_build(checkout: Path | None = None) -> dict[str, Any]:
    """The rtp-ref that runs: ``version``, and ``commit`` (the full hash checked out) and ``dirty`` (whether a
    tracked file differs from it; untracked files do not count, as for ``git describe --dirty``) when it runs
    from a git checkout: ``checkout`` (default: the directory holding the imported ``rtp_ref`` package) has a
    ``.git``. Both are None for an installed wheel, or where git is absent or cannot read the checkout; this
    never raises."""
    root = Path(__file__).resolve().parents[2] if checkout is None else checkout
    commit = dirty = None
    # a wheel's site-packages may lie inside some project's repository (its .venv): only a .git right here
    # makes this a checkout of rtp-ref
    if (root / ".git").exists():
        head = _git(root, "rev-parse", "--verify", "HEAD")
        status = _git(root, "status", "--porcelain", "--untracked-files=no")
        if head is not None and status is not None:
            commit, dirty = head.strip(), bool(status.strip())
    return {"version": __version__, "commit": commit, "dirty": dirty}


def layout_table() -> dict[str, Any] | None:
    """The layout table ``$RTP_REF_LAYOUTS`` added records from: its path, its bytes' sha256 (None when it
    can no longer be read) and the layouts it added; None without one."""
    path = os.environ.get(LAYOUTS_ENV)
    if not path:
        return None
    try:
        digest: str | None = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        digest = None
    return {"path": path, "sha256": digest, "layouts": list(MLA_LAYOUT_NAMES[len(BUILTIN_LAYOUTS):])}


def collect_environment() -> dict[str, Any]:
    """Versions of rtp-ref, Python, torch, triton, the GPU runtime and driver, device 0, and the layout table
    that added layouts to the built-in ones (a report certified on one names it)."""
    import torch

    env: dict[str, Any] = {
        "rtp_ref": __version__,
        "python": pyplatform.python_version(),
        "machine": pyplatform.machine(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "torch_hip": torch.version.hip,
        "layout_table": layout_table(),
    }
    try:
        import triton

        env["triton"] = triton.__version__
    except ImportError:
        env["triton"] = None
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        env["device"] = props.name
        env["device_count"] = torch.cuda.device_count()
        env["device_arch"] = str(props.gcnArchName) if torch.version.hip else f"{props.major}.{props.minor}"
        env["driver"] = _nvidia_driver() if torch.version.cuda else None
    else:
        env["device"] = "cpu"
        env["device_count"] = 0
        env["device_arch"] = None
        env["driver"] = None
    return env
