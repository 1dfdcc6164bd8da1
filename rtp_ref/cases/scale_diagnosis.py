"""Which scale rule an indexer write's stored scales follow, when they are not the contract's: the contract-
fingerprint search of the indexer op, like rtp_ref.cases.diagnosis for the MLA write.

A slice's scale is ``max(amax, 1e-4) / divisor``, raised to a power of two under ``ue8m0``. The alternatives
are the ways production kernels have computed it:

* the amax of the values (the contract), of the input's 16-bit patterns read as the other 16-bit float type, or
  of the raw 16-bit patterns taken as unsigned integers (a kernel that converts the bits, not the value);
* the divisor 448 (OCP e4m3's largest value: vLLM on CUDA), 240 (e4m3fnuz's: AMD AITER on gfx942) or 224
  (vLLM's ``kFp8ScaleDivisor`` on ROCm);
* the scale as computed or raised to the next power of two.

Every combination is tried against the kernel's scales of the written tokens, the contract's first; the first that
reproduces all of them bit for bit is named.
"""

from __future__ import annotations

import itertools

import torch

from rtp_ref.fp8.rules import Pow2Rule
from rtp_ref.fp8.ue8m0 import decode_ue8m0, encode_ue8m0
from rtp_ref.kv.indexer import AMAX_FLOOR

#: where the amax is taken, in the order tried (the contract's first)
AMAX_SOURCES = ("the values", "the 16-bit patterns read as the other 16-bit type", "the raw 16-bit patterns")
#: divisors in use, with who uses them
DIVISORS = {448.0: "OCP e4m3 max, vLLM CUDA", 240.0: "e4m3fnuz max, AITER gfx942", 224.0: "vLLM kFp8ScaleDivisor, ROCm"}
_OTHER16 = {torch.bfloat16: torch.float16, torch.float16: torch.bfloat16}


def _magnitudes(x: torch.Tensor, source: str) -> torch.Tensor:
    """|x| as the amax of ``source`` sees it (float32, NaN as 0: vLLM's fmaxf fold drops NaN)."""
    if source == AMAX_SOURCES[0]:
        m = x.float().abs()
    elif source == AMAX_SOURCES[1]:
        m = x.view(_OTHER16[x.dtype]).float().abs()
    else:
        m = (x.view(torch.int16).to(torch.int32) & 0xFFFF).float()
    return torch.where(torch.isnan(m), 0.0, m)


def scales_under(x: torch.Tensor, quant_block: int, source: str, divisor: float, pow2: bool) -> torch.Tensor:
    """The fp32 scale of each ``quant_block`` slice of ``x`` ``[T, D]`` (bf16 or fp16) under one alternative."""
    amax = _magnitudes(x, source).reshape(x.shape[0], -1, quant_block).amax(dim=-1)
    scale = torch.maximum(amax, torch.tensor(AMAX_FLOOR)) / torch.tensor(divisor, dtype=torch.float32)
    if pow2:
        scale = torch.where(torch.isinf(scale), scale, decode_ue8m0(encode_ue8m0(scale, Pow2Rule.CEIL)))
    return scale


def _words(source: str, divisor: float, pow2: bool) -> str:
    rule = "2^ceil(log2(max(amax, 1e-4) / {d}))" if pow2 else "max(amax, 1e-4) / {d}"
    who = DIVISORS.get(divisor, "this table's")
    return f"{rule.format(d=f'{divisor:g}')}, amax of {source} (divisor {divisor:g}: {who})"


def diagnose_scales(x: torch.Tensor, quant_block: int, stored: torch.Tensor, divisor: float, pow2: bool) -> str:
    """Which alternative the stored scales ``stored`` ``[T, n]`` (fp32, of the written tokens' rows ``x``) follow:
    one line naming it and what the contract is (``divisor``, ``pow2``), or that none matches."""
    contract = _words(AMAX_SOURCES[0], divisor, pow2)
    divisors = [divisor, *(d for d in DIVISORS if d != divisor)]
    tried = 0
    for source, d, p in itertools.product(AMAX_SOURCES, divisors, (pow2, not pow2)):
        tried += 1
        want = scales_under(x, quant_block, source, d, p)
        if torch.equal(want.view(torch.int32), stored.view(torch.int32)):
            if (source, d, p) == (AMAX_SOURCES[0], divisor, pow2):
                return "the scales are the contract's: the values are wrong"
            return f"the scales follow {_words(source, d, p)}; the contract is {contract}"
    return f"the scales match no known scale rule (tried {tried}); the contract is {contract}"
