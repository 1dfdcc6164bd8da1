"""The ``cuda`` built-in kernel: CUDA C++ (``csrc/mla_cache.cu``) built at first use for the running GPU.

Built at first use by rtp_ref.kernels.cuda_build (once per GPU architecture, cached on disk); the
library has a plain C entry point called through ctypes.

fp8 conversion: ``hardware`` (``__nv_cvt_float2_to_fp8x2`` with ``__NV_SATFINITE``) for OCP e4m3 with
``satfinite``, the NVIDIA platforms' contract, where the GPU's table lists it under ``[hardware]``;
``software`` (integer round-half-even) for any other contract, e.g. the fnuz format of a ROCm table
emulated on an NVIDIA GPU.

Without an NVIDIA GPU, CUDA toolkit (nvcc) or ninja the kernel is unavailable and
``unavailable_reason()`` says why.
"""

from __future__ import annotations

import ctypes
import functools
import os
from collections.abc import Collection, Mapping

import torch

from rtp_ref.contract import ConversionChoice, ConversionPath, WriteContract, default_contract
from rtp_ref.kernels.call_signature import Launch, on_device, raw_stream
from rtp_ref.kernels.cuda_build import (
    CUDA_SLOT_DOMAIN,
    HARDWARE_E4M3,
    arch_of,
    build_library,
    csrc_dir,
    hardware_conversion,
)
from rtp_ref.kernels.format_traits import CUDA_TRAIT_FIELDS
from rtp_ref.kernels.input_flags import Validation
from rtp_ref.kernels.write_plan import COMPILED_LAYOUT_NAMES, PlannedKernel, ValueMode, WritePlan, block_shift_of
from rtp_ref.kv.layouts import MlaLayout

#: values per 16-byte chunk of bf16/fp16 input (kChunk in the source), and the fewest lanes per token
#: (a half warp: copies and per-tensor fp8; tile-scaled layouts take a whole warp)
_CHUNK = 8
_LANES_PER_TOKEN = 16
#: the most lanes one scale tile may span: tile_amax's shuffles stay within a half warp
_MAX_LANES_PER_TILE = 16
#: the most values per token field the kernel holds in registers (8 chunks a lane of a half warp or 4 of
#: a warp for nope, 1 chunk of the first 16 lanes for rope)
_MAX_R, _MAX_P = _LANES_PER_TOKEN * 8 * _CHUNK, _LANES_PER_TOKEN * _CHUNK


class _Params(ctypes.Structure):
    """Mirror of ``struct RtpRefMlaParams`` in mla_cache.cu: 38 int64 then 2 doubles, no padding."""

    _fields_ = [
        (name, ctypes.c_int64)
        for name in (
            "kv_c", "k_pe", "cache", "slots", "scale",
            "num_tokens", "kv_c_row", "k_pe_row", "block_size", "block_bytes",
            "R", "P", "nope_mode", "rope_mode", "nope_off", "rope_off", "data_bytes", "trail_bytes",
            "tile", "n_tiles", "pow2", "scale_ue8m0", "scale_trailing", "scale_off",
            *CUDA_TRAIT_FIELDS,
            "input_fp16", "aligned", "hardware", "block_shift", "capacity", "flags",
        )
    ] + [("divisor", ctypes.c_double), ("floor_", ctypes.c_double)]


def _source_path() -> str:
    return os.path.join(csrc_dir(), "mla_cache.cu")


