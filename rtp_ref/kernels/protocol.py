"""What a KV-cache write kernel is, for rtp-ref.

A kernel implements one op (rtp_ref.ops): ``op: str`` names it, and a kernel without ``op`` is a
``concat_and_cache_mla`` kernel, described here; the other ops differ only in their call and in the
attribute listing their claims (``reshape_and_cache_flash``: ``kv_cache_dtypes`` of ``auto``, ``fp8``,
``fp8_e5m2``, called ``kernel(key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype, k_scale,
v_scale)``; ``indexer_k_quant_and_cache``: ``scale_fmts`` of ``none``, ``ue8m0``, called ``kernel(k, kv_cache,
slot_mapping, quant_block_size, scale_fmt)``). A ``concat_and_cache_mla`` kernel is any object with:

* ``name: str`` — unique among all kernels, shown in reports (``vendor-x-mla``);
* ``kv_cache_dtypes: Collection[str]`` — the layouts it claims (``auto``, ``fp8``, ``fp8_ds_mla``,
  ``fp8_model1_mla``, ``fp8_rocm_compact``); the suite certifies each claim, and checks that every
  other layout raises (a claimed-unsupported layout must fail loudly, never write garbage);
* ``devices: Collection[str]`` — torch device types it runs on (``cuda``, ``cpu``);
* ``__call__(kv_c, k_pe, kv_cache, slot_mapping, kv_cache_dtype, scale) -> None`` — the
  ``concat_and_cache_mla`` signature of vLLM and rtp-llm: writes token ``i`` to slot
  ``slot_mapping[i]`` (slot = block * block_size + offset; negative = padding, write nothing).

Optionally ``bind(contract: WriteContract) -> kernel``: returns the kernel configured for a
platform contract (fp8 format, scale rule, divisor...). Kernels without ``bind`` are certified as
they are, against the platform under test. rtp-ref's built-in kernels all bind, which is how a
ROCm table is exercised on a CUDA GPU or the CPU ("emulated").

Optionally a declared input domain, the arguments the kernel takes, as data (any op, readers included):

* ``input_domain: Mapping[str, Collection[str | int]]``: per argument dimension of its op (``OpCases.domain``,
  rtp_ref.cases.domain: ``block_table``, ``slot_mapping``, ``dst``, ``input``, ``scales``, ``head_size``,
  ``quant_block``, ``block_size``, ...), the values it takes, e.g. ``{"block_table": ("int32",), "dst": ("bf16",)}``;
  a dimension it leaves out takes every value;
* ``input_requirements: Collection[str]``, names from ``INPUT_REQUIREMENTS``: what it needs of its value inputs'
  memory (``kv_c`` and ``k_pe`` here; contiguity, 16-byte alignment for vector loads).

Given a case outside its declared domain, the kernel may raise a clear error before writing: the suite reports that
case as refused as declared, never as a pass of the write or a failure, and the report lists the domain beside the
verdict. A kernel that declares nothing must take every case; a fault, wrong bytes or a refusal of a case inside
the domain is a failure either way, and so is a domain that leaves out a value engines pass (``Dimension.required``).

Optionally ``graph_safe: bool``: whether a call can be captured in a CUDA graph and replayed with new inputs in
the same tensors. ``True`` makes the graph tier (``--tier graph``) a requirement; ``False`` keeps the kernel out
of it; without the attribute the kernel is tried and the result reported. Optionally ``take_input_errors() ->
list[str]``: what the kernel's device-side argument checks flagged since the last take (rtp_ref's kernels skip a
slot past the cache there instead of syncing to check it on the host); the suite reports such a kernel's input
checks as ``flagged``.

Optionally ``write_layers(layers) -> None``, for a writer: several layers' writes of one step, ``layers`` a sequence
of each layer's arguments as the op's call takes them (one slot mapping), made at once (a grouped kernel: one
launch for them all). ``rtp-ref bench --layers N`` times it against N calls of other kernels; its bytes are checked
layer by layer there (rtp_ref/bench/verify.py). The triton MLA writer has one.

Optionally ``supports(layout) -> str | None``: the kernel's limits as data (None: it writes this layout of
its op at these shapes, ``rtp_ref.kv.layouts.MlaLayout`` for the MLA write; else why not, e.g. a register
budget). A case past a declared
limit must still raise before writing, and is reported as refused with that reason, never as a pass.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import torch

from rtp_ref.cases.domain import Domain, Value, narrowed, outside, problems
from rtp_ref.errors import RtpRefError
from rtp_ref.errors import UnsupportedLayoutError as UnsupportedLayoutError  # re-exported: the kernels' import path
from rtp_ref.ops import MLA_OP, OPS

if TYPE_CHECKING:
    from rtp_ref.contract import WriteContract


@runtime_checkable
class KVCacheKernel(Protocol):
    """The structural type every kernel satisfies (see the module doc)."""

    name: str
    kv_cache_dtypes: Collection[str]
    devices: Collection[str]

    def __call__(
        self,
        kv_c: torch.Tensor,
        k_pe: torch.Tensor,
        kv_cache: torch.Tensor,
        slot_mapping: torch.Tensor,
        kv_cache_dtype: str,
        scale: torch.Tensor,
    ) -> None: ...


@runtime_checkable
class BindableKernel(KVCacheKernel, Protocol):
    """A kernel with the optional ``bind``: the same kernel configured for another platform contract."""

    def bind(self, contract: WriteContract) -> KVCacheKernel: ...


#: requirements a kernel may declare on its value inputs (``input_requirements``: kv_c and k_pe of the MLA
#: write, key and value of the MHA write, k of the indexer write), and what each means
INPUT_REQUIREMENTS = {
    "contiguous": "the value inputs are contiguous tensors",
    "aligned16": "the value inputs start at 16-byte aligned addresses and their row strides are multiples of 16 bytes",
}


def broken_requirements(requirements: Collection[str], *inputs: torch.Tensor) -> list[str]:
    """The declared ``requirements`` that these value inputs break, from their metadata alone (no device sync)."""
    broken = []
    if "contiguous" in requirements and not all(t.is_contiguous() for t in inputs):
        broken.append("contiguous")
    if "aligned16" in requirements and any(
        t.data_ptr() % 16 or (t.dim() > 1 and t.stride(0) * t.element_size() % 16) for t in inputs
    ):
        broken.append("aligned16")
    return broken


def declared_domain(kernel: object) -> Domain:
    """The kernel's ``input_domain`` (empty when it declares none: every value)."""
    declared = getattr(kernel, "input_domain", None)
    return declared if isinstance(declared, Mapping) else {}


