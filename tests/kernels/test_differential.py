"""Differential tests: every built-in kernel against ``reference_write`` on hypothesis-drawn calls.

Each example (tests/strategies.py) is a random platform contract, layout, shape, slot map (negative
entries, no duplicates) and value mix (zero tiles, subnormals, overflow, NaN/inf where defined), on a
canary-filled cache with padded blocks. The kernel's whole cache storage is compared with the
reference's image of it (tests/kernels/cases.py):

* ``reference``, ``triton`` (Triton's interpreter on the CPU, compiled on a GPU) and ``cuda`` (GPU
  only) must be bit-exact;
* ``torch-eager`` on the CPU casts with torch's own ``.to(float8)``, whose overflow and NaN handling
  differs between torch builds (torch 2.13: e4m3fn keeps a NaN's sign, e4m3fnuz does not saturate;
  torch 2.11 does not saturate e4m3fn either). It must be bit-exact except for exactly the (contract
  byte, torch byte) pairs this build's cast gives on probe values (``torch_cast_deviations``).
* bf16 subnormals are in the ``triton`` property too: Triton 3.9's interpreter converts them wrongly,
  so the kernel widens bf16 by bit placement (``test_triton_bf16_subnormals_with_the_smallest_scale``).

A slot used twice in one call is refused by every built-in kernel before it writes a byte.

Example counts are shares of the active hypothesis profile (``ci``/``dev``: 60 per property;
``--hypothesis-profile thorough``: 2000), so the thorough profile scales every test here.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import assume, given, settings

from rtp_ref.fp8 import encode
from rtp_ref.fp8.formats import ConversionMode, Fp8Format
from rtp_ref.kernels.builtin import unavailable_builtin_kernels
from rtp_ref.kernels.discovery import builtin_kernels
from rtp_ref.kernels.protocol import KVCacheKernel
from rtp_ref.kv.cache import reference_write
from rtp_ref.kv.fields import Source, is_fp8_element
from tests.kernels.cases import (
    COMPILED,
    WriteCase,
    assert_bit_exact,
    block_byte_positions,
    contract,
    full_bytes,
    make_case,
    nan_scale_bytes,
    target_bytes,
)
from tests.strategies import ValuePlan, WriteSpec, write_specs

# The Triton interpreter evaluates both sides of every select in numpy, so NaN, inf and huge inputs make
# it warn about lanes whose results are discarded; the bytes written are what is checked.
pytestmark = [pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")]

#: Triton runs in its CPU interpreter here (tests/kernels/conftest.py sets TRITON_INTERPRET without a GPU)
KERNELS = {entry.kernel.name: entry.kernel for entry in builtin_kernels()}
MISSING = unavailable_builtin_kernels()
#: the smallest normal float32, a scale floor
FLT_MIN = torch.finfo(torch.float32).tiny

#: bf16 bit patterns of values on which torch's own fp8 casts differ between builds and from the contract:
#: finite overflow near and far past each format's maximum (464, 466, 1000, ~2.5e30; 241, 248, 250 for
#: e4m3fnuz's 240), inf and NaN; each is also probed with its sign bit set.
CAST_PROBES = (0x43E8, 0x43E9, 0x447A, 0x7149, 0x7F80, 0x4371, 0x4378, 0x437A, 0x7FC0)


def cast_probes() -> torch.Tensor:
    """``CAST_PROBES`` and their negatives as bf16, built from bits (torch's casts may drop a NaN's sign)."""
    bits = torch.tensor(CAST_PROBES, dtype=torch.int32)
    both = torch.cat([bits, bits | 0x8000])
    return torch.where(both >= 0x8000, both - 0x10000, both).to(torch.int16).view(torch.bfloat16)


def torch_cast_deviations(fmt: Fp8Format, mode: ConversionMode) -> set[tuple[int, int]]:
    """(contract byte, torch byte) pairs where this torch build's ``.to(float8)`` differs from the contract
    on the probes (torch-eager's numerics are that cast, by design)."""
    x = cast_probes().float()
    contract_bytes = encode(x, fmt, mode)
    torch_bytes = x.to(getattr(torch, fmt.torch_dtype_name)).view(torch.uint8)
    differ = contract_bytes != torch_bytes
    return set(zip(contract_bytes[differ].tolist(), torch_bytes[differ].tolist(), strict=True))


def share(fraction: float) -> settings:
    """Settings running ``fraction`` of the active profile's examples (at least 3)."""
    return settings(max_examples=max(3, round(settings.default.max_examples * fraction)))


def kernel(name: str) -> KVCacheKernel:
    """The built-in kernel ``name``, or a skip saying why it cannot run here."""
    if name not in KERNELS:
        pytest.skip(f"{name} kernel: {MISSING.get(name, 'not a built-in kernel')}")
    return KERNELS[name]


def device_of(name: str) -> str:
    """Where a built-in kernel runs in this process (Triton: the CPU under its interpreter)."""
    return next(iter(kernel(name).devices))


def run(name: str, spec: WriteSpec) -> tuple[WriteCase, torch.Tensor]:
    """The spec's case and the cache (on the CPU) after the kernel, bound to the spec's contract, wrote it."""
    case = spec.case()
    bound = kernel(name).bind(spec.contract)  # type: ignore[attr-defined]
    return case, case.to(device_of(name)).run(bound)


@share(0.5)
@given(spec=write_specs())
def test_reference_kernel_is_bit_exact(spec: WriteSpec) -> None:
    case, got = run("reference", spec)
    assert_bit_exact(case, got, f"reference {spec.layout}")


@pytest.mark.triton
@share(0.25)
@given(spec=write_specs(layouts=COMPILED, max_tokens=24, max_dim=192))
def test_triton_is_bit_exact(spec: WriteSpec) -> None:
    case, got = run("triton", spec)
    assert_bit_exact(case, got, f"triton {spec.layout} on {spec.platform}")


@pytest.mark.triton
def test_triton_bf16_subnormals_with_the_smallest_scale() -> None:
    """Triton's interpreter (3.9) converts bf16 subnormals to float32 wrongly (2^-128 -> 0); the kernel
    widens bf16 by bit placement instead, which this case (tile scale at FLT_MIN) would catch."""
    values = ValuePlan(seed=0, rows=("subnormal",), exponents=(0,), zero_tiles=(), specials=(), scale_factor=1.0)
    spec = WriteSpec("cpu", {"model1_scale_floor": str(FLT_MIN)}, "fp8_model1_mla", (448, 64), "bf16", block_size=4,
                     num_blocks=1, block_pad=0, extra_rows=0, column_offset=0, slots=(0,), values=values)
    case, got = run("triton", spec)
    assert_bit_exact(case, got, "triton model1 on bf16 subnormals")


@pytest.mark.cuda
@share(0.5)
@given(spec=write_specs(layouts=COMPILED))
def test_cuda_is_bit_exact(spec: WriteSpec) -> None:
    case, got = run("cuda", spec)
    assert_bit_exact(case, got, f"cuda {spec.layout} on {spec.platform}")


def fp8_value_bytes(case: WriteCase) -> torch.Tensor:
    """Mask of the storage bytes holding fp8 values (not scales, not 16-bit fields) of the written entries."""
    layout = case.layout
    mask = torch.zeros_like(full_bytes(case.expected), dtype=torch.bool)
    columns = [torch.arange(layout.entry_offset(f), layout.entry_offset(f) + f.size) for f in layout.entry_fields
               if f.source in (Source.KV_C, Source.K_PE) and is_fp8_element(f.element)]
    slots = case.slots[case.slots >= 0]
    if not columns or not slots.numel():
        return mask
    block_size = case.cache.shape[1]
    positions = block_byte_positions(layout, slots % block_size, torch.cat(columns), block_size)
    mask[(slots // block_size).unsqueeze(1) * case.cache.stride(0) * case.cache.element_size() + positions] = True
    return mask


@share(1.0)
@given(spec=write_specs())
def test_torch_eager_on_the_cpu_is_bit_exact_but_for_torchs_cast(spec: WriteSpec) -> None:
    case, got = run("torch-eager", spec)
    expected, written = full_bytes(case.expected), full_bytes(got)
    differ = (expected != written) & ~nan_scale_bytes(case, got)
    assert not (differ & ~target_bytes(case)).any(), "torch-eager changed bytes outside the target entries"
    assert not (differ & ~fp8_value_bytes(case)).any(), "torch-eager differs in a scale or a 16-bit field"
    pairs = set(zip(expected[differ].tolist(), written[differ].tolist(), strict=True))
    known = torch_cast_deviations(case.layout.element_format, case.layout.conversion_mode)
    assert pairs <= known, (
        f"torch-eager on {spec.platform} ({case.layout.element_format.name}) wrote (reference, torch-eager) "
        f"byte pairs {sorted(pairs - known)} beyond those of torch {torch.__version__}'s own cast {sorted(known)}"
    )


@pytest.mark.parametrize("platform", ["cpu", "rocm-gfx942"])
def test_torch_eager_writes_what_torchs_cast_writes(platform: str, survey: list[str]) -> None:
    """On the probe values torch-eager stores exactly torch's cast, the reference exactly the contract:
    the allowance of the property above is this build's measured cast behaviour, nothing more."""
    c = contract(platform)
    x = cast_probes()
    n = x.numel()
    case = make_case(c, "fp8", tokens=1, edge=False, scale=1.0)
    case.slots[0] = 0
    case.kv_c[0, :n] = x
    expected, got = case.cache.clone(), case.cache.clone()
    reference_write(case.layout, case.kv_c, case.k_pe, expected, case.slots, case.scale)
    kernel("torch-eager").bind(c)(case.kv_c, case.k_pe, got, case.slots, "fp8", case.scale)  # type: ignore[attr-defined]
    fmt, quotient = c.element_format, x.float() / case.scale
    assert got[0, 0, :n].tolist() == quotient.to(getattr(torch, fmt.torch_dtype_name)).view(torch.uint8).tolist()
    assert expected[0, 0, :n].tolist() == encode(quotient, fmt, c.conversion_mode).tolist()
    deviations = torch_cast_deviations(fmt, c.conversion_mode)
    survey.append(f"torch {torch.__version__} .to(float8_{fmt.name}) on the CPU differs from the contract as "
                  f"(contract, torch) bytes {sorted(deviations) or 'nowhere'} on overflow, inf and NaN probes")


@pytest.mark.parametrize("name", [
    "reference",
    "torch-eager",
    pytest.param("triton", marks=pytest.mark.triton),
    pytest.param("cuda", marks=pytest.mark.cuda),
])
@share(0.15)
@given(spec=write_specs(max_tokens=12, max_dim=128, duplicate=True))
def test_duplicate_slots_are_refused_before_any_byte_is_written(name: str, spec: WriteSpec) -> None:
    assume(spec.layout in kernel(name).kv_cache_dtypes)  # the compiled kernels refuse V4.1's layouts first
    device = device_of(name)
    # The call is refused, so there is no expected image: the initial cache stands in for it.
    layout, kv_c, k_pe, cache, slots, scale = spec.arguments()
    call = WriteCase(layout, kv_c, k_pe, cache, slots, scale, expected=cache).to(device)
    before = full_bytes(call.cache).cpu().clone()
    # the compiled kernels check slot values only on their host-validating path (the default one does not sync)
    host = {"validation": "host"} if name in ("triton", "cuda") else {}
    bound = kernel(name).bind(spec.contract, **host)  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match=r"slot_mapping\[\d+\]=\d+ repeats slot_mapping\[\d+\]"):
        bound(call.kv_c, call.k_pe, call.cache, call.slots, spec.layout, call.scale)
    assert torch.equal(full_bytes(call.cache).cpu(), before), f"{name} wrote into the cache before refusing"
