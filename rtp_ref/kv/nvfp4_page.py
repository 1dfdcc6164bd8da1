"""The NVFP4 MHA paged cache's page: where each token's E2M1 codes and e4m3 block scales lie, and the reference
writer of one side (K or V) of it.

Sources: vLLM ``csrc/libtorch_stable/nvfp4_kv_cache_kernels.cu`` (``reshape_and_cache_nvfp4_kernel``, PR #37332;
the version of PR #55976, vllm-project/vllm@0cd789b397ef); FlashInfer ``nvfp4_quantize_paged_kv_cache``
(flashinfer-ai/flashinfer@fb28d7242b35:flashinfer/quantization/fp4_quantization.py), whose bytes vLLM #49012 reports
equal to vLLM's.

A cache side is ``uint8 [num_blocks, block_size, H, D/2 + D/16]`` indexed as vLLM's kernel indexes it (NHD, or HND
through strides: ``stride(2) > stride(1)``); its last dimension is a size, not a place. A block of ``T`` tokens holds
``T * H * (D/2 + D/16)`` bytes from the block's first byte (``stride(0)`` apart): first the packed E2M1 codes of
every (token, head), ``D/2`` bytes each (value ``2i`` in the low nibble of byte ``i``), then their e4m3 scales,
``S = D/16`` each, one per 16 values. Both areas follow the cache's order: NHD puts (token ``t``, head ``h``) at row
``t * H + h``, HND at ``h * T + t``. The scales are stored

* ``linear``: row by row, as the codes; or
* ``swizzled_4_token`` (the order SM100's trtllm-gen attention reads): within each group of 4 tokens, the ``[4, S]``
  scales of a head are stored transposed, ``[S, 4]``; under HND, head ``h``'s scale ``s`` of token ``t`` is at
  ``h * T * S + (t // 4) * 4 * S + 4 * s + t % 4`` of the scale area; under NHD the group's ``4 * S`` bytes of a
  head are spread over the group's 4 token rows, ``S`` bytes in each (vLLM ``swizzle_scale_offset``; FlashInfer
  permutes ``[P, T/4, 4, H, 4, S/4]`` by ``(0, 1, 4, 3, 5, 2)``). It needs ``T % 4 == 0`` and ``S % 4 == 0``
  (``D % 64 == 0``): otherwise it is no permutation of the area (vLLM checks only ``D % 16``).

Which order each side uses is the platform's convention: SM100 swizzles V's scales and keeps K's linear; SM120/121
readers read both linearly (vLLM #50084; the fix #55976 swizzles V only where the compute capability's major is
below 12).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import torch

from rtp_ref.errors import RtpRefError
from rtp_ref.fp4.e2m1 import decode as decode_e2m1
from rtp_ref.fp4.e2m1 import pack, unpack
from rtp_ref.fp4.nvfp4 import NVFP4_BLOCK, Nvfp4Conventions, nvfp4_quantize
from rtp_ref.fp8.codec import decode as decode_fp8
from rtp_ref.fp8.formats import E4M3FN

#: the two orders a cache side's rows may follow
ROW_ORDERS = ("NHD", "HND")
#: tokens per group of the swizzled scale order
SWIZZLE_TOKENS = 4


class ScaleOrder(str, Enum):
    """How a side's scale area orders its bytes (module doc)."""

    LINEAR = "linear"
    SWIZZLED_4_TOKEN = "swizzled_4_token"


def other_scale_order(order: ScaleOrder) -> ScaleOrder:
    """The scale order that is not ``order``: what a writer of the other platform's convention stores."""
    return ScaleOrder.LINEAR if ScaleOrder(order) is ScaleOrder.SWIZZLED_4_TOKEN else ScaleOrder.SWIZZLED_4_TOKEN


def check_head_size(head_size: int) -> None:
    """RtpRefError unless ``head_size`` is a positive multiple of 16 (whole blocks of one scale each)."""
    if head_size < NVFP4_BLOCK or head_size % NVFP4_BLOCK:
        raise RtpRefError(f"head_size {head_size}; valid: a positive multiple of {NVFP4_BLOCK} for nvfp4")


