"""ACME's MLA cache writer in CUDA C++, built by torch's extension builder at first use.

Two kernels, both claiming ``auto`` (a bf16/fp16 copy) and ``fp8`` (per-tensor scale, OCP e4m3,
saturating), on CUDA GPUs only:

* ``acme-cuda``: the CUDA kernel written like a production kernel (csrc/cache_kernels.cu says what
  that means: 16-byte vector loads, no slot validation), with the host-side habits that make it
  certifiable, all from tensor metadata alone (no device sync, so it stays capturable in a CUDA
  graph): it declares ``input_requirements = ("aligned16",)`` and refuses inputs its vector loads
  cannot read, it declares ``input_domain`` (the int64 slot mappings its kernel reads), it refuses
  under ``auto`` a cache of another dtype than the inputs', and it launches nothing for 0 tokens. It
  raises ``NotImplementedError`` for a layout it does not claim, before touching memory.
* ``acme-cuda-crashy``: the same CUDA code called as production kernels were found calling it: an
  empty grid for 0 tokens, misaligned rows handed to the vector loads, and on ``fp8`` a write far
  outside the cache (the CUDA context dies: illegal memory access); asked for a layout it does not
  claim it runs that same fp8 path instead of raising. It shows what a certification reports.

Nothing is compiled at import or discovery: the first call builds csrc/ for the running GPU with
``torch.utils.cpp_extension.load`` into ``$TORCH_EXTENSIONS_DIR`` (about a minute) and later
processes reuse that build.
"""

from __future__ import annotations

import functools
import os
from typing import Any, ClassVar

import torch

#: the TORCH_LIBRARY namespace of csrc/torch_bindings.cpp
_NAMESPACE = "acme_cuda_mla"
_CSRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "csrc")
_SOURCES = ("cache_kernels.cu", "torch_bindings.cpp")
#: set to 1 to see the compiler's command lines and output
VERBOSE_BUILD_ENV = "ACME_CUDA_MLA_VERBOSE_BUILD"


@functools.cache
def _ops() -> Any:
    """Build (or reuse from the extensions cache) and load the kernels for the current GPU; once per process.

    Returns ``torch.ops.acme_cuda_mla``.
    """
    # Imported here, not at module level: on a machine without CUDA importing it logs a warning.
    from torch.utils import cpp_extension

    major, minor = torch.cuda.get_device_capability()
    arch = f"{major}{minor}"
    cpp_extension.load(
        name=f"acme_cuda_mla_sm{arch}",
        sources=[os.path.join(_CSRC, name) for name in _SOURCES],
        extra_cflags=["-O3"],
        # An explicit -gencode: torch then adds no arch flags of its own (TORCH_CUDA_ARCH_LIST is ignored).
        extra_cuda_cflags=["-O3", f"-gencode=arch=compute_{arch},code=sm_{arch}"],
        is_python_module=False,  # TORCH_LIBRARY ops: loaded with torch.ops.load_library
        verbose=os.environ.get(VERBOSE_BUILD_ENV) == "1",
    )
    return getattr(torch.ops, _NAMESPACE)


def build() -> None:
    """Build (or load from the extensions cache) the kernels now, e.g. before a timed run; needs a CUDA GPU."""
    _ops()


#: what the vector loads need: every input row starts at a 16-byte boundary
_ALIGNMENT = 16


def _misaligned(t: torch.Tensor) -> bool:
    return t.data_ptr() % _ALIGNMENT != 0 or (t.size(0) > 1 and t.stride(0) * t.element_size() % _ALIGNMENT != 0) \
        or t.stride(-1) != 1


class AcmeCudaKernel:
    """``concat_and_cache_mla`` for the ``auto`` and ``fp8`` layouts, in CUDA C++ (module doc)."""

    name = "acme-cuda"
    kv_cache_dtypes = ("auto", "fp8")
    devices = ("cuda",)
    #: rtp-ref's vocabulary (rtp_ref.kernels.protocol.INPUT_REQUIREMENTS): 16-byte aligned rows
    input_requirements = ("aligned16",)
    #: the kernel reads slot_mapping as int64 (``data_ptr<int64_t>()`` refuses any other dtype before launching)
    input_domain: ClassVar[dict[str, tuple[str, ...]]] = {"slot_mapping": ("int64",)}

    def __call__(
        self,
        kv_c: torch.Tensor,
        k_pe: torch.Tensor,
        kv_cache: torch.Tensor,
        slot_mapping: torch.Tensor,
        kv_cache_dtype: str,
        scale: torch.Tensor,
    ) -> None:
        if kv_cache_dtype not in self.kv_cache_dtypes:
            raise NotImplementedError(
                f"{self.name} does not support kv_cache_dtype={kv_cache_dtype!r}; "
                f"supported: {', '.join(self.kv_cache_dtypes)}"
            )
        if kv_cache_dtype == "auto" and kv_cache.dtype != kv_c.dtype:
            # the CUDA code copies bits: a bf16 row in an fp16 cache would read back as other numbers
            raise ValueError(f"{self.name}: kv_cache_dtype 'auto' stores the inputs' own type; kv_cache is "
                             f"{kv_cache.dtype}, kv_c {kv_c.dtype}")
        bad = [name for name, t in (("kv_c", kv_c), ("k_pe", k_pe)) if _misaligned(t)]
        if bad:
            raise ValueError(f"{self.name} reads rows with 16-byte loads: {', '.join(bad)} must have unit inner stride "
                             f"and start and row stride multiples of 16 bytes (got k_pe stride {k_pe.stride()}, "
                             f"offset {k_pe.data_ptr() % _ALIGNMENT} bytes); pass .contiguous() inputs")
        if slot_mapping.numel() == 0:
            return  # a launch of an empty grid is an error (cudaErrorInvalidValue): launch nothing
        _ops().concat_and_cache_mla(kv_c, k_pe, kv_cache, slot_mapping, kv_cache_dtype, scale)


class AcmeCudaCrashyKernel:
    """A deliberately broken variant (module doc): empty-grid launches, misaligned rows read, its fp8 path
    writes out of bounds, and it never refuses a layout."""

    name = "acme-cuda-crashy"
    kv_cache_dtypes = ("auto", "fp8")
    devices = ("cuda",)

    def __call__(
        self,
        kv_c: torch.Tensor,
        k_pe: torch.Tensor,
        kv_cache: torch.Tensor,
        slot_mapping: torch.Tensor,
        kv_cache_dtype: str,
        scale: torch.Tensor,
    ) -> None:
        _ops().concat_and_cache_mla_crashy(kv_c, k_pe, kv_cache, slot_mapping, kv_cache_dtype, scale)


def kernels() -> list[AcmeCudaKernel | AcmeCudaCrashyKernel]:
    """The entry point: every kernel this package provides (nothing is built here)."""
    return [AcmeCudaKernel(), AcmeCudaCrashyKernel()]
