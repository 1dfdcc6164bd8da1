"""Golden vectors of the other cache families: one ``reshape_and_cache_flash`` or ``indexer_k_quant_and_cache``
call (inputs, the caches before it and the expected caches after it) as a safetensors file.

As for the MLA write (rtp_ref.kv.golden, whose file writer and checks these share): the same arguments give
the same bytes, every ``SKIP_EVERY``-th token is on slot -1, the caches start as random bytes, and
docs/layouts.md lists the keys. An HND cache is stored as its ``[num_blocks, heads, block_size, head_size]``
storage (``cache_order`` in the metadata): the kernel's view is that tensor permuted to ``(0, 2, 1, 3)``.
A file states the contract it was written under (``GoldenContract``: ``flags``, ``conversion_mode``, the cache's
``fp8_format``; an MHA file also the platform's own, ``platform_fp8_format``, which is what ``fp8`` stores), so
that ``rtp-ref golden-check`` (rtp_ref.kv.golden_read) binds a kernel to it without the platform table.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import torch

from rtp_ref import __version__
from rtp_ref.errors import RtpRefError
from rtp_ref.kv.flags import resolve_flags
from rtp_ref.kv.golden import (
    GOLDEN_FORMAT,
    GOLDEN_MAX_BYTES,
    SEED_RANGE,
    SKIP_EVERY,
    GoldenCase,
    GoldenContract,
    input_dtype_of,
)
from rtp_ref.kv.indexer import indexer_layout_for, quant_block_for, reference_indexer_k_quant_and_cache
from rtp_ref.kv.mha_paged import CACHE_ORDERS, mha_layout, reference_reshape_and_cache_flash
from rtp_ref.kv.op_names import INDEXER_OP, MHA_OP
from rtp_ref.kv.platform_table import PlatformTable


@dataclass(frozen=True)
class GoldenShape:
    """The call's size: ``tokens`` into a ``num_blocks x block_size`` cache, inputs of ``input_dtype``."""

    tokens: int = 32
    block_size: int = 16
    num_blocks: int = 4
    seed: int = 0
    input_dtype: str = "bf16"

    def check(self, row_bytes: int) -> torch.dtype:
        """Refuse sizes out of range (RtpRefError naming the argument); returns the input dtype."""
        for name, value in (("tokens", self.tokens), ("block_size", self.block_size),
                            ("num_blocks", self.num_blocks)):
            if value < 1:
                raise RtpRefError(f"{name}={value} is not valid; valid: >= 1")
        capacity = self.num_blocks * self.block_size
        if self.tokens > capacity:
            raise RtpRefError(f"tokens={self.tokens} do not fit the cache; valid: <= num_blocks x block_size = "
                              f"{capacity}")
        if self.seed not in SEED_RANGE:
            raise RtpRefError(f"seed={self.seed} is not valid; valid: 0..{SEED_RANGE.stop - 1}")
        if 3 * capacity * row_bytes > GOLDEN_MAX_BYTES:
            raise RtpRefError(f"the golden file would hold over {GOLDEN_MAX_BYTES} bytes; valid: fewer --tokens, "
                              f"--num-blocks or --block-size")
        return input_dtype_of(self.input_dtype)

    def slots(self, generator: torch.Generator) -> torch.Tensor:
        """Distinct random slots, every ``SKIP_EVERY``-th one -1."""
        slots = torch.randperm(self.num_blocks * self.block_size, generator=generator)[: self.tokens]
        slots[SKIP_EVERY - 1:: SKIP_EVERY] = -1
        return slots

    def metadata(self, platform: PlatformTable, contract: GoldenContract, op: str, layout: str) -> dict[str, str]:
        """The metadata every family's golden file has (``flags``: the contract's resolved layout flags)."""
        return {"golden_format": GOLDEN_FORMAT, "rtp_ref_version": __version__, "op": op, "layout": layout,
                "platform": platform.name, "platform_sha256": platform.sha256, "input_dtype": self.input_dtype,
                "block_size": str(self.block_size), "num_blocks": str(self.num_blocks),
                "num_tokens": str(self.tokens), "seed": str(self.seed),
                "flags": json.dumps(contract.flags.as_dict()), "conversion_mode": contract.conversion_mode.value}


def platform_contract(platform: PlatformTable) -> GoldenContract:
    """The contract a kernel bound to ``platform``'s table follows (its default layout flags): the cache's fp8
    format is the platform's own unless flag ``cache_fp8_format`` names another."""
    flags = resolve_flags(platform)
    return GoldenContract(flags.cache_format(platform.element_format), platform.conversion_mode, flags)


