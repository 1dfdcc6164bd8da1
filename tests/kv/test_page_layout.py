"""A page-level field map (``Placement.PAGE_SEGMENT``): AITER's page-segmented DeepSeek V3.2 cache.

AITER's ``op_tests/test_mla_persistent.py`` (``split_3buffer_kv_cache``, ROCm/aiter at e4048607a535) lays a page
of B tokens out as ``[B x 512 fp8 | B x 4 fp32 | B x 64 bf16]``. The offsets below are written by hand for B = 64
from that statement, not derived from rtp_ref.kv; the tests/kv oracle walks the same map at random block sizes
(tests/kv/test_kv_writer.py).
"""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import torch

from rtp_ref.errors import RtpRefError
from rtp_ref.kv.cache import read_slots, reference_write
from rtp_ref.kv.fields import Placement
from rtp_ref.kv.layout_records import (
    DESCRIBED_LAYOUT_NAMES,
    MLA_LAYOUT_NAMES,
    certifiable,
    layout_record,
)
from rtp_ref.kv.layout_table import load_layout_table
from rtp_ref.kv.layouts import MlaLayout, layout_for_platform
from rtp_ref.platform import load_platform

B = 64
#: field -> (first byte of token 0 in the page, bytes from one token to the next, bytes a token), for B = 64
BY_HAND = {"nope": (0, 512, 512), "nope_scale": (64 * 512, 16, 16), "rope": (64 * 528, 128, 128)}
PAGE_BYTES = 64 * 656


def _layout(platform: str = "rocm-gfx942") -> MlaLayout:
    return layout_for_platform(load_platform(platform), "fp8_ds_mla_3buffer")


def test_the_page_map_is_aiters_at_block_size_64() -> None:
    layout = _layout()
    assert [(p.field.name, p.start, p.per_token, p.field.size) for p in layout.page_map(B)] == [
        (name, *where) for name, where in BY_HAND.items()]
    assert layout.bytes_per_token == 656 and layout.bytes_per_block(B) == PAGE_BYTES
    assert (layout.data_bytes_per_token, layout.trailing_bytes_per_token, layout.segment_bytes_per_token) == (0, 0, 656)
    assert (layout.k_bytes_per_token, layout.v_bytes_per_token, layout.scale_bytes_per_token) == (512, 128, 16)
    assert not layout.k_plus_v_equals_block


def _written(slots: list[int], seed: int = 3) -> tuple[MlaLayout, torch.Tensor, torch.Tensor, torch.Tensor]:
    layout = _layout()
    g = torch.Generator().manual_seed(seed)
    kv_c = (torch.randn(len(slots), 512, generator=g) * 4).to(torch.bfloat16)
    k_pe = torch.randn(len(slots), 64, generator=g).to(torch.bfloat16)
    cache = torch.full(layout.cache_shape(3, B), 0xA5, dtype=torch.uint8)
    reference_write(layout, kv_c, k_pe, cache, torch.tensor(slots), torch.tensor([1.0]))
    return layout, cache, kv_c, k_pe


def test_a_write_lands_at_the_hand_written_offsets_and_nowhere_else() -> None:
    slots = [64 + 0, 64 + 63, 2 * 64 + 5]  # block 1 tokens 0 and 63, block 2 token 5
    _, cache, _, k_pe = _written(slots)
    pages = cache.reshape(3, PAGE_BYTES)
    allowed: dict[int, set[int]] = {0: set(), 1: set(), 2: set()}
    for slot in slots:
        block, t = divmod(slot, B)
        for start, step, size in BY_HAND.values():
            allowed[block] |= set(range(start + t * step, start + t * step + size))
    for block in range(3):
        changed = set(torch.nonzero(pages[block] != 0xA5).flatten().tolist())
        assert changed <= allowed[block]
    # the rope is copied bit for bit: token 63's 64 bf16 values at 64 * 528 + 63 * 128
    start = BY_HAND["rope"][0] + 63 * 128
    assert torch.equal(pages[1, start:start + 128], k_pe[1].view(torch.uint8))


def test_split_as_aiter_splits_the_page_and_read_back() -> None:
    """The page cut into AITER's three buffers (latent fp8, fp32 scales, bf16 rope), dequantised as AITER's test
    reference multiplies them, gives back what the reference reader reads and what was written."""
    slots = [0, 1, 63]
    layout, cache, kv_c, k_pe = _written(slots, seed=5)
    page = cache.reshape(3, PAGE_BYTES)[0].numpy()
    nope = page[: B * 512].reshape(B, 512).view(ml_dtypes.float8_e4m3fnuz).astype(np.float32)
    scales = page[B * 512: B * 528].reshape(B, 16).view("<f4")
    rope = page[B * 528:].reshape(B, 128).view(ml_dtypes.bfloat16).astype(np.float32)
    dequant = nope * np.repeat(scales, 128, axis=1)
    got_c, got_pe = read_slots(layout, cache, torch.tensor(slots), torch.tensor([1.0]))
    np.testing.assert_array_equal(got_c.numpy(), dequant[slots])
    np.testing.assert_array_equal(got_pe.numpy(), rope[slots])
    np.testing.assert_array_equal(rope[slots], k_pe.float().numpy())
    # fnuz e4m3 rounds to 3 mantissa bits: within 1/16 of the value, or half its smallest subnormal step (2^-10)
    x = kv_c.float().numpy()
    step = np.repeat(scales[slots], 128, axis=1) * 2.0**-11
    assert (np.abs(dequant[slots] - x) <= np.abs(x) / 16 + step).all()


def test_a_page_segmented_layout_is_described_not_certified(tmp_path: Path) -> None:
    assert "fp8_ds_mla_3buffer" in DESCRIBED_LAYOUT_NAMES and "fp8_ds_mla_3buffer" not in MLA_LAYOUT_NAMES
    assert not certifiable(layout_record("fp8_ds_mla_3buffer"))
    assert all(certifiable(layout_record(name)) for name in MLA_LAYOUT_NAMES)
    table = tmp_path / "layouts.toml"
    table.write_text('''[[layout]]
name = "paged_fp8"
summary = "latent and rope fp8 in page segments"
kv_split = "k + v == block"
sources = "made up"
fields = [
  { name = "nope", source = "kv_c", element = "fp8", count = "R", scale = "s", placement = "page_segment" },
  { name = "rope", source = "k_pe", element = "fp8", count = "P", scale = "s", placement = "page_segment" },
  { name = "s", source = "scale", element = "fp32", count = 1, placement = "external" },
]
''')
    (record,) = load_layout_table(str(table), taken=())
    assert not certifiable(record)
    assert [f.placement for f in record.fields] == [Placement.PAGE_SEGMENT, Placement.PAGE_SEGMENT,
                                                     Placement.EXTERNAL]


def test_its_dims_are_fixed() -> None:
    with pytest.raises(RtpRefError, match="supports only kv_lora_rank=512 and rope_dim=64"):
        layout_for_platform(load_platform("cpu"), "fp8_ds_mla_3buffer", kv_lora_rank=256)
