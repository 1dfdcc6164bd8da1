"""What a report records about the machine it ran on (so results can be compared across runs)."""

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
