"""torch-eager, the naive baseline, against the reference writer.

It must never touch a byte outside the target entries and must copy 16-bit fields exactly. Its fp8
bytes follow torch's own cast, so the tests state what it reaches rather than demand bit-exactness:
on the CPU (saturating cast) it is bit-exact on ordinary inputs of the OCP tables; edge values
(inf, NaN, overflow) and fnuz tables give deviations, which the run summary lists.
"""

from __future__ import annotations

import pytest
import torch

from rtp_ref.kernels.protocol import UnsupportedLayoutError, check_kernel
from rtp_ref.kernels.torch_eager import TorchEagerKernel
from tests.kernels.cases import BUNDLED, LAYOUTS, assert_bit_exact, contract, differences, make_case

KERNEL = TorchEagerKernel()


def _contract_for(device: torch.device) -> str:
    return "cpu" if device.type == "cpu" else "cuda-sm90"


def test_kernel_satisfies_the_protocol() -> None:
    check_kernel(KERNEL, "test")
    assert set(BUNDLED) <= set(KERNEL.kv_cache_dtypes) == set(LAYOUTS)
    assert KERNEL.conversion_path == "torch"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_auto_layout_is_bit_exact(device: torch.device, dtype: torch.dtype) -> None:
    c = contract(_contract_for(device))
    case = make_case(c, "auto", dtype=dtype).to(device.type)
    assert_bit_exact(case, case.run(KERNEL.bind(c)), "torch-eager auto")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_ordinary_inputs_are_bit_exact_on_the_cpu(layout: str) -> None:
    c = contract("cpu")
    # scale 1.0 keeps the per-tensor layouts' values far below the fp8 maximum.
    case = make_case(c, layout, edge=False, scale=1.0)
    assert_bit_exact(case, case.run(KERNEL.bind(c)), f"torch-eager {layout}")


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("tokens", [0, 1])
def test_zero_and_one_token(layout: str, tokens: int) -> None:
    c = contract("cpu")
    case = make_case(c, layout, edge=False, scale=1.0, tokens=tokens)
    assert_bit_exact(case, case.run(KERNEL.bind(c)), f"torch-eager {layout} tokens={tokens}")


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("platform", ["cpu", "rocm-gfx942"])
def test_edge_inputs_change_only_target_bytes(device: torch.device, platform: str, layout: str,
                                              survey: list[str]) -> None:
    c = contract(platform)
    case = make_case(c, layout).to(device.type)
    inside, outside = differences(case, case.run(KERNEL.bind(c)))
    assert outside == 0, f"torch-eager changed {outside} byte(s) outside the target entries"
    if inside:
        survey.append(f"torch-eager on {device.type}, {platform} table, {layout} with edge values: "
                      f"{inside} entry byte(s) differ from the reference (torch's own fp8 cast)")


def test_unclaimed_layout_and_device_raise() -> None:
    case = make_case(contract("cpu"), "fp8", tokens=2)
    with pytest.raises(UnsupportedLayoutError, match="torch-eager does not support kv_cache_dtype 'int8'"):
        case.run(KERNEL, "int8")
    with pytest.raises(UnsupportedLayoutError, match="torch-eager does not run on device type 'meta'"):
        KERNEL(case.kv_c, case.k_pe, case.cache.to("meta"), case.slots, "fp8", case.scale)
