"""Which cases a memcheck run calls: the conformance suite's own cases, each named ``layout/case-id``.

A case id is ``CaseSpec.case_id`` with ``-r<R>p<P>`` appended when the case runs at other than the
layout's default (R, P), as the suite's test ids spell it, so every case of a layout has its own name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rtp_ref.cases.case_matrix import case_specs
from rtp_ref.cases.cases import CaseSpec
from rtp_ref.errors import RtpRefError
from rtp_ref.kernels.protocol import KVCacheKernel
from rtp_ref.kv.layouts import default_dims
from rtp_ref.platform import Platform


@dataclass(frozen=True)
class PlannedCase:
    """One call to check: which kernel, layout and case."""

    kernel: str
    layout: str
    case: str

    @property
    def key(self) -> str:
        """The name the driver and the markers use: ``layout/case-id``."""
        return f"{self.layout}/{self.case}"


def case_name(spec: CaseSpec, dims: tuple[int, int]) -> str:
    """The case's id within its layout: ``random-t37-b16-bf16``, or ``...-r256p32`` at non-default dims."""
    suffix = "" if dims == default_dims(spec.layout) else f"-r{dims[0]}p{dims[1]}"
    return spec.case_id + suffix


def layout_cases(layout: str) -> dict[str, tuple[CaseSpec, tuple[int, int]]]:
    """Every conformance case of ``layout`` by case id, in the suite's order, with its (R, P)."""
    return {case_name(spec, dims): (spec, dims) for spec, dims in case_specs(layout)}


def split_key(key: str) -> tuple[str, str]:
    """``layout/case-id`` -> (layout, case id); anything else raises RtpRefError."""
    layout, sep, case = key.partition("/")
    if not sep or not layout or not case:
        raise RtpRefError(f"case key {key!r} is not layout/case-id, e.g. fp8/random-t37-b16-bf16")
    return layout, case


def select_layouts(kernel: KVCacheKernel, platform: Platform, wanted: Sequence[str]) -> list[str]:
    """The layouts to check for ``kernel``: ``wanted`` (default: every layout the platform supports),
    each of which the kernel must claim and the platform support; a bad choice raises RtpRefError."""
    claimed = [name for name in platform.supported_layouts if name in kernel.kv_cache_dtypes]
    for name in wanted:
        if name not in platform.supported_layouts:
            raise RtpRefError(f"--layout {name!r}: platform {platform.name} does not support it; valid: "
                              f"{', '.join(platform.supported_layouts)}")
        if name not in kernel.kv_cache_dtypes:
            raise RtpRefError(f"--layout {name!r}: kernel {kernel.name!r} does not claim it; valid: "
                              f"{', '.join(claimed) or 'none (it claims no layout the platform supports)'}")
    if not claimed:
        raise RtpRefError(f"--kernel {kernel.name!r} claims {', '.join(kernel.kv_cache_dtypes)}, and platform "
                          f"{platform.name} supports none of them; valid: {', '.join(platform.supported_layouts)}")
    return list(dict.fromkeys(wanted)) or claimed


def plan_cases(kernel: str, layouts: Sequence[str], case_filters: Sequence[str]) -> list[PlannedCase]:
    """Every case of each layout whose id contains one of ``case_filters`` (all cases when empty)."""
    return [PlannedCase(kernel, layout, case) for layout in layouts for case in layout_cases(layout)
            if not case_filters or any(text in case for text in case_filters)]
