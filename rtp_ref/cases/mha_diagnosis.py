"""Which conversion an MHA paged write's fp8 codes follow, when they are not the contract's: the contract-
fingerprint search of ``reshape_and_cache_flash``.

The contract stores ``fp8(x / s)``: the quotient in fp32, rounded to the nearest even fp8 value under the table's
conversion mode. The alternatives are the ways production kernels have computed it: a reciprocal multiply
``x * (1 / s)`` (one more rounding in fp32: AMD AITER applies scales so, ROCm/aiter e4048607
``aiter_opus_plus.h``), the scale applied as a multiplier
``x * s`` (the quantisation direction confused), rounding toward zero, and the other conversion mode (saturating
or not). Every one is tried on every written token's key and value codes, the contract's first; the first that
reproduces them all is named. For a variant whose bytes follow layout flags (``nvfp4``), each other value of each
flag that changes the layout is tried instead (``diagnose_flags``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from rtp_ref.contract import WriteContract
from rtp_ref.errors import RtpRefError
from rtp_ref.fp8 import decode, encode
from rtp_ref.fp8.formats import ConversionMode, Fp8Format
from rtp_ref.kv.flags import FLAG_SPECS, FlagKind

#: ``(x [T, H, D] float32, s [1, H or 1, 1] float32) -> the value to convert``, by name (the contract's first)
QUOTIENTS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "x / s": lambda x, s: x / s,
    "x * (1 / s), a reciprocal multiply": lambda x, s: x * (1.0 / s),
    "x * s, the scale applied as a multiplier": lambda x, s: x * s,
}


def codes_under(x: torch.Tensor, scale: torch.Tensor, quotient: str, fmt: Fp8Format, mode: ConversionMode,
                toward_zero: bool) -> torch.Tensor:
    """The fp8 codes of rows ``x`` ``[T, H, D]`` with ``scale`` ``[1]`` or ``[H]`` under one alternative."""
    v = QUOTIENTS[quotient](x.float(), scale.float().reshape(1, -1, 1))
    codes = encode(v, fmt, mode)
    if toward_zero:
        codes = codes.clone()
        codes[decode(codes, fmt).abs() > v.abs()] -= 1  # one step toward zero: sign and magnitude codes
    return codes


def diagnose_codes(rows: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]], fmt: Fp8Format,
                   mode: ConversionMode) -> str:
    """Which alternative the stored codes follow: ``rows`` holds, for the key and the value, the written tokens'
    inputs ``[T, H, D]``, their scale and the codes the kernel stored ``[T, H, D]``; one line naming the match (and
    the contract), or that none matches."""
    other = ConversionMode.NONSAT if mode is ConversionMode.SATFINITE else ConversionMode.SATFINITE
    tried = 0
    for quotient in QUOTIENTS:
        for toward_zero in (False, True):
            for m in (mode, other):
                tried += 1
                if all(torch.equal(codes_under(x, s, quotient, fmt, m, toward_zero), got) for x, s, got in rows):
                    if (quotient, toward_zero, m) == ("x / s", False, mode):
                        return "the fp8 codes are the contract's: the bytes are wrong elsewhere"
                    rounding = "toward zero" if toward_zero else "to nearest even"
                    return (f"the fp8 codes follow {quotient}, rounded {rounding}, {m.value}; the contract is x / s "
                            f"in fp32, rounded to nearest even, {mode.value}")
    return f"the fp8 codes match no known conversion (tried {tried}); the contract is x / s, {mode.value}"


def flag_alternatives(contract: WriteContract, layout_of: Callable[[WriteContract], object]) -> list[dict[str, Any]]:
    """Each other value of each choice flag of ``contract`` that changes the layout ``layout_of`` builds under it
    (typed, as ``WriteContract.under`` takes them), one flag at a time; flags that change nothing are left out, so
    the alternatives are the ones a case of that layout can tell apart."""
    base = layout_of(contract)
    out: list[dict[str, Any]] = []
    for name, spec in FLAG_SPECS.items():
        if spec.kind is not FlagKind.CHOICE:
            continue
        for choice in spec.choices:
            value = spec.convert(choice)
            if value == getattr(contract.flags, name):
                continue
            try:
                changed = layout_of(contract.under({name: value})) != base
            except RtpRefError:  # the alternative cannot hold this case (a swizzle a block size does not fit)
                continue
            if changed:
                out.append({name: value})
    return out


def flags_text(values: dict[str, Any]) -> str:
    """``name=value, ...`` of typed flag values (enums as their strings)."""
    return ", ".join(f"{name}={getattr(value, 'value', value)}" for name, value in values.items())


def diagnose_flags(contract: WriteContract, layout_of: Callable[[WriteContract], object],
                   storage_under: Callable[[WriteContract], torch.Tensor], after: torch.Tensor) -> str | None:
    """Which layout flags a kernel's write follows instead of the table's: ``storage_under`` writes the case's
    reference under a contract into a fresh canary-filled storage; each one-flag alternative (``flag_alternatives``)
    whose storage equals the kernel's ``after`` byte for byte is named, with the value this table requires. None
    where no alternative explains the bytes."""
    for values in flag_alternatives(contract, layout_of):
        if torch.equal(storage_under(contract.under(values)), after):
            required = {name: getattr(contract.flags, name) for name in values}
            return f"the kernel follows {flags_text(values)}; this table requires {flags_text(required)}"
    return None
