"""What a platform's NVFP4 MHA readers see in a written ``nvfp4`` cache: its values as a reader of that platform's
V-scale order decodes them.

SM100's trtllm-gen attention reads the V scales swizzled in 4-token groups, SM120/121's readers linearly (vLLM
#50084): a cache written in one order and read in the other pairs each value with another token's or block's scale.
The platform table's layout flag ``nvfp4_v_scale_order`` says which order its readers take; ``nvfp4_reader_changes``
decodes the written tokens of a golden file's caches in the file's own order and in the reader's, and compares.
"""

from __future__ import annotations

import torch

from rtp_ref.kv.mha_paged import MhaPagedLayout
from rtp_ref.kv.nvfp4_page import ScaleOrder, read_nvfp4_side
from rtp_ref.kv.reader_view import ReadChange, value_change


def rel_l2(stored: torch.Tensor, read: torch.Tensor) -> float:
    """``||read - stored|| / ||stored||`` over the values read as finite numbers (a scale byte read from a token
    never written can be NaN: ``ReadChange.broken`` counts those); 0 where the stored values are all zero."""
    keep = torch.isfinite(read)
    norm = float(torch.linalg.vector_norm(stored[keep].double()))
    return float(torch.linalg.vector_norm((read - stored)[keep].double())) / norm if norm else 0.0


def nvfp4_reader_changes(layout: MhaPagedLayout, key_cache: torch.Tensor, value_cache: torch.Tensor,
                         slots: torch.Tensor, k_scale: torch.Tensor, v_scale: torch.Tensor,
                         reader_v_order: ScaleOrder) -> list[tuple[ReadChange, float]]:
    """How a reader of ``reader_v_order`` takes the tokens written at ``slots`` (negative ones skipped) of caches
    written under ``layout`` (the kernel's views: ``[blocks, rows, heads, width]``, HND through strides): per cache,
    a ``ReadChange`` of its values and the relative L2 error of what the reader sees (K's scales are linear for every
    reader)."""
    written = slots.to(torch.int64)[slots >= 0]
    label = [f"slot {s}" for s in written.tolist()]
    out = []
    for name, cache, scale, written_order, read_order in (
            ("K values", key_cache, k_scale, ScaleOrder.LINEAR, ScaleOrder.LINEAR),
            ("V values", value_cache, v_scale, layout.v_scale_order, reader_v_order)):
        stored, read = (read_nvfp4_side(cache, written, layout.num_kv_heads, layout.head_size, scale, order)
                        .reshape(written.numel(), -1) for order in (written_order, read_order))
        out.append((value_change(name, stored, read, label), rel_l2(stored, read)))
    return out
