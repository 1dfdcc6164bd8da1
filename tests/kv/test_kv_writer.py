"""The reference writer and reader against the tests' own byte walk (tests/kv/oracle.py).

Every write goes into a canary-filled buffer (random bytes, padded block strides, a non-zero storage
offset); afterwards each written byte must equal the oracle's and every other byte, padding and
model1's pad byte included, must be unchanged. Inputs are strided views with extra rows (vLLM's
CUDA-graph padding), some slots are negative.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from rtp_ref.kv.cache import concat_and_cache_mla, gather_entries, read_slots, reference_write
from rtp_ref.kv.layout_records import layout_record
from rtp_ref.kv.layouts import MlaLayout, layout_for_platform
from rtp_ref.platform import load_platform
from tests.kv import oracle

LEAD = 2  # bytes before the cache in its buffer: a non-zero storage offset, even for 16-bit views

# (platform, overrides, the contract the test expects from them, written by hand)
SETTINGS = [
    ("cpu", {}, oracle.CONTRACTS["cpu"]),
    ("rocm-gfx942", {}, oracle.CONTRACTS["rocm-gfx942"]),
    (
        "cpu",
        {
            "ds_mla_scale_rule": "amax_div",
            "ds_mla_scale_floor": "1e-30",
            "fp8_max_divisor": "400",
            "model1_scale_floor": "1e-30",
        },
        oracle.Contract("e4m3fn", "amax_div", 1e-30, 400.0, 1e-30),
    ),
]
#: (R, P) each layout is walked at: chosen by hand for the bundled ones (odd ranks included), a layout's
#: certified dims (its record's) otherwise
DIMS = {
    "auto": [(512, 64), (100, 16), (64, 32)],
    "fp8": [(512, 64), (256, 64), (100, 16)],
    "fp8_rocm_compact": [(512, 64), (100, 32)],
    "fp8_ds_mla": [(512, 64), (256, 64), (100, 64)],
    "fp8_model1_mla": [(448, 64)],
}


@dataclass
class Canary:
    """A canary-filled byte buffer and the cache tensor viewing part of it."""

    buffer: torch.Tensor
    cache: torch.Tensor
    block_stride_bytes: int


def make_cache(
    layout: str,
    r: int,
    p: int,
    dtype: torch.dtype,
    num_blocks: int,
    block_size: int,
    padding: str,
    rng: np.random.Generator,
) -> Canary:
    """A ``[num_blocks, block_size, entry]`` cache over random bytes; ``padding`` picks the block stride:
    none, one extra row (FlashMLA's block_size + 1), a multiple of 576 (FlashMLA/sglang model1) or odd."""
    bpt = oracle.bytes_per_token(layout, r, p)
    block = block_size * bpt
    stride = {"none": block, "extra_row": block + bpt, "to_576": -(-block // 576) * 576, "odd": block + 6}[padding]
    buffer = torch.from_numpy(rng.integers(0, 256, LEAD + num_blocks * stride, dtype=np.uint8))
    if layout == "auto":
        cache = buffer.view(dtype).as_strided((num_blocks, block_size, bpt // 2), (stride // 2, bpt // 2, 1), LEAD // 2)
    else:
        cache = buffer.as_strided((num_blocks, block_size, bpt), (stride, bpt, 1), LEAD)
    return Canary(buffer, cache, stride)


def make_inputs(
    r: int, p: int, tokens: int, dtype: torch.dtype, rng: np.random.Generator, zero_row: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """kv_c [>= tokens, r] and k_pe as strided column slices of one wider tensor, 2 extra NaN rows after the
    tokens; values normal with a random power-of-two magnitude per 32 values."""
    gap = 5
    exponents = rng.integers(-5, 6, (tokens + 2, -(-(r + p + gap) // 32))).repeat(32, axis=1)[:, : r + p + gap]
    wide = torch.from_numpy(rng.standard_normal((tokens + 2, r + p + gap)) * np.exp2(exponents)).to(dtype)
    wide[tokens:] = float("nan")
    if zero_row:
        wide[0] = 0
    return wide[:, :r], wide[:, r + gap : r + gap + p]


def expected_buffer(
    canary_before: npt.NDArray[np.uint8],
    layout: str,
    contract: oracle.Contract,
    r: int,
    p: int,
    block_size: int,
    stride: int,
    kv_c: torch.Tensor,
    k_pe: torch.Tensor,
    slots: list[int],
    scale: float,
) -> npt.NDArray[np.uint8]:
    expected = canary_before.copy()
    written = oracle.written_entry_bytes(layout, r, p)
    for i, slot in enumerate(slots):
        if slot < 0:
            continue
        block, t = divmod(slot, block_size)
        entry = oracle.expected_entry(layout, contract, kv_c[i], k_pe[i], scale)
        for j in written:
            expected[LEAD + block * stride + oracle.block_position(layout, r, p, block_size, t, j)] = entry[j]
    return expected


def assert_bytes_equal(actual: npt.NDArray[np.uint8], expected: npt.NDArray[np.uint8]) -> None:
    bad = np.flatnonzero(actual != expected)
    first = int(bad[0]) if bad.size else -1
    assert bad.size == 0, f"{bad.size} bytes differ, first at buffer byte {first}: {actual[first]} != {expected[first]}"


@dataclass(frozen=True)
class WriteCase:
    layout: str
    r: int
    p: int
    platform: str
    overrides: dict[str, str]
    contract: oracle.Contract
    dtype: torch.dtype
    block_size: int
    num_blocks: int
    slots: list[int]
    padding: str
    zero_row: bool
    scale_factor: float
    seed: int


@st.composite
def write_cases(draw: st.DrawFn, layout: str) -> WriteCase:
    r, p = draw(st.sampled_from(DIMS.get(layout, layout_record(layout).certified_dims)))
    platform, overrides, contract = draw(st.sampled_from(SETTINGS))
    if layout == "fp8_ds_mla" and r % 128:
        overrides = {**overrides, "lora_alignment": "round_up"}
    block_size = draw(st.integers(1, 6))
    num_blocks = draw(st.integers(1, 4))
    capacity = block_size * num_blocks
    tokens = draw(st.integers(1, min(capacity, 8)))
    targets = draw(st.permutations(range(capacity)))[:tokens]
    skipped = draw(st.lists(st.booleans(), min_size=tokens, max_size=tokens))
    paddings = ["none", "extra_row", "odd"] + (["to_576"] if layout == "fp8_model1_mla" else [])
    return WriteCase(
        layout,
        r,
        p,
        platform,
        overrides,
        contract,
        dtype=draw(st.sampled_from([torch.bfloat16, torch.float16])),
        block_size=block_size,
        num_blocks=num_blocks,
        slots=[-1 - i if skip else slot for i, (slot, skip) in enumerate(zip(targets, skipped, strict=True))],
        padding=draw(st.sampled_from(paddings)),
        zero_row=draw(st.booleans()),
        scale_factor=draw(st.sampled_from([0.5, 1.0, 3.0])),
        seed=draw(st.integers(0, 2**32 - 1)),
    )


@pytest.mark.parametrize("layout", oracle.LAYOUTS + oracle.DESCRIBED)
@given(data=st.data())
def test_write_matches_byte_walk_and_touches_nothing_else(layout: str, data: st.DataObject) -> None:
    case = data.draw(write_cases(layout))
    rng = np.random.default_rng(case.seed)
    canary = make_cache(layout, case.r, case.p, case.dtype, case.num_blocks, case.block_size, case.padding, rng)
    kv_c, k_pe = make_inputs(case.r, case.p, len(case.slots), case.dtype, rng, case.zero_row)
    tokens = len(case.slots)
    amax = float(torch.cat([kv_c[:tokens].flatten(), k_pe[:tokens].flatten()]).float().abs().max())
    scale = float(np.float32(max(amax, 1e-3) / oracle.FP8_MAX[case.contract.fp8] * case.scale_factor))
    layout_obj = layout_for_platform(
        load_platform(case.platform), layout, kv_lora_rank=case.r, rope_dim=case.p, overrides=case.overrides
    )
    before = canary.buffer.numpy().copy()

    reference_write(layout_obj, kv_c, k_pe, canary.cache, torch.tensor(case.slots), torch.tensor([scale]))

    expected = expected_buffer(
        before,
        layout,
        case.contract,
        case.r,
        case.p,
        case.block_size,
        canary.block_stride_bytes,
        kv_c,
        k_pe,
        case.slots,
        scale,
    )
    assert_bytes_equal(canary.buffer.numpy(), expected)
    if any(s >= 0 for s in case.slots):
        check_reader(layout_obj, layout, case.contract, canary.cache, kv_c, k_pe, case.slots, scale, case.dtype)


def check_reader(
    layout_obj: MlaLayout,
    layout: str,
    contract: oracle.Contract,
    cache: torch.Tensor,
    kv_c: torch.Tensor,
    k_pe: torch.Tensor,
    slots: list[int],
    scale: float,
    dtype: torch.dtype,
) -> None:
    """read_slots gives what the oracle decodes from the oracle's own entry bytes, exactly."""
    r, p = layout_obj.kv_lora_rank, layout_obj.rope_dim
    rows = [i for i, s in enumerate(slots) if s >= 0]
    got_c, got_pe = read_slots(layout_obj, cache, torch.tensor([slots[i] for i in rows]), torch.tensor([scale]), dtype)
    for n, i in enumerate(rows):
        entry = oracle.expected_entry(layout, contract, kv_c[i], k_pe[i], scale)
        want_c, want_pe = oracle.decode_entry(layout, contract, entry, r, p, scale, dtype)
        np.testing.assert_array_equal(got_c[n].numpy(), want_c)
        np.testing.assert_array_equal(got_pe[n].numpy(), want_pe)


def _contiguous_case(layout: str) -> tuple[MlaLayout, torch.Tensor, torch.Tensor, torch.Tensor]:
    layout_obj = layout_for_platform(load_platform("cpu"), layout)
    r, p = layout_obj.kv_lora_rank, layout_obj.rope_dim
    g = torch.Generator().manual_seed(7)
    kv_c = torch.randn(6, r, generator=g).to(torch.bfloat16)
    k_pe = torch.randn(6, p, generator=g).to(torch.bfloat16)
    cache = torch.randint(0, 256, (3, 4, oracle.bytes_per_token(layout, r, p)), dtype=torch.uint8, generator=g)
    return layout_obj, kv_c, k_pe, cache.view(torch.bfloat16) if layout == "auto" else cache


@pytest.mark.parametrize("layout", oracle.LAYOUTS + oracle.DESCRIBED)
def test_only_negative_slots_write_nothing(layout: str) -> None:
    layout_obj, kv_c, k_pe, cache = _contiguous_case(layout)
    before = cache.clone()
    reference_write(layout_obj, kv_c, k_pe, cache, torch.tensor([-1, -1, -7, -1, -2, -1]), torch.tensor([0.01]))
    assert torch.equal(cache.view(torch.uint8), before.view(torch.uint8))


@pytest.mark.parametrize("layout", oracle.LAYOUTS + oracle.DESCRIBED)
def test_gather_returns_the_entries_written(layout: str) -> None:
    layout_obj, kv_c, k_pe, cache = _contiguous_case(layout)
    slots = [11, 0, 5, 6, 3, 9]
    reference_write(layout_obj, kv_c, k_pe, cache, torch.tensor(slots), torch.tensor([0.01]))
    entries = gather_entries(layout_obj, cache, torch.tensor(slots)).numpy()
    r, p = layout_obj.kv_lora_rank, layout_obj.rope_dim
    written = oracle.written_entry_bytes(layout, r, p)
    for i in range(len(slots)):
        want = oracle.expected_entry(layout, oracle.CONTRACTS["cpu"], kv_c[i], k_pe[i], 0.01)
        np.testing.assert_array_equal(entries[i, written], want[written])


def test_model1_scales_trail_the_block_and_the_pad_byte_is_never_written() -> None:
    """Token t of a 4-token block: data at t*576, its 7 ue8m0 bytes at 4*576 + t*8, byte 7 untouched."""
    layout_obj, kv_c, k_pe, cache = _contiguous_case("fp8_model1_mla")
    cache.fill_(0xA5)
    reference_write(layout_obj, kv_c[:1], k_pe[:1], cache, torch.tensor([6]), torch.tensor([1.0]))
    block = cache[1].reshape(-1)  # slot 6 = block 1, token 2
    changed = torch.nonzero(block != 0xA5).flatten().tolist()
    data = set(range(2 * 576, 3 * 576))
    scales = set(range(4 * 576 + 2 * 8, 4 * 576 + 2 * 8 + 7))
    assert set(changed) <= data | scales
    assert scales <= set(changed)  # every scale byte changed: 0xA5 is 2^38, no tile of N(0,1) values gets it
    assert int(block[4 * 576 + 2 * 8 + 7]) == 0xA5
    assert torch.equal(cache[0], torch.full_like(cache[0], 0xA5)) and torch.equal(cache[2], cache[0])


def test_facade_takes_the_kernel_signature_and_derives_r_and_p_from_the_inputs() -> None:
    platform = load_platform("cpu")
    layout_obj = layout_for_platform(platform, "fp8", kv_lora_rank=256, rope_dim=32)
    g = torch.Generator().manual_seed(3)
    kv_c = torch.randn(5, 256, generator=g).to(torch.float16)
    k_pe = torch.randn(5, 32, generator=g).to(torch.float16)
    slots = torch.tensor([4, -1, 0, 2, 7])
    via_facade = torch.zeros(2, 4, 288, dtype=torch.uint8)
    via_reference = via_facade.clone()
    concat_and_cache_mla(kv_c, k_pe, via_facade, slots, "fp8_e4m3", torch.tensor([0.02]), platform=platform)
    reference_write(layout_obj, kv_c, k_pe, via_reference, slots, torch.tensor([0.02]))
    assert torch.equal(via_facade, via_reference)
    expected = oracle.expected_entry("fp8", oracle.CONTRACTS["cpu"], kv_c[0], k_pe[0], float(np.float32(0.02)))
    np.testing.assert_array_equal(via_facade[1, 0].numpy(), expected)  # slot 4 = block 1, row 0
