"""What a KV-cache write kernel is, for rtp-ref.

A kernel is any object with:

* ``name: str`` — unique, shown in reports (``vendor-x-mla``);
* ``kv_cache_dtypes: Collection[str]`` — the layouts it claims (``auto``, ``fp8``, ``fp8_ds_mla``,
  ``fp8_model1_mla``, ``fp8_rocm_compact``); the suite certifies each claim, and checks that every
  other layout raises (a claimed-unsupported layout must fail loudly, never write garbage);
* ``devices: Collection[str]`` — torch device types it runs on (``cuda``, ``cpu``);
* ``__call__(kv_c, k_pe, kv_cache, slot_mapping, kv_cache_dtype, scale) -> None`` — the
  ``concat_and_cache_mla`` signature of vLLM and rtp-llm: writes token ``i`` to slot
  ``slot_mapping[i]`` (slot = block * block_size + offset; negative = padding, write nothing).

Optionally ``bind(contract: WriteContract) -> kernel``: returns the kernel configured for a
platform contract (fp8 format, scale rule, divisor...). Kernels without ``bind`` are certified as
they are, against the platform under test. rtp-ref's built-in kernels all bind, which is how a
ROCm table is exercised on a CUDA GPU or the CPU ("emulated").

Optionally ``input_requirements: Collection[str]``, names from ``INPUT_REQUIREMENTS``: what the
kernel needs of ``kv_c`` and ``k_pe`` (contiguity, 16-byte alignment for vector loads). Given inputs
that break a declared requirement, the kernel may raise a clear error: the suite reports that case
as refused as declared, never as a pass of the write. A kernel that declares nothing must handle
every stride the suite builds; a fault or wrong bytes is a failure either way.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import torch

from rtp_ref.errors import RtpRefError
from rtp_ref.errors import UnsupportedLayoutError as UnsupportedLayoutError  # re-exported: the kernels' import path
from rtp_ref.platform import MLA_LAYOUT_NAMES

if TYPE_CHECKING:
    from rtp_ref.kernels.contract import WriteContract


@runtime_checkable
class KVCacheKernel(Protocol):
    """The structural type every kernel satisfies (see the module doc)."""

    name: str
    kv_cache_dtypes: Collection[str]
    devices: Collection[str]

    def __call__(
        self,
        kv_c: torch.Tensor,
        k_pe: torch.Tensor,
        kv_cache: torch.Tensor,
        slot_mapping: torch.Tensor,
        kv_cache_dtype: str,
        scale: torch.Tensor,
    ) -> None: ...


@runtime_checkable
class BindableKernel(KVCacheKernel, Protocol):
    """A kernel with the optional ``bind``: the same kernel configured for another platform contract."""

    def bind(self, contract: WriteContract) -> KVCacheKernel: ...


#: requirements a kernel may declare on its inputs (``input_requirements``), and what each means
INPUT_REQUIREMENTS = {
    "contiguous": "kv_c and k_pe are contiguous tensors",
    "aligned16": "kv_c and k_pe start at 16-byte aligned addresses and their row strides are multiples of 16 bytes",
}


def broken_requirements(requirements: Collection[str], kv_c: torch.Tensor, k_pe: torch.Tensor) -> list[str]:
    """The declared ``requirements`` that these inputs break, from their metadata alone (no device sync)."""
    broken = []
    if "contiguous" in requirements and not (kv_c.is_contiguous() and k_pe.is_contiguous()):
        broken.append("contiguous")
    if "aligned16" in requirements and any(
        t.data_ptr() % 16 or (t.dim() > 1 and t.stride(0) * t.element_size() % 16) for t in (kv_c, k_pe)
    ):
        broken.append("aligned16")
    return broken


def check_kernel(obj: Any, origin: str) -> KVCacheKernel:
    """Validate that ``obj`` satisfies the protocol; ``origin`` (e.g. the entry point) names it in errors."""
    problems = []
    name = getattr(obj, "name", None)
    if not isinstance(name, str) or not name:
        problems.append("'name' must be a non-empty string")
    layouts = getattr(obj, "kv_cache_dtypes", None)
    if isinstance(layouts, str) or not isinstance(layouts, Collection) or not layouts:
        problems.append("'kv_cache_dtypes' must be a non-empty collection of layout names")
    else:
        unknown = sorted(set(layouts) - set(MLA_LAYOUT_NAMES))
        if unknown:
            problems.append(f"'kv_cache_dtypes' has unknown {unknown}; valid: {', '.join(MLA_LAYOUT_NAMES)}")
    devices = getattr(obj, "devices", None)
    if isinstance(devices, str) or not isinstance(devices, Collection) or not devices:
        problems.append("'devices' must be a non-empty collection of torch device types, e.g. ('cuda',)")
    requirements = getattr(obj, "input_requirements", ())
    if isinstance(requirements, str) or not isinstance(requirements, Collection):
        problems.append("'input_requirements' must be a collection of requirement names")
    elif set(requirements) - set(INPUT_REQUIREMENTS):
        problems.append(f"'input_requirements' has unknown {sorted(set(requirements) - set(INPUT_REQUIREMENTS))}; "
                        f"valid: {', '.join(INPUT_REQUIREMENTS)}")
    if not callable(obj):
        problems.append("it must be callable as kernel(kv_c, k_pe, kv_cache, slot_mapping, kv_cache_dtype, scale)")
    if problems:
        raise RtpRefError(f"kernel from {origin} does not satisfy the rtp-ref kernel protocol: {'; '.join(problems)}")
    kernel: KVCacheKernel = obj
    return kernel


def device_to_run(devices: Collection[str], prefer_gpu: bool = True) -> str | None:
    """The torch device type a kernel claiming ``devices`` runs on here, or None when torch sees none.

    A GPU torch sees (``cuda``, also on ROCm builds) when the kernel claims it, unless ``prefer_gpu`` is
    False and the kernel also claims the CPU; otherwise the CPU when the kernel claims it.
    """
    gpu = torch.cuda.is_available() and "cuda" in devices
    if "cpu" in devices and not (gpu and prefer_gpu):
        return "cpu"
    return "cuda" if gpu else None


@dataclass(frozen=True)
class KernelEntry:
    """A discovered kernel and where it came from: ``builtin (rtp-ref VERSION)``, ``entry point NAME = VALUE
    (DIST VERSION)`` or ``RTP_REF_KERNELS item 'module:attr'``."""

    kernel: KVCacheKernel
    origin: str
