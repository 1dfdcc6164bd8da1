"""Declared input domains (rtp_ref.cases.domain): every op's cases give a value to each of its dimensions, every
named value is used by some case (a kernel declaring less meets a case it refuses), and a kernel's declaration is
checked, matched and shown as data."""

from __future__ import annotations

from typing import ClassVar

import pytest
import torch

from rtp_ref.cases.domain import INPUT_DTYPE, Dimension, left_out, narrowed, outside, problems
from rtp_ref.cases.op_cases import arguments_of
from rtp_ref.errors import RtpRefError
from rtp_ref.kernels.protocol import check_kernel, declared_refusal, domain_text
from rtp_ref.ops import MHA_OP, MLA_GATHER_OP, OPS


@pytest.mark.parametrize("op", list(OPS))
def test_every_case_gives_each_dimension_of_its_op_a_valid_value(op: str) -> None:
    dims = {d.name: d for d in OPS[op].cases.domain}
    assert dims, f"{op} names no argument dimension a kernel may narrow"
    used: dict[str, set[object]] = {name: set() for name in dims}
    for variant in OPS[op].variants:
        for key in OPS[op].cases.specs(variant):
            assert set(arguments_of(key)) == set(dims), (op, key.case_id)
            for name, value in arguments_of(key).items():
                assert value in dims[name].values if dims[name].values else isinstance(value, int), (key, name)
                used[name].add(value)
    # every named value has a case: a kernel that leaves one out of its domain meets a case it refuses
    for name, dim in dims.items():
        assert set(dim.values) <= used[name], f"{op}: no case uses {name} {set(dim.values) - used[name]}"
        assert set(dim.required) <= used[name], f"{op}: no case uses the required {name} {dim.required}"


def test_the_int64_read_cases_differ_from_a_twin_in_the_index_dtype_alone() -> None:
    for op in (MLA_GATHER_OP, "cp_gather_indexer_k_quant_cache"):
        keys = list(OPS[op].cases.specs(OPS[op].variants[0]))
        wide = [k for k in keys if arguments_of(k)["block_table"] == "int64"]
        assert len(wide) == 1
        twin = [k for k in keys if k.seed != wide[0].seed and k.kind == wide[0].kind and k.tokens == wide[0].tokens
                and {**arguments_of(k), "block_table": "int64"} == arguments_of(wide[0])]
        assert twin, f"{op}: {wide[0].case_id} has no int32 twin"


def test_outside_left_out_and_narrowed() -> None:
    dims = OPS[MLA_GATHER_OP].cases.domain
    declared = {"block_table": ("int32",), "dst": ("bf16",)}
    assert outside(declared, {"block_table": "int64", "dst": "bf16", "block_size": 16}) == \
        ["block_table int64, declared int32"]
    assert outside(declared, {"block_table": "int32", "dst": "bf16", "block_size": 64}) == []
    assert left_out(declared, dims) == []
    assert narrowed(declared, dims) == ["block_table int32", "dst bf16"]
    # a dimension declared whole is no narrowing; one without what engines pass is left out, with its source
    whole = {"block_table": ("int32", "int64"), "dst": ("fp32",)}
    assert narrowed(whole, dims) == ["dst fp32"]
    (missing,) = left_out(whole, dims)
    assert missing.startswith("dst bf16 (vLLM gathers DeepSeek's MLA cache into bf16")
    # sizes: any declared value narrows
    assert narrowed({"block_size": (16, 64)}, dims) == ["block_size 16/64"]


@pytest.mark.parametrize(("declared", "problem"), [
    ("int32", "must be a mapping"),
    ({"slot_mapping": ("int64",)}, "unknown dimension 'slot_mapping'; valid: block_table, dst, block_size"),
    ({"block_table": "int32"}, "must be a non-empty collection"),
    ({"dst": ()}, "must be a non-empty collection"),
    ({"dst": ("bfloat16",)}, "has unknown ['bfloat16']; valid: bf16, fp16, fp32"),
    ({"block_size": (16, 0)}, "must hold positive integers"),
    ({"block_size": (True,)}, "must hold positive integers"),
])
def test_a_bad_declaration_is_named(declared: object, problem: str) -> None:
    found = problems(declared, OPS[MLA_GATHER_OP].cases.domain)
    assert len(found) == 1 and problem in found[0], found
    assert problems({"block_table": ("int32",), "block_size": (64,)}, OPS[MLA_GATHER_OP].cases.domain) == []


class _Reader:
    """A protocol reader of the MLA gather that declares a domain (never called here)."""

    name = "declared-reader"
    op = MLA_GATHER_OP
    kv_cache_dtypes = ("fp8",)
    devices = ("cpu",)

    def __init__(self, domain: object) -> None:
        self.input_domain = domain

    def __call__(self, *args: object) -> None:
        raise NotImplementedError


def test_the_protocol_refuses_a_bad_declaration_and_reads_a_good_one() -> None:
    with pytest.raises(RtpRefError, match=r"kernel from here does not satisfy .*'input_domain'\['dst'\] has unknown"):
        check_kernel(_Reader({"dst": ("bf15",)}), "here")
    reader = check_kernel(_Reader({"block_table": ("int32",), "dst": ("bf16",)}), "here")
    assert domain_text(reader, MLA_GATHER_OP) == "block_table int32, dst bf16"
    case_args = {"block_table": "int64", "dst": "bf16", "block_size": 16}
    assert declared_refusal(reader, case_args, (), object()) == "block_table int64, declared int32"
    assert declared_refusal(reader, {**case_args, "block_table": "int32"}, (), object()) is None


def test_requirements_are_part_of_the_declared_domain() -> None:
    class Writer:
        name, op, kv_cache_dtypes, devices = "w", MHA_OP, ("auto",), ("cpu",)
        input_requirements = ("contiguous",)
        input_domain: ClassVar[dict[str, tuple[str, ...]]] = {"scales": ("tensor", "head")}

    strided = torch.zeros(4, 8)[:, :4]
    assert domain_text(Writer(), MHA_OP) == "scales head/tensor, contiguous inputs"
    assert declared_refusal(Writer(), {"scales": "tensor"}, (strided,), object()) == "contiguous"
    assert declared_refusal(Writer(), {"scales": "mixed"}, (strided,), object()) == \
        "scales mixed, declared head/tensor, contiguous"
    assert declared_refusal(Writer(), {"scales": "head"}, (strided.contiguous(),), object()) is None


def test_a_size_dimension_takes_any_positive_integer() -> None:
    assert INPUT_DTYPE.required == ("bf16",) and INPUT_DTYPE.source
    heads = Dimension("heads", "heads per token")
    assert problems({"heads": (8, 96)}, (heads,)) == [] and narrowed({"heads": (8,)}, (heads,)) == ["heads 8"]


def test_the_pair_cases_take_a_sample_inside_the_declared_domain() -> None:
    cases = OPS[MHA_OP].cases
    assert cases.sample_in("fp8", {}) == cases.sample("fp8")
    assert arguments_of(cases.sample("fp8"))["scales"] == "head"
    inside = cases.sample_in("fp8", {"scales": ("tensor",)})
    assert inside.kind == "random" and inside.tokens > 1 and arguments_of(inside)["scales"] == "tensor"
    # nothing inside: the sample itself (the kernel answers for refusing it)
    assert cases.sample_in("fp8", {"head_size": (96,)}) == cases.sample("fp8")
