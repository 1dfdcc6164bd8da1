"""Mutants of the other cache families' writes: each is the reference with one fault a real kernel had.

They are protocol kernels of their op (``op``, claims, ``devices``, ``bind``), certified through
``RTP_REF_KERNELS`` with the MLA mutants (tests/mutants/kernels.py ``mutants``). ``MHA_INDEXER_EXPECTED`` says
the platform and the named check that must catch each one.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import torch

from rtp_ref.cases.launch_size import CPU_LAUNCH_TOKENS
from rtp_ref.contract import WriteContract, default_contract
from rtp_ref.fp8 import decode, encode
from rtp_ref.kernels.protocol import UnsupportedLayoutError
from rtp_ref.kv.indexer import IndexerLayout, indexer_layout_for, reference_indexer_k_quant_and_cache
from rtp_ref.kv.mha_indexer_records import INDEXER_FIELDS
from rtp_ref.kv.mha_paged import MhaPagedLayout, mha_head_size, mha_layout, reference_reshape_and_cache_flash
from rtp_ref.kv.place_fields import place_fields
from rtp_ref.ops import INDEXER_OP, MHA_OP


class _BoundMutant:
    """What every MHA and indexer mutant shares: CPU only, the software conversion, ``bind`` to a platform contract."""

    name: ClassVar[str]
    devices = ("cpu",)
    conversion_path = "software"

    def __init__(self, contract: WriteContract | None = None) -> None:
        self.contract = contract

    def bind(self, contract: WriteContract) -> _BoundMutant:
        return type(self)(contract)


class MhaMutant(_BoundMutant):
    """The MHA reference with one fault injected by a subclass (``write``)."""

    op = MHA_OP
    kv_cache_dtypes: ClassVar[tuple[str, ...]] = ("auto", "fp8")

    def __call__(self, key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                 slot_mapping: torch.Tensor, kv_cache_dtype: str, k_scale: torch.Tensor,
                 v_scale: torch.Tensor) -> None:
        if kv_cache_dtype not in self.kv_cache_dtypes:
            raise UnsupportedLayoutError(f"{self.name} does not support {kv_cache_dtype}")
        contract = self.contract or default_contract(key_cache.device)
        layout = mha_layout(contract, kv_cache_dtype, key_cache.shape[2],
                            mha_head_size(kv_cache_dtype, key_cache.shape[3]))
        self.write(layout, key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale)

    def write(self, layout: MhaPagedLayout, key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor,
              value_cache: torch.Tensor, slots: torch.Tensor, k_scale: torch.Tensor, v_scale: torch.Tensor) -> None:
        reference_reshape_and_cache_flash(layout, key, value, key_cache, value_cache, slots, k_scale, v_scale)


class KvSwapped(MhaMutant):
    """Writes the keys into the value cache and the values into the key cache."""

    name = "mutant-mha-kv-swapped"

    def write(self, layout, key, value, key_cache, value_cache, slots, k_scale, v_scale):  # type: ignore[no-untyped-def]
        reference_reshape_and_cache_flash(layout, key, value, value_cache, key_cache, slots, k_scale, v_scale)


class HeadsTransposed(MhaMutant):
    """Stores a token's [H, D] values in [D, H] order (head and dim exchanged)."""

    name = "mutant-mha-heads-transposed"

    def write(self, layout, key, value, key_cache, value_cache, slots, k_scale, v_scale):  # type: ignore[no-untyped-def]
        def flip(x: torch.Tensor) -> torch.Tensor:
            return x.transpose(1, 2).reshape(x.shape)

        reference_reshape_and_cache_flash(layout, flip(key), flip(value), key_cache, value_cache, slots,
                                          k_scale, v_scale)


class HndAsNhd(MhaMutant):
    """Ignores the caches' strides: writes an HND cache as if it were a contiguous NHD one."""

    name = "mutant-mha-hnd-as-nhd"

    def write(self, layout, key, value, key_cache, value_cache, slots, k_scale, v_scale):  # type: ignore[no-untyped-def]
        def as_nhd(cache: torch.Tensor) -> torch.Tensor:
            heads, size = cache.shape[2:]
            strides = (cache.stride(0), heads * size, size, 1)  # the blocks where they are, rows as if NHD
            return torch.as_strided(cache, cache.shape, strides, cache.storage_offset())

        reference_reshape_and_cache_flash(layout, key, value, as_nhd(key_cache), as_nhd(value_cache), slots,
                                          k_scale, v_scale)


