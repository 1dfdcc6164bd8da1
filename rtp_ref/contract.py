"""What a built-in kernel is bound to: the platform half of the write contract.

``WriteContract`` is the fp8 element format, the conversion mode, the layout flags (scale rule, floor,
divisor...) and the NaN policy (which NaN encodings a case accepts) of a platform table.
``kernel.bind(contract)`` returns the kernel configured for it, which is how a ROCm table is exercised on an NVIDIA
GPU or the CPU. rtp_ref.kernels.write_plan reduces a layout to what a
compiled kernel needs; rtp_ref.kernels.format_traits gives a format's integers to the kernels.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

import torch

from rtp_ref.errors import UnsupportedLayoutError
from rtp_ref.fp8.elements import ANY_NAN, NanPolicy
from rtp_ref.fp8.formats import ConversionMode, Fp8Format
from rtp_ref.kv.cache import KV_CACHE_DTYPE_ALIASES
from rtp_ref.kv.flags import LayoutFlags, resolve_flags, with_values
from rtp_ref.kv.layouts import MlaLayout, build_layout
from rtp_ref.kv.padding import NEGATIVE

if TYPE_CHECKING:
    from rtp_ref.platform import Platform

#: how a compiled kernel converts values to fp8: the GPU's instruction, or integer round-half-even
ConversionPath = Literal["hardware", "software"]
#: what a caller asks of a compiled kernel: the hardware path where it exists, or the software one always
ConversionChoice = Literal["auto", "software"]


@dataclass(frozen=True)
class WriteContract:
    """The platform's side of ``concat_and_cache_mla``: fp8 format, conversion mode, layout flags, NaN policy."""

    element_format: Fp8Format
    conversion_mode: ConversionMode
    flags: LayoutFlags
    #: name of the platform table the contract came from, for messages (``custom`` when built by hand)
    platform: str = "custom"
    #: which NaN encodings pass where the reference stores a NaN (the table's ``[fp8] nan_pins``)
    nan_policy: NanPolicy = ANY_NAN

    @classmethod
    def for_platform(cls, platform: Platform, overrides: Mapping[str, str] | None = None) -> WriteContract:
        """The contract of a platform table, with ``--layout-flag`` style ``overrides`` applied (its fp8 format is
        the cache's: flag ``cache_fp8_format``)."""
        flags = resolve_flags(platform, overrides)
        return cls(flags.cache_format(platform.element_format), platform.conversion_mode, flags, platform.name,
                   NanPolicy.pinning(platform.nan_pins))

    def under(self, flags: Mapping[str, Any]) -> WriteContract:
        """This contract with the typed layout ``flags`` of a writer convention in place of its own (a platform
        table's ``[[conventions]]``: flags that change only stored scales, so the element format stays)."""
        return replace(self, flags=with_values(self.flags, flags))

    def layout(self, kv_cache_dtype: str, kv_lora_rank: int, rope_dim: int) -> MlaLayout:
        """The reference layout for a kernel call (``fp8_e4m3`` is vLLM's spelling of ``fp8``).

        An R/P the layout does not support raises RtpRefError naming it.
        """
        return build_layout(
            KV_CACHE_DTYPE_ALIASES.get(kv_cache_dtype, kv_cache_dtype),
            kv_lora_rank=kv_lora_rank,
            rope_dim=rope_dim,
            flags=self.flags,
            element_format=self.element_format,
            conversion_mode=self.conversion_mode,
        )


def default_contract(device: torch.device) -> WriteContract:
    """The contract an unbound built-in kernel follows: the platform table of the tensors' device.

    CPU tensors follow the ``cpu`` table (the reference contract); GPU tensors the detected
    platform, and an unknown GPU raises RtpRefError asking for ``bind`` or ``--platform``.
    """
    from rtp_ref.platform import detect_platform, load_platform

    platform = load_platform("cpu") if device.type == "cpu" else detect_platform()
    return WriteContract.for_platform(platform)


class DeviceContracts:
    """``default_contract`` of each device, looked up once (an unbound kernel's call then costs no table lookup)."""

    def __init__(self) -> None:
        self._found: dict[torch.device, WriteContract] = {}

    def of(self, device: torch.device) -> WriteContract:
        """The contract an unbound built-in kernel follows on ``device`` (``default_contract``)."""
        found = self._found.get(device)
        if found is None:
            found = self._found[device] = default_contract(device)
        return found

    def padding_slot(self, bound: WriteContract | None, slot_mapping: object) -> str:
        """The engine padding convention (flag ``padding_slot``, rtp_ref.kv.padding) a built-in kernel follows for a
        call: its ``bound`` contract's, else the table of the slots' device; ``negative`` for slots that are no
        tensor (the kernel's checks then name them)."""
        if bound is not None:
            return bound.flags.padding_slot
        if isinstance(slot_mapping, torch.Tensor):
            return self.of(slot_mapping.device).flags.padding_slot
        return NEGATIVE


def check_call(kernel_name: str, layouts: Collection[str], devices: Collection[str], kv_cache_dtype: object,
               kv_cache: object) -> str:
    """Refuse a layout or device the kernel does not claim, before anything else; returns the layout name.

    Raises ``UnsupportedLayoutError`` naming the kernel, what was asked and what it supports.
    """
    name = KV_CACHE_DTYPE_ALIASES.get(str(kv_cache_dtype), str(kv_cache_dtype))
    if name not in layouts:
        raise UnsupportedLayoutError(
            f"kernel {kernel_name} does not support kv_cache_dtype {kv_cache_dtype!r}; it supports "
            f"{', '.join(layouts)}"
        )
    if isinstance(kv_cache, torch.Tensor) and kv_cache.device.type not in devices:
        raise UnsupportedLayoutError(
            f"kernel {kernel_name} does not run on device type {kv_cache.device.type!r} (layout {name}); "
            f"it runs on {', '.join(devices)}"
        )
    return name
