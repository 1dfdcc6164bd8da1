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

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import torch

from rtp_ref.errors import RtpRefError
from rtp_ref.kv.entries import decode_entries, encode_entries
from rtp_ref.kv.fields import Field, Source
from rtp_ref.kv.layouts import MlaLayout, layout_for_platform
from rtp_ref.kv.validate import validate_read_args, validate_write_args

if TYPE_CHECKING:
    from rtp_ref.kv.platform_table import PlatformTable

#: vLLM's other spelling of the per-tensor fp8 layout.
KV_CACHE_DTYPE_ALIASES = {"fp8_e4m3": "fp8"}


def _byte_view(kv_cache: torch.Tensor) -> torch.Tensor:
    """The cache as uint8 ``[num_blocks, block_size, bytes_per_token]`` sharing its memory."""
    return kv_cache if kv_cache.dtype == torch.uint8 else kv_cache.view(torch.uint8)


def _field_views(layout: MlaLayout, kv_cache: torch.Tensor) -> list[tuple[Field, int, torch.Tensor]]:
    """Each cache field with its entry offset and a strided uint8 view ``[num_blocks, block_size, size]`` of the
    cache's memory: ``view[b, t]`` holds token t of block b's bytes of the field (``MlaLayout.page_map``).

    Whole-field views replace per-byte index tensors, so a 65,536-token case gathers in milliseconds. The
    per-token stride of the cache is its entry (``validate_write_args`` checks it); the block stride may be padded.
    """
    view = _byte_view(kv_cache)
    num_blocks, block_size = view.shape[0], view.shape[1]
    return [
        (p.field, layout.entry_offset(p.field),
         torch.as_strided(view, (num_blocks, block_size, p.field.size), (view.stride(0), p.per_token, 1),
                          view.storage_offset() + p.start))
        for p in layout.page_map(block_size)
    ]


def _block_rows(kv_cache: torch.Tensor, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(block, token-in-block) of each slot, as int64 on the cache's device."""
    block_size = kv_cache.shape[1]
    slots = slots.to(device=kv_cache.device, dtype=torch.int64)
    return slots // block_size, slots % block_size


def scatter_entries(layout: MlaLayout, entries: torch.Tensor, kv_cache: torch.Tensor, slots: torch.Tensor) -> None:
    """Write entry ``i`` (uint8 ``[n, bytes_per_token]``) to slot ``slots[i]`` (all >= 0) of the cache.

    Pad bytes are skipped (a ``zero`` field's are written: 0 in every entry). No validation: callers check first
    (``validate_write_args``).
    """
    blocks, rows = _block_rows(kv_cache, slots)
    entries = entries.to(kv_cache.device)
    for f, offset, field_bytes in _field_views(layout, kv_cache):
        if f.source is not Source.PAD:
            field_bytes[blocks, rows] = entries[:, offset: offset + f.size]


def gather_entries(layout: MlaLayout, kv_cache: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """The entries stored at ``slots``: uint8 ``[n, bytes_per_token]`` (pad bytes as found in the cache)."""
    blocks, rows = _block_rows(kv_cache, slots)
    entries = torch.empty((blocks.shape[0], layout.bytes_per_token), dtype=torch.uint8, device=kv_cache.device)
    for f, offset, field_bytes in _field_views(layout, kv_cache):
        entries[:, offset: offset + f.size] = field_bytes[blocks, rows]
    return entries


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
    reference_write_each(layout, kv_c, k_pe, (kv_cache,), slot_mapping, scale)


def reference_write_each(
    layout: MlaLayout,
    kv_c: torch.Tensor,
    k_pe: torch.Tensor,
    kv_caches: Sequence[torch.Tensor],
    slot_mapping: torch.Tensor,
    scale: torch.Tensor,
) -> None:
    """``reference_write`` of one call into each of ``kv_caches``, encoding the tokens once (a grader's canary
    images of a 65,536-token case). Every cache is validated before any is written."""
    for kv_cache in kv_caches:
        validate_write_args(layout, kv_c, k_pe, kv_cache, slot_mapping, scale)
    tokens = slot_mapping.shape[0]
    slots = slot_mapping.to(torch.int64)  # an int32 mapping names the same slots; offsets are computed in 64 bits
    keep = slots >= 0
    entries = encode_entries(layout, kv_c[:tokens][keep], k_pe[:tokens][keep], scale)
    for kv_cache in kv_caches:
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
