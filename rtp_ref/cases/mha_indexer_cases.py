"""Conformance cases of the other cache families: the MHA paged write and the indexer write.

As for the MLA write (rtp_ref.cases.cases), a case's caches are views into one canary-filled byte storage
with guard bytes around them (and between the K and V caches), inputs are drawn on the CPU from the case's
seed and built on the device under test (strided kinds strided there), and the reference writes into CPU
copies of the storage. A case also writes the reference under a named wrong hypothesis (K and V exchanged,
an HND cache written as NHD, one scale for every head, scales inside the token data, another quant block):
a kernel whose bytes equal one of those fails the check that names the fault.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from rtp_ref.cases.cases import (
    CANARY,
    DTYPE_NAMES,
    GUARD_BYTES,
    MISMATCHED_CACHE_KIND,
    CaseSpec,
    num_blocks_for,
    scale_tensor,
    slot_tensor,
)
from rtp_ref.cases.domain import BLOCK_SIZE, INPUT_DTYPE, SLOT_MAPPING, ZERO_DIM_SOURCE, Dimension, Value
from rtp_ref.cases.input_checks import EMPTY_CALL_KIND
from rtp_ref.cases.launch_size import LAUNCH_BLOCK_SIZE, LAUNCH_KIND, LAUNCH_SEED, launch_blocks, launch_tokens
from rtp_ref.cases.padding_cases import NAN_PADDING_KIND, engine_slots, input_rows, padding_rows, poison
from rtp_ref.cases.storage import FieldPlaces, StorageMap, field_places, slot_namer
from rtp_ref.contract import WriteContract
from rtp_ref.errors import RtpRefError
from rtp_ref.fp8.codec import encode
from rtp_ref.fp8.elements import dtype_element, element_traits
from rtp_ref.kv.fields import ELEMENT_E2M1, Source, field_element
from rtp_ref.kv.indexer import (
    IndexerLayout,
    encode_tokens,
    fixed_quant_block,
    indexer_layout_for,
    reference_indexer_k_quant_and_cache,
    slice_scales,
)
from rtp_ref.kv.mha_indexer_records import NVFP4_SCALE_ELEMENT
from rtp_ref.kv.mha_paged import MhaPagedLayout, mha_layout, reference_reshape_and_cache_flash
from rtp_ref.kv.nvfp4_page import Nvfp4Page, ScaleOrder, other_scale_order, side_views
from rtp_ref.kv.op_names import INDEXER_OP, MHA_OP
from rtp_ref.kv.padding import first_real_slot, reserved_slot

#: case kinds whose value inputs must not be contiguous (the suite checks they are not, before the call)
STRIDED_MHA_INDEXER_KINDS = ("fused",)
#: an MHA case id's suffix for its scales (MhaIndexerSpec.scales)
_SCALE_IDS = {"tensor": "", "head": "-ph", "mixed": "-pv", "0d": "-0d"}
#: DeepSeek V3.2's indexer: head_dim 128 quantised in one block of 128
_DEEPSEEK_INDEXER = ("DeepSeek V3.2's indexer keys (config.json index_head_dim 128), quantised by vLLM in blocks of "
                     "128 (vllm/model_executor/models/deepseek_v2.py)")
#: MHA variants whose k_scale and v_scale are one value each: ``auto`` reads none, ``nvfp4``'s are global
_PER_TENSOR_ONLY = ("auto", "nvfp4")
#: a block of 16 whose bytes the FP4 fingerprints decide under a decode scale of 1 (tests/fp4/test_nvfp4.py): amax
#: 1.40625 gives the scale 0.234375, 0.5859375 / 0.234375 is the E2M1 tie 2.5 (code 0x4) while 0.5859375 times the
#: rounded reciprocal lands above it (0x5); -0.0 is 0x8 or 0x0
FP4_WITNESS = (1.40625, 0.5859375, -0.5859375, -0.0) + (0.0,) * 12
#: the arguments of the MHA write a kernel may narrow (``input_domain``: rtp_ref.cases.domain)
MHA_DOMAIN = (INPUT_DTYPE, SLOT_MAPPING, BLOCK_SIZE,
              Dimension("head_size", "the head size of key and value", (), (128,),
                        "Llama 3 and Qwen 3 (config.json head_dim 128)"),
              Dimension("scales", "the shapes of the float32 k_scale and v_scale: both [1] (tensor), both "
                        "[num_kv_heads] (head), [1] and [num_kv_heads] (mixed), or both 0-D (0d)",
                        ("tensor", "head", "mixed", "0d"), ("tensor", "0d"),
                        f"vLLM passes per-tensor k_scale and v_scale (vllm/attention/layer.py); {ZERO_DIM_SOURCE}"),
              Dimension("order", "the cache's order: NHD, or HND as strides over [blocks, heads, rows, dim]",
                        ("NHD", "HND")))
#: the arguments of the indexer write a kernel may narrow
INDEXER_DOMAIN = (INPUT_DTYPE, SLOT_MAPPING, BLOCK_SIZE,
                  Dimension("head_dim", "the width of k", (), (128,), _DEEPSEEK_INDEXER),
                  Dimension("quant_block", "quant_block_size", (), (128,), _DEEPSEEK_INDEXER))


@dataclass(frozen=True)
class MhaIndexerSpec(CaseSpec):
    """One case of the MHA or indexer write: a CaseSpec (``layout`` is the op's variant, ``kv_cache_dtype`` or
    ``scale_fmt``) with its op and shapes. ``width`` is the head size (MHA) or head_dim (indexer); ``heads``,
    ``order`` and ``scales`` are the MHA's, ``quant_block`` the indexer's. ``scales``: ``tensor`` (k_scale and
    v_scale of shape [1]), ``head`` (both [H]), ``mixed`` (k_scale [1], v_scale [H]: the two are independent
    arguments, and a kernel that takes both lengths from one of them is caught) or ``0d`` (both 0-D)."""

    op: str = MHA_OP
    width: int = 128
    heads: int = 1
    order: str = "NHD"
    scales: str = "tensor"
    quant_block: int = 128

    @property
    def arguments(self) -> dict[str, Value]:
        """The case's value of each of ``MHA_DOMAIN`` or ``INDEXER_DOMAIN``."""
        shared: dict[str, Value] = {"input": DTYPE_NAMES[self.input_dtype], "slot_mapping": self.slot_dtype,
                                    "block_size": self.block_size}
        if self.op == MHA_OP:
            return {**shared, "head_size": self.width, "scales": self.scales, "order": self.order}
        return {**shared, "head_dim": self.width, "quant_block": self.quant_block}

    @property
    def case_id(self) -> str:
        """``random-t37-b16-bf16-h8d128-HND-ph`` (MHA) or ``random-t37-b16-bf16-d128q64`` (indexer); ``-i32`` after
        the dtype for an int32 slot mapping."""
        base = super().case_id
        if self.op == MHA_OP:
            return f"{base}-h{self.heads}d{self.width}-{self.order}{_SCALE_IDS[self.scales]}"
        return f"{base}-d{self.width}q{self.quant_block}"


