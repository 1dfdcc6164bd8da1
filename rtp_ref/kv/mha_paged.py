"""The MHA paged cache as data, and its reference writer: vLLM's ``reshape_and_cache_flash``.

Sources: docs/sources.md#the-mha-paged-cache (vLLM ``csrc/cache.h`` and ``csrc/cache_kernels.cu``:
``reshape_and_cache_flash(key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype, k_scale,
v_scale)``; per-head scales since vLLM #30141; rtp-llm ``MHAKVCacheSpec.h`` for the per-rank head count).

Contract: ``key`` and ``value`` are ``[T, H, D]`` (any strides); ``key_cache`` and ``value_cache`` are
``[num_blocks, block_size, H, D]`` views in NHD order, or the same index order over HND storage
(``[num_blocks, H, block_size, D]`` permuted: the order is expressed through strides, as in vLLM). Token
``t`` with ``slot_mapping[t] = s >= 0`` (int64, or int32 naming the same slots) goes to block
``s // block_size``, row ``s % block_size``; a negative slot writes nothing; only the first
``slot_mapping.numel()`` tokens are written (vLLM pads key for CUDA graphs). ``auto`` copies the bits (the
caches' dtype is the inputs'); ``fp8`` and ``fp8_e5m2`` store ``encode(x / scale)`` with the scale of the token's
head (``k_scale``/``v_scale`` of shape ``[1]`` or 0-D per tensor, ``[H]`` per head), the quotient in fp32 (vLLM's
CUDA path divides: ``__nv_cvt_float_to_fp8(x / scale, __NV_SATFINITE, ...)``). ``nvfp4`` caches are uint8
``[num_blocks, block_size, H, D/2 + D/16]`` (the last dimension a size: a block's bytes are laid out by
rtp_ref.kv.nvfp4_page), written under the per-tensor decode scales (``[1]`` or 0-D) by rtp_ref.fp4.nvfp4, the V
scales in the layout flag ``nvfp4_v_scale_order``'s order.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, replace
from typing import cast

import torch

from rtp_ref.errors import RtpRefError
from rtp_ref.fp4.e2m1 import NegativeZero
from rtp_ref.fp4.nvfp4 import Nvfp4Conventions
from rtp_ref.fp4.quantize import PayloadDivision
from rtp_ref.fp4.scales import AmaxDivision
from rtp_ref.fp8.codec import encode
from rtp_ref.fp8.formats import FP8_FORMATS, ConversionMode, FormatSource, Fp8Format
from rtp_ref.kv.fields import ELEMENT_E2M1, ELEMENT_INPUT16, Field, Placement, is_fp8_element
from rtp_ref.kv.flags import FlagSource, LayoutFlags, resolve_flags
from rtp_ref.kv.mha_indexer_records import MHA_VARIANTS, NVFP4_SCALE_ELEMENT, variant_record
from rtp_ref.kv.nvfp4_page import Nvfp4Page, ScaleOrder, check_head_size, order_of, write_nvfp4_side
from rtp_ref.kv.place_fields import place_fields
from rtp_ref.kv.records import ELEMENT_FP8
from rtp_ref.kv.validate import (
    SLOT_DTYPES,
    check_input_dtype,
    check_rows,
    check_slot_mapping,
    check_tensor,
    dtype_name,
)

#: the cache dtypes of the op, as vLLM names them: the names of its variant records
MHA_CACHE_DTYPES = tuple(r.name for r in MHA_VARIANTS)
#: the variants whose values are the inputs' bits or fp8 codes, a head's D values in D elements
FP8_MHA_CACHE_DTYPES = tuple(r.name for r in MHA_VARIANTS if r.element != ELEMENT_E2M1)
#: how a block's rows and heads are ordered in memory
CACHE_ORDERS = ("NHD", "HND")


@dataclass(frozen=True)
class MhaPagedLayout:
    """One MHA paged layout: K and V caches of ``num_kv_heads`` heads of ``head_size`` values per token.

    ``element_format`` is None for ``auto`` (the inputs' own 16-bit type, bits copied) and ``nvfp4`` (E2M1 codes,
    ``fp4`` its conventions, ``v_scale_order`` its V scales' order); ``fields`` is the variant record's field table
    placed for these heads (rtp_ref.kv.mha_indexer_records).
    """

    kv_cache_dtype: str
    num_kv_heads: int
    head_size: int
    element_format: Fp8Format | None
    conversion_mode: ConversionMode
    fields: tuple[Field, ...]
    fp4: Nvfp4Conventions | None = None
    v_scale_order: ScaleOrder = ScaleOrder.LINEAR

    def _bytes_per_token(self, area: str) -> int:
        return sum(f.size for f in self.fields if f.area == area and f.placement is not Placement.EXTERNAL)

    @property
    def row_width(self) -> int:
        """The caches' last dimension: ``head_size`` values, or ``nvfp4``'s D/2 + D/16 bytes."""
        return self.head_size if self.fp4 is None else self.k_bytes_per_token() // self.num_kv_heads

    @property
    def calibration_max(self) -> float:
        """The largest value a calibrated per-tensor scale maps a tensor's amax to: the fp8 format's largest, nvfp4's
        6 x 448 (E2M1's largest times its e4m3 block scale's: NVIDIA's global-scale recipe), 1 for ``auto`` (no
        scale is read)."""
        if self.element_format is not None:
            return self.element_format.max_value
        return 6.0 * 448.0 if self.fp4 is not None else 1.0

    def page(self, block_size: int, order: str) -> Nvfp4Page:
        """``nvfp4``: one side of a block of ``block_size`` tokens in ``order`` (rtp_ref.kv.nvfp4_page)."""
        return Nvfp4Page(block_size, self.num_kv_heads, self.head_size, order)

    def k_bytes_per_token(self) -> int:
        """Bytes of one token's keys in ``key_cache``: H * D values of 1 byte (fp8) or 2 (auto)."""
        return self._bytes_per_token("key_cache")

    def v_bytes_per_token(self) -> int:
        """Bytes of one token's values in ``value_cache``."""
        return self._bytes_per_token("value_cache")

    def cache_dtype(self, input_dtype: torch.dtype) -> torch.dtype:
        """The cache tensors' dtype: the inputs' for ``auto``, uint8 codes for fp8 and nvfp4."""
        return input_dtype if self.element_format is None and self.fp4 is None else torch.uint8

    def new_cache(self, num_blocks: int, block_size: int, order: str, input_dtype: torch.dtype,
                  device: torch.device | str = "cpu") -> torch.Tensor:
        """A zeroed cache in ``order``, always indexed ``[block, row, head, dim]``."""
        if order not in CACHE_ORDERS:
            raise RtpRefError(f"order {order!r}; valid: {', '.join(CACHE_ORDERS)}")
        dtype, width = self.cache_dtype(input_dtype), self.row_width
        if order == "NHD":
            return torch.zeros(num_blocks, block_size, self.num_kv_heads, width, dtype=dtype, device=device)
        hnd = torch.zeros(num_blocks, self.num_kv_heads, block_size, width, dtype=dtype, device=device)
        return hnd.permute(0, 2, 1, 3)


def mha_head_size(kv_cache_dtype: str, width: int) -> int:
    """The head size of a cache of ``kv_cache_dtype`` whose last dimension is ``width``: itself, or ``nvfp4``'s
    D of D/2 + D/16 (a width that is no such size gives 0, which ``mha_layout`` refuses)."""
    if variant_record(MHA_VARIANTS, kv_cache_dtype, "kv_cache_dtype").element != ELEMENT_E2M1:
        return width
    return 16 * width // 9 if width % 9 == 0 else 0


def _flags_of(platform: FormatSource) -> LayoutFlags:
    """The layout flags of a kernel's bound contract (rtp_ref.contract.WriteContract), or a platform table's own."""
    flags = getattr(platform, "flags", None)
    return flags if isinstance(flags, LayoutFlags) else resolve_flags(cast(FlagSource, platform))


def _nvfp4_layout(platform: FormatSource, name: str, record_fields: tuple[Field, ...], num_kv_heads: int,
                  head_size: int) -> MhaPagedLayout:
    """``nvfp4``'s layout: its conventions and V-scale order from the layout flags."""
    flags = _flags_of(platform)
    conventions = Nvfp4Conventions(name, AmaxDivision.MUL_ONE_SIXTH, PayloadDivision(flags.nvfp4_value_quotient),
                                   NegativeZero(flags.fp4_negative_zero), "the layout flags")
    return MhaPagedLayout(name, num_kv_heads, head_size, None, platform.conversion_mode, record_fields,
                          conventions, ScaleOrder(flags.nvfp4_v_scale_order))


def mha_layout(platform: FormatSource, kv_cache_dtype: str, num_kv_heads: int, head_size: int,
               element_format: Fp8Format | None = None) -> MhaPagedLayout:
    """The layout of ``kv_cache_dtype`` on ``platform`` (a platform table, or a kernel's bound contract): ``fp8`` is
    the platform's e4m3 (e4m3fnuz on gfx942),
    ``fp8_e5m2`` is OCP e5m2; ``element_format`` overrides either (a cache's format is the cache's: one
    model can keep two caches in two formats on one platform); ``nvfp4`` follows the layout flags (its payload
    division, -0.0 rule and V-scale order) and needs a head size that is a multiple of 16."""
    record = variant_record(MHA_VARIANTS, kv_cache_dtype, "kv_cache_dtype")
    for name, value in (("num_kv_heads", num_kv_heads), ("head_size", head_size)):
        if value < 1:
            raise RtpRefError(f"{name} {value} is not valid; valid: >= 1")
    if record.element == ELEMENT_E2M1:
        if element_format is not None:
            raise RtpRefError(f"kv_cache_dtype {kv_cache_dtype!r} stores E2M1 codes; an element format needs fp8")
        check_head_size(head_size)
        fields = place_fields(record.fields, {"HD": num_kv_heads * head_size, "HD/16": num_kv_heads * head_size // 16},
                              FP8_FORMATS[NVFP4_SCALE_ELEMENT])
        return _nvfp4_layout(platform, record.name, fields, num_kv_heads, head_size)
    if record.element == ELEMENT_INPUT16:
        if element_format is not None:
            raise RtpRefError(f"kv_cache_dtype {kv_cache_dtype!r} stores the inputs' own type; an element format "
                              "needs fp8")
        fmt = None
    else:
        fmt = element_format or (platform.element_format if record.element == ELEMENT_FP8 else
                                 FP8_FORMATS[record.element])
    # the cache's format, given or the variant's, is the one every fp8 field is stored in
    records = [replace(f, element=ELEMENT_FP8) if is_fp8_element(f.element) else f for f in record.fields]
    fields = place_fields(records, {"HD": num_kv_heads * head_size}, fmt or platform.element_format)
    return MhaPagedLayout(kv_cache_dtype, num_kv_heads, head_size, fmt, platform.conversion_mode, fields)


def validate_mha_args(layout: MhaPagedLayout, key: object, value: object, key_cache: object, value_cache: object,
                      slot_mapping: object, k_scale: object, v_scale: object, values: bool = True,
                      slot_dtypes: Collection[torch.dtype] = tuple(SLOT_DTYPES.values())) -> None:
    """Check one ``reshape_and_cache_flash`` call against ``layout`` (the module doc says what is valid; a slot
    mapping of one of ``slot_dtypes``); without ``values``, metadata only (no device sync: the slots' values are not
    checked)."""
    kc = check_tensor("key_cache", key_cache, None)
    device = kc.device
    vc = check_tensor("value_cache", value_cache, device)
    k, v = check_tensor("key", key, device), check_tensor("value", value, device)
    check_input_dtype("key", k.dtype)
    if v.dtype != k.dtype:
        raise RtpRefError(f"value: dtype {dtype_name(v.dtype)}; valid: key's dtype {dtype_name(k.dtype)}")
    heads, size, width = layout.num_kv_heads, layout.head_size, layout.row_width
    want = layout.cache_dtype(k.dtype)
    for arg, cache in (("key_cache", kc), ("value_cache", vc)):
        if cache.dim() != 4 or tuple(cache.shape[2:]) != (heads, width) or cache.shape[:2] != kc.shape[:2]:
            raise RtpRefError(f"{arg}: shape {tuple(cache.shape)}; valid: [num_blocks, block_size, {heads}, {width}] "
                              f"(the same for both caches; HND through strides)")
        if cache.dtype != want or cache.stride(-1) != 1:
            raise RtpRefError(f"{arg}: dtype {dtype_name(cache.dtype)}, strides {cache.stride()}; valid: "
                              f"{dtype_name(want)} for {layout.kv_cache_dtype}, a contiguous last dimension")
    slots = check_slot_mapping(slot_mapping, device, kc.shape[0], kc.shape[1], values, slot_dtypes)
    for arg, x in (("key", k), ("value", v)):
        check_rows(arg, x, slots.numel(), (heads, size))
    if layout.element_format is None and layout.fp4 is None:
        return
    counts = (1,) if layout.fp4 is not None else (1, heads)
    for arg, scale in (("k_scale", k_scale), ("v_scale", v_scale)):
        s = check_tensor(arg, scale, device)
        if s.dtype != torch.float32 or s.numel() not in counts:
            raise RtpRefError(f"{arg}: dtype {dtype_name(s.dtype)} with {s.numel()} values; valid: float32 with 1 "
                              f"(per tensor){'' if layout.fp4 is not None else f' or {heads} (per head)'}")
    if layout.fp4 is not None:
        for arg, cache in (("key_cache", kc), ("value_cache", vc)):
            if cache.stride(0) < layout.page(kc.shape[1], order_of(cache)).side_bytes:
                raise RtpRefError(f"{arg}: strides {cache.stride()}; valid: blocks at least a block's bytes apart")
        layout.page(kc.shape[1], order_of(vc)).check_scale_order(layout.v_scale_order)


def scale_step(scale: torch.Tensor, heads: int) -> int:
    """How far apart two heads' scales lie in a valid ``k_scale``/``v_scale``: 1 when it holds one per head,
    0 when one value serves every head (per tensor). k_scale's and v_scale's are independent."""
    return 1 if scale.numel() == heads > 1 else 0


def _store(layout: MhaPagedLayout, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """The cache elements of ``x`` ``[T, H, D]``: its bits (auto), or the fp8 codes of ``x / scale`` in fp32."""
    if layout.element_format is None:
        return x
    per_head = scale.to(torch.float32).reshape(1, -1, 1)
    return encode(x.to(torch.float32) / per_head, layout.element_format, layout.conversion_mode)


def reference_reshape_and_cache_flash(layout: MhaPagedLayout, key: torch.Tensor, value: torch.Tensor,
                                      key_cache: torch.Tensor, value_cache: torch.Tensor,
                                      slot_mapping: torch.Tensor, k_scale: torch.Tensor,
                                      v_scale: torch.Tensor) -> None:
    """Write ``key``/``value`` into the caches as the module doc states (CPU tensors; in place); bad arguments
    raise RtpRefError before anything is written (validate_mha_args)."""
    validate_mha_args(layout, key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale)
    tokens = slot_mapping.numel()
    block_size = key_cache.shape[1]
    slots = slot_mapping.to(torch.int64)
    valid = torch.nonzero(slots >= 0).flatten()
    if layout.fp4 is not None:
        for cache, x, scale, order in ((key_cache, key, k_scale, ScaleOrder.LINEAR),
                                       (value_cache, value, v_scale, layout.v_scale_order)):
            write_nvfp4_side(cache, x[:tokens], slots, scale, layout.fp4, order)
        return
    blocks, rows = slots[valid] // block_size, slots[valid] % block_size
    key_cache[blocks, rows] = _store(layout, key[:tokens][valid], k_scale)
    value_cache[blocks, rows] = _store(layout, value[:tokens][valid], v_scale)