def unavailable_reason() -> str | None:
    """Why the cuda kernel cannot run here (None when it can): no GPU, ROCm, no nvcc, no ninja."""
    if torch.version.hip is not None:
        return "torch is a ROCm build (the cuda kernel is CUDA C++; use the triton kernel on AMD GPUs)"
    if not torch.cuda.is_available():
        return "torch sees no CUDA GPU"
    # Imported only now: on a machine without CUDA, importing it logs a warning to stderr.
    from torch.utils import cpp_extension

    nvcc = os.path.join(cpp_extension.CUDA_HOME or "", "bin", "nvcc")
    if not cpp_extension.CUDA_HOME or not os.path.exists(nvcc):
        return "the CUDA toolkit (nvcc) was not found: set CUDA_HOME to build the kernel at first use"
    if not cpp_extension.is_ninja_available():
        return "ninja is not installed (torch.utils.cpp_extension builds with it): pip install ninja"
    if not os.path.exists(_source_path()):
        return f"the kernel source {_source_path()} is missing from this installation"
    return None


@functools.cache
def _library(arch: str) -> ctypes.CDLL:
    """The built kernel library for ``sm_<arch>`` with its entry points typed."""
    lib = build_library("mla_cache.cu", arch)
    lib.rtp_ref_mla_cache_write.argtypes = [ctypes.POINTER(_Params), ctypes.c_void_p]
    lib.rtp_ref_mla_cache_write.restype = ctypes.c_int
    lib.rtp_ref_mla_error_string.argtypes = [ctypes.c_int]
    lib.rtp_ref_mla_error_string.restype = ctypes.c_char_p
    return lib


def _aligned(plan: WritePlan, kv_c: torch.Tensor, k_pe: torch.Tensor, kv_cache: torch.Tensor) -> bool:
    """Whether the vector path's 16-byte loads and 8/16-byte stores are all naturally aligned."""
    if plan.kv_lora_rank % _CHUNK or plan.rope_dim % _CHUNK or not plan.wide_fields_aligned(kv_cache):
        return False
    inputs = all(x.data_ptr() % 16 == 0 and (x.stride(0) * x.element_size()) % 16 == 0 for x in (kv_c, k_pe))
    # fp8 stores are 8 bytes, 16-bit copies 16 bytes, at the field's offset in every token.
    need = {ValueMode.COPY16: 16, ValueMode.PER_TENSOR: 8, ValueMode.TILED: 8}
    block_bytes = kv_cache.stride(0) * kv_cache.element_size()
    fields = all(
        (kv_cache.data_ptr() + offset) % need[mode] == 0 and plan.data_bytes % need[mode] == 0
        and block_bytes % need[mode] == 0
        for mode, offset in ((plan.nope_mode, plan.nope_offset), (plan.rope_mode, plan.rope_offset))
    )
    return inputs and fields


