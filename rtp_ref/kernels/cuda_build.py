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
import shutil
import tempfile
from importlib import resources

import torch

from rtp_ref.fp8.formats import E4M3FN, E5M2, ConversionMode, Fp8Format
from rtp_ref.platform import gpu_index, gpu_platform

#: the declared input domain (rtp_ref.cases.domain) of every CUDA writer: its launch reads slot_mapping through an
#: ``int64_t`` pointer (csrc/mla_cache.cu, csrc/mha_indexer.cu), so an int32 mapping, whose pairs it would read as
#: one slot each (AITER #4697), is refused before writing; widening it on the host would cost every call a launch
CUDA_SLOT_DOMAIN: dict[str, tuple[str, ...]] = {"slot_mapping": ("int64",)}


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
    staged = _staged_sources(directory, os.path.join(build_directory, "csrc"))
    cpp_extension.load(
        name=name,
        sources=[os.path.join(staged, source)],
        extra_cuda_cflags=["-O3", f"-gencode=arch=compute_{arch},code=sm_{arch}"],
        extra_include_paths=[staged],
        build_directory=build_directory,
        is_python_module=False,
    )
    return ctypes.CDLL(os.path.join(build_directory, f"{name}.so"))


def _staged_sources(directory: str, staged: str) -> str:
    """The sources of ``directory`` copied to ``staged`` (inside the build folder, whose name carries their digest),
    each file once, with its modification time.

    torch rebuilds an extension whose build arguments change, and the include path is one: two copies of rtp-ref
    (the installed one certify runs, the checkout the unit tests import under tox) would rebuild every library for
    each other, the unit tests' workers waiting on the build lock. Compiled from the staged copy, both name the same
    paths and share the build.
    """
    os.makedirs(staged, exist_ok=True)
    for file in sorted(os.listdir(directory)):
        target = os.path.join(staged, file)
        if not os.path.exists(target):
            # copied beside the target, then renamed: a process compiling meanwhile never reads half a file
            fd, partial = tempfile.mkstemp(dir=staged, prefix=f".{file}.")
            os.close(fd)
            shutil.copy2(os.path.join(directory, file), partial)
            os.replace(partial, target)
    return staged


#: the fp8 conversions of the CUDA kernels (their p.hardware): the integer encoder, or cvt.rn.satfinite to one format
HARDWARE_NONE, HARDWARE_E4M3, HARDWARE_E5M2 = 0, 1, 2
_HARDWARE = {E4M3FN: HARDWARE_E4M3, E5M2: HARDWARE_E5M2}


def hardware_conversion(fmt: Fp8Format, mode: ConversionMode, device: torch.device | None = None) -> int:
    """Which instruction the CUDA kernels convert ``fmt`` with on GPU ``device`` (default: the current GPU):
    ``HARDWARE_E4M3`` or ``HARDWARE_E5M2`` (``__nv_cvt_float_to_fp8`` with ``__NV_SATFINITE``: OCP e4m3 or e5m2
    under satfinite) where the GPU's platform table lists the format under ``[hardware] fp8_conversion``;
    ``HARDWARE_NONE`` (the software encoder) otherwise."""
    if fmt not in _HARDWARE or mode is not ConversionMode.SATFINITE:
        return HARDWARE_NONE
    platform = gpu_platform(gpu_index(device))
    return _HARDWARE[fmt] if platform is not None and fmt.name in platform.fp8_conversion else HARDWARE_NONE
