"""The built-in kernels of the other cache families (triton, cuda, torch-eager) against their references, byte
for byte:
the MHA paged write (reshape_and_cache_flash) and the DeepSeek indexer write (indexer_k_quant_and_cache). Where the
reference stores a NaN, any NaN encoding of the cache's format passes (the suite's NaN policy: the cuda kernel keeps
the hardware's e5m2 NaN, 0x7F on an H200, where the reference writes 0x7E).

Inputs are built on the device under test (strided key/value views of a fused projection among them),
the caches are filled with a canary, and the whole cache is compared with the reference's on the CPU, so a
stray byte anywhere fails too. On a machine without a GPU the Triton kernels run in Triton's interpreter
and the CUDA ones are skipped; without Triton only the Triton kernels are skipped (torch-eager needs none).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from rtp_ref.contract import WriteContract
from rtp_ref.errors import UnsupportedLayoutError
from rtp_ref.fp8.elements import ANY_NAN, dtype_element, element_bits, element_traits
from rtp_ref.kernels import cuda_mha_indexer
from rtp_ref.kernels.cuda_mha_indexer import prepare_cuda_indexer, prepare_cuda_mha
from rtp_ref.kernels.input_flags import Validation
from rtp_ref.kernels.mha_indexer_builtin import mha_indexer_kernels
from rtp_ref.kernels.torch_eager_mha_indexer import (
    torch_eager_indexer_k_quant_and_cache,
    torch_eager_reshape_and_cache_flash,
)
from rtp_ref.kv.indexer import indexer_layout, reference_indexer_k_quant_and_cache
from rtp_ref.kv.mha_paged import mha_layout, reference_reshape_and_cache_flash
from rtp_ref.ops import INDEXER_OP, MHA_OP
from rtp_ref.platform import load_platform

try:  # only the Triton kernels need triton: without it their params are skipped, the others still run
    import triton  # noqa: F401
except ImportError:
    HAVE_TRITON = False
else:
    HAVE_TRITON = True

pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")

#: kernel name -> (MHA writer, indexer writer) (lean ones: their preparers); cuda only where the inputs live on a GPU
WRITERS = {
    "cuda": (prepare_cuda_mha, prepare_cuda_indexer),
    "torch-eager": (torch_eager_reshape_and_cache_flash, torch_eager_indexer_k_quant_and_cache),
}
if HAVE_TRITON:
    from rtp_ref.kernels.triton_fp8 import interpreted
    from rtp_ref.kernels.triton_indexer import prepare_triton_indexer
    from rtp_ref.kernels.triton_mha_paged import prepare_triton_mha

    WRITERS["triton"] = (prepare_triton_mha, prepare_triton_indexer)

    DEVICE = "cpu" if interpreted() else "cuda"
    if DEVICE == "cuda" and not torch.cuda.is_available():
        pytest.skip("triton was imported without TRITON_INTERPRET and torch sees no GPU", allow_module_level=True)
else:
    DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
CANARY = 0x5A
#: the lean writers: preparers, given the call and a device flag word for slots past the cache, of its launch
LEAN = ("triton", "cuda")


def _call(kernel: str, which: int, layout: object, *tensors: object) -> None:
    """One call by a writer of ``kernel``: a lean one's prepared launch, or the writer itself."""
    writer = WRITERS[kernel][which]
    if kernel in LEAN:
        writer(layout, *tensors, torch.zeros(1, dtype=torch.int32, device=DEVICE))(*tensors)
    else:
        writer(layout, *tensors)
KERNELS = [pytest.param("triton", marks=[pytest.mark.triton,
                                         pytest.mark.skipif(not HAVE_TRITON, reason="the triton kernels need triton")]),
           pytest.param("cuda", marks=pytest.mark.skipif(DEVICE == "cpu", reason="the cuda kernels need a GPU")),
           pytest.param("torch-eager")]


def _edge_values(x: torch.Tensor) -> torch.Tensor:
    """A few values every fp8 write must get right: +-inf, NaN, overflow, a subnormal, -0."""
    flat = x.view(-1)
    flat[:6] = torch.tensor([float("inf"), float("-inf"), float("nan"), 1e6, 1e-9, -0.0], dtype=x.dtype)
    return x


