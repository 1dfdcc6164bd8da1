"""The cuda kernel (CUDA C++ built at first use) against the reference writer, byte for byte.

Needs an NVIDIA GPU with nvcc: elsewhere the kernel is unavailable and only its reason is tested.
"""

from __future__ import annotations

import zlib

import pytest
import torch

from rtp_ref.errors import RtpRefError
from rtp_ref.kernels.cuda_mla import CudaMlaKernel, unavailable_reason
from rtp_ref.kernels.protocol import UnsupportedLayoutError, check_kernel
from tests.kernels.cases import CONTRACTS, LAYOUTS, SHAPES, assert_bit_exact, contract, make_case

KERNEL = CudaMlaKernel()
#: the one-wave kernel (0) and the pipelined kernel's ring depths
STAGES = (0, 2, 3, 4)
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
needs_build = pytest.mark.skipif(unavailable_reason() is not None, reason=f"cuda kernel: {unavailable_reason()}")
pytestmark = [pytest.mark.cuda, needs_build]


def test_kernel_satisfies_the_protocol() -> None:
    check_kernel(KERNEL, "test")
    assert set(KERNEL.kv_cache_dtypes) == set(LAYOUTS)


def test_conversion_path_is_hardware_only_for_ocp_satfinite() -> None:
    assert KERNEL.bind(contract("cuda-sm90")).conversion_path == "hardware"
    assert KERNEL.bind(contract("cuda-sm90"), conversion="software").conversion_path == "software"
    assert KERNEL.bind(contract("rocm-gfx942")).conversion_path == "software"
    assert KERNEL.bind(CONTRACTS["e4m3fn-nonsat"]()).conversion_path == "software"


@pytest.mark.parametrize("stages", STAGES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("contract_id", ["cuda-sm90", "cuda-sm90/software", "rocm-gfx942", "e5m2fnuz-nonsat"])
def test_bit_exact_on_every_layout(contract_id: str, layout: str, dtype: str, stages: int) -> None:
    base, _, forced = contract_id.partition("/")
    c = CONTRACTS[base]()
    staged = CudaMlaKernel(stages=stages)
    kernel = staged.bind(c, conversion="software") if forced else staged.bind(c)
    seed = zlib.crc32(f"{contract_id}{layout}{dtype}".encode())
    case = make_case(c, layout, dtype=DTYPES[dtype], seed=seed).to("cuda")
    assert_bit_exact(case, case.run(kernel), f"cuda {contract_id} {layout} {dtype}")


@pytest.mark.parametrize(("contract_id", "layout", "dims", "flags"), SHAPES,
                         ids=[f"{s[1]}-{s[2][0]}x{s[2][1]}" for s in SHAPES])
@pytest.mark.parametrize("stages", [0, 3])
def test_bit_exact_on_odd_shapes(contract_id: str, layout: str, dims: tuple[int, int],
                                 flags: dict[str, str], stages: int) -> None:
    c = contract(contract_id, **flags)
    case = make_case(c, layout, dims=dims, dtype=torch.float16, tokens=13, block_size=3).to("cuda")
    assert_bit_exact(case, case.run(CudaMlaKernel(stages=stages).bind(c)), f"cuda {layout} {dims} stages={stages}")


@pytest.mark.parametrize("stages", [0, 3])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_bit_exact_with_misaligned_inputs(layout: str, stages: int) -> None:
    """Rows starting off a 16-byte boundary take the scalar path (whatever the stages), with the same bytes."""
    c = contract("cuda-sm90")
    case = make_case(c, layout, seed=3).to("cuda")
    case.kv_c = torch.cat([case.kv_c.new_zeros(case.kv_c.shape[0], 1), case.kv_c], dim=1)[:, 1:]
    assert case.kv_c.data_ptr() % 16 != 0
    assert_bit_exact(case, case.run(CudaMlaKernel(stages=stages).bind(c)), f"cuda misaligned {layout}")


@pytest.mark.parametrize(("stages", "blocks_per_sm"), [(0, 0), (2, 0), (3, 0), (4, 0), (2, 1), (3, 1)])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_bit_exact_with_many_tokens(layout: str, stages: int, blocks_per_sm: int) -> None:
    """More tokens than one wave of resident blocks covers (an H200 holds 132 x 6 blocks of 8 tiled
    tokens: 6,336), an odd count, block size 64, about a third of the slots padding. With one block a
    multiprocessor, each warp of the pipelined kernel goes round its ring of stages many times."""
    c = contract("cuda-sm90")
    case = make_case(c, layout, tokens=13_001, block_size=64, num_blocks=300, seed=11).to("cuda")
    kernel = CudaMlaKernel(stages=stages, blocks_per_sm=blocks_per_sm).bind(c)
    assert_bit_exact(case, case.run(kernel), f"cuda many tokens {layout} stages={stages} blocks={blocks_per_sm}")


def test_unclaimed_layout_and_cpu_tensors_raise() -> None:
    case = make_case(contract("cuda-sm90"), "fp8", tokens=2)
    with pytest.raises(UnsupportedLayoutError, match="cuda does not support kv_cache_dtype 'fp8_e5m2'"):
        case.to("cuda").run(KERNEL, "fp8_e5m2")
    with pytest.raises(UnsupportedLayoutError, match="cuda does not run on device type 'cpu'"):
        case.run(KERNEL)


def test_invalid_arguments_raise_before_any_byte_is_written() -> None:
    case = make_case(contract("cuda-sm90"), "fp8_model1_mla", tokens=4).to("cuda")
    slots = case.slots.clone()
    slots[0] = case.cache.shape[0] * case.cache.shape[1]
    before = case.cache.clone()
    with pytest.raises(RtpRefError, match="outside the cache"):
        KERNEL(case.kv_c, case.k_pe, case.cache, slots, "fp8_model1_mla", case.scale)
    assert torch.equal(case.cache, before)


@pytest.mark.parametrize("tokens", [0, 1])
def test_zero_and_one_token(tokens: int) -> None:
    c = contract("cuda-sm90")
    case = make_case(c, "fp8_ds_mla", tokens=tokens).to("cuda")
    assert_bit_exact(case, case.run(KERNEL.bind(c)), f"cuda tokens={tokens}")
