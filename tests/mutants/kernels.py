"""Deliberately broken kernels (mutants): each breaks one clause of the contract.

They are ordinary kernels under the rtp-ref protocol (name, kv_cache_dtypes, devices, bind,
__call__), loaded into a certify run through ``RTP_REF_KERNELS=tests.mutants.kernels:mutants``.
``EXPECTED`` says, for each mutant, the platform it is certified on and the named check that must
catch it; tests/mutants/test_mutation_score.py asserts every one is caught by exactly that check.
Each is the reference writer with one fault injected, so the fault is the only difference.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import torch

from rtp_ref.contract import WriteContract
from rtp_ref.fp8 import decode, encode, encode_ue8m0, quantize_tiles
from rtp_ref.fp8.formats import E4M3FN, ConversionMode
from rtp_ref.fp8.scales import ScaleRule
from rtp_ref.kernels.protocol import UnsupportedLayoutError
from rtp_ref.kv.cache import scatter_entries
from rtp_ref.kv.entries import encode_entries, tile_scales
from rtp_ref.kv.fields import Source, TileScale
from rtp_ref.kv.layouts import MlaLayout

ALL = ("auto", "fp8", "fp8_ds_mla", "fp8_model1_mla", "fp8_rocm_compact")


class Mutant:
    """The reference writer, validation skipped, with one fault injected by a subclass. It refuses, as the contract
    says, a cache whose dtype is not the one ``auto`` stores (``check_cache_dtype``)."""

    name: ClassVar[str]
    kv_cache_dtypes: ClassVar[tuple[str, ...]] = ALL
    devices = ("cpu", "cuda")
    conversion_path = "software"

    def __init__(self, contract: WriteContract | None = None) -> None:
        self.contract = contract

    def bind(self, contract: WriteContract) -> Mutant:
        return type(self)(self.mutate_contract(contract))

    def mutate_contract(self, contract: WriteContract) -> WriteContract:
        return contract

    def __call__(self, kv_c: torch.Tensor, k_pe: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
                 kv_cache_dtype: str, scale: torch.Tensor) -> None:
        if kv_cache_dtype not in self.kv_cache_dtypes or self.contract is None:
            raise UnsupportedLayoutError(f"{self.name} does not support {kv_cache_dtype}")
        layout = self.contract.layout(kv_cache_dtype, kv_c.shape[1], k_pe.shape[1])
        self.check_cache_dtype(layout, kv_c, kv_cache)
        capacity = kv_cache.shape[0] * kv_cache.shape[1]
        if slot_mapping.numel() and int(slot_mapping.max()) >= capacity:
            raise IndexError(f"{self.name}: slot {int(slot_mapping.max())} is outside the cache")
        tokens = slot_mapping.shape[0]
        self.write(layout, kv_c[:tokens], k_pe[:tokens], kv_cache, slot_mapping, scale)

    def check_cache_dtype(self, layout: MlaLayout, kv_c: torch.Tensor, kv_cache: torch.Tensor) -> None:
        if kv_cache.dtype != layout.cache_dtype(kv_c.dtype):
            raise ValueError(f"{self.name}: kv_cache is {kv_cache.dtype}; {layout.name} needs "
                             f"{layout.cache_dtype(kv_c.dtype)}")

    def write(self, layout: MlaLayout, kv_c: torch.Tensor, k_pe: torch.Tensor, kv_cache: torch.Tensor,
              slots: torch.Tensor, scale: torch.Tensor) -> None:
        keep = slots >= 0
        entries = self.entries(layout, kv_c[keep], k_pe[keep], scale)
        scatter_entries(layout, entries, kv_cache, slots[keep])

    def entries(self, layout: MlaLayout, kv_c: torch.Tensor, k_pe: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        return encode_entries(layout, kv_c, k_pe, scale)


def _with_flags(contract: WriteContract, **changes: object) -> WriteContract:
    return dataclasses.replace(contract, flags=dataclasses.replace(contract.flags, **changes))


class WrongSlot(Mutant):
    """Writes the first token one slot further on (into a slot nobody asked for)."""

    name = "mutant-wrong-slot"
    # a 16-bit entry and a tile-scaled one: the fault is in the addressing, the same for every layout
    kv_cache_dtypes = ("auto", "fp8_ds_mla")

    def write(self, layout, kv_c, k_pe, kv_cache, slots, scale):  # type: ignore[no-untyped-def]
        slots = slots.clone()
        capacity = kv_cache.shape[0] * kv_cache.shape[1]
        valid = torch.nonzero(slots >= 0).flatten()
        if valid.numel():
            taken = set(slots.tolist())
            free = next(s for s in range(capacity - 1, -1, -1) if s not in taken)
            slots[valid[0]] = free
        super().write(layout, kv_c, k_pe, kv_cache, slots, scale)


class WritesPaddingSlots(Mutant):
    """Treats a negative slot as counting from the end of the cache, like Python indexing."""

    name = "mutant-writes-padding-slots"
    kv_cache_dtypes = ("auto", "fp8_ds_mla")

    def write(self, layout, kv_c, k_pe, kv_cache, slots, scale):  # type: ignore[no-untyped-def]
        capacity = kv_cache.shape[0] * kv_cache.shape[1]
        entries = self.entries(layout, kv_c, k_pe, scale)
        scatter_entries(layout, entries, kv_cache, torch.where(slots < 0, slots + capacity, slots))


class BytePastEntry(Mutant):
    """Writes one byte past the end of each token's entry."""

    name = "mutant-byte-past-entry"
    kv_cache_dtypes = ("fp8", "fp8_ds_mla")

    def write(self, layout, kv_c, k_pe, kv_cache, slots, scale):  # type: ignore[no-untyped-def]
        super().write(layout, kv_c, k_pe, kv_cache, slots, scale)
        raw = kv_cache.view(torch.uint8)
        block_stride = raw.stride(0)
        flat = torch.as_strided(raw, (raw.shape[0] * block_stride,), (1,))
        block_size, entry = raw.shape[1], raw.shape[2]
        for slot in slots[slots >= 0].tolist():
            end = (slot // block_size) * block_stride + (slot % block_size + 1) * entry
            if end < flat.numel():
                flat[end] ^= 0x01


class QuantizedRope(Mutant):
    """Stores the rope through an fp8 round trip instead of copying its 16-bit bits."""

    name = "mutant-quantized-rope"
    kv_cache_dtypes = ("fp8_ds_mla", "fp8_model1_mla")

    def entries(self, layout, kv_c, k_pe, scale):  # type: ignore[no-untyped-def]
        rounded = decode(encode(k_pe, layout.element_format, "satfinite"), layout.element_format).to(k_pe.dtype)
        return super().entries(layout, kv_c, rounded, scale)


def _requantize(layout: MlaLayout, entries: torch.Tensor, kv_c: torch.Tensor, per_value_tile: int,
                scale_of_tile: torch.Tensor) -> torch.Tensor:
    """Entries whose nope codes and stored scales use ``scale_of_tile`` (one per stored scale slot)."""
    nope = layout.value_field(Source.KV_C)
    scale_field = layout.field(nope.scale_field or "")
    per_value = scale_of_tile.repeat_interleave(per_value_tile, dim=1)[:, : nope.count]
    codes = encode(kv_c.float() / per_value, layout.element_format, layout.conversion_mode)
    out = entries.clone()
    out[:, layout.entry_offset(nope): layout.entry_offset(nope) + nope.size] = codes
    stored = scale_of_tile.contiguous().view(torch.uint8) if scale_field.element == "fp32" \
        else encode_ue8m0(scale_of_tile, "ceil")
    start = layout.entry_offset(scale_field)
    out[:, start:start + scale_field.size] = stored
    return out


class Tile64InDsMla(Mutant):
    """fp8_ds_mla with 64-value tiles: scales of the first four 64-tiles stored, the rest lost."""

    name = "mutant-tile64-in-ds-mla"
    kv_cache_dtypes = ("fp8_ds_mla",)

    def entries(self, layout, kv_c, k_pe, scale):  # type: ignore[no-untyped-def]
        entries = super().entries(layout, kv_c, k_pe, scale)
        spec = layout.field("nope_scale").tile_scale
        scales64 = tile_scales(kv_c, dataclasses.replace(spec, tile=64))
        # the writer quantizes with all eight 64-tile scales but has room for four
        codes = quantize_tiles(kv_c.float(), scales64, 64, layout.element_format, layout.conversion_mode)
        out = _requantize(layout, entries, kv_c, 128, scales64[:, :4])
        nope = layout.value_field(Source.KV_C)
        out[:, nope.offset:nope.offset + nope.size] = codes
        return out


class Tile128InModel1(Mutant):
    """fp8_model1_mla with 128-value tiles: each pair of 64-tiles shares the 128-tile's scale."""

    name = "mutant-tile128-in-model1"
    kv_cache_dtypes = ("fp8_model1_mla",)

    def entries(self, layout, kv_c, k_pe, scale):  # type: ignore[no-untyped-def]
        entries = super().entries(layout, kv_c, k_pe, scale)
        spec: TileScale = layout.field("nope_scale").tile_scale
        scales128 = tile_scales(kv_c, dataclasses.replace(spec, tile=128))
        return _requantize(layout, entries, kv_c, 64, scales128.repeat_interleave(2, dim=1)[:, :7])


class NonPow2DsMlaScale(Mutant):
    """Stores amax/448 scales where the platform's readers need powers of two."""

    name = "mutant-non-pow2-ds-mla-scale"
    kv_cache_dtypes = ("fp8_ds_mla",)

    def mutate_contract(self, contract):  # type: ignore[no-untyped-def]
        return _with_flags(contract, ds_mla_scale_rule=ScaleRule.AMAX_DIV)


class NonSaturatingCast(Mutant):
    """Converts with the non-saturating cast: overflow becomes NaN."""

    name = "mutant-non-saturating-cast"
    kv_cache_dtypes = ("fp8", "fp8_rocm_compact")

    def mutate_contract(self, contract):  # type: ignore[no-untyped-def]
        return dataclasses.replace(contract, conversion_mode=ConversionMode.NONSAT)


class Divisor224(Mutant):
    """Divides tile amax by 224 where the platform says 448."""

    name = "mutant-divisor-224"
    kv_cache_dtypes = ("fp8_ds_mla", "fp8_model1_mla")

    def mutate_contract(self, contract):  # type: ignore[no-untyped-def]
        return _with_flags(contract, fp8_max_divisor=224.0)


class Divisor448(Mutant):
    """Divides tile amax by 448 where the platform (gfx942) says 224."""

    name = "mutant-divisor-448"
    kv_cache_dtypes = ("fp8_ds_mla",)

    def mutate_contract(self, contract):  # type: ignore[no-untyped-def]
        return _with_flags(contract, fp8_max_divisor=448.0)


class OcpOnFnuz(Mutant):
    """Writes OCP e4m3fn bytes where the platform (gfx942) reads e4m3fnuz."""

    name = "mutant-e4m3fn-on-fnuz"
    kv_cache_dtypes = ("fp8", "fp8_rocm_compact")

    def mutate_contract(self, contract):  # type: ignore[no-untyped-def]
        return dataclasses.replace(contract, element_format=E4M3FN)


class NoScaleFloor(Mutant):
    """Drops the floor clamp: an all-zero tile gets scale 0 and NaN codes."""

    name = "mutant-no-scale-floor"
    kv_cache_dtypes = ("fp8_ds_mla",)

    def entries(self, layout, kv_c, k_pe, scale):  # type: ignore[no-untyped-def]
        entries = super().entries(layout, kv_c, k_pe, scale)
        spec = layout.field("nope_scale").tile_scale
        amax = kv_c.float().reshape(kv_c.shape[0], -1, spec.tile).abs().amax(-1)
        scales = amax / spec.divisor
        if spec.rule is ScaleRule.POW2_CEIL:
            scales = torch.where(scales > 0, torch.exp2(torch.ceil(torch.log2(scales))), scales)
        return _requantize(layout, entries, kv_c, 128, scales)


class SwappedScales(Mutant):
    """Stores the four ds_mla tile scales in reverse order."""

    name = "mutant-swapped-scales"
    kv_cache_dtypes = ("fp8_ds_mla",)

    def entries(self, layout, kv_c, k_pe, scale):  # type: ignore[no-untyped-def]
        entries = super().entries(layout, kv_c, k_pe, scale)
        f = layout.field("nope_scale")
        start = layout.entry_offset(f)
        scales = entries[:, start:start + f.size].clone().view(torch.float32)
        entries[:, start:start + f.size] = scales.flip(1).contiguous().view(torch.uint8)
        return entries


class IgnoresBlockStride(Mutant):
    """Addresses blocks as if they were packed: ignores a padded kv_cache.stride(0)."""

    name = "mutant-ignores-block-stride"
    kv_cache_dtypes = ("auto", "fp8_ds_mla")

    def write(self, layout, kv_c, k_pe, kv_cache, slots, scale):  # type: ignore[no-untyped-def]
        packed = torch.as_strided(kv_cache, kv_cache.shape, (kv_cache.shape[1] * kv_cache.shape[2],
                                                             kv_cache.shape[2], 1))
        super().write(layout, kv_c, k_pe, packed, slots, scale)


class Model1ScalesInTokenData(Mutant):
    """fp8_model1_mla with each token's 8 scale bytes right after its data, not after the block."""

    name = "mutant-model1-scales-inline"
    kv_cache_dtypes = ("fp8_model1_mla",)

    def write(self, layout, kv_c, k_pe, kv_cache, slots, scale):  # type: ignore[no-untyped-def]
        keep = slots >= 0
        entries = self.entries(layout, kv_c[keep], k_pe[keep], scale)
        block_size = kv_cache.shape[1]
        s = slots[keep]
        kv_cache[s // block_size, s % block_size] = entries  # 584-byte rows: data then scales, inline


class Int32SlotsReadAsInt64(Mutant):
    """Reads an int32 slot_mapping through an int64 pointer (AITER #4697): token i takes the int64 that the int32
    slots 2i and 2i + 1 make together, and the tokens past half the mapping read what follows it (padding here).
    A slot it reads outside the cache it skips, as a device-side bound check would. Given int64 slots it is right."""

    name = "mutant-int32-slots-as-int64"
    kv_cache_dtypes = ("auto",)

    def write(self, layout, kv_c, k_pe, kv_cache, slots, scale):  # type: ignore[no-untyped-def]
        if slots.dtype == torch.int32:
            pairs = slots[: slots.numel() // 2 * 2].view(torch.int64)  # little-endian: slot 2i low, 2i + 1 high
            read = torch.full(slots.shape, -1, dtype=torch.int64)
            read[: pairs.numel()] = pairs
            read[read >= kv_cache.shape[0] * kv_cache.shape[1]] = -1
            slots = read
        super().write(layout, kv_c, k_pe, kv_cache, slots, scale)


class Int64SlotsReadAsInt32(Mutant):
    """Reads an int64 slot_mapping through an int32 pointer (vllm-ascend #16664): token 2j takes the low half of
    slot j, token 2j + 1 its high half (0, or -1 for a padding slot), so half the tokens go to other slots and many
    to slot 0."""

    name = "mutant-int64-slots-as-int32"
    kv_cache_dtypes = ("auto",)

    def write(self, layout, kv_c, k_pe, kv_cache, slots, scale):  # type: ignore[no-untyped-def]
        if slots.dtype == torch.int64:
            slots = slots.view(torch.int32)[: slots.numel()].to(torch.int64)
        super().write(layout, kv_c, k_pe, kv_cache, slots, scale)


class BitCopiesMismatchedCache(Mutant):
    """Under ``auto`` copies the inputs' bits into whatever cache it is given, its dtype unchecked: bf16 rows in an
    fp16 cache (vLLM #54338). Right wherever the cache's dtype is the inputs'."""

    name = "mutant-bit-copies-mismatched-cache"
    kv_cache_dtypes = ("auto",)

    def check_cache_dtype(self, layout: MlaLayout, kv_c: torch.Tensor, kv_cache: torch.Tensor) -> None:
        """Checks nothing (the fault)."""


class SilentFallback(Mutant):
    """Writes the right bytes through a fallback path: its launch counter never moves."""

    name = "mutant-silent-fallback"
    kv_cache_dtypes = ("auto", "fp8")
    launch_count = 0


#: mutant class -> (platform it is certified on, the check that must catch it)
EXPECTED: dict[type[Mutant], tuple[str, str]] = {
    WrongSlot: ("cpu", "layout.slot_mapping"),
    WritesPaddingSlots: ("cpu", "layout.negative_slots"),
    BytePastEntry: ("cpu", "layout.entry_bounds"),
    QuantizedRope: ("cpu", "layout.rope_exact"),
    Tile64InDsMla: ("cpu", "numerics.scale_value"),
    Tile128InModel1: ("cpu", "numerics.scale_value"),
    NonPow2DsMlaScale: ("cpu", "numerics.scale_form"),
    NonSaturatingCast: ("cpu", "numerics.saturation"),
    Divisor224: ("cpu", "numerics.scale_value"),
    Divisor448: ("rocm-gfx942", "numerics.scale_value"),
    OcpOnFnuz: ("rocm-gfx942", "numerics.element_format"),
    NoScaleFloor: ("cpu", "numerics.scale_positive"),
    SwappedScales: ("cpu", "layout.scale_order"),
    IgnoresBlockStride: ("cpu", "layout.block_stride"),
    Model1ScalesInTokenData: ("cpu", "layout.block_scales"),
    SilentFallback: ("cpu", "support.kernel_ran"),
    Int32SlotsReadAsInt64: ("cpu", "layout.slot_mapping"),
    Int64SlotsReadAsInt32: ("cpu", "layout.slot_mapping"),
    BitCopiesMismatchedCache: ("cpu", "support.mismatched_cache_raises"),
}


def mutants() -> list[object]:
    """The entry point for ``RTP_REF_KERNELS``: one instance of every mutant, of every op."""
    from tests.mutants.gather_mutants import GATHER_EXPECTED
    from tests.mutants.mha_indexer_mutants import MHA_INDEXER_EXPECTED

    return [cls() for cls in [*EXPECTED, *MHA_INDEXER_EXPECTED, *GATHER_EXPECTED]]
