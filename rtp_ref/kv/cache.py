"""The reference cache writer and reader: ``concat_and_cache_mla`` for every layout, in torch.

Contract (vLLM ``vllm._custom_ops`` and rtp-llm ``rtp_llm.ops.compute_ops`` share it):

* ``slot_mapping[i]`` (int64, or int32 naming the same slots) is ``block * block_size + offset`` for token i;
  a negative slot writes nothing (vLLM's ``slot_idx < 0``: CUDA-graph padding). Only the first
  ``len(slot_mapping)`` rows of kv_c / k_pe are tokens; more rows may follow (vLLM V1 pads them) and are ignored.
* Under ``auto`` the cache's dtype is the inputs' (a bf16 input's bits in an fp16 cache read back as other
  numbers), and ``scale`` is float32 of one element, ``[1]`` or 0-D.
* ``kv_cache`` is ``[num_blocks, block_size, entry]`` (``rtp_ref.kv.layouts``); the block stride
  ``kv_cache.stride(0)`` may be padded and is honoured.
* Only the bytes of the target entries change (for fp8_model1_mla also the tokens' block-trailing
  scale bytes; its pad byte is never written). Every other byte of the cache is left as it was.
* Inputs are bf16/fp16 with a contiguous last dimension; rows may be strided (slices of a wider tensor).

``reference_write`` mutates the cache in place like a kernel; ``encode_entries`` (rtp_ref.kv.entries)
is the pure per-token part; ``read_slots`` decodes chosen slots back to float32.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch

from rtp_ref.errors import RtpRefError
from rtp_ref.kv.entries import decode_entries, encode_entries
from rtp_ref.kv.fields import Source
from rtp_ref.kv.layouts import MlaLayout, layout_for_platform
from rtp_ref.kv.validate import validate_read_args, validate_write_args

if TYPE_CHECKING:
    from rtp_ref.kv.platform_table import PlatformTable

#: vLLM's other spelling of the per-tensor fp8 layout.
KV_CACHE_DTYPE_ALIASES = {"fp8_e4m3": "fp8"}


def _byte_view(kv_cache: torch.Tensor) -> torch.Tensor:
    """The cache as uint8 ``[num_blocks, block_size, bytes_per_token]`` sharing its memory."""
    return kv_cache if kv_cache.dtype == torch.uint8 else kv_cache.view(torch.uint8)


def _entry_bytes(layout: MlaLayout, *, written_only: bool) -> torch.Tensor:
    """Entry byte indices of the cache fields (without pad bytes when ``written_only``)."""
    ranges = [
        torch.arange(layout.entry_offset(f), layout.entry_offset(f) + f.size)
        for f in layout.entry_fields
        if not (written_only and f.source is Source.PAD)
    ]
    return torch.cat(ranges)


def _locations(
    layout: MlaLayout, kv_cache: torch.Tensor, slots: torch.Tensor, columns: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Index tensors (block, row, column) into the byte view for entry bytes ``columns`` of ``slots``."""
    block_size = kv_cache.shape[1]
    columns = columns.to(slots.device)
    positions = layout.block_byte_positions(slots % block_size, columns, block_size)
    blocks = (slots // block_size).unsqueeze(1).expand_as(positions)
    width = layout.bytes_per_token
    return blocks, positions // width, positions % width


def scatter_entries(layout: MlaLayout, entries: torch.Tensor, kv_cache: torch.Tensor, slots: torch.Tensor) -> None:
    """Write entry ``i`` (uint8 ``[n, bytes_per_token]``) to slot ``slots[i]`` (all >= 0) of the cache.

    Pad bytes are skipped. No validation: callers check first (``validate_write_args``).
    """
    columns = _entry_bytes(layout, written_only=True)
    index = _locations(layout, kv_cache, slots, columns)
    _byte_view(kv_cache)[index] = entries[:, columns.to(entries.device)]


def gather_entries(layout: MlaLayout, kv_cache: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """The entries stored at ``slots``: uint8 ``[n, bytes_per_token]`` (pad bytes as found in the cache)."""
    columns = _entry_bytes(layout, written_only=False)
    return _byte_view(kv_cache)[_locations(layout, kv_cache, slots, columns)]


def reference_write(
    layout: MlaLayout,
    kv_c: torch.Tensor,
    k_pe: torch.Tensor,
    kv_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    scale: torch.Tensor,
) -> None:
    """Write tokens into ``kv_cache`` in place, as a conforming ``concat_and_cache_mla`` kernel must.

    Validates everything first (``validate_write_args``): bad input raises RtpRefError and leaves
    the cache untouched. The resulting cache image is the expected output for the same call on a kernel.
    """
    validate_write_args(layout, kv_c, k_pe, kv_cache, slot_mapping, scale)
    tokens = slot_mapping.shape[0]
    slots = slot_mapping.to(torch.int64)  # an int32 mapping names the same slots; offsets are computed in 64 bits
    keep = slots >= 0
    entries = encode_entries(layout, kv_c[:tokens][keep], k_pe[:tokens][keep], scale)
    scatter_entries(layout, entries, kv_cache, slots[keep])


def read_slots(
    layout: MlaLayout,
    kv_cache: torch.Tensor,
    slots: torch.Tensor,
    scale: torch.Tensor,
    input_dtype: torch.dtype = torch.bfloat16,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Decode the tokens at ``slots`` (int64, in 0..capacity-1) to float32 ``(kv_c [n, R], k_pe [n, P])``.

    ``input_dtype`` is the dtype the writer was given (how 16-bit fields are read); ``scale`` the
    per-tensor scale (used by layouts with an external scale).
    """
    validate_read_args(layout, kv_cache, slots, scale, input_dtype)
    return decode_entries(layout, gather_entries(layout, kv_cache, slots), scale, input_dtype)


def concat_and_cache_mla(
    kv_c: torch.Tensor,
    k_pe: torch.Tensor,
    kv_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    kv_cache_dtype: str,
    scale: torch.Tensor,
    *,
    platform: PlatformTable,
    layout_flags: Mapping[str, str] | None = None,
) -> None:
    """The kernels' signature over the reference: layout ``kv_cache_dtype``, R and P from the inputs.

    ``platform`` supplies the fp8 format, conversion mode and default flags; ``layout_flags`` are
    ``--layout-flag`` overrides. An R/P the layout does not support raises RtpRefError naming it.
    """
    for arg, x in (("kv_c", kv_c), ("k_pe", k_pe)):
        if not isinstance(x, torch.Tensor) or x.dim() != 2:
            shown = list(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise RtpRefError(f"{arg}: {shown} is not a 2-dim tensor; valid: [num_tokens, dim]")
    name = KV_CACHE_DTYPE_ALIASES.get(kv_cache_dtype, kv_cache_dtype)
    layout = layout_for_platform(
        platform, name, kv_lora_rank=kv_c.shape[1], rope_dim=k_pe.shape[1], overrides=layout_flags
    )
    reference_write(layout, kv_c, k_pe, kv_cache, slot_mapping, scale)