@dataclass(frozen=True)
class Nvfp4Page:
    """One side of one block: ``block_size`` tokens of ``heads`` heads of ``head_size`` values, rows in ``order``."""

    block_size: int
    heads: int
    head_size: int
    order: str

    def __post_init__(self) -> None:
        if self.order not in ROW_ORDERS:
            raise RtpRefError(f"order {self.order!r}; valid: {', '.join(ROW_ORDERS)}")
        check_head_size(self.head_size)

    @property
    def code_bytes(self) -> int:
        """Bytes of one (token, head)'s codes: D/2."""
        return self.head_size // 2

    @property
    def scales(self) -> int:
        """Scales of one (token, head): D/16."""
        return self.head_size // NVFP4_BLOCK

    @property
    def row_bytes(self) -> int:
        """Bytes per (token, head), codes and scales: D/2 + D/16 (the cache's last dimension)."""
        return self.code_bytes + self.scales

    @property
    def side_bytes(self) -> int:
        """Bytes of the side of a block: T * H * (D/2 + D/16)."""
        return self.block_size * self.heads * self.row_bytes

    def _rows(self) -> torch.Tensor:
        """int64 ``[T, H]``: each (token, head)'s row in the order's areas."""
        t = torch.arange(self.block_size).reshape(-1, 1)
        h = torch.arange(self.heads).reshape(1, -1)
        return t * self.heads + h if self.order == "NHD" else h * self.block_size + t

    def code_offsets(self) -> torch.Tensor:
        """int64 ``[T, H, D/2]``: the side offset of each code byte."""
        return self._rows().unsqueeze(-1) * self.code_bytes + torch.arange(self.code_bytes)

    def check_scale_order(self, scale_order: ScaleOrder) -> None:
        """RtpRefError where ``scale_order`` is no permutation of this page's scale area (module doc)."""
        if ScaleOrder(scale_order) is ScaleOrder.SWIZZLED_4_TOKEN and (
                self.block_size % SWIZZLE_TOKENS or self.scales % SWIZZLE_TOKENS):
            raise RtpRefError(f"block_size {self.block_size}, head_size {self.head_size}; valid for the "
                              f"{ScaleOrder.SWIZZLED_4_TOKEN.value} scale order: block_size a multiple of "
                              f"{SWIZZLE_TOKENS} and head_size a multiple of {NVFP4_BLOCK * SWIZZLE_TOKENS}")

    def scale_offsets(self, scale_order: ScaleOrder) -> torch.Tensor:
        """int64 ``[T, H, D/16]``: the side offset of each scale byte under ``scale_order``."""
        self.check_scale_order(scale_order)
        area = self.block_size * self.heads * self.code_bytes
        s = torch.arange(self.scales)
        if ScaleOrder(scale_order) is ScaleOrder.LINEAR:
            return area + self._rows().unsqueeze(-1) * self.scales + s
        t = torch.arange(self.block_size).reshape(-1, 1, 1)
        h = torch.arange(self.heads).reshape(1, -1, 1)
        group, lane = t // SWIZZLE_TOKENS, t % SWIZZLE_TOKENS
        # the [4, S] group tile transposed to [S, 4]: scale s of lane l at 4 * s + l of the group's 4 * S bytes
        within = SWIZZLE_TOKENS * s + lane
        if self.order == "HND":
            return area + (h * self.block_size + group * SWIZZLE_TOKENS) * self.scales + within
        # NHD: the group's 4 * S bytes of head h lie S at a time in its 4 token rows (rows of H * S bytes)
        row, column = within // self.scales, within % self.scales
        return area + ((group * SWIZZLE_TOKENS + row) * self.heads + h) * self.scales + column


def order_of(cache: torch.Tensor) -> str:
    """The row order of a cache side as vLLM's kernel reads it: HND where ``stride(2) > stride(1)``."""
    return "HND" if cache.stride(2) > cache.stride(1) else "NHD"


def side_pages(cache: torch.Tensor, page: Nvfp4Page) -> torch.Tensor:
    """uint8 ``[num_blocks, side_bytes]``: each block's side bytes of ``cache``, a view (writing it writes the
    cache); a block's bytes start at its first element, ``stride(0)`` elements apart."""
    return torch.as_strided(cache, (cache.shape[0], page.side_bytes), (cache.stride(0), 1), cache.storage_offset())


