"""Write cases shared by the kernel tests: inputs, canary-filled caches, and the byte comparison.

Every case is checked against ``rtp_ref.kv.reference_write`` run on the CPU: the kernel's whole
cache (every byte, padding rows of padded blocks included) must equal the reference's image of the
same canary cache, so a write outside the target entries or a wrong byte inside one fails.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from rtp_ref.contract import WriteContract
from rtp_ref.fp8.formats import ConversionMode, fp8_format
from rtp_ref.kernels.protocol import KVCacheKernel
from rtp_ref.kv.cache import reference_write
from rtp_ref.kv.fields import ELEMENT_FP32, Placement, Source
from rtp_ref.kv.layouts import MlaLayout, default_dims
from rtp_ref.platform import MLA_LAYOUT_NAMES, load_platform

#: every MLA layout record: each built-in kernel is tested on each
LAYOUTS = MLA_LAYOUT_NAMES
#: the bundled layouts, written out by hand: the built-in kernels must claim at least these (a claim list
#: read from the records would be compared with itself)
BUNDLED = ("auto", "fp8", "fp8_ds_mla", "fp8_model1_mla", "fp8_rocm_compact")
#: the bundled layouts only the Triton writer of the compiled kernels writes, written out by hand: DeepSeek V4.1's,
#: whose rope is tile-scaled and whose FP4 values are E2M1, FlashMLA's NVFP4 record, and the fork's 432-byte NVFP4
#: record with its zero bytes (the references and torch-eager write them too); the CUDA C++ writer and the compiled
#: readers do not
TRITON_ONLY = ("V41", "V41_FP4", "nvfp4_fp8_ds_mla", "nvfp4_ds_mla_bf16rope")
#: the bundled layouts only the references and torch-eager write, written out by hand: b12x's 368-byte record, whose
#: rope scale is formed by reciprocal multiplies (the compiled writers divide)
REFERENCE_ONLY = ("nvfp4_ds_mla_fp8rope",)
#: the layouts the Triton writer claims and is tested on
TRITON_LAYOUTS = tuple(name for name in LAYOUTS if name not in REFERENCE_ONLY)
#: the layouts every compiled kernel (the triton and cuda writers, their readers) claims and is tested on
COMPILED = tuple(name for name in TRITON_LAYOUTS if name not in TRITON_ONLY)
#: the input dtypes the kernels take, by their short names
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}

#: values that stress the conversion: overflow, inf, NaN, signed zero, subnormals, rounding ties
#: and the interpreter's mis-rounded values (-31.74 -> -16, 126.48 -> 64)
EDGE_VALUES = (1000.0, -1000.0, float("inf"), float("-inf"), float("nan"), -0.0, 0.0, 1e-9, -3e-5,
               464.0, -464.0, 241.0, 300.0, -31.7406, 126.48, 0.0009765625, 6e-8, 65504.0)


def contract(platform: str, **overrides: str) -> WriteContract:
    """The contract of a bundled platform table, with layout-flag overrides."""
    return WriteContract.for_platform(load_platform(platform), overrides)


@dataclass
class WriteCase:
    """One call: inputs, a canary cache and the reference's image of it after the write."""

    layout: MlaLayout
    kv_c: torch.Tensor
    k_pe: torch.Tensor
    cache: torch.Tensor
    slots: torch.Tensor
    scale: torch.Tensor
    expected: torch.Tensor

    def to(self, device: str) -> WriteCase:
        """The same case with every tensor on ``device`` (strides and padding kept)."""
        return WriteCase(self.layout, copy_to(self.kv_c, device), copy_to(self.k_pe, device),
                         copy_to(self.cache, device), self.slots.to(device), self.scale.to(device), self.expected)

    def run(self, kernel: KVCacheKernel, name: str | None = None) -> torch.Tensor:
        """Call ``kernel`` on a copy of the cache; returns the written cache on the CPU (storage kept whole)."""
        cache = copy_to(self.cache, str(self.cache.device))
        kernel(self.kv_c, self.k_pe, cache, self.slots, self.layout.name if name is None else name, self.scale)
        return copy_to(cache, "cpu")