class CudaMlaKernel(PlannedKernel):
    """``concat_and_cache_mla`` in CUDA C++ for every layout (module doc); CUDA devices only."""

    name = "cuda"
    kv_cache_dtypes: Collection[str] = COMPILED_LAYOUT_NAMES
    devices: Collection[str] = ("cuda",)
    #: int64 slot mappings only (rtp_ref.kernels.cuda_build.CUDA_SLOT_DOMAIN says why)
    input_domain: Mapping[str, tuple[str, ...]] = CUDA_SLOT_DOMAIN

    def __init__(self, contract: WriteContract | None = None,
                 conversion: ConversionChoice = "auto", *, validation: Validation = "device") -> None:
        self._init_call_path(validation)
        self.contract = contract
        self.conversion = conversion

    def bind(self, contract: WriteContract, *, conversion: ConversionChoice | None = None,
             validation: Validation | None = None) -> CudaMlaKernel:
        """This kernel configured for ``contract``; ``conversion="software"`` forces the integer path."""
        return CudaMlaKernel(contract, conversion or self.conversion, validation=validation or self.validation)

    def conversion_path_for(self, contract: WriteContract, device: torch.device | None = None) -> ConversionPath:
        """``hardware`` for OCP e4m3 with satfinite where GPU ``device`` (default: the current one) converts it
        (unless forced to software), else ``software``."""
        # the MLA kernel implements the e4m3 instruction only
        hardware = hardware_conversion(contract.element_format, contract.conversion_mode, device) == HARDWARE_E4M3
        return "hardware" if hardware and self.conversion == "auto" else "software"

    @property
    def conversion_path(self) -> ConversionPath:
        """The conversion path of this kernel's contract (of the GPU's platform when unbound)."""
        return self.conversion_path_for(self.contract or default_contract(torch.device("cuda")))

    def supports(self, layout: MlaLayout) -> str | None:
        """Its limits: a token in a half warp's or a warp's registers, one chunk index across a half warp."""
        if layout.kv_lora_rank > _MAX_R or layout.rope_dim > _MAX_P:
            return (f"kv_lora_rank={layout.kv_lora_rank}, rope_dim={layout.rope_dim}: it holds a token in a half "
                    f"warp's or a warp's registers: it supports kv_lora_rank <= {_MAX_R} and rope_dim <= {_MAX_P}")
        plan = WritePlan.of(layout)
        lanes_per_tile = plan.tile // _CHUNK
        if plan.nope_mode is ValueMode.TILED and (
            plan.tile % _CHUNK or lanes_per_tile > _MAX_LANES_PER_TILE or lanes_per_tile & (lanes_per_tile - 1)
        ):
            return (f"layout {layout.name} has a scale tile of {plan.tile} values; it supports tiles of {_CHUNK} x a "
                    f"power of two up to {_CHUNK * _MAX_LANES_PER_TILE} values (one chunk index across a half warp)")
        return None

    def _prepare(self, plan: WritePlan, contract: WriteContract, kv_c: torch.Tensor, k_pe: torch.Tensor,
                 kv_cache: torch.Tensor, slot_mapping: torch.Tensor, scale: torch.Tensor,
                 flags: torch.Tensor) -> Launch:
        lib = _library(arch_of(kv_cache.device))
        block_size = kv_cache.shape[1]
        f = plan.traits
        # one parameter block per checked launch: a call only writes the five addresses into it
        params = _Params(
            num_tokens=slot_mapping.shape[0], kv_c_row=kv_c.stride(0), k_pe_row=k_pe.stride(0),
            block_size=block_size, block_bytes=kv_cache.stride(0) * kv_cache.element_size(),
            R=plan.kv_lora_rank, P=plan.rope_dim, nope_mode=int(plan.nope_mode), rope_mode=int(plan.rope_mode),
            nope_off=plan.nope_offset, rope_off=plan.rope_offset, data_bytes=plan.data_bytes,
            trail_bytes=plan.trailing_bytes, tile=plan.tile, n_tiles=plan.n_tiles, pow2=plan.pow2_scale,
            scale_ue8m0=plan.scale_ue8m0, scale_trailing=plan.scale_trailing, scale_off=plan.scale_offset,
            **f.cuda_params(),
            input_fp16=kv_c.dtype == torch.float16, aligned=_aligned(plan, kv_c, k_pe, kv_cache),
            hardware=self.conversion_path_for(contract, kv_cache.device) == "hardware",
            block_shift=block_shift_of(block_size), capacity=kv_cache.shape[0] * block_size, flags=flags.data_ptr(),
            divisor=plan.divisor, floor_=plan.floor,
        )
        index = kv_cache.device.index
        write = lib.rtp_ref_mla_cache_write
        reference = ctypes.byref(params)

        def launch(kv_c: torch.Tensor, k_pe: torch.Tensor, kv_cache: torch.Tensor, slots: torch.Tensor,
                   scale: torch.Tensor) -> None:
            params.kv_c, params.k_pe, params.cache = kv_c.data_ptr(), k_pe.data_ptr(), kv_cache.data_ptr()
            params.slots, params.scale = slots.data_ptr(), scale.data_ptr()
            with on_device(index):
                code = write(reference, raw_stream(index))
            if code != 0:
                raise RuntimeError(f"cuda kernel launch failed: {lib.rtp_ref_mla_error_string(code).decode()}")
            self.launch_count += 1

        return launch
