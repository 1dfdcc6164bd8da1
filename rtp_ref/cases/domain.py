"""Argument domains, as data: which values of an op's arguments a kernel takes.

An op names the arguments a kernel may narrow (``OpCases.domain``: one ``Dimension`` each — index dtypes, ``dst``
and input dtypes, scale shapes, head sizes, quant and cache block sizes) and each of its cases says which values it
uses (``CaseKey.arguments``: ``{"block_table": "int32", "dst": "bf16", "block_size": 16}``). A kernel declares the
values it takes (``input_domain``: rtp_ref.kernels.protocol); a dimension it does not declare takes every value. A
case outside the declared domain that the kernel refuses before writing is refused as declared, never a failure; a
dimension's ``required`` values are what engines pass, and a declared domain that leaves one out fails.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

#: the kind of the per-(kernel, variant) record of a kernel's declared domain (report.md lists it beside the verdict)
DOMAIN_KIND = "domain"
#: a value of a dimension: a dtype or shape name (``int32``, ``bf16``, ``tensor``), or a size
Value = str | int
#: a kernel's declared domain: dimension name -> the values it takes
Domain = Mapping[str, Collection[Value]]


@dataclass(frozen=True)
class Dimension:
    """One argument dimension of an op: its name and what it is; ``values``: every valid value of a named
    dimension (empty: a size, any positive integer); ``required``: the values engines pass (a declared domain
    must keep them), with ``source`` saying who passes them."""

    name: str
    meaning: str
    values: tuple[str, ...] = ()
    required: tuple[Value, ...] = ()
    source: str = ""


def _shown(values: Collection[Value]) -> str:
    return "/".join(str(v) for v in sorted(values, key=str))


def outside(declared: Domain, arguments: Mapping[str, Value]) -> list[str]:
    """Each of a case's ``arguments`` outside the ``declared`` domain, as ``block_table int64, declared int32``;
    empty when the case is inside it."""
    return [f"{name} {value}, declared {_shown(declared[name])}" for name, value in arguments.items()
            if name in declared and value not in declared[name]]


def left_out(declared: Domain, dims: Sequence[Dimension]) -> list[str]:
    """The required values of ``dims`` that the ``declared`` domain leaves out, each with its source:
    ``block_table int32 (vLLM's block tables are int32: ...)``."""
    return [f"{d.name} {v} ({d.source})" for d in dims if d.name in declared for v in d.required
            if v not in declared[d.name]]


def narrowed(declared: Domain, dims: Sequence[Dimension]) -> list[str]:
    """The declared dimensions that leave out a valid value (every declared size dimension), as ``block_table
    int32``: what the report lists beside the verdict."""
    return [f"{d.name} {_shown(declared[d.name])}" for d in dims
            if d.name in declared and (not d.values or set(d.values) - set(declared[d.name]))]


def problems(declared: object, dims: Sequence[Dimension]) -> list[str]:
    """What is wrong with a kernel's ``input_domain`` over its op's ``dims`` (not a mapping, an unknown dimension, a
    value that is not one of the dimension's, a size that is not a positive integer); empty when it is valid."""
    if not isinstance(declared, Mapping):
        return [f"'input_domain' must be a mapping of dimension -> values; valid dimensions: "
                f"{', '.join(d.name for d in dims) or 'none for this op'}"]
    by_name = {d.name: d for d in dims}
    found = []
    for name, values in declared.items():
        dim = by_name.get(name)
        if dim is None:
            found.append(f"'input_domain' has unknown dimension {name!r}; valid: "
                         f"{', '.join(by_name) or 'none for this op'}")
        elif isinstance(values, str) or not isinstance(values, Collection) or not values:
            found.append(f"'input_domain'[{name!r}] must be a non-empty collection of values")
        elif dim.values and set(values) - set(dim.values):
            found.append(f"'input_domain'[{name!r}] has unknown {sorted(map(str, set(values) - set(dim.values)))}; "
                         f"valid: {', '.join(dim.values)}")
        elif not dim.values and not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values):
            found.append(f"'input_domain'[{name!r}] must hold positive integers ({dim.meaning})")
    return found


#: dimensions several ops share
INPUT_DTYPE = Dimension("input", "the dtype of the value inputs", ("bf16", "fp16"), ("bf16",),
                        "the dtype DeepSeek V3/V3.2, Llama 3 and Qwen 3 checkpoints are served in (config.json "
                        "torch_dtype bfloat16)")
SLOT_MAPPING = Dimension("slot_mapping", "the dtype of slot_mapping (int32 names the same slots)", ("int32", "int64"),
                         ("int64",), "vLLM's slot mapping is int64 (vllm/v1/worker/block_table.py)")
#: who passes a per-tensor scale as a 0-D tensor (the MLA write's ``scale``, the MHA write's ``scales``)
ZERO_DIM_SOURCE = ("a per-tensor scale reaches a kernel as [1] or, from vLLM's attention layer, as a 0-D float32 "
                   "tensor (vllm/attention/layer.py: torch.tensor(1.0, dtype=torch.float32))")
BLOCK_TABLE = Dimension("block_table", "the dtype of block_table, cu_seq_lens and seq_starts", ("int32", "int64"),
                        ("int32",), "vLLM's block tables are int32 (vllm/v1/worker/block_table.py) and its readers "
                        "take int32 only (csrc/cache_kernels.cu: 'block_table must be int32')")
BLOCK_SIZE = Dimension("block_size", "tokens per cache block")
