"""The triton kernel against the reference writer, byte for byte, on every layout.

On a machine without a GPU the kernel runs in Triton's CPU interpreter (tests/kernels/conftest.py
sets TRITON_INTERPRET=1), where it must take the software conversion path: the interpreter
mis-rounds fp8 conversions. On a GPU it runs compiled, with the hardware path where one exists.
"""

from __future__ import annotations

import zlib

import pytest
import torch

from rtp_ref.errors import RtpRefError
from rtp_ref.kernels.protocol import UnsupportedLayoutError, check_kernel
from tests.kernels.cases import (
    BUNDLED,
    CONTRACTS,
    DTYPES,
    PAST_CAPACITY_FLAGGED,
    REFERENCE_ONLY,
    SHAPES,
    TRITON_LAYOUTS,
    TRITON_ONLY,
    assert_bit_exact,
    contract,
    full_bytes,
    make_case,
    past_capacity_case,
)

pytest.importorskip("triton")
from rtp_ref.kernels.triton_fp8 import interpreted
from rtp_ref.kernels.triton_mla import TritonMlaKernel

# NaN and inf inputs make the interpreter's numpy division warn; the results are what is checked.
pytestmark = [pytest.mark.triton, pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")]

DEVICE = "cpu" if interpreted() else "cuda"
if DEVICE == "cuda" and not torch.cuda.is_available():
    pytest.skip("triton was imported without TRITON_INTERPRET and torch sees no GPU", allow_module_level=True)

KERNEL = TritonMlaKernel()
#: compiled Triton costs a second or two per specialisation, so the GPU runs fewer contracts
RUN_CONTRACTS = (["cpu", "rocm-gfx942", "rocm-gfx950", "e4m3fn-nonsat", "e5m2-satfinite", "e5m2fnuz-nonsat"]
                 if DEVICE == "cpu" else ["cuda-sm90", "rocm-gfx942", "e5m2fnuz-nonsat"])


def test_kernel_satisfies_the_protocol_and_claims_every_compiled_layout() -> None:
    check_kernel(KERNEL, "test")
    assert set(BUNDLED) | set(TRITON_ONLY) <= set(KERNEL.kv_cache_dtypes) == set(TRITON_LAYOUTS)
    assert not set(REFERENCE_ONLY) & set(KERNEL.kv_cache_dtypes)
    assert tuple(KERNEL.devices) == (DEVICE,)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", TRITON_LAYOUTS)
@pytest.mark.parametrize("contract_id", RUN_CONTRACTS)
def test_bit_exact_on_every_layout(contract_id: str, layout: str, dtype: str) -> None:
    c = CONTRACTS[contract_id]()
    seed = zlib.crc32(f"{contract_id}{layout}{dtype}".encode())
    case = make_case(c, layout, dtype=DTYPES[dtype], seed=seed).to(DEVICE)
    assert_bit_exact(case, case.run(KERNEL.bind(c)), f"triton {contract_id} {layout} {dtype}")


@pytest.mark.skipif(DEVICE == "cpu", reason="the software path is what the interpreter runs anyway")
@pytest.mark.parametrize("layout", TRITON_LAYOUTS)
def test_forced_software_path_is_bit_exact_on_the_gpu(layout: str) -> None:
    c = contract("cuda-sm90")
    kernel = KERNEL.bind(c, conversion="software")
    assert kernel.conversion_path == "software"
    case = make_case(c, layout, seed=7).to(DEVICE)
    assert_bit_exact(case, case.run(kernel), f"triton software {layout}")


@pytest.mark.parametrize(("contract_id", "layout", "dims", "flags"), SHAPES,
                         ids=[f"{s[1]}-{s[2][0]}x{s[2][1]}" for s in SHAPES])
def test_bit_exact_on_odd_shapes(contract_id: str, layout: str, dims: tuple[int, int],
                                 flags: dict[str, str]) -> None:
    c = contract(contract_id, **flags)
    case = make_case(c, layout, dims=dims, dtype=torch.float16, tokens=13, block_size=3).to(DEVICE)
    assert_bit_exact(case, case.run(KERNEL.bind(c)), f"triton {layout} {dims}")


@pytest.mark.parametrize(("tokens", "block_size"), [(0, 4), (1, 1), (37, 16)])
def test_bit_exact_for_token_counts_and_block_sizes(tokens: int, block_size: int) -> None:
    c = contract("cpu")
    case = make_case(c, "fp8_model1_mla", tokens=tokens, block_size=block_size, num_blocks=6).to(DEVICE)
    assert_bit_exact(case, case.run(KERNEL.bind(c)), f"triton model1 tokens={tokens} block={block_size}")


def test_unbound_kernel_follows_its_devices_platform() -> None:
    c = contract("cpu") if DEVICE == "cpu" else None
    case = make_case(c or contract("cuda-sm90"), "fp8_ds_mla").to(DEVICE)
    assert_bit_exact(case, case.run(KERNEL), "unbound triton")


def test_conversion_path_is_reported() -> None:
    if DEVICE == "cpu":
        # Triton's interpreter mis-rounds fp8 conversions: the kernel must not use them there.
        assert KERNEL.bind(contract("cpu")).conversion_path == "software"
    else:
        major, minor = torch.cuda.get_device_capability()
        expected = "hardware" if (major, minor) >= (8, 9) and not torch.version.hip else "software"
        assert KERNEL.bind(contract("cuda-sm90")).conversion_path == expected
        assert KERNEL.bind(contract("rocm-gfx942")).conversion_path == ("hardware" if torch.version.hip
                                                                        and "gfx942" in str(
            torch.cuda.get_device_properties(0).gcnArchName) else "software")


@pytest.mark.parametrize("bad", ["fp8_e5m2", "bf16", ""])
def test_unclaimed_layout_raises(bad: str) -> None:
    case = make_case(contract("cpu"), "fp8", tokens=2).to(DEVICE)
    with pytest.raises(UnsupportedLayoutError, match="triton does not support kv_cache_dtype"):
        case.run(KERNEL, bad)


def test_device_it_does_not_run_on_raises() -> None:
    other = "meta"
    case = make_case(contract("cpu"), "fp8", tokens=2)
    with pytest.raises(UnsupportedLayoutError, match=f"triton does not run on device type '{other}'"):
        KERNEL(case.kv_c.to(other), case.k_pe.to(other), case.cache.to(other), case.slots.to(other), "fp8",
               case.scale.to(other))


@pytest.mark.parametrize("problem", ["slot out of range", "repeated slot", "wrong cache entry"])
def test_invalid_arguments_raise_before_any_byte_is_written(problem: str) -> None:
    c = contract("cpu")
    case = make_case(c, "fp8_ds_mla", tokens=4).to(DEVICE)
    cache = case.cache.clone()
    slots = case.slots.clone()
    if problem == "slot out of range":
        slots[0] = case.cache.shape[0] * case.cache.shape[1]
    elif problem == "repeated slot":
        slots[2] = slots[0] = 3
    else:
        cache = cache[..., :-1]
    before = cache.clone()
    with pytest.raises(RtpRefError):
        KERNEL.bind(c, validation="host")(case.kv_c, case.k_pe, cache, slots, "fp8_ds_mla", case.scale)
    assert torch.equal(cache, before)


def test_the_default_path_skips_and_flags_a_slot_past_the_cache() -> None:
    """No sync: the bad token writes nothing, every other token is written as the reference writes it; a wrong
    cache entry (metadata) still raises before writing."""
    c = contract("cpu")
    case, slots, expected = past_capacity_case(c, "fp8_ds_mla")
    case = case.to(DEVICE)
    kernel = KERNEL.bind(c)
    assert kernel.graph_safe and not KERNEL.bind(c, validation="host").graph_safe
    kernel(case.kv_c, case.k_pe, case.cache, slots.to(DEVICE), "fp8_ds_mla", case.scale)
    assert torch.equal(full_bytes(case.cache).cpu(), full_bytes(expected))
    device = "cpu" if DEVICE == "cpu" else "cuda:0"
    assert kernel.take_input_errors() == [PAST_CAPACITY_FLAGGED.format(device=device)]
    assert kernel.take_input_errors() == []
    with pytest.raises(RtpRefError, match="entry size"):
        kernel(case.kv_c, case.k_pe, case.cache[..., :-1], slots.to(DEVICE), "fp8_ds_mla", case.scale)


@pytest.mark.parametrize(("tokens_per_program", "num_warps"), [(1, 1), (2, 2), (4, 2), (16, 8)])
def test_launch_tuning_never_changes_the_bytes(tokens_per_program: int, num_warps: int) -> None:
    c = contract("rocm-gfx942")
    kernel = TritonMlaKernel(c, tokens_per_program=tokens_per_program, num_warps=num_warps)
    case = make_case(c, "fp8_ds_mla", tokens=21, seed=5).to(DEVICE)
    assert_bit_exact(case, case.run(kernel), f"triton t{tokens_per_program} w{num_warps}")


def test_tokens_per_program_must_be_a_power_of_two() -> None:
    with pytest.raises(ValueError, match="tokens_per_program=3: must be a power of two"):
        TritonMlaKernel(tokens_per_program=3)


def test_a_checked_launch_is_reused_only_for_calls_of_the_same_metadata() -> None:
    """The second call of a shape reuses the first's checked launch (rtp_ref.kernels.call_signature): it must
    write its own inputs' bytes; a call whose metadata differs is checked afresh and refused."""
    c = contract("rocm-gfx942")
    kernel = KERNEL.bind(c)
    for seed in (1, 2):  # same shapes, strides and alignment, other values and slots
        case = make_case(c, "fp8_ds_mla", tokens=7, seed=seed).to(DEVICE)
        assert_bit_exact(case, case.run(kernel), f"triton reused launch, seed {seed}")
    with pytest.raises(RtpRefError, match="entry size"):
        kernel(case.kv_c, case.k_pe, case.cache[..., :-1], case.slots, "fp8_ds_mla", case.scale)


@pytest.mark.parametrize(("version", "release"), [("3.6.0", (3, 6)), ("3.3.1+git0", (3, 3)), ("3.4rc1", (3, 4)),
                                                  ("2.1.0", (2, 1)), ("nightly", (0, 0))])
def test_triton_releases_are_read_from_their_version_strings(version: str, release: tuple[int, int]) -> None:
    from rtp_ref.kernels.triton_launch import release_of

    assert release_of(version) == release