def mha_specs(variant: str) -> Iterator[MhaIndexerSpec]:
    """The MHA cases of one ``kv_cache_dtype``: GQA head counts 1 and 8, head sizes 64/128/256, block sizes 16
    and 64, NHD and HND, per-tensor, per-head and 0-D scales, edge values, padding slots, a key longer than the slot
    mapping, strided key/value (views of a fused QKV projection), an int32 slot mapping, the empty call; for
    ``auto``, caches of the other 16-bit dtype, which must be refused (rtp_ref.cases.invalid_calls). ``auto`` reads
    no scale: its cases pass per-tensor ones where others pass per-head ones."""
    rows = [  # kind, tokens, block, dtype, heads, head size, order, scales
        (EMPTY_CALL_KIND, 0, 16, torch.bfloat16, 8, 128, "NHD", "tensor"),
        ("random", 1, 16, torch.float16, 1, 64, "NHD", "tensor"),
        ("random", 37, 16, torch.bfloat16, 8, 128, "NHD", "head"),
        ("random", 37, 64, torch.bfloat16, 8, 128, "HND", "head"),
        ("random", 37, 16, torch.float16, 1, 256, "HND", "tensor"),
        ("random", 20, 64, torch.float16, 2, 64, "NHD", "mixed"),
        ("edge", 8, 16, torch.bfloat16, 8, 128, "NHD", "tensor"),
        ("edge", 8, 16, torch.float16, 8, 64, "HND", "head"),
        ("padded", 37, 16, torch.bfloat16, 8, 128, "HND", "tensor"),
        ("padding_only", 5, 16, torch.bfloat16, 8, 128, "NHD", "tensor"),
        # each strided case is a random case above with only its inputs strided: a failure here and not there is
        # the stride's
        ("fused", 37, 16, torch.bfloat16, 8, 128, "NHD", "head"),
        ("fused", 37, 16, torch.float16, 1, 256, "HND", "tensor"),
        # argument forms engines pass (rtp_ref.cases.domain), each alone on a random case: 0-D scales here, an int32
        # slot mapping after these
        ("random", 20, 16, torch.float16, 8, 128, "HND", "0d"),
    ]
    for seed, (kind, tokens, block, dtype, heads, size, order, scales) in enumerate(rows, start=1):
        yield MhaIndexerSpec(variant, kind, tokens, block, num_blocks_for(tokens, block), dtype, seed, op=MHA_OP,
                             width=size, heads=heads, order=order,
                             scales=variant_scales(variant, scales))
    seed = len(rows)
    yield MhaIndexerSpec(variant, "random", 20, 16, num_blocks_for(20, 16), torch.bfloat16, seed + 1, "int32",
                         op=MHA_OP, width=128, heads=8)
    if variant == "auto":
        yield MhaIndexerSpec(variant, MISMATCHED_CACHE_KIND, 8, 16, num_blocks_for(8, 16), torch.bfloat16, seed + 2,
                             op=MHA_OP, width=128, heads=8)
    # a batch padded with NaN rows in the engine's convention (rtp_ref.cases.padding_cases)
    yield MhaIndexerSpec(variant, NAN_PADDING_KIND, 37, 16, num_blocks_for(37, 16), torch.bfloat16, seed + 3,
                         op=MHA_OP, width=128, heads=8, order="HND",
                         scales=variant_scales(variant, "head"))


