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
from tests.kernels import cases
from tests.kernels.cases import COMPILED, CONTRACTS, DTYPES, SHAPES, assert_bit_exact, contract, make_case

KERNEL = CudaMlaKernel()
needs_build = pytest.mark.skipif(unavailable_reason() is not None, reason=f"cuda kernel: {unavailable_reason()}")
pytestmark = [pytest.mark.cuda, needs_build]


def test_kernel_satisfies_the_protocol() -> None:
    check_kernel(KERNEL, "test")
    assert set(KERNEL.kv_cache_dtypes) == set(COMPILED)


def test_conversion_path_is_hardware_only_for_ocp_satfinite() -> None:
    assert KERNEL.bind(contract("cuda-sm90")).conversion_path == "hardware"
    assert KERNEL.bind(contract("cuda-sm90"), conversion="software").conversion_path == "software"
    assert KERNEL.bind(contract("rocm-gfx942")).conversion_path == "software"
    assert KERNEL.bind(CONTRACTS["e4m3fn-nonsat"]()).conversion_path == "software"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", COMPILED)
@pytest.mark.parametrize("contract_id", ["cuda-sm90", "cuda-sm90/software", "rocm-gfx942", "e5m2fnuz-nonsat"])
def test_bit_exact_on_every_layout(contract_id: str, layout: str, dtype: str) -> None:
    base, _, forced = contract_id.partition("/")
    c = CONTRACTS[base]()
    kernel = KERNEL.bind(c, conversion="software") if forced else KERNEL.bind(c)
    seed = zlib.crc32(f"{contract_id}{layout}{dtype}".encode())
    case = make_case(c, layout, dtype=DTYPES[dtype], seed=seed).to("cuda")
    assert_bit_exact(case, case.run(kernel), f"cuda {contract_id} {layout} {dtype}")


@pytest.mark.parametrize(("contract_id", "layout", "dims", "flags"), SHAPES,
                         ids=[f"{s[1]}-{s[2][0]}x{s[2][1]}" for s in SHAPES])
def test_bit_exact_on_odd_shapes(contract_id: str, layout: str, dims: tuple[int, int],
                                 flags: dict[str, str]) -> None:
    c = contract(contract_id, **flags)
    case = make_case(c, layout, dims=dims, dtype=torch.float16, tokens=13, block_size=3).to("cuda")
    assert_bit_exact(case, case.run(KERNEL.bind(c)), f"cuda {layout} {dims}")


@pytest.mark.parametrize("layout", COMPILED)
def test_bit_exact_with_misaligned_inputs(layout: str) -> None:
    """Rows starting off a 16-byte boundary take the scalar path, with the same bytes."""
    c = contract("cuda-sm90")
    case = make_case(c, layout, seed=3).to("cuda")
    case.kv_c = torch.cat([case.kv_c.new_zeros(case.kv_c.shape[0], 1), case.kv_c], dim=1)[:, 1:]
    assert case.kv_c.data_ptr() % 16 != 0
    assert_bit_exact(case, case.run(KERNEL.bind(c)), f"cuda misaligned {layout}")


@pytest.mark.parametrize("layout", ["fp8_ds_mla", "fp8_model1_mla"])
def test_bit_exact_with_many_tokens(layout: str) -> None:
    """More tokens than one wave of resident blocks covers (an H200 holds 132 x 6 blocks of 8 tiled
    tokens: 6,336), an odd count, block size 64, about a third of the slots padding."""
    c = contract("cuda-sm90")
    case = make_case(c, layout, tokens=13_001, block_size=64, num_blocks=300, seed=11).to("cuda")
    assert_bit_exact(case, case.run(KERNEL.bind(c)), f"cuda many tokens {layout}")


def test_unclaimed_layout_and_cpu_tensors_raise() -> None:
    case = make_case(contract("cuda-sm90"), "fp8", tokens=2)
    with pytest.raises(UnsupportedLayoutError, match="cuda does not support kv_cache_dtype 'fp8_e5m2'"):
        case.to("cuda").run(KERNEL, "fp8_e5m2")
    with pytest.raises(UnsupportedLayoutError, match="cuda does not run on device type 'cpu'"):
        case.run(KERNEL)


def test_invalid_arguments_raise_before_any_byte_is_written_on_the_host_path() -> None:
    c = contract("cuda-sm90")
    case = make_case(c, "fp8_model1_mla", tokens=4).to("cuda")
    slots = case.slots.clone()
    slots[0] = case.cache.shape[0] * case.cache.shape[1]
    before = case.cache.clone()
    with pytest.raises(RtpRefError, match="outside the cache"):
        KERNEL.bind(c, validation="host")(case.kv_c, case.k_pe, case.cache, slots, "fp8_model1_mla", case.scale)
    assert torch.equal(case.cache, before)


def test_the_default_path_skips_and_flags_a_slot_past_the_cache() -> None:
    """No sync: the bad token writes nothing, every other token is written as the reference writes it."""
    c = contract("cuda-sm90")
    case, slots, expected = cases.past_capacity_case(c, "fp8_ds_mla")
    case = case.to("cuda")
    kernel = KERNEL.bind(c)
    kernel(case.kv_c, case.k_pe, case.cache, slots.to("cuda"), "fp8_ds_mla", case.scale)
    assert torch.equal(cases.full_bytes(case.cache).cpu(), cases.full_bytes(expected))
    assert kernel.take_input_errors() == [cases.PAST_CAPACITY_FLAGGED.format(device="cuda:0")]


@pytest.mark.parametrize("tokens", [0, 1])
def test_zero_and_one_token(tokens: int) -> None:
    c = contract("cuda-sm90")
    case = make_case(c, "fp8_ds_mla", tokens=tokens).to("cuda")
    assert_bit_exact(case, case.run(KERNEL.bind(c)), f"cuda tokens={tokens}")