class PerTensorForPerHead(MhaMutant):
    """Given per-head scales, uses the first head's scale for every head."""

    name = "mutant-mha-per-tensor-scale"
    kv_cache_dtypes = ("fp8",)

    def write(self, layout, key, value, key_cache, value_cache, slots, k_scale, v_scale):  # type: ignore[no-untyped-def]
        def first(scale: torch.Tensor) -> torch.Tensor:
            return scale[:1].expand(layout.num_kv_heads).contiguous()

        reference_reshape_and_cache_flash(layout, key, value, key_cache, value_cache, slots, first(k_scale),
                                          first(v_scale))


class TruncatingConversion(MhaMutant):
    """Rounds each fp8 quotient toward zero instead of to nearest even: every value within one fp8 step of the
    contract, so only the bytes tell it apart (a kernel whose division or conversion rounds differently)."""

    name = "mutant-mha-truncating-conversion"
    kv_cache_dtypes = ("fp8",)

    def write(self, layout, key, value, key_cache, value_cache, slots, k_scale, v_scale):  # type: ignore[no-untyped-def]
        fmt, mode = layout.element_format, layout.conversion_mode
        keep = slots >= 0
        blocks, rows = slots[keep] // key_cache.shape[1], slots[keep] % key_cache.shape[1]
        for x, scale, cache in ((key, k_scale, key_cache), (value, v_scale, value_cache)):
            v = x[: slots.shape[0]][keep].float() / scale.float().reshape(1, -1, 1)  # x may be longer (padded)
            codes = encode(v, fmt, mode)
            rounded_up = decode(codes, fmt).abs() > v.abs()  # False for NaN, and for a clamped +-max
            codes[rounded_up] -= 1  # one step toward zero: sign and magnitude codes
            cache[blocks, rows] = codes


class MhaBitCopiesMismatchedCache(MhaMutant):
    """Under ``auto`` copies the inputs' bits into whatever caches it is given, their dtype unchecked (it views them
    as the inputs' dtype, as a kernel taking ``data_ptr()`` does): bf16 rows in fp16 caches (vLLM #54338)."""

    name = "mutant-mha-bit-copies-mismatched-cache"
    kv_cache_dtypes = ("auto",)

    def write(self, layout, key, value, key_cache, value_cache, slots, k_scale, v_scale):  # type: ignore[no-untyped-def]
        if layout.element_format is None:
            key_cache, value_cache = key_cache.view(key.dtype), value_cache.view(key.dtype)
        reference_reshape_and_cache_flash(layout, key, value, key_cache, value_cache, slots, k_scale, v_scale)


class ZeroDimScaleReadPerHead(MhaMutant):
    """Takes a 0-D k_scale or v_scale for one scale per head (its shape misread, as sglang #14550's 0-D scale was):
    head h reads the float h places past the scale's address, which is not the scale."""

    name = "mutant-mha-0d-scale-per-head"
    kv_cache_dtypes = ("fp8",)

    def write(self, layout, key, value, key_cache, value_cache, slots, k_scale, v_scale):  # type: ignore[no-untyped-def]
        def per_head(scale: torch.Tensor) -> torch.Tensor:
            return torch.as_strided(scale, (layout.num_kv_heads,), (1,)) if scale.dim() == 0 else scale

        reference_reshape_and_cache_flash(layout, key, value, key_cache, value_cache, slots, per_head(k_scale),
                                          per_head(v_scale))


class DropsRowsPastGridLimit(MhaMutant):
    """Puts its tokens on a grid dimension of at most 65,535 blocks (CUDA's grid.y: ik_llama.cpp #2367) and writes
    only the tokens that fit; on the CPU the limit shrinks with the launch-size case (one token short of it)."""

    name = "mutant-mha-drops-rows-past-grid-limit"
    kv_cache_dtypes = ("auto",)

    def write(self, layout, key, value, key_cache, value_cache, slots, k_scale, v_scale):  # type: ignore[no-untyped-def]
        limit = 65_535 if key_cache.is_cuda else CPU_LAUNCH_TOKENS - 1
        if slots.numel() > limit:
            slots = slots.clone()
            slots[limit:] = -1
        reference_reshape_and_cache_flash(layout, key, value, key_cache, value_cache, slots, k_scale, v_scale)