def variant_scales(variant: str, scales: str) -> str:
    """A case's ``scales`` form under MHA ``variant``: per-head forms (``head``, ``mixed``) become ``tensor`` for the
    variants whose k_scale and v_scale are one value each (``auto`` reads none, ``nvfp4``'s are global); every other
    form (``tensor``, ``0d``) stays."""
    return "tensor" if variant in _PER_TENSOR_ONLY and scales in ("head", "mixed") else scales


def _quant(variant: str, quant: int) -> int:
    """A case's quant block under ``variant``: ``quant``, or the variant's fixed one (``mxfp4``: 32)."""
    return fixed_quant_block(variant) or quant


def indexer_specs(variant: str) -> Iterator[MhaIndexerSpec]:
    """The indexer cases of one ``scale_fmt``: head_dim 128 with quant blocks 128 and 64, head_dim 256, block
    sizes 16 and 64, edge values (an all-zero row: the amax floor; NaN, inf, overflow), padding slots, a
    strided ``k`` (a view of a wider projection) at each quant block, an int32 slot mapping, the empty call. A
    variant with a quant block of its own (``mxfp4``: 32) has it in every case."""
    rows = [  # kind, tokens, block, dtype, head_dim, quant block
        (EMPTY_CALL_KIND, 0, 16, torch.bfloat16, 128, 128),
        ("random", 1, 64, torch.bfloat16, 128, 128),
        ("random", 37, 16, torch.bfloat16, 128, 128),
        ("random", 37, 64, torch.float16, 128, 128),
        ("random", 37, 16, torch.bfloat16, 128, 64),
        ("random", 20, 16, torch.float16, 256, 128),
        ("edge", 8, 16, torch.bfloat16, 128, 128),
        ("edge", 8, 16, torch.float16, 128, 64),
        ("padded", 37, 16, torch.bfloat16, 128, 128),
        ("padding_only", 5, 16, torch.bfloat16, 128, 128),
        # each strided case is a random case above with only ``k`` strided (quant blocks 64 and 128 apart: a stride
        # defect and a quant-block defect are told apart)
        ("fused", 37, 16, torch.bfloat16, 128, 64),
        ("fused", 37, 16, torch.bfloat16, 128, 128),
    ]
    for seed, (kind, tokens, block, dtype, dim, quant) in enumerate(rows, start=1):
        yield MhaIndexerSpec(variant, kind, tokens, block, num_blocks_for(tokens, block), dtype, seed, op=INDEXER_OP,
                             width=dim, quant_block=_quant(variant, quant))
    # an argument form engines pass (rtp_ref.cases.domain), alone on a random case
    yield MhaIndexerSpec(variant, "random", 20, 16, num_blocks_for(20, 16), torch.bfloat16, len(rows) + 1, "int32",
                         op=INDEXER_OP, width=128, quant_block=_quant(variant, 64))
    # a batch padded with NaN rows in the engine's convention (rtp_ref.cases.padding_cases)
    yield MhaIndexerSpec(variant, NAN_PADDING_KIND, 37, 16, num_blocks_for(37, 16), torch.bfloat16, len(rows) + 2,
                         op=INDEXER_OP, width=128, quant_block=_quant(variant, 64))