def _mha_inputs(tokens: int, heads: int, head_size: int, dtype: torch.dtype, strided: bool,
                seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    if strided:  # key and value as views of one fused [T, 3 * H * D] projection, as engines pass them
        fused = (torch.randn(tokens, 3 * heads * head_size, generator=gen) * 4).to(dtype).to(DEVICE)
        key = fused[:, heads * head_size: 2 * heads * head_size].view(tokens, heads, head_size)
        value = fused[:, 2 * heads * head_size:].view(tokens, heads, head_size)
        assert not key.is_contiguous()
        return key, value
    key = (torch.randn(tokens, heads, head_size, generator=gen) * 4).to(dtype)
    value = (torch.randn(tokens, heads, head_size, generator=gen) * 4).to(dtype)
    return _edge_values(key).to(DEVICE), value.to(DEVICE)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("order", ["NHD", "HND"])
@pytest.mark.parametrize(("cache_dtype", "platform_name", "per_head"), [
    ("auto", "cuda-sm90", False), ("fp8", "cuda-sm90", False), ("fp8", "cuda-sm90", True),
    ("fp8", "rocm-gfx942", True), ("fp8_e5m2", "cuda-sm90", False),
])
@pytest.mark.parametrize(("heads", "head_size", "block_size", "strided"), [(1, 64, 16, False), (8, 128, 16, True),
                                                                          (2, 256, 64, False)])
def test_mha_paged_is_bit_exact(kernel: str, order: str, cache_dtype: str, platform_name: str, per_head: bool,
                                heads: int, head_size: int, block_size: int, strided: bool) -> None:
    layout = mha_layout(load_platform(platform_name), cache_dtype, heads, head_size)
    dtype = torch.bfloat16 if head_size != 256 else torch.float16
    tokens, num_blocks = 9, 3
    key, value = _mha_inputs(tokens, heads, head_size, dtype, strided, seed=heads * head_size)
    # padding slots, the first and last slot of the cache, and a key longer than the slot mapping
    slots = torch.tensor([0, -1, block_size * num_blocks - 1, 5, block_size + 2, -1, 2 * block_size, 7])
    k_scale = torch.linspace(0.5, 2.0, heads if per_head else 1)
    v_scale = torch.linspace(1.5, 0.25, heads if per_head else 1)
    caches = []
    for device in ("cpu", DEVICE):
        kc = layout.new_cache(num_blocks, block_size, order, dtype, device)
        vc = layout.new_cache(num_blocks, block_size, order, dtype, device)
        for cache in (kc, vc):
            cache.view(torch.uint8).fill_(CANARY) if cache.is_contiguous() else \
                cache.permute(0, 2, 1, 3).view(torch.uint8).fill_(CANARY)
        caches.append((kc, vc))
    (rk, rv), (gk, gv) = caches
    reference_reshape_and_cache_flash(layout, key.cpu(), value.cpu(), rk, rv, slots, k_scale, v_scale)
    _call(kernel, 0, layout, key, value, gk, gv, slots.to(DEVICE), k_scale.to(DEVICE), v_scale.to(DEVICE))
    element = dtype_element(dtype) if layout.element_format is None else element_traits(layout.element_format.name)
    for name, want, got in (("key_cache", rk, gk), ("value_cache", rv, gv)):
        want_bits, got_bits = (element_bits(c.cpu().contiguous().view(torch.uint8).reshape(-1, element.size))
                               for c in (want, got))
        differ = int((~ANY_NAN.matches(element, want_bits, got_bits)).sum())
        assert differ == 0, f"{name}: {differ} elements differ from the reference"


@pytest.mark.parametrize(("platform_name", "dim", "quant", "scale_fmt"), [
    ("cuda-sm90", 128, 128, "none"), ("cuda-sm90", 128, 128, "ue8m0"), ("rocm-gfx942", 128, 128, "none"),
    ("cuda-sm90", 256, 64, "ue8m0"), ("cuda-sm90", 512, 256, "none"), ("cuda-sm90", 64, 16, "ue8m0"),
])
@pytest.mark.parametrize("block_size", [16, 64])
@pytest.mark.parametrize("kernel", KERNELS)
def test_indexer_is_bit_exact(kernel: str, platform_name: str, dim: int, quant: int, scale_fmt: str,
                              block_size: int) -> None:
    """Quant blocks 256, 128, 64 and 16 give the cuda kernel's rows 32, 16, 8 and 2 lanes of 8 values (1, 2, 4 and
    16 rows side by side in a warp)."""
    _check_indexer(kernel, platform_name, dim, quant, scale_fmt, block_size, offset=0)


@pytest.mark.parametrize("scale_fmt", ["none", "ue8m0"])
@pytest.mark.parametrize("kernel", KERNELS)
def test_indexer_is_bit_exact_on_fp16_inputs(kernel: str, scale_fmt: str) -> None:
    _check_indexer(kernel, "cuda-sm90", 128, 128, scale_fmt, 16, 0, torch.float16)


@pytest.mark.parametrize("offset", [1, 2])
@pytest.mark.parametrize("kernel", KERNELS)
def test_indexer_is_bit_exact_on_inputs_not_aligned_for_vector_access(kernel: str, offset: int) -> None:
    """k and the cache views ``offset`` elements into their buffers: the cuda kernel's lanes narrow to what the
    addresses allow (1 or 2 values) instead of faulting on a misaligned vector access."""
    _check_indexer(kernel, "cuda-sm90", 128, 128, "ue8m0", 16, offset)


@pytest.mark.skipif(DEVICE == "cpu", reason="the cuda kernels need a GPU")
@pytest.mark.parametrize("split_below", [0, 1 << 30], ids=["warp-a-token", "heads-split"])
@pytest.mark.parametrize("rows", [1, 2])
def test_the_cuda_kernels_are_bit_exact_at_every_rows_a_warp(rows: int, split_below: int,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The cuda kernels are compiled for 1 and 2 passes a warp (cuda_mha_indexer.*_ROWS_PER_WARP pick one): each
    instance, with rows left over in the last warp, rows of 8, 16 and 32 lanes side by side (a row's tokens and
    heads split across groups: 3 heads), rows with idle lanes (80 = 10 vectors on 16 lanes) and rows strided over
    the warp twice (320), padding slots, strided inputs, narrower vectors where an input is misaligned; the MHA
    kernel with a warp a token and with a token's heads split over warps."""
    monkeypatch.setattr(cuda_mha_indexer, "MHA_TOKENS_PER_WARP", rows)
    monkeypatch.setattr(cuda_mha_indexer, "INDEXER_ROWS_PER_WARP", rows)
    monkeypatch.setattr(cuda_mha_indexer, "MHA_SPLIT_BELOW_TOKENS", split_below)
    test_mha_paged_is_bit_exact("cuda", "NHD", "fp8", "cuda-sm90", True, 8, 128, 16, True)
    test_mha_paged_is_bit_exact("cuda", "HND", "auto", "cuda-sm90", False, 1, 64, 16, False)
    test_mha_paged_is_bit_exact("cuda", "NHD", "fp8_e5m2", "cuda-sm90", False, 2, 256, 64, False)
    test_mha_paged_is_bit_exact("cuda", "NHD", "fp8", "cuda-sm90", True, 3, 80, 16, False)
    test_mha_paged_is_bit_exact("cuda", "HND", "fp8_e5m2", "cuda-sm90", False, 3, 320, 16, True)
    _check_indexer("cuda", "cuda-sm90", 128, 128, "ue8m0", 16, 0)
    _check_indexer("cuda", "cuda-sm90", 512, 256, "none", 64, 0)
    _check_indexer("cuda", "cuda-sm90", 256, 64, "ue8m0", 16, 1)


@pytest.mark.parametrize(("dim", "block_size", "dtype"), [(128, 16, torch.bfloat16), (256, 64, torch.float16),
                                                          (64, 16, torch.bfloat16)])
@pytest.mark.parametrize("kernel", [k for k in KERNELS if k.values[0] != "cuda"])
def test_indexer_mxfp4_is_bit_exact(kernel: str, dim: int, block_size: int, dtype: torch.dtype) -> None:
    """``mxfp4`` (E2M1 codes, ue8m0 scales per 32): the Triton writer (software E2M1, its interpreter on a CPU) and
    torch-eager write the reference's bytes, +-inf, NaN, overflow, a subnormal and -0 among the values, unaligned
    inputs too."""
    _check_indexer(kernel, "cuda-sm90", dim, 32, "mxfp4", block_size, 0, dtype)
    _check_indexer(kernel, "cuda-sm90", dim, 32, "mxfp4", block_size, 1, dtype)


def test_the_cuda_indexer_writer_refuses_mxfp4_before_launching() -> None:
    """The CUDA writer stores fp8 only: it claims the fp8 variants, and its preparer raises for an E2M1 layout before
    anything reaches a device (so this runs without a GPU)."""
    layout = indexer_layout(load_platform("cuda-sm90"), scale_fmt="mxfp4")
    cache = torch.zeros(1, 16, layout.bytes_per_token, dtype=torch.uint8)
    with pytest.raises(UnsupportedLayoutError, match="fp8 values only; valid: none, ue8m0"):
        prepare_cuda_indexer(layout, torch.zeros(1, 128, dtype=torch.bfloat16), cache, torch.zeros(1, dtype=torch.long),
                             "mxfp4", torch.zeros(1, dtype=torch.int32))
    if DEVICE == "cuda":
        (cuda,) = [k for k in mha_indexer_kernels() if k.name == "cuda-indexer"]
        assert "mxfp4" not in cuda.scale_fmts


def _check_indexer(kernel: str, platform_name: str, dim: int, quant: int, scale_fmt: str, block_size: int,
                   offset: int, dtype: torch.dtype = torch.bfloat16) -> None:
    layout = indexer_layout(load_platform(platform_name), head_dim=dim, quant_block_size=quant, scale_fmt=scale_fmt)
    gen = torch.Generator().manual_seed(dim + block_size)
    k = torch.randn(7, dim, generator=gen) * torch.tensor([4.0, 0.01, 1.0, 100.0, 1.0, 1.0, 3.0])[:, None]
    k[4] = 0.0
    k = _edge_values(k.to(dtype))
    slots = torch.tensor([3, -1, 2 * block_size - 1, 0, block_size, 9, -1])
    num_blocks = 2
    want = torch.full((num_blocks, block_size, layout.bytes_per_token), CANARY, dtype=torch.uint8)
    got = _offset_view(want.to(DEVICE), offset)
    reference_indexer_k_quant_and_cache(layout, k, want, slots, scale_fmt)
    _call(kernel, 1, layout, _offset_view(k.to(DEVICE), offset), got, slots.to(DEVICE), scale_fmt)
    differ = int((want != got.cpu()).sum())
    assert differ == 0, f"{differ} bytes differ from the reference"


def _mha_indexer_kernel(name: str, op: str, validation: Validation) -> Any:
    """The built-in kernel ``name`` of ``op`` bound to cuda-sm90, checking values by ``validation``."""
    (found,) = [k for k in mha_indexer_kernels() if k.impl == name and k.op == op]
    return found.bind(WriteContract.for_platform(load_platform("cuda-sm90")), validation=validation)


@pytest.mark.parametrize("kernel", KERNELS)
def test_bad_calls_are_refused_before_writing(kernel: str) -> None:
    """A slot past the cache, a repeated slot, a scale of the wrong length, a cache of the wrong dtype: each
    refused with one RtpRefError naming the argument, the caches untouched, by the host-validating call path
    (the reference's checks, rtp_ref.kv.mha_paged.validate_mha_args / rtp_ref.kv.indexer.validate_indexer_args)."""
    from rtp_ref.errors import RtpRefError

    mha, indexer = _mha_indexer_kernel(kernel, MHA_OP, "host"), _mha_indexer_kernel(kernel, INDEXER_OP, "host")
    key = torch.ones(2, 8, 64, dtype=torch.bfloat16, device=DEVICE)
    one = torch.ones(1, device=DEVICE)
    for slots, k_scale, cache_dtype, problem in (
        ([0, 32], one, torch.uint8, "slot_mapping"), ([3, 3], one, torch.uint8, "repeats"),
        ([0, 1], torch.ones(3, device=DEVICE), torch.uint8, "k_scale"), ([0, 1], one, torch.bfloat16, "key_cache"),
    ):
        kc = torch.full((2, 16, 8, 64), 7, dtype=cache_dtype, device=DEVICE)
        vc = kc.clone()
        with pytest.raises(RtpRefError, match=problem):
            mha(key, key, kc, vc, torch.tensor(slots, device=DEVICE), "fp8", k_scale, one)
        assert bool((kc == 7).all()) and bool((vc == 7).all())
    idx = indexer_layout(load_platform("cuda-sm90"))
    cache = torch.full((2, 16, idx.bytes_per_token), 7, dtype=torch.uint8, device=DEVICE)
    k = torch.ones(2, 128, dtype=torch.bfloat16, device=DEVICE)
    for slots, problem in (([0, 32], "slot_mapping"), ([5, 5], "repeats")):
        with pytest.raises(RtpRefError, match=problem):
            indexer(k, cache, torch.tensor(slots, device=DEVICE), 128, "none")
    with pytest.raises(RtpRefError, match=r"^k: "):
        indexer(k[:, None], cache, torch.tensor([0, 1], device=DEVICE), 128, "none")
    assert bool((cache == 7).all())


@pytest.mark.parametrize("kernel", [k for k in KERNELS if k.values[0] in LEAN])
def test_the_device_path_skips_and_flags_a_slot_past_the_cache(kernel: str) -> None:
    """The default call path of the lean writers: metadata errors still raise; a slot past the cache is
    written nowhere and flagged (take_input_errors), the other token written; the flag is cleared by the take."""
    from rtp_ref.errors import RtpRefError

    mha, indexer = _mha_indexer_kernel(kernel, MHA_OP, "device"), _mha_indexer_kernel(kernel, INDEXER_OP, "device")
    assert mha.graph_safe and indexer.graph_safe
    key = torch.ones(2, 8, 64, dtype=torch.bfloat16, device=DEVICE)
    one = torch.ones(1, device=DEVICE)
    kc = torch.full((2, 16, 8, 64), 7, dtype=torch.uint8, device=DEVICE)
    vc = kc.clone()
    with pytest.raises(RtpRefError, match="k_scale"):
        mha(key, key, kc, vc, torch.tensor([0, 1], device=DEVICE), "fp8", torch.ones(3, device=DEVICE), one)
    mha(key, key, kc, vc, torch.tensor([32, 1], device=DEVICE), "fp8", one, one)
    for cache in (kc, vc):  # slot 1 written, every other slot untouched
        assert (cache.view(32, 8, 64) != 7).any(dim=2).any(dim=1).nonzero().flatten().tolist() == [1]
    assert mha.take_input_errors() == [f"{kc.device}: a slot at or past the cache's capacity was skipped "
                                       "(nothing written for it)"]
    assert mha.take_input_errors() == []
    idx = indexer_layout(load_platform("cuda-sm90"))
    cache = torch.full((2, 16, idx.bytes_per_token), 7, dtype=torch.uint8, device=DEVICE)
    indexer(torch.ones(2, 128, dtype=torch.bfloat16, device=DEVICE), cache, torch.tensor([32, -1], device=DEVICE),
            128, "none")
    assert bool((cache == 7).all()) and len(indexer.take_input_errors()) == 1


def _offset_view(tensor: torch.Tensor, offset: int) -> torch.Tensor:
    """A copy of ``tensor`` that starts ``offset`` elements into a buffer of its own (same shape and strides)."""
    if offset == 0:
        return tensor
    buffer = torch.empty(tensor.numel() + offset, dtype=tensor.dtype, device=tensor.device)
    view = buffer[offset:].view(tensor.shape)
    view.copy_(tensor)
    return view


def test_the_cuda_indexer_vector_width_follows_every_address_and_stride() -> None:
    """As wide as k's address and strides and the cache's address and block stride allow, up to 8 values a lane
    (the 132-byte token stride of a 128-value head does not count: codes are addressed by head_dim)."""
    from rtp_ref.kernels.cuda_mha_indexer import indexer_vector_width

    sm90 = load_platform("cuda-sm90")
    layout = indexer_layout(sm90, head_dim=128, quant_block_size=128)
    cache = torch.zeros(3, 16, layout.bytes_per_token, dtype=torch.uint8)
    k = torch.zeros(5, 128, dtype=torch.bfloat16)
    assert indexer_vector_width(layout, k, cache) == 8
    assert indexer_vector_width(indexer_layout(sm90, head_dim=64, quant_block_size=16),
                                torch.zeros(5, 64, dtype=torch.bfloat16),
                                torch.zeros(3, 16, 80, dtype=torch.uint8)) == 8
    assert indexer_vector_width(indexer_layout(sm90, head_dim=64, quant_block_size=4),
                                torch.zeros(5, 64, dtype=torch.bfloat16),
                                torch.zeros(3, 16, 128, dtype=torch.uint8)) == 4
    assert indexer_vector_width(layout, _offset_view(k, 1), cache) == 1
    assert indexer_vector_width(layout, _offset_view(k, 2), cache) == 2
    assert indexer_vector_width(layout, k, _offset_view(cache, 2)) == 2
    odd_blocks = torch.zeros(3, 16 * 132 + 4, dtype=torch.uint8)[:, :16 * 132].view(3, 16, 132)  # stride 2116
    assert indexer_vector_width(layout, k, odd_blocks) == 4
    assert indexer_vector_width(layout, torch.zeros(5, 130, dtype=torch.bfloat16)[:, :128], cache) == 2


def test_the_cuda_mha_vector_width_follows_every_address_and_stride() -> None:
    """8 values a lane where everything is 16-byte aligned; narrower as soon as one input, cache or stride is not
    (a key view one element in, a cache view one fp8 element in, an odd head size)."""
    from rtp_ref.kernels.cuda_mha_indexer import mha_vector_width

    key = torch.zeros(4, 2, 128, dtype=torch.bfloat16)
    cache = torch.zeros(3, 16, 2, 128, dtype=torch.uint8)
    assert mha_vector_width(128, (key, key), (cache, cache), 1) == 8
    assert mha_vector_width(64, (key, key), (cache, cache), 1) == 8
    assert mha_vector_width(36, (key, key), (cache, cache), 1) == 4  # 36 = 4 x 9
    shifted = torch.zeros(4 * 2 * 128 + 1, dtype=torch.bfloat16)[1:].view(4, 2, 128)
    assert mha_vector_width(128, (key, shifted), (cache, cache), 1) == 1
    two_in = torch.zeros(4 * 2 * 128 + 2, dtype=torch.bfloat16)[2:].view(4, 2, 128)
    assert mha_vector_width(128, (two_in, key), (cache, cache), 1) == 2
    odd_cache = torch.zeros(3 * 16 * 2 * 256 + 4, dtype=torch.uint8)[4:].view(3, 16, 2, 256)
    key256 = torch.zeros(4, 2, 256, dtype=torch.bfloat16)
    assert mha_vector_width(256, (key256, key256), (odd_cache, odd_cache), 1) == 4
    wide = torch.zeros(3, 16, 2, 128, dtype=torch.bfloat16)
    assert mha_vector_width(100, (key, key), (wide, wide), 2) == 4  # 100 = 4 x 25
    assert mha_vector_width(128, (key, key), (wide, wide), 2) == 8  # 16-bit: moved 16 bytes a lane


@pytest.mark.parametrize(("tokens", "heads", "lanes", "split"), [
    (64, 8, 16, 4), (64, 1, 16, 1), (64, 3, 16, 2), (64, 8, 32, 8), (64, 8, 4, 1), (8191, 8, 16, 4), (8192, 8, 16, 1),
])
def test_a_few_tokens_share_their_heads_across_warps(tokens: int, heads: int, lanes: int, split: int) -> None:
    """ceil(heads / (32 / lanes)) warps a token below MHA_SPLIT_BELOW_TOKENS (8192), one from there; by hand."""
    from rtp_ref.kernels.cuda_mha_indexer import mha_split

    assert mha_split(tokens, heads, lanes) == split


@pytest.mark.parametrize(("values", "vec", "lanes"), [
    (128, 8, 16), (128, 4, 32), (256, 8, 32), (1024, 8, 32), (64, 8, 8), (16, 8, 2), (8, 8, 1), (100, 4, 32),
    (80, 8, 16), (12, 4, 4), (128, 1, 32),
])
def test_a_row_takes_the_fewest_lanes_that_cover_it_with_one_vector_each(values: int, vec: int, lanes: int) -> None:
    """ceil(values / vec) lanes rounded up to a power of two, at most 32; enumerated by hand."""
    from rtp_ref.kernels.cuda_mha_indexer import row_lanes

    assert row_lanes(values, vec) == lanes
