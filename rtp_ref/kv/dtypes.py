"""KV-cache element types of rtp-llm's KV-cache specs, with their sizes as the reference states them.

rtp-llm's ``getTypeSize`` (``models_py/bindings/core/Types.cc`` 95-123) returns 2 for fp16/bf16 and 1
for FP8_E8M0, but 1 for FP8_E4M3 only when the build defines ``ENABLE_FP8`` (the cuda12 config) or
targets ROCm; every other build (CPU, ARM) gets 0, so an fp8 spec's byte sizes collapse to 0 there.
The reference is the same on every machine: FP8_E4M3 is one byte.
"""

from __future__ import annotations

from enum import Enum

from rtp_ref.errors import RtpRefError


class KvDtype(str, Enum):
    """A KV-cache dtype of rtp-llm's specs (rtp-llm ``DataType`` names, lower case)."""

    FP32 = "fp32"
    FP16 = "fp16"
    BF16 = "bf16"
    INT8 = "int8"
    FP8_E4M3 = "fp8_e4m3"
    FP8_E8M0 = "fp8_e8m0"

    @property
    def size(self) -> int:
        """Bytes per element (``getTypeSize``, with FP8_E4M3 = 1 on every build)."""
        return _SIZES[self]

    @property
    def is_mla_fp8(self) -> bool:
        """True for the dtypes the MLA spec treats as fp8: E4M3 *and* E8M0 (``MLAKVCacheSpec.h`` 40)."""
        return self in (KvDtype.FP8_E4M3, KvDtype.FP8_E8M0)

    @property
    def has_mha_scale(self) -> bool:
        """True for the dtypes the MHA spec gives per-head fp32 scales: INT8 and FP8_E4M3, not E8M0."""
        return self in (KvDtype.INT8, KvDtype.FP8_E4M3)


_SIZES = {
    KvDtype.FP32: 4,
    KvDtype.FP16: 2,
    KvDtype.BF16: 2,
    KvDtype.INT8: 1,
    KvDtype.FP8_E4M3: 1,
    KvDtype.FP8_E8M0: 1,
}


def kv_dtype(name: str) -> KvDtype:
    """Look up a dtype by name; an unknown name raises RtpRefError listing the valid ones."""
    try:
        return KvDtype(name)
    except ValueError:
        valid = ", ".join(d.value for d in KvDtype)
        raise RtpRefError(f"unknown KV-cache dtype {name!r}; valid dtypes: {valid}") from None
