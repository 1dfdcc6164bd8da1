"""What a report records about the machine it ran on (so results can be compared across runs)."""

from __future__ import annotations

import platform as pyplatform
import shutil
import subprocess
from typing import Any

from rtp_ref import __version__


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


def collect_environment() -> dict[str, Any]:
    """Versions of rtp-ref, Python, torch, triton, the GPU runtime and driver, and device 0."""
    import torch

    env: dict[str, Any] = {
        "rtp_ref": __version__,
        "python": pyplatform.python_version(),
        "machine": pyplatform.machine(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "torch_hip": torch.version.hip,
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
