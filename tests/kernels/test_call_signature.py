"""The key a built-in kernel's checked launch is reused under (rtp_ref.kernels.call_signature): two calls share it
only when nothing a launch was prepared from differs. Each variant below changes one fact a launch depends on
(shape, strides, dtype, device, the start address modulo 16, a string or integer argument) and must get a key of
its own; new values in the same tensors must not."""

from __future__ import annotations

import pytest
import torch

from rtp_ref.kernels.call_signature import call_signature


def _args(x: torch.Tensor, layout: str = "fp8", count: int = 4) -> tuple[object, ...]:
    return (layout, x, count)


BASE = torch.zeros(8, 16, dtype=torch.bfloat16)
#: each differs from BASE in one fact a launch depends on
VARIANTS = {
    "shape": torch.zeros(8, 8, dtype=torch.bfloat16),
    "strides": torch.zeros(16, 8, dtype=torch.bfloat16).t(),
    "dtype": torch.zeros(8, 16, dtype=torch.float16),
    "device": torch.zeros(8, 16, dtype=torch.bfloat16, device="meta"),
    # 2 bytes past a 16-byte aligned start (torch's CPU allocations are at least 16-byte aligned)
    "alignment": torch.zeros(8 * 16 + 1, dtype=torch.bfloat16)[1:].view(8, 16),
}


def test_new_values_in_tensors_of_the_same_metadata_share_the_key() -> None:
    assert BASE.data_ptr() % 16 == 0
    assert call_signature(*_args(BASE)) == call_signature(*_args(torch.ones(8, 16, dtype=torch.bfloat16)))


@pytest.mark.parametrize("fact", sorted(VARIANTS))
def test_a_tensor_that_differs_in_one_fact_gets_its_own_key(fact: str) -> None:
    assert call_signature(*_args(VARIANTS[fact])) != call_signature(*_args(BASE))


def test_string_and_integer_arguments_are_part_of_the_key() -> None:
    assert call_signature(*_args(BASE, layout="fp8_ds_mla")) != call_signature(*_args(BASE))
    assert call_signature(*_args(BASE, count=5)) != call_signature(*_args(BASE))


@pytest.mark.parametrize("other", [True, 1.0, None, [1]], ids=["bool", "float", "none", "list"])
def test_an_argument_that_is_no_tensor_string_or_integer_gives_no_key(other: object) -> None:
    """No key: the call takes the checked path, which names the bad argument (a bool is not a count)."""
    assert call_signature("fp8", BASE, other) is None