class IndexerMutant(_BoundMutant):
    """The indexer reference with one fault injected by a subclass (``write``)."""

    op = INDEXER_OP
    scale_fmts: ClassVar[tuple[str, ...]] = ("none", "ue8m0")

    def __call__(self, k: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor, quant_block_size: int,
                 scale_fmt: str) -> None:
        if scale_fmt not in self.scale_fmts:
            raise UnsupportedLayoutError(f"{self.name} does not support {scale_fmt}")
        contract = self.contract or default_contract(kv_cache.device)
        layout = indexer_layout_for(contract, contract.flags, k.shape[1], quant_block_size)
        self.write(layout, k, kv_cache, slot_mapping, scale_fmt)

    def write(self, layout: IndexerLayout, k: torch.Tensor, kv_cache: torch.Tensor, slots: torch.Tensor,
              scale_fmt: str) -> None:
        reference_indexer_k_quant_and_cache(layout, k, kv_cache, slots, scale_fmt)


class ScalesInTokenData(IndexerMutant):
    """Writes each token's scales right after its own values (a per-token row) instead of at the block's end."""

    name = "mutant-indexer-scales-in-token"

    def write(self, layout, k, kv_cache, slots, scale_fmt):  # type: ignore[no-untyped-def]
        # the reference on a one-token-per-block view: its block-trailing scales land right after the values
        num_blocks, block_size, row = kv_cache.shape
        per_token = kv_cache.reshape(num_blocks * block_size, 1, row)
        reference_indexer_k_quant_and_cache(layout, k, per_token, slots, scale_fmt)


class WholeTokenQuantBlock(IndexerMutant):
    """Computes one scale per token (quant block = head_dim) and stores it in every quant block's slot."""

    name = "mutant-indexer-whole-token-quant-block"

    def write(self, layout, k, kv_cache, slots, scale_fmt):  # type: ignore[no-untyped-def]
        # the reference with one quant block per token, into a cache of that layout; then its values and its
        # one scale (repeated for every quant block) copied to the real layout's places
        whole = dataclasses.replace(layout, quant_block_size=layout.head_dim, fields=place_fields(
            INDEXER_FIELDS, {"D": layout.head_dim, "D/Q": 1}, layout.element_format))
        num_blocks, block_size, _ = kv_cache.shape
        d, n = layout.head_dim, layout.scales_per_token
        tmp = torch.zeros(num_blocks, block_size, whole.bytes_per_token, dtype=torch.uint8)
        reference_indexer_k_quant_and_cache(whole, k, tmp, slots, scale_fmt)
        src, dst = tmp.reshape(num_blocks, -1), kv_cache.reshape(num_blocks, -1)
        for slot in slots[slots >= 0].tolist():
            block, row = divmod(slot, block_size)
            dst[block, row * d:(row + 1) * d] = src[block, row * d:(row + 1) * d]
            scale = src[block, block_size * d + row * 4: block_size * d + row * 4 + 4]
            start = block_size * d + row * 4 * n
            dst[block, start:start + 4 * n] = scale.repeat(n)


class SkipsSecondScale(IndexerMutant):
    """Writes every token's values and scales but its second quant block's scale (an off-by-one in the scale
    loop): readers take that block's scale from whatever the cache held."""

    name = "mutant-indexer-skips-second-scale"

    def write(self, layout, k, kv_cache, slots, scale_fmt):  # type: ignore[no-untyped-def]
        before = kv_cache.clone()
        reference_indexer_k_quant_and_cache(layout, k, kv_cache, slots, scale_fmt)
        if layout.scales_per_token < 2:
            return
        block_size, d, n = kv_cache.shape[1], layout.head_dim, layout.scales_per_token
        blocks, old = kv_cache.reshape(kv_cache.shape[0], -1), before.reshape(kv_cache.shape[0], -1)
        for slot in slots[slots >= 0].tolist():
            block, row = divmod(slot, block_size)
            second = block_size * d + row * 4 * n + 4
            blocks[block, second:second + 4] = old[block, second:second + 4]


#: mutant class -> (platform it is certified on, the check that must catch it)
MHA_INDEXER_EXPECTED: dict[type[MhaMutant] | type[IndexerMutant], tuple[str, str]] = {
    KvSwapped: ("cpu", "layout.kv_order"),
    HeadsTransposed: ("cpu", "layout.head_order"),
    HndAsNhd: ("cpu", "layout.cache_order"),
    PerTensorForPerHead: ("cpu", "numerics.per_head_scale"),
    ScalesInTokenData: ("cpu", "layout.scale_placement"),
    WholeTokenQuantBlock: ("cpu", "numerics.quant_block"),
    TruncatingConversion: ("cpu", "bit_exact.bytes"),
    SkipsSecondScale: ("cpu", "numerics.scale_positive"),
    MhaBitCopiesMismatchedCache: ("cpu", "support.mismatched_cache_raises"),
    ZeroDimScaleReadPerHead: ("cpu", "numerics.error_bound"),
    DropsRowsPastGridLimit: ("cpu", "layout.slot_mapping"),
}