def domain_text(kernel: object, op: str) -> str | None:
    """What the kernel's declared domain leaves out of its op's, for the report (``block_table int32, dst bf16,
    contiguous inputs``), or None when it takes every case's values."""
    requirements = getattr(kernel, "input_requirements", ())
    parts = [*narrowed(declared_domain(kernel), OPS[op].cases.domain), *(f"{r} inputs" for r in sorted(requirements))]
    return ", ".join(parts) or None


def declared_refusal(kernel: object, arguments: Mapping[str, Value], value_inputs: tuple[torch.Tensor, ...],
                     layout: object) -> str | None:
    """Why a case is one the kernel declared it does not take (its arguments outside ``input_domain``, value inputs
    that break ``input_requirements``, a ``supports`` limit), or None when the kernel must take it."""
    reasons = [*outside(declared_domain(kernel), arguments),
               *broken_requirements(getattr(kernel, "input_requirements", ()), *value_inputs)]
    return ", ".join(reasons) or declared_limit(kernel, layout)


def declared_limit(kernel: object, layout: object) -> str | None:
    """The kernel's own reason it does not write ``layout`` (its op's layout at the call's shapes: an
    ``MlaLayout``, ``MhaPagedLayout`` or ``IndexerLayout``), from its optional ``supports(layout) -> str | None``;
    None when it writes it or declares nothing. A ``supports`` that raises is reported as that limit, so a broken
    declaration fails loudly as a refusal, never as a pass."""
    supports = getattr(kernel, "supports", None)
    if not callable(supports):
        return None
    try:
        reason = supports(layout)
    except Exception as exc:  # the vendor's declaration is the finding
        return f"supports() raised {type(exc).__name__}: {exc}"
    return str(reason) if reason else None


def check_kernel(obj: Any, origin: str) -> Any:
    """Validate that ``obj`` satisfies the protocol of its op (``op``, default ``concat_and_cache_mla``:
    rtp_ref.ops); ``origin`` (e.g. the entry point) names it in errors. Returns ``obj``."""
    found: list[str] = []
    name = getattr(obj, "name", None)
    if not isinstance(name, str) or not name:
        found.append("'name' must be a non-empty string")
    op = getattr(obj, "op", MLA_OP)
    if op not in OPS:
        raise RtpRefError(f"kernel from {origin} does not satisfy the rtp-ref kernel protocol: 'op' is {op!r}; "
                          f"valid: {', '.join(OPS)} (no 'op': {MLA_OP})")
    spec = OPS[op]
    claims = getattr(obj, spec.claims, None)
    if isinstance(claims, str) or not isinstance(claims, Collection) or not claims:
        found.append(f"'{spec.claims}' must be a non-empty collection of {op} variants")
    else:
        unknown = sorted(set(claims) - set(spec.variants))
        if unknown:
            found.append(f"'{spec.claims}' has unknown {unknown}; valid: {', '.join(spec.variants)}")
    devices = getattr(obj, "devices", None)
    if isinstance(devices, str) or not isinstance(devices, Collection) or not devices:
        found.append("'devices' must be a non-empty collection of torch device types, e.g. ('cuda',)")
    requirements = getattr(obj, "input_requirements", ())
    if isinstance(requirements, str) or not isinstance(requirements, Collection):
        found.append("'input_requirements' must be a collection of requirement names")
    elif set(requirements) - set(INPUT_REQUIREMENTS):
        found.append(f"'input_requirements' has unknown {sorted(set(requirements) - set(INPUT_REQUIREMENTS))}; "
                     f"valid: {', '.join(INPUT_REQUIREMENTS)}")
    if hasattr(obj, "input_domain"):
        found += problems(obj.input_domain, spec.cases.domain)
    if not callable(obj):
        found.append(f"it must be callable as {spec.signature}")
    if found:
        raise RtpRefError(f"kernel from {origin} does not satisfy the rtp-ref kernel protocol: {'; '.join(found)}")
    return obj


def device_to_run(devices: Collection[str], prefer_gpu: bool = True) -> str | None:
    """The torch device type a kernel claiming ``devices`` runs on here, or None when torch sees none.

    A GPU torch sees (``cuda``, also on ROCm builds) when the kernel claims it, unless ``prefer_gpu`` is
    False and the kernel also claims the CPU; otherwise the CPU when the kernel claims it.
    """
    gpu = torch.cuda.is_available() and "cuda" in devices
    if "cpu" in devices and not (gpu and prefer_gpu):
        return "cpu"
    return "cuda" if gpu else None


@dataclass(frozen=True)
class KernelEntry:
    """A discovered kernel and where it came from: ``builtin (rtp-ref VERSION)``, ``entry point NAME = VALUE
    (DIST VERSION)`` or ``RTP_REF_KERNELS item 'module:attr'``."""

    #: a kernel of any op (rtp_ref.ops); ``KVCacheKernel`` for the MLA write
    kernel: Any
    origin: str