def mha_launch(variant: str, device: str) -> MhaIndexerSpec:
    """The launch-size case of one ``kv_cache_dtype`` for a kernel on ``device`` (rtp_ref.cases.launch_size): one
    head of 128 values, per-tensor scales (the grader's copies of the caches stay tens of MB on a GPU)."""
    tokens = launch_tokens(device)
    return MhaIndexerSpec(variant, LAUNCH_KIND, tokens, LAUNCH_BLOCK_SIZE, launch_blocks(tokens),
                          torch.bfloat16, LAUNCH_SEED, op=MHA_OP, width=128, heads=1)


def indexer_launch(variant: str, device: str) -> MhaIndexerSpec:
    """The launch-size case of one ``scale_fmt`` for a kernel on ``device`` (rtp_ref.cases.launch_size): DeepSeek
    V3.2's head_dim 128 in one quant block (``mxfp4``: its blocks of 32)."""
    tokens = launch_tokens(device)
    return MhaIndexerSpec(variant, LAUNCH_KIND, tokens, LAUNCH_BLOCK_SIZE, launch_blocks(tokens),
                          torch.bfloat16, LAUNCH_SEED, op=INDEXER_OP, width=128, quant_block=_quant(variant, 128))


def _values(g: torch.Generator, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """Normal values with a per-token magnitude spread of 2^-6..2^6."""
    x = torch.randn(*shape, generator=g)
    spread = torch.exp2(torch.randint(-6, 7, (shape[0],) + (1,) * (len(shape) - 1), generator=g).float())
    return (x * spread).to(dtype)


def _edges(x: torch.Tensor, reach: float, non_finite: bool = True) -> torch.Tensor:
    """Token 0 all zero (the indexer's amax floor); token 1 -0.0 and input subnormals; token 2 a ramp to
    +-4 * ``reach`` (beyond the fp8 range once scaled); token 3 +-inf and NaN of both signs (set by bits), or, without
    ``non_finite`` (a variant that defines no bytes for them), the largest finite values of both signs after a first
    block of ``FP4_WITNESS``."""
    x = x.clone()
    flat = x.reshape(x.shape[0], -1)
    finfo = torch.finfo(x.dtype)
    flat[0] = 0.0
    half = flat.shape[1] // 2
    flat[1, :half] = -0.0
    flat[1, half:] = finfo.smallest_normal / 4
    flat[2] = torch.linspace(-4 * reach, 4 * reach, flat.shape[1]).clamp(finfo.min, finfo.max).to(x.dtype)
    if not non_finite:
        flat[3, :half], flat[3, half:] = finfo.max, -finfo.max
        flat[3, : len(FP4_WITNESS)] = torch.tensor(FP4_WITNESS)
        return x
    flat[3, 1], flat[3, 2] = float("inf"), float("-inf")
    bits = flat.view(torch.int16)
    quiet = 0x7FC0 if x.dtype == torch.bfloat16 else 0x7E00
    bits[3, 0], bits[3, 3] = quiet, (quiet | 0x8000) - 0x10000
    return x


def _slots(g: torch.Generator, spec: MhaIndexerSpec, first: int = 0) -> torch.Tensor:
    """Distinct slots from ``first`` (the engine's first real slot: rtp_ref.kv.padding), the first and the cache's
    last among them; ``padded`` and ``nan_padding``: a fifth of them -1 (``nan_padding``: token 1 among them); edge
    tokens 0-3 always written."""
    capacity = spec.num_blocks * spec.block_size
    if spec.kind == "padding_only":
        return torch.full((spec.tokens,), -1, dtype=torch.int64)
    perm = (torch.randperm(capacity - first, generator=g) + first).to(torch.int64)
    if spec.tokens < 6:
        slots = perm[: spec.tokens]
    else:  # tokens 4 and 5 write the first and the cache's last slot (away from the edge rows 0-3)
        inner = perm[(perm != first) & (perm != capacity - 1)]
        ends = torch.tensor([first, capacity - 1])
        slots = torch.cat([inner[:4], ends, inner[4: spec.tokens - 2]])
    if spec.kind in ("padded", NAN_PADDING_KIND):
        padding = torch.rand(spec.tokens, generator=g) < 0.2
        padding[4:6] = False
        if spec.kind == NAN_PADDING_KIND:
            padding[1] = True
        slots[padding] = -1
    return slots


def slot_values(slot_mapping: torch.Tensor) -> torch.Tensor:
    """A case's slot mapping as int64 on the CPU: the slots the reference and the grader work with, whatever dtype
    the kernel was given them in."""
    return slot_mapping.cpu().to(torch.int64)


def _wide(g: torch.Generator, tokens: int, width: int, offset: int, dtype: torch.dtype,
          device: torch.device | str) -> torch.Tensor:
    """A [tokens, width] view at column ``offset`` of a wider projection output built on ``device``."""
    out = _values(g, (tokens, offset + width + 64), dtype).to(device)
    return out[:, offset: offset + width]


class _SlottedCase:
    """What the two ops' cases share: the slot mapping graded (``slot_mapping``, padding as -1) and the one the
    kernel is given (``call_slots``: the engine's padding sentinel in a ``nan_padding`` case), and the engine's
    reserved padding slot (rtp_ref.kv.padding)."""

    slot_mapping: torch.Tensor
    call_slots: torch.Tensor
    reserved_slot: int | None

    def _draw_slots(self, g: torch.Generator, spec: MhaIndexerSpec, contract: WriteContract,
                    device: torch.device | str, values: tuple[torch.Tensor, ...]) -> None:
        """Draw the case's slots in the engine's padding convention; in a ``nan_padding`` case fill the padding
        rows of ``values`` with NaN."""
        padding_slot = contract.flags.padding_slot
        slots = _slots(g, spec, first_real_slot(padding_slot))
        if spec.kind == NAN_PADDING_KIND:
            for x in values:
                poison(x, padding_rows(slots, x.shape[0]))
        self.slot_mapping = slot_tensor(slots, spec.slot_dtype, device)
        engine = engine_slots(spec.kind, slots, padding_slot)
        self.call_slots = self.slot_mapping if engine is None else slot_tensor(engine, spec.slot_dtype, device)
        self.reserved_slot = reserved_slot(padding_slot)


class MhaCase(_SlottedCase):
    """One MHA case on a device: key, value, the two caches (views into ``storage``), slots and scales."""

    def __init__(self, spec: MhaIndexerSpec, contract: WriteContract, device: torch.device | str,
                 guard: int = GUARD_BYTES) -> None:
        self.spec, self.guard = spec, guard
        self.layout: MhaPagedLayout = mha_layout(contract, spec.layout, spec.heads, spec.width)
        g = torch.Generator().manual_seed(spec.seed)
        heads, size, dtype = spec.heads, spec.width, spec.input_dtype
        # ``padded``: the key and value are 3 tokens longer than the slot mapping (vLLM pads for CUDA graphs);
        # ``nan_padding`` too (rtp_ref.cases.padding_cases)
        rows = input_rows(spec.kind, spec.tokens) + (3 if spec.kind == "padded" else 0)
        if spec.kind == "fused":  # views of one [T, (Hq + 2H) * D] QKV projection, as engines pass them
            qkv = _values(g, (rows, 4 * heads * size), dtype).to(device)
            self.key = qkv[:, 2 * heads * size: 3 * heads * size].view(rows, heads, size)
            self.value = qkv[:, 3 * heads * size:].view(rows, heads, size)
        else:
            key, value = _values(g, (rows, heads, size), dtype), _values(g, (rows, heads, size), dtype)
            if spec.kind == "edge":
                fmt, finite = self.layout.element_format, self.layout.fp4 is not None
                reach = fmt.max_value * 2.0 if fmt is not None else 1e4
                key, value = _edges(key, reach, not finite), _edges(value, reach, not finite)
            self.key, self.value = key.to(device), value.to(device)
        k_count, v_count = {"tensor": (1, 1), "head": (heads, heads), "mixed": (1, heads), "0d": (1, 1)}[spec.scales]
        k_scale, v_scale = torch.rand(k_count, generator=g) * 1.5 + 0.5, torch.rand(v_count, generator=g) * 1.5 + 0.25
        if spec.kind == "edge" and self.layout.fp4 is not None:
            # engines' default decode scale (vLLM's k_scale without calibration): a scale of few significant bits,
            # under which the witness's E2M1 tie is exact (a random scale gives no 16-bit input a tie)
            k_scale, v_scale = torch.ones(k_count), torch.ones(v_count)
        if spec.scales == "0d":
            self.k_scale, self.v_scale = (scale_tensor(float(x), "0d", device) for x in (k_scale, v_scale))
        else:
            self.k_scale, self.v_scale = k_scale.to(device), v_scale.to(device)
        self._draw_slots(g, spec, contract, device, (self.key, self.value))
        self.itemsize = 2 if self.layout.cache_dtype(dtype) != torch.uint8 else 1
        self.cache_bytes = spec.num_blocks * spec.block_size * self.layout.k_bytes_per_token()
        size_all = 3 * guard + 2 * self.cache_bytes
        self.storage = torch.full((size_all,), CANARY, dtype=torch.uint8, device=device)
        self.key_cache, self.value_cache = self.caches(self.storage)

    def caches(self, storage: torch.Tensor, order: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The K and V cache views over ``storage`` (this case's or a copy), in the case's order or ``order``; of the
        other 16-bit dtype than the inputs' in a ``MISMATCHED_CACHE_KIND`` case under ``auto``."""
        s = self.spec
        dtype = self.layout.cache_dtype(s.cache_input_dtype)
        width = self.layout.row_width
        out = []
        for start in (self.guard, 2 * self.guard + self.cache_bytes):
            region = storage[start: start + self.cache_bytes].view(dtype)
            if (order or s.order) == "NHD":
                out.append(region.view(s.num_blocks, s.block_size, s.heads, width))
            else:
                out.append(region.view(s.num_blocks, s.heads, s.block_size, width).permute(0, 2, 1, 3))
        return out[0], out[1]

    def storage_map(self) -> StorageMap:
        """The case storage's fields, ``key`` and ``value`` (every head of every slot; ``nvfp4``: their codes, and
        ``key_scale`` and ``value_scale``), named by token and slot."""
        layer = torch.empty(self.storage.numel(), dtype=torch.uint8)
        fmt = self.layout.element_format
        if self.layout.fp4 is not None:
            fields = self._nvfp4_fields(layer)
        else:
            element = dtype_element(self.spec.input_dtype) if fmt is None else element_traits(fmt.name)
            fields = [field_places(name, cache, layer, element, 2, ("head",))
                      for name, cache in zip(("key", "value"), self.caches(layer), strict=True)]
        g, size = self.guard, self.cache_bytes
        areas = [("key_cache", g, g + size), ("value_cache", 2 * g + size, 2 * g + 2 * size)]
        return StorageMap(layer.numel(), fields, areas, slot_namer(self.slot_mapping, self.reserved_slot))

    def _nvfp4_fields(self, layer: torch.Tensor) -> list[FieldPlaces]:
        """``nvfp4``'s fields over ``layer``: each side's codes and scales (rtp_ref.kv.nvfp4_page.side_views)."""
        page = self.layout.page(self.spec.block_size, self.spec.order)
        orders = (ScaleOrder.LINEAR, self.layout.v_scale_order)
        return [f for name, cache, order in zip(("key", "value"), self.caches(layer), orders, strict=True)
                for f in nvfp4_field_places(name, cache, layer, page, order)]

    def call(self, kernel: Callable[..., None]) -> None:
        """Call ``kernel`` the way engines call ``reshape_and_cache_flash``."""
        kernel(self.key, self.value, self.key_cache, self.value_cache, self.call_slots, self.spec.layout,
               self.k_scale, self.v_scale)

    def value_inputs(self) -> tuple[torch.Tensor, ...]:
        """The inputs a kernel's ``input_requirements`` speak of."""
        return self.key, self.value

    def reference_on(self, storage: torch.Tensor, hypothesis: str | None = None) -> None:
        """Write the reference (or the named wrong ``hypothesis``) into CPU ``storage``."""
        key, value = self.key.cpu(), self.value.cpu()
        k_scale, v_scale, slots = self.k_scale.cpu(), self.v_scale.cpu(), slot_values(self.slot_mapping)
        order, layout = None, self.layout
        if hypothesis == "layout.kv_order":
            key, value, k_scale, v_scale = value, key, v_scale, k_scale
        elif hypothesis == "layout.cache_order":
            order = "NHD"
        elif hypothesis == "numerics.per_head_scale":
            k_scale, v_scale = (s[:1].expand(self.spec.heads).contiguous() for s in (k_scale, v_scale))
        elif hypothesis == "layout.v_scale_order":
            layout = dataclasses.replace(self.layout, v_scale_order=other_scale_order(self.layout.v_scale_order))
        elif hypothesis is not None:
            raise RtpRefError(f"unknown hypothesis {hypothesis!r}")
        kc, vc = self.caches(storage, order)
        reference_reshape_and_cache_flash(layout, key, value, kc, vc, slots, k_scale, v_scale)

    def hypotheses(self) -> list[str]:
        """The wrong hypotheses this case can tell apart from the contract."""
        out = ["layout.kv_order"]
        if self.layout.fp4 is not None and _both_orders_fit(self.layout.page(self.spec.block_size, self.spec.order)):
            out.append("layout.v_scale_order")
        if self.spec.order == "HND" and self.spec.heads > 1:
            out.append("layout.cache_order")
        if self.spec.scales in ("head", "mixed") and self.spec.heads > 1:
            out.append("numerics.per_head_scale")
        return out


class IndexerCase(_SlottedCase):
    """One indexer case on a device: k, the cache (a view into ``storage``) and slots."""

    def __init__(self, spec: MhaIndexerSpec, contract: WriteContract, device: torch.device | str,
                 guard: int = GUARD_BYTES) -> None:
        self.spec, self.guard = spec, guard
        self.layout: IndexerLayout = indexer_layout_for(contract, contract.flags, spec.width, spec.quant_block,
                                                        scale_fmt=spec.layout)
        g = torch.Generator().manual_seed(spec.seed)
        if spec.kind == "fused":
            self.k = _wide(g, spec.tokens, spec.width, 64, spec.input_dtype, device)
        else:
            k = _values(g, (input_rows(spec.kind, spec.tokens), spec.width), spec.input_dtype)
            if spec.kind == "edge":
                k = _edges(k, 1e4)
            self.k = k.to(device)
        self._draw_slots(g, spec, contract, device, (self.k,))
        self.cache_bytes = spec.num_blocks * spec.block_size * self.layout.bytes_per_token
        self.storage = torch.full((2 * guard + self.cache_bytes,), CANARY, dtype=torch.uint8, device=device)
        self.kv_cache = self.cache(self.storage)

    def cache(self, storage: torch.Tensor) -> torch.Tensor:
        """The cache view over ``storage`` (this case's or a copy)."""
        s = self.spec
        region = storage[self.guard: self.guard + self.cache_bytes]
        return region.view(s.num_blocks, s.block_size, self.layout.bytes_per_token)

    def storage_map(self) -> StorageMap:
        """The case storage's fields, ``k`` (the fp8 codes, or two E2M1 codes a byte) and ``scale`` (fp32, or ue8m0,
        one per quant block) of every slot: a block holds every token's codes, then every token's scales."""
        layer = torch.empty(self.storage.numel(), dtype=torch.uint8)
        s, lay = self.spec, self.layout
        blocks = self.cache(layer).reshape(s.num_blocks, -1)
        values = s.block_size * lay.data_bytes_per_token
        scales = s.block_size * lay.trailing_bytes_per_token
        k_field, scale_field = lay.field(Source.KEY), lay.field(Source.SCALE)
        fields = [field_places("k", blocks[:, :values].view(s.num_blocks, s.block_size, -1), layer,
                               field_element(k_field.element), 2),
                  field_places("scale", blocks[:, values: values + scales].view(s.num_blocks, s.block_size, -1),
                               layer, field_element(scale_field.element), 2)]
        areas = [("kv_cache", self.guard, self.guard + self.cache_bytes)]
        return StorageMap(layer.numel(), fields, areas, slot_namer(self.slot_mapping, self.reserved_slot))

    def call(self, kernel: Callable[..., None]) -> None:
        """Call ``kernel`` the way engines call ``indexer_k_quant_and_cache``."""
        kernel(self.k, self.kv_cache, self.call_slots, self.spec.quant_block, self.spec.layout)

    def value_inputs(self) -> tuple[torch.Tensor, ...]:
        """The inputs a kernel's ``input_requirements`` speak of."""
        return (self.k,)

    def reference_on(self, storage: torch.Tensor, hypothesis: str | None = None) -> None:
        """Write the reference (or the named wrong ``hypothesis``) into CPU ``storage``."""
        k, slots, cache = self.k.cpu(), slot_values(self.slot_mapping), self.cache(storage)
        if hypothesis is None:
            reference_indexer_k_quant_and_cache(self.layout, k, cache, slots, self.spec.layout)
            return
        keep = torch.nonzero(slots >= 0).flatten()
        if keep.numel() == 0:
            return
        x = k[keep]
        lay, n, variant = self.layout, self.layout.scales_per_token, self.spec.layout
        if hypothesis == "numerics.quant_block":
            # one scale per whole token: each quant block's slot holds the token's scale (the fp8 variants)
            whole = dataclasses.replace(lay, quant_block_size=lay.head_dim)
            scales = slice_scales(whole, x, variant).expand(-1, n).contiguous()
            per_value = scales.repeat_interleave(lay.quant_block_size, dim=1)
            codes = encode(x.float() / per_value, lay.element_format, lay.conversion_mode)
            scale_bytes = scales.view(torch.uint8).reshape(-1, 4 * n)
        elif hypothesis == "layout.scale_placement":
            codes, scale_bytes = encode_tokens(lay, x, variant)
        else:
            raise RtpRefError(f"unknown hypothesis {hypothesis!r}")
        block, offset = slots[keep] // self.spec.block_size, slots[keep] % self.spec.block_size
        if hypothesis == "layout.scale_placement":  # each token's scales right after its own values
            cache[block, offset] = torch.cat([codes, scale_bytes], dim=1)
            return
        blocks = cache.reshape(cache.shape[0], -1)
        d, t = lay.data_bytes_per_token, lay.trailing_bytes_per_token
        blocks[block[:, None], offset[:, None] * d + torch.arange(d)] = codes
        blocks[block[:, None], self.spec.block_size * d + offset[:, None] * t + torch.arange(t)] = scale_bytes

    def hypotheses(self) -> list[str]:
        """The wrong hypotheses this case can tell apart from the contract."""
        out = ["layout.scale_placement"]
        if self.spec.quant_block < self.spec.width and self.layout.fp4 is None:
            out.append("numerics.quant_block")
        return out


def nvfp4_field_places(name: str, cache: torch.Tensor, layer: torch.Tensor, page: Nvfp4Page,
                       scale_order: ScaleOrder) -> list[FieldPlaces]:
    """The places of one ``nvfp4`` cache side over ``layer``: its codes (``name``) and scales (``name_scale``), each
    named by head and element (a swizzled NHD scale's two last dimensions form one index)."""
    codes, scales, slot_dims = side_views(cache, page, scale_order)
    labels = ("head", "") if scales.dim() == 6 else ("head",)
    return [field_places(name, codes, layer, field_element(ELEMENT_E2M1), 2, ("head",)),
            field_places(f"{name}_scale", scales, layer, field_element(NVFP4_SCALE_ELEMENT), slot_dims, labels)]


def _both_orders_fit(page: Nvfp4Page) -> bool:
    """Whether both scale orders are permutations of ``page``'s scale area (the swizzle needs multiples of 4)."""
    try:
        page.check_scale_order(ScaleOrder.SWIZZLED_4_TOKEN)
    except RtpRefError:
        return False
    return True


MhaIndexerCase = MhaCase | IndexerCase


def build_mha_indexer_case(spec: MhaIndexerSpec, contract: WriteContract, device: torch.device | str,
                      guard: int = GUARD_BYTES) -> MhaIndexerCase:
    """The inputs and canary-filled caches of ``spec`` on ``device`` under ``contract``, ``guard`` bytes of canary
    before, between and after the caches."""
    cls = MhaCase if spec.op == MHA_OP else IndexerCase
    return cls(spec, contract, device, guard)
