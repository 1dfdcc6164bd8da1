"""Building vLLM's cache ops at first use, for the running GPU, from vLLM's source in ``$VLLM_SRC``.

vLLM's ``csrc/cache_kernels.cu`` (and the headers it includes) is compiled unmodified together with this package's
``csrc/rtp_vllm_bindings.cpp``, which registers the ops rtp-ref calls under the torch library ``rtp_vllm``
(``torch.ops.rtp_vllm.reshape_and_cache_flash``...). The build follows vLLM's own for its stable-ABI extension
(CMakeLists.txt, ``_C_stable_libtorch``): C++20, ``-DENABLE_FP8``, ``-DUSE_CUDA``, ``TORCH_TARGET_VERSION`` 2.11, and
torch's nvcc flags without the ``__CUDA_NO_HALF*`` macros (cmake/utils.cmake removes them for CUDA >= 12); ``-O3``
and ``-gencode`` for the GPU's own architecture (``sm_90a`` on Hopper). The library lands in
``$TORCH_EXTENSIONS_DIR`` (torch's default when unset) under a name carrying the architecture and a digest of the
sources and flags, so a later process reuses it and a changed source rebuilds it.

Where vLLM's source is: ``$VLLM_SRC`` (the directory holding ``csrc/``), else the first ``.vllm-src`` found in the
current directory or above it, or above this file (an editable install in an rtp-ref checkout).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import time
from pathlib import Path

#: the environment variable naming vLLM's source directory (the one holding csrc/cache_kernels.cu)
VLLM_SRC_ENV = "VLLM_SRC"
#: the directory name looked for above the current directory when $VLLM_SRC is unset
DEFAULT_DIR_NAME = ".vllm-src"
#: vLLM's sources compiled (relative to $VLLM_SRC)
VLLM_SOURCES = ("csrc/cache_kernels.cu",)
#: the torch library the ops are registered under (csrc/rtp_vllm_bindings.cpp)
NAMESPACE = "rtp_vllm"
#: vLLM's stable-ABI target (CMakeLists.txt: TORCH_TARGET_VERSION for _C_stable_libtorch): torch 2.11's C shim
TORCH_TARGET_VERSION = "0x020B000000000000ULL"
_DEFINES = ["-DENABLE_FP8", "-DUSE_CUDA", f"-DTORCH_TARGET_VERSION={TORCH_TARGET_VERSION}"]
#: torch adds these to every nvcc call (COMMON_NVCC_FLAGS); vLLM removes them (cmake/utils.cmake), so undo them
_UNDO_NO_HALF = ["-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
                 "-U__CUDA_NO_BFLOAT16_CONVERSIONS__", "-U__CUDA_NO_HALF2_OPERATORS__"]

_HERE = Path(__file__).resolve().parent
BINDINGS = _HERE / "csrc" / "rtp_vllm_bindings.cpp"
FALLBACK_INCLUDE = _HERE / "csrc" / "fallback_include"

#: what the last build took, in seconds (None before one in this process)
last_build_seconds: float | None = None


class VllmSourceError(RuntimeError):
    """vLLM's source is not where the build looks for it."""


def vllm_src() -> Path:
    """The directory of vLLM's source (holding ``csrc/cache_kernels.cu``); VllmSourceError saying where it looked."""
    looked = []
    env = os.environ.get(VLLM_SRC_ENV)
    if env:
        path = Path(env).expanduser().resolve()
        if (path / VLLM_SOURCES[0]).is_file():
            return path
        raise VllmSourceError(f"${VLLM_SRC_ENV}={env!r} has no {VLLM_SOURCES[0]}; point it at the directory holding "
                              f"vLLM's csrc/ (e.g. the .vllm-src of an rtp-ref checkout)")
    for start in (Path.cwd().resolve(), _HERE):
        looked.append(str(start))
        for directory in (start, *start.parents):
            candidate = directory / DEFAULT_DIR_NAME
            if (candidate / VLLM_SOURCES[0]).is_file():
                return candidate
    raise VllmSourceError(f"vLLM's source was not found: set ${VLLM_SRC_ENV} to the directory holding vLLM's "
                          f"csrc/cache_kernels.cu (no {DEFAULT_DIR_NAME} with it in {' or '.join(looked)} or "
                          f"above)")


def arch_of(major: int, minor: int) -> str:
    """``XY`` of ``sm_XY`` for compute capability ``major.minor``, with the architecture-specific ``a`` from Hopper
    on (``90a``: vLLM builds its Hopper kernels for sm_90a)."""
    return f"{major}{minor}a" if major >= 9 else f"{major}{minor}"


