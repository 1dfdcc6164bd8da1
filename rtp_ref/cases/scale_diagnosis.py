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
reproduces all of them bit for bit is named. ``mxfp4``'s ue8m0 scales have rules of their own (``diagnose_mxfp4``).
"""

from __future__ import annotations

import itertools
import math

import torch

from rtp_ref.fp4.quantize import MXFP4_OCP
from rtp_ref.fp4.scales import AmaxDivision, ScaleElement, ScaleRounding, ScaleTraits, scale_codes
from rtp_ref.fp8.rules import Pow2Rule
from rtp_ref.fp8.ue8m0 import decode_ue8m0, encode_ue8m0
from rtp_ref.kv.indexer import AMAX_FLOOR, MXFP4_INDEXER

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


def _mxfp4_rules() -> list[tuple[str, ScaleTraits]]:
    """``mxfp4``'s scale rules, each as (what it is, its traits): the contract's first (rtp_ref.kv.indexer), then OCP
    MX v1.0's ``2**(floor(log2(amax)) - 2)`` and vLLM's older MXFP4 writer's ``max(amax, 1e-4) / 6``
    (vllm-project/vllm@43860973851d, ``fused_compress_quant_cache.py``)."""
    old_floor = float(torch.tensor(AMAX_FLOOR, dtype=torch.float32) / torch.tensor(6.0))
    older = ScaleTraits(ScaleElement.UE8M0, 32, ScaleRounding.CEIL_LOG2_EXACT, AmaxDivision.DIV_SIX,
                        (old_floor, math.inf))
    return [("2^ceil(log2(max(amax, 6 * 2^-126) * (1/6))), exactly", MXFP4_INDEXER.scale),
            ("OCP MX v1.0's 2^(floor(log2(amax)) - 2)", MXFP4_OCP.scale),
            ("vLLM's older MXFP4 writer's 2^ceil(log2(max(amax, 1e-4) / 6)) (vllm-project/vllm@43860973851d)", older)]


def _mxfp4_scale_bytes(x: torch.Tensor, traits: ScaleTraits, nan_in_amax: bool) -> torch.Tensor:
    """The ue8m0 byte of each 32-value block of ``x`` ``[T, D]`` under ``traits``; a NaN left out of the amax, or
    (``nan_in_amax``) taken into it, as DeepGEMM's test quantizer's ``amax`` does; an amax of inf or NaN gives 254
    (the exponent clamp, ``ceil_to_ue8m0``'s for both)."""
    m = x.float().abs().reshape(x.shape[0], x.shape[1] // 32, 32)
    amax = m.amax(dim=-1) if nan_in_amax else torch.where(torch.isnan(m), 0.0, m).amax(dim=-1)
    finite = torch.isfinite(amax)
    codes = scale_codes(torch.where(finite, amax, torch.zeros_like(amax)), traits)
    return torch.where(finite, codes, torch.full_like(codes, 254))


def _older_codes(x: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """vLLM's older writer's packed E2M1 bytes of ``x`` under the ue8m0 ``scales``: ``torch.bucketize`` on the
    midpoints with ties toward zero, and a value that rounds to zero stored as 0x0, whatever its sign
    (vllm-project/vllm@c82253792178, ``_e2m1_nibble``)."""
    q = x.float().reshape(x.shape[0], x.shape[1] // 32, 32) / decode_ue8m0(scales).unsqueeze(-1)
    bounds = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])
    code = torch.bucketize(q.abs().clamp(max=6.0), bounds, right=False)
    code = code | (((q < 0) & (code != 0)).to(torch.int64) << 3)
    code = code.reshape(x.shape)
    return (code[:, 0::2] | (code[:, 1::2] << 4)).to(torch.uint8)


def diagnose_mxfp4(x: torch.Tensor, stored_scales: torch.Tensor, stored_codes: torch.Tensor) -> str:
    """Which scale rule the ``mxfp4`` scale bytes ``stored_scales`` ``[T, D / 32]`` of the written tokens' rows ``x``
    follow (``_mxfp4_rules``, each with a NaN left out of the amax and taken into it), or, where they are the
    contract's, whether the code bytes ``stored_codes`` follow vLLM's older writer's rounding: one line."""
    rules = _mxfp4_rules()
    contract = rules[0][0]
    tried = 0
    for (words, traits), nan_in_amax in itertools.product(rules, (False, True)):
        tried += 1
        if not torch.equal(_mxfp4_scale_bytes(x, traits, nan_in_amax), stored_scales):
            continue
        nan = " with a NaN taken into the amax (DeepGEMM's test quantizer)" if nan_in_amax else ""
        if (words, nan_in_amax) != (contract, False):
            return f"the scales follow {words}{nan}; the contract is {contract}"
        if torch.equal(_older_codes(x, stored_scales), stored_codes):
            return ("the scales are the contract's; the codes follow vLLM's older MXFP4 writer (ties toward zero, a "
                    "value rounding to zero stored as 0x0: vllm-project/vllm@c82253792178); the contract rounds to "
                    "nearest even and keeps the sign (0x8)")
        return "the scales are the contract's: the codes are wrong"
    return f"the scales match no known mxfp4 scale rule (tried {tried}); the contract is {contract}"