def _values(generator: torch.Generator, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """Normal values with a random power-of-two magnitude per token (2^-6 .. 2^6)."""
    spread = torch.exp2(torch.randint(-6, 7, (shape[0],) + (1,) * (len(shape) - 1), generator=generator).float())
    return (torch.randn(*shape, generator=generator) * spread).to(dtype)


def make_mha_golden(platform: PlatformTable, kv_cache_dtype: str, num_kv_heads: int, head_size: int,
                    order: str = "NHD", per_head_scales: bool = False,
                    shape: GoldenShape | None = None) -> GoldenCase:
    """The golden vector of one ``reshape_and_cache_flash`` call on ``platform`` (keys: docs/layouts.md)."""
    shape = shape or GoldenShape()
    if order not in CACHE_ORDERS:
        raise RtpRefError(f"--cache-order {order!r}; valid: {', '.join(CACHE_ORDERS)}")
    contract = platform_contract(platform)
    layout = mha_layout(contract, kv_cache_dtype, num_kv_heads, head_size)
    dtype = shape.check(2 * layout.k_bytes_per_token())
    g = torch.Generator().manual_seed(shape.seed)
    key = _values(g, (shape.tokens, num_kv_heads, head_size), dtype)
    value = _values(g, (shape.tokens, num_kv_heads, head_size), dtype)
    slots = shape.slots(g)
    fmt_max = layout.calibration_max

    def calibrated(x: torch.Tensor) -> torch.Tensor:  # amax / fp8 max, per head or per tensor
        amax = x.float().abs().amax(dim=(0, 2)) if per_head_scales else x.float().abs().amax().reshape(1)
        return (amax / fmt_max).to(torch.float32)

    tensors = {"key": key, "value": value, "slot_mapping": slots, "k_scale": calibrated(key),
               "v_scale": calibrated(value)}
    cache_dtype = layout.cache_dtype(dtype)
    for name in ("key_cache", "value_cache"):
        width = layout.row_width
        storage = (shape.num_blocks, num_kv_heads, shape.block_size, width) if order == "HND" \
            else (shape.num_blocks, shape.block_size, num_kv_heads, width)
        itemsize = torch.empty((), dtype=cache_dtype).element_size()
        raw = torch.randint(0, 256, (*storage[:-1], width * itemsize), dtype=torch.uint8, generator=g)
        tensors[f"{name}_before"] = raw.view(cache_dtype)
        tensors[f"{name}_expected"] = tensors[f"{name}_before"].clone()
    views = [tensors[f"{n}_expected"] if order == "NHD" else tensors[f"{n}_expected"].permute(0, 2, 1, 3)
             for n in ("key_cache", "value_cache")]
    reference_reshape_and_cache_flash(layout, key, value, views[0], views[1], slots, tensors["k_scale"],
                                      tensors["v_scale"])
    meta = shape.metadata(platform, contract, MHA_OP, kv_cache_dtype)
    meta.update({"num_kv_heads": str(num_kv_heads), "head_size": str(head_size), "cache_order": order,
                 "fp8_format": layout.element_format.name if layout.element_format else "none",
                 "platform_fp8_format": platform.element_format.name,
                 "scales": "per_head" if per_head_scales else "per_tensor",
                 "k_bytes_per_token": str(layout.k_bytes_per_token())})
    return GoldenCase(tensors, meta)


def make_indexer_golden(platform: PlatformTable, scale_fmt: str, head_dim: int, quant_block_size: int | None,
                        shape: GoldenShape | None = None) -> GoldenCase:
    """The golden vector of one ``indexer_k_quant_and_cache`` call on ``platform`` (keys: docs/layouts.md; the
    quant block the variant's default when None: 128, ``mxfp4``'s 32). Token 0 is all zero (the amax floor)."""
    shape = shape or GoldenShape()
    contract = platform_contract(platform)
    quant_block_size = quant_block_for(scale_fmt, quant_block_size)
    layout = indexer_layout_for(contract, contract.flags, head_dim, quant_block_size, scale_fmt=scale_fmt)
    dtype = shape.check(layout.bytes_per_token)
    g = torch.Generator().manual_seed(shape.seed)
    k = _values(g, (shape.tokens, head_dim), dtype)
    k[0] = 0
    slots = shape.slots(g)
    before = torch.randint(0, 256, (shape.num_blocks, shape.block_size, layout.bytes_per_token), dtype=torch.uint8,
                           generator=g)
    expected = before.clone()
    reference_indexer_k_quant_and_cache(layout, k, expected, slots, scale_fmt)
    meta = shape.metadata(platform, contract, INDEXER_OP, scale_fmt)
    meta.update({"head_dim": str(head_dim), "quant_block_size": str(quant_block_size),
                 "fp8_format": layout.element_format.name, "scale_divisor": json.dumps(layout.scale_divisor),
                 "bytes_per_token": str(layout.bytes_per_token)})
    return GoldenCase({"k": k, "slot_mapping": slots, "kv_cache_before": before, "kv_cache_expected": expected}, meta)