def _cuda_has_cublas_header() -> bool:
    from torch.utils.cpp_extension import CUDA_HOME

    if not CUDA_HOME:
        return False
    home = Path(CUDA_HOME)
    return any((d / "cublas_v2.h").is_file() for d in (home / "include", *home.glob("targets/*/include")))


def _libcuda_ldflags() -> list[str]:
    """Link flags for the CUDA driver library, which vLLM links its extensions to (cmake/utils.cmake:
    ``CUDA::cuda_driver``; cache_kernels.cu resolves ``cuMemcpyBatchAsync`` through ``cuGetProcAddress``): the
    toolkit's link stub where it has one (the library then names libcuda.so.1, the driver's, as a dependency); none
    otherwise (``_load_driver`` makes the driver's symbols global before the library is loaded)."""
    from torch.utils.cpp_extension import CUDA_HOME

    if not CUDA_HOME:
        return []
    home = Path(CUDA_HOME)
    for stubs in (home / "lib64" / "stubs", *home.glob("targets/*/lib/stubs")):
        if (stubs / "libcuda.so").is_file():
            return [f"-L{stubs}", "-lcuda"]
    return []


def _load_driver() -> None:
    """The NVIDIA driver library loaded with its symbols global, so that the built library's driver calls resolve
    whether or not it was linked to the driver (on a GPU host libcuda.so.1 is always there: torch uses it too)."""
    try:
        ctypes.CDLL("libcuda.so.1", mode=os.RTLD_NOW | os.RTLD_GLOBAL)
    except OSError as exc:
        raise RuntimeError(f"the NVIDIA driver library libcuda.so.1 cannot be loaded: {exc}") from exc


def build_flags(arch: str) -> tuple[list[str], list[str]]:
    """``(extra_cflags, extra_cuda_cflags)`` of the build for ``sm_<arch>``."""
    cflags = ["-O3", "-std=c++20", *_DEFINES]
    cuda_cflags = ["-O3", "-std=c++20", f"-gencode=arch=compute_{arch},code=sm_{arch}", *_DEFINES, *_UNDO_NO_HALF]
    return cflags, cuda_cflags


def _digest(src: Path, flags: list[str]) -> str:
    h = hashlib.sha256("\0".join(flags).encode())
    files = sorted(p for p in (src / "csrc").rglob("*") if p.is_file())
    files += [BINDINGS, *sorted(FALLBACK_INCLUDE.glob("*"))]
    for path in files:
        h.update(str(path.name).encode() + path.read_bytes())
    return h.hexdigest()[:12]


@functools.cache
def load_ops(verbose: bool = False) -> object:
    """Build (or reuse) and load vLLM's cache ops for the current CUDA device: ``torch.ops.rtp_vllm``.

    Once per process; a build error raises with the compiler's output (cpp_extension shows it)."""
    global last_build_seconds
    import torch
    from torch.utils import cpp_extension

    if not torch.cuda.is_available():
        raise RuntimeError("vLLM's cache ops need a CUDA GPU; torch sees none")
    src = vllm_src()
    arch = arch_of(*torch.cuda.get_device_capability())
    cflags, cuda_cflags = build_flags(arch)
    includes = [str(src / "csrc")]
    if not _cuda_has_cublas_header():
        # torch_utils.h includes cublas_v2.h for a handle type only; a toolkit without cuBLAS's headers gets ours
        includes.append(str(FALLBACK_INCLUDE))
    ldflags = _libcuda_ldflags()
    name = f"rtp_vllm_cache_ops_sm{arch}_{_digest(src, cflags + cuda_cflags + includes[1:] + ldflags)}"
    root = os.environ.get("TORCH_EXTENSIONS_DIR") or cpp_extension.get_default_build_root()
    build_directory = os.path.join(root, name)
    os.makedirs(build_directory, exist_ok=True)
    _load_driver()
    start = time.perf_counter()
    cpp_extension.load(
        name=name,
        sources=[str(src / s) for s in VLLM_SOURCES] + [str(BINDINGS)],
        extra_cflags=cflags,
        extra_cuda_cflags=cuda_cflags,
        extra_include_paths=includes,
        extra_ldflags=ldflags,
        build_directory=build_directory,
        is_python_module=False,  # loaded with torch.ops.load_library: the ops register themselves
        verbose=verbose,
    )
    last_build_seconds = time.perf_counter() - start
    return getattr(torch.ops, NAMESPACE)
