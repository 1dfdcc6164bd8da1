"""Building rtp-ref's CUDA C++ sources (``csrc/``) at first use for the running GPU, cached on disk.

A source is compiled once per process and GPU architecture with ``torch.utils.cpp_extension.load``
(``-O3``, ``sm_XYa`` of the device: ``sm_90a`` on an H200) into ``$TORCH_EXTENSIONS_DIR`` (torch's default
cache folder when unset) and reused by later processes. The library's name carries a digest of every file
in ``csrc/``, so a changed header rebuilds it too. The libraries have plain C entry points called through
ctypes: the build needs no torch headers.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
from importlib import resources

import torch

from rtp_ref.fp8.formats import E4M3FN, ConversionMode, Fp8Format
from rtp_ref.platform import gpu_index, gpu_platform


def csrc_dir() -> str:
    """Where the installed CUDA sources live."""
    return str(resources.files("rtp_ref.kernels").joinpath("csrc"))


@functools.cache
def arch_of(device: torch.device) -> str:
    """``XY`` of ``sm_XY`` for the device, with the ``a`` (architecture-specific) suffix from Hopper on."""
    major, minor = torch.cuda.get_device_capability(device)
    return f"{major}{minor}a" if major >= 9 else f"{major}{minor}"


@functools.cache
def build_library(source: str, arch: str) -> ctypes.CDLL:
    """Build (or reuse from the extensions cache) ``csrc/<source>`` for ``sm_<arch>``; once per process."""
    from torch.utils import cpp_extension

    directory = csrc_dir()
    digest = hashlib.sha256()
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), "rb") as f:
            digest.update(name.encode() + f.read())
    stem = source.rsplit(".", 1)[0]
    name = f"rtp_ref_{stem}_sm{arch}_{digest.hexdigest()[:12]}"
    root = os.environ.get("TORCH_EXTENSIONS_DIR") or cpp_extension.get_default_build_root()
    build_directory = os.path.join(root, name)
    os.makedirs(build_directory, exist_ok=True)
    cpp_extension.load(
        name=name,
        sources=[os.path.join(directory, source)],
        extra_cuda_cflags=["-O3", f"-gencode=arch=compute_{arch},code=sm_{arch}"],
        extra_include_paths=[directory],
        build_directory=build_directory,
        is_python_module=False,
    )
    return ctypes.CDLL(os.path.join(build_directory, f"{name}.so"))


def hardware_converts(fmt: Fp8Format, mode: ConversionMode, device: torch.device | None = None) -> bool:
    """Whether the CUDA kernels convert ``fmt`` with GPU ``device``'s instruction (default: the current GPU):
    the one they implement (``__NV_E4M3`` with ``__NV_SATFINITE``: OCP e4m3 under satfinite) and the GPU's
    platform table lists under ``[hardware] fp8_conversion``."""
    if fmt != E4M3FN or mode is not ConversionMode.SATFINITE:
        return False
    platform = gpu_platform(gpu_index(device))
    return platform is not None and fmt.name in platform.fp8_conversion
