"""Argument contracts and launch size (issue 33): int32 slot mappings, 0-D scales, a cache of another dtype under
``auto``, and the launch-size case sized by device. Every write op has the cases; the built-in kernels handle them or
refuse them as declared; the mutants that fail each by name are in tests/mutants (test_mutation_score.py)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from rtp_ref.cases.cases import MISMATCHED_CACHE_KIND, ZERO_DIM_TAIL, scale_tensor
from rtp_ref.cases.invalid_calls import MISMATCHED_CACHE_CHECK, refused_before_writing
from rtp_ref.cases.launch_size import CPU_LAUNCH_TOKENS, GPU_LAUNCH_TOKENS, LAUNCH_KIND
from rtp_ref.cases.op_cases import arguments_of
from rtp_ref.contract import WriteContract
from rtp_ref.errors import RtpRefError
from rtp_ref.kernels.cuda_build import CUDA_SLOT_DOMAIN
from rtp_ref.kernels.cuda_mla import CudaMlaKernel
from rtp_ref.kernels.mha_indexer_builtin import MhaPagedKernel
from rtp_ref.kernels.torch_eager import TorchEagerKernel
from rtp_ref.kv.cache import reference_write
from rtp_ref.kv.mha_paged import mha_layout
from rtp_ref.kv.validate import accepted_slot_dtypes
from rtp_ref.ops import MHA_OP, MLA_OP, OPS, WRITE_OPS
from rtp_ref.platform import load_platform

CONTRACT = WriteContract.for_platform(load_platform("cpu"))


@pytest.mark.parametrize("op", WRITE_OPS)
def test_every_write_op_has_an_int32_slot_case_and_a_launch_case_sized_by_device(op: str) -> None:
    for variant in OPS[op].variants:
        keys = list(OPS[op].cases.keys(variant, "cpu"))
        narrow = [k for k in keys if arguments_of(k)["slot_mapping"] == "int32"]
        assert narrow and all(k.kind == "random" and "-i32" in k.case_id for k in narrow), (op, variant)
        assert (keys[-1].kind, keys[-1].tokens) == (LAUNCH_KIND, CPU_LAUNCH_TOKENS)
        on_gpu = list(OPS[op].cases.keys(variant, "cuda"))[-1]
        assert (on_gpu.kind, on_gpu.tokens) == (LAUNCH_KIND, GPU_LAUNCH_TOKENS) and GPU_LAUNCH_TOKENS > 65_535
        assert on_gpu.case_id == keys[-1].case_id.replace(f"-t{CPU_LAUNCH_TOKENS}-", f"-t{GPU_LAUNCH_TOKENS}-")
        assert LAUNCH_KIND not in {k.kind for k in OPS[op].cases.specs(variant)}  # only through keys(variant, device)


@pytest.mark.parametrize(("op", "dimension"), [(MLA_OP, "scale"), (MHA_OP, "scales")])
def test_the_mla_and_mha_writes_have_a_0d_scale_case_and_an_auto_cache_mismatch(op: str, dimension: str) -> None:
    for variant in OPS[op].variants:
        keys = list(OPS[op].cases.specs(variant))
        assert [k.case_id for k in keys if arguments_of(k)[dimension] == "0d" and k.kind == "random"], variant
        mismatched = [k for k in keys if k.kind == MISMATCHED_CACHE_KIND]
        assert len(mismatched) == (variant == "auto"), variant


def test_an_int32_case_names_the_same_slots_as_int64() -> None:
    key = next(k for k in OPS[MLA_OP].cases.specs("fp8") if arguments_of(k)["slot_mapping"] == "int32")
    wide = dataclasses.replace(key, spec=dataclasses.replace(key.spec, slot_dtype="int64"))
    narrow, twin = (OPS[MLA_OP].cases.build(k, CONTRACT, "cpu") for k in (key, wide))
    assert narrow.inputs.slot_mapping.dtype == torch.int32
    assert torch.equal(narrow.inputs.slot_mapping.long(), twin.inputs.slot_mapping)
    assert bool((narrow.inputs.slot_mapping < 0).any()), "the int32 case has padding slots too"


def test_the_reference_writes_an_int32_mapping_as_the_int64_one_and_refuses_other_dtypes() -> None:
    layout = CONTRACT.layout("fp8", 512, 64)
    kv_c, k_pe = torch.randn(5, 512).bfloat16(), torch.randn(5, 64).bfloat16()
    slots = torch.tensor([3, -1, 0, 7, 12])
    caches = [torch.zeros(2, 8, layout.cache_entry, dtype=torch.uint8) for _ in range(2)]
    for cache, dtype in zip(caches, (torch.int64, torch.int32), strict=True):
        reference_write(layout, kv_c, k_pe, cache, slots.to(dtype), torch.tensor(0.05))  # a 0-D scale
    assert torch.equal(caches[0], caches[1]) and bool(caches[0].any())
    with pytest.raises(RtpRefError, match=r"slot_mapping: int16 .*valid: int32 or int64"):
        reference_write(layout, kv_c, k_pe, caches[0], slots.to(torch.int16), torch.tensor([0.05]))


def test_a_0d_scale_is_a_view_whose_neighbours_are_other_scales() -> None:
    tensor, zero_dim = scale_tensor(0.3, "tensor", "cpu"), scale_tensor(0.3, "0d", "cpu")
    assert (tensor.shape, zero_dim.shape, zero_dim.dtype) == ((1,), (), torch.float32)
    assert torch.equal(tensor[0], zero_dim)
    past = torch.as_strided(zero_dim, (ZERO_DIM_TAIL + 1,), (1,))  # what a kernel reading it as an array sees
    assert torch.equal(past[1:], zero_dim * 4.0 ** torch.arange(1, ZERO_DIM_TAIL + 1))


def test_accepted_slot_dtypes_follow_the_declared_domain() -> None:
    assert accepted_slot_dtypes({}) == (torch.int32, torch.int64)
    assert accepted_slot_dtypes(CUDA_SLOT_DOMAIN) == (torch.int64,)
    assert CudaMlaKernel.input_domain == CUDA_SLOT_DOMAIN == {"slot_mapping": ("int64",)}


class _Int64OnlyEager(TorchEagerKernel):
    """torch-eager's write declaring the CUDA writers' domain: the shared call path must refuse int32."""

    input_domain = CUDA_SLOT_DOMAIN


def test_a_planned_kernel_refuses_a_slot_dtype_outside_its_domain_before_writing() -> None:
    key = next(k for k in OPS[MLA_OP].cases.specs("fp8") if arguments_of(k)["slot_mapping"] == "int32")
    case = OPS[MLA_OP].cases.build(key, CONTRACT, "cpu")
    before = case.snapshot()
    with pytest.raises(RtpRefError, match=r"slot_mapping: int32 .*valid: int64"):
        case.call(_Int64OnlyEager(CONTRACT))
    assert torch.equal(case.snapshot(), before)
    case.call(TorchEagerKernel(CONTRACT))  # the built-in takes it
    assert not torch.equal(case.snapshot(), before)


def test_a_lean_mha_kernel_keeps_its_declared_domain_through_bind_and_refuses_before_launching() -> None:
    prepared: list[torch.dtype] = []

    def prepare(layout: object, *args: torch.Tensor, flags: torch.Tensor) -> object:
        prepared.append(args[4].dtype)
        return lambda *tensors: None

    kernel = MhaPagedKernel("int64-only", prepare, ("cpu",), lambda c: "software", lean=True,
                            input_domain=CUDA_SLOT_DOMAIN).bind(CONTRACT)
    assert kernel.input_domain == CUDA_SLOT_DOMAIN
    layout = mha_layout(CONTRACT, "fp8", 2, 64)
    key, value = torch.randn(3, 2, 64).bfloat16(), torch.randn(3, 2, 64).bfloat16()
    caches = [layout.new_cache(2, 16, "NHD", torch.bfloat16) for _ in range(2)]
    scale = torch.tensor([1.0])
    with pytest.raises(RtpRefError, match="valid: int64"):
        kernel(key, value, *caches, torch.tensor([0, 5, -1], dtype=torch.int32), "fp8", scale, scale)
    assert prepared == []
    kernel(key, value, *caches, torch.tensor([0, 5, -1]), "fp8", scale, scale)
    assert prepared == [torch.int64]
    assert not hasattr(MhaPagedKernel("any", prepare, ("cpu",), lambda c: "software", lean=True), "input_domain")


def test_a_refusal_passes_only_when_it_raised_before_writing() -> None:
    before = torch.zeros(8, dtype=torch.uint8)
    after = before.clone()
    assert refused_before_writing(before, after, "ValueError: auto needs a bf16 cache").passed
    after[3] = 1
    wrote_then_raised = refused_before_writing(before, after, "ValueError: late")
    returned = refused_before_writing(before, after, None)
    silent = refused_before_writing(before, before, None)
    assert {c.name for c in (wrote_then_raised, returned, silent)} == {MISMATCHED_CACHE_CHECK}
    assert not (wrote_then_raised.passed or returned.passed or silent.passed)
    assert "only after changing 1 byte(s)" in wrote_then_raised.detail
    assert "returned after changing 1 byte(s)" in returned.detail and "vLLM #54338" in returned.detail
    assert "returned without raising" in silent.detail