def side_views(cache: torch.Tensor, page: Nvfp4Page, scale_order: ScaleOrder) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Views of a cache side's blocks (writing them writes the cache), slot dimensions first: ``(codes, scales,
    scale slot dims)``. The codes are ``[blocks, T, H, D/2]``; the scales ``[blocks, T, H, D/16]`` when linear (two
    slot dimensions), and when swizzled ``[blocks, T/4, 4, H, D/16]`` (HND) or ``[blocks, T/4, 4, H, 4, D/64]``
    (NHD, the last two one index ``s``), the 4-token group and lane (three slot dimensions, block-major as slots
    count)."""
    pages = side_pages(cache, page)
    T, H, S = page.block_size, page.heads, page.scales
    nb, area = cache.shape[0], T * H * page.code_bytes
    codes, scales = pages[:, :area], pages[:, area:]
    hnd = page.order == "HND"
    code_view = codes.reshape(nb, H, T, -1).permute(0, 2, 1, 3) if hnd else codes.reshape(nb, T, H, -1)
    if ScaleOrder(scale_order) is ScaleOrder.LINEAR:
        scale_view = scales.reshape(nb, H, T, S).permute(0, 2, 1, 3) if hnd else scales.reshape(nb, T, H, S)
        return code_view, scale_view, 2
    page.check_scale_order(scale_order)
    q = SWIZZLE_TOKENS
    if hnd:  # [head][group][s][lane] (Nvfp4Page.scale_offsets)
        return code_view, scales.reshape(nb, H, T // q, S, q).permute(0, 2, 4, 1, 3), 3
    # NHD: [group][s // (S/4)][head][s % (S/4)][lane]
    return code_view, scales.reshape(nb, T // q, q, H, S // q, q).permute(0, 1, 5, 3, 2, 4), 3


def write_nvfp4_side(cache: torch.Tensor, x: torch.Tensor, slots: torch.Tensor, k_scale: torch.Tensor,
                     conventions: Nvfp4Conventions, scale_order: ScaleOrder) -> None:
    """Write tokens ``x`` ``[N, H, D]`` to the slots ``slots`` (int64 ``[N]``, each in the cache; negative: not
    written) of the cache side ``cache`` (module doc), quantized under the decode scale ``k_scale`` (one float32)
    by ``conventions``, scales in ``scale_order``. Every written token's blocks must be finite (a block holding NaN
    or inf has no bytes here: RtpRefError)."""
    page = Nvfp4Page(cache.shape[1], x.shape[1], x.shape[2], order_of(cache))
    keep = slots >= 0
    quantized = nvfp4_quantize(x[keep], k_scale, conventions)
    if not bool(quantized.defined.all()):
        raise RtpRefError("nvfp4: a block of a written token holds NaN or inf; no writer states its bytes")
    blocks, rows = slots[keep] // page.block_size, slots[keep] % page.block_size
    pages = side_pages(cache, page)
    pages[blocks.reshape(-1, 1, 1), page.code_offsets()[rows]] = pack(quantized.codes)
    pages[blocks.reshape(-1, 1, 1), page.scale_offsets(scale_order)[rows]] = quantized.scales


def read_nvfp4_side(cache: torch.Tensor, slots: torch.Tensor, heads: int, head_size: int, k_scale: torch.Tensor,
                    scale_order: ScaleOrder) -> torch.Tensor:
    """The values a reader that takes the scales in ``scale_order`` sees at ``slots`` (int64 ``[N]``, each in the
    cache) of the cache side ``cache``: float32 ``[N, heads, head_size]``, each code's E2M1 value times its block's
    e4m3 scale times the decode scale ``k_scale`` (vLLM's ``dequant_nvfp4_kv_cache``; FlashInfer: "e2m1_value *
    block_scale * global_scale")."""
    page = Nvfp4Page(cache.shape[1], heads, head_size, order_of(cache))
    codes, scales, _ = side_views(cache.cpu(), page, scale_order)
    T, S = page.block_size, page.scales
    blocks, rows = slots // T, slots % T
    values = decode_e2m1(unpack(codes[blocks, rows].contiguous()))  # [N, H, D]
    block_scales = decode_fp8(scales.reshape(cache.shape[0], T, heads, S)[blocks, rows], E4M3FN)
    per_value = block_scales.repeat_interleave(NVFP4_BLOCK, dim=-1)
    return values * per_value * k_scale.to(torch.float32).reshape(())