def copy_to(x: torch.Tensor, device: str) -> torch.Tensor:
    """Copy ``x`` to ``device`` keeping its strides and storage offset (padded and sliced views stay so)."""
    base = torch.empty(x.untyped_storage().nbytes() // x.element_size(), dtype=x.dtype, device=device)
    base.copy_(torch.as_strided(x, (base.numel(),), (1,), 0).to(device))
    return torch.as_strided(base, x.shape, x.stride(), x.storage_offset())


def make_case(c: WriteContract, layout_name: str, *, dims: tuple[int, int] | None = None,
              dtype: torch.dtype = torch.bfloat16, tokens: int = 9, block_size: int = 4, num_blocks: int = 5,
              edge: bool = True, seed: int = 0, scale: float = 0.37) -> WriteCase:
    """A case with strided inputs, a padded-block canary cache and negative slots (built on the CPU).

    kv_c/k_pe are column slices of wider tensors with extra rows after the tokens; the cache has
    ``block_size + 1`` rows per block and is sliced to ``block_size`` (FlashMLA's padded blocks); the
    canary is random bytes. ``edge`` overwrites some values with ``EDGE_VALUES``.
    """
    r, p = dims or default_dims(layout_name)
    layout = c.layout(layout_name, r, p)
    g = torch.Generator().manual_seed(seed)
    rows = tokens + 3
    kv_c = (torch.randn(rows, r + 24, generator=g) * 40).to(dtype)[:, 8:8 + r]
    k_pe = (torch.randn(rows, p + 8, generator=g) * 3).to(dtype)[:, :p]
    if edge:
        for source, x in ((Source.KV_C, kv_c), (Source.K_PE, k_pe)):
            n = x.numel()
            idx = torch.randint(0, n, (min(n // 4, 4 * len(EDGE_VALUES)),), generator=g)
            # a field whose tiles define no bytes for NaN or inf (the layout's non-finite policy) gets finite ones
            edge_values = [v for v in EDGE_VALUES if math.isfinite(v) or layout.stores_non_finite(source)]
            vals = torch.tensor(edge_values)[torch.arange(idx.numel()) % len(edge_values)].to(dtype)
            flat_rows, flat_cols = idx // x.shape[1], idx % x.shape[1]
            x[flat_rows, flat_cols] = vals
        kv_c[2, :] = 0  # an all-zero row (token 2 is written): every tile scale falls to the floor
    capacity = num_blocks * block_size
    slots = torch.randperm(capacity, generator=g)[:tokens].to(torch.int64)
    slots[1::4] = -1  # padding tokens write nothing
    entry = layout.cache_entry
    raw = torch.randint(0, 256, (num_blocks, block_size + 1, entry * (2 if layout.stores_input_dtype else 1)),
                        generator=g, dtype=torch.uint8)
    cache = raw.view(layout.cache_dtype(dtype))[:, :block_size]
    scale_t = torch.tensor([scale], dtype=torch.float32)
    expected = copy_to(cache, "cpu")
    reference_write(layout, kv_c, k_pe, expected, slots, scale_t)
    return WriteCase(layout, kv_c, k_pe, cache, slots, scale_t, expected)


#: what take_input_errors says of a slot past the cache on the compiled kernels' default path, per device
PAST_CAPACITY_FLAGGED = "{device}: a slot at or past the cache's capacity was skipped (nothing written for it)"


def past_capacity_case(c: WriteContract, layout_name: str) -> tuple[WriteCase, torch.Tensor, torch.Tensor]:
    """(case, slots, expected): the case's slots with token 0's replaced by the capacity (one past the cache), and
    the reference's image of the cache when token 0 is skipped, as the default call path must write (CPU)."""
    case = make_case(c, layout_name, tokens=6)
    skipped = case.slots.clone()
    skipped[0] = -1
    expected = copy_to(case.cache, "cpu")
    reference_write(case.layout, case.kv_c, case.k_pe, expected, skipped, case.scale)
    slots = case.slots.clone()
    slots[0] = case.cache.shape[0] * case.cache.shape[1]
    return case, slots, expected


def full_bytes(cache: torch.Tensor) -> torch.Tensor:
    """Every byte of the cache's storage (padding rows included), as uint8."""
    return torch.as_strided(cache, (cache.untyped_storage().nbytes() // cache.element_size(),), (1,), 0) \
        .contiguous().view(torch.uint8)


def nan_scale_bytes(case: WriteCase, got: torch.Tensor) -> torch.Tensor:
    """Mask of storage bytes of per-token fp32 tile scales where both caches hold a NaN.

    The contract puts NaN inputs only where it defines their bytes (per-tensor fp8 and 16-bit fields), so
    a NaN in a tile leaves its fp32 scale's NaN bits open: the reference writes 0x7FC00000, while on an
    H200 the cuda and triton kernels' correctly rounded division gives another NaN for the ``amax_div``
    rule (13 kernel tests failed there without this mask). Any NaN is accepted there, nothing else.
    """
    exp, out = full_bytes(case.expected), full_bytes(got)
    mask = torch.zeros_like(out, dtype=torch.bool)
    layout = case.layout
    block_bytes = case.cache.stride(0) * case.cache.element_size()
    blocks, block_size = case.cache.shape[0], case.cache.shape[1]
    for f in layout.fields:
        if f.source is not Source.SCALE or f.element != ELEMENT_FP32 or f.placement is not Placement.PER_TOKEN:
            continue
        token_starts = (torch.arange(blocks).unsqueeze(1) * block_bytes
                        + torch.arange(block_size).unsqueeze(0) * layout.data_bytes_per_token).reshape(-1)
        at = (token_starts.unsqueeze(1) + f.offset + 4 * torch.arange(f.count).unsqueeze(0)).reshape(-1)
        byte_at = at.unsqueeze(1) + torch.arange(4).unsqueeze(0)
        both_nan = exp[byte_at].view(torch.float32).isnan() & out[byte_at].view(torch.float32).isnan()
        mask[byte_at[both_nan.reshape(-1)]] = True
    return mask


def block_byte_positions(layout: MlaLayout, token_in_block: torch.Tensor, entry_bytes: torch.Tensor,
                         block_size: int) -> torch.Tensor:
    """Byte offset within its block of entry byte ``entry_bytes[j]`` of token ``token_in_block[i]``: int64
    ``[len(token_in_block), len(entry_bytes)]``; the byte of field f at ``k`` bytes into the field sits at
    ``start + t * per_token + k`` (``MlaLayout.page_map``)."""
    start = torch.empty(layout.bytes_per_token, dtype=torch.int64)
    step = torch.empty(layout.bytes_per_token, dtype=torch.int64)
    for position in layout.page_map(block_size):
        first = layout.entry_offset(position.field)
        span = slice(first, first + position.field.size)
        start[span] = torch.arange(position.start, position.start + position.field.size)
        step[span] = position.per_token
    j = entry_bytes.to(torch.int64).cpu()
    t = token_in_block.to(torch.int64).unsqueeze(1)
    return start[j].to(t.device).unsqueeze(0) + t * step[j].to(t.device).unsqueeze(0)


def target_bytes(case: WriteCase) -> torch.Tensor:
    """Mask of the storage bytes the call may write: the entries of its non-negative slots (for
    fp8_model1_mla also their block-trailing scale bytes), pad bytes excluded."""
    layout = case.layout
    mask = torch.zeros_like(full_bytes(case.expected), dtype=torch.bool)
    slots = case.slots.cpu()
    slots = slots[slots >= 0]
    block_size = case.cache.shape[1]
    columns = torch.cat([torch.arange(layout.entry_offset(f), layout.entry_offset(f) + f.size)
                         for f in layout.entry_fields if f.source is not Source.PAD])
    positions = block_byte_positions(layout, slots % block_size, columns, block_size)
    block_bytes = case.cache.stride(0) * case.cache.element_size()
    mask[(slots // block_size).unsqueeze(1) * block_bytes + positions] = True
    return mask


def differences(case: WriteCase, got: torch.Tensor) -> tuple[int, int]:
    """(bytes differing inside the target entries, bytes changed outside them) versus the reference."""
    diff = (full_bytes(case.expected) != full_bytes(got)) & ~nan_scale_bytes(case, got)
    inside = target_bytes(case)
    return int((diff & inside).sum()), int((diff & ~inside).sum())


def assert_bit_exact(case: WriteCase, got: torch.Tensor, what: str) -> None:
    """Fail unless ``got`` is the reference's cache image byte for byte (see ``nan_scale_bytes``)."""
    inside, outside = differences(case, got)
    assert (inside, outside) == (0, 0), (
        f"{what}: {inside} byte(s) of the target entries differ from the reference and {outside} byte(s) "
        "outside them were changed"
    )


def custom_contract(base: str, fmt: str, mode: str) -> WriteContract:
    """A hand-made contract: ``base``'s flags with another fp8 format and conversion mode."""
    c = contract(base)
    return WriteContract(fp8_format(fmt), ConversionMode(mode), c.flags, f"{base}+{fmt}/{mode}")


#: contract id -> contract, for parametrized tests (ids are readable in test names)
CONTRACTS = {
    "cpu": lambda: contract("cpu"),
    "cuda-sm90": lambda: contract("cuda-sm90"),
    "rocm-gfx942": lambda: contract("rocm-gfx942"),
    "rocm-gfx950": lambda: contract("rocm-gfx950"),
    "e4m3fn-nonsat": lambda: custom_contract("cpu", "e4m3fn", "nonsat"),
    "e5m2-satfinite": lambda: custom_contract("cpu", "e5m2", "satfinite"),
    "e5m2fnuz-nonsat": lambda: custom_contract("rocm-gfx942", "e5m2fnuz", "nonsat"),
}

#: odd shapes: (contract id, layout, (R, P), layout-flag overrides)
SHAPES = [
    ("cpu", "fp8_ds_mla", (256, 64), {}),
    ("cpu", "fp8_ds_mla", (200, 64), {"lora_alignment": "round_up"}),  # partial last tile
    ("rocm-gfx942", "fp8_ds_mla", (129, 7), {"lora_alignment": "round_up"}),  # odd offsets: byte stores
    ("cpu", "auto", (100, 24), {}),
    ("cpu", "fp8", (256, 32), {}),
    ("rocm-gfx942", "fp8_rocm_compact", (36, 12), {}),
]
