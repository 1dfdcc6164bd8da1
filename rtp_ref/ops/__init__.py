"""The cache ops rtp-ref certifies (writes, and the gather that reads a cache back), one record each: name, cache
family, call signature, variants, the reference that defines the op and the generator of its cases (the suite
and the built-in reference kernels take both from the record).

A kernel names its op in an ``op`` attribute; a kernel without one is a ``concat_and_cache_mla`` kernel
(every vendor kernel written before the other families joined keeps working). The op says which call the
suite makes, which attribute lists the variants the kernel claims, and which variants exist:

* ``concat_and_cache_mla`` (family ``mla``): the MLA latent cache; variants are the MLA layouts;
* ``reshape_and_cache_flash`` (family ``mha``): vLLM's paged K/V write; variants are its cache dtypes;
* ``indexer_k_quant_and_cache`` (family ``indexer``): DeepSeek V3.2's indexer cache; variants are the
  ``scale_fmt`` values;
* ``gather_and_maybe_dequant_cache`` (family ``mla``, a read op): vLLM's MLA gather, sequences read out of the
  cache through a block table into dense dequantised rows; variants are the MLA layouts;
* ``cp_gather_indexer_k_quant_cache`` (family ``indexer``, a read op): the indexer cache's stored codes and scales
  gathered into dense rows; its call names no variant, the variants (``scale_fmt``) say how the cache read was
  written.

The MHA paged caches have no read op: attention kernels read them in place through the block table (no engine
gathers them into dense rows).

Each op is one module of this package defining its record as ``OP`` (rtp_ref.ops.record.OpSpec), found by scanning
the package: a new op is one module here (and its reference), and its conformance cases one module in
rtp_ref/ops.

Built-in kernels of the MLA op are named after their implementation (``triton``); those of the other ops
carry the family as a suffix (``triton-mha``, ``triton-indexer``), readers ``-gather`` and ``-indexer-gather``, so
every kernel name stays unique. The large-address and CUDA-graph tiers cover the writes (``OpSpec.reads``: not yet
the reads).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable

from rtp_ref.errors import RtpRefError
from rtp_ref.kv.op_names import INDEXER_GATHER_OP, INDEXER_OP, MHA_OP, MLA_GATHER_OP, MLA_OP
from rtp_ref.ops.record import OpSpec
from rtp_ref.platform import Platform

__all__ = ["INDEXER_GATHER_OP", "INDEXER_OP", "MHA_OP", "MLA_GATHER_OP", "MLA_OP", "OPS", "WRITE_OPS", "OpSpec",
           "claimed_variants", "every_variant", "op_name", "op_reference", "op_spec", "supported_variants"]


def _scan() -> dict[str, OpSpec]:
    found = []
    for module in pkgutil.iter_modules(__path__):
        record = getattr(importlib.import_module(f"{__name__}.{module.name}"), "OP", None)
        if isinstance(record, OpSpec):
            found.append(record)
    return {record.name: record for record in sorted(found, key=lambda r: (r.rank, r.name))}


#: every op, by name, in rank order
OPS: dict[str, OpSpec] = _scan()
#: the ops that write a cache (the large-address and CUDA-graph tiers take these)
WRITE_OPS = tuple(name for name, spec in OPS.items() if not spec.reads)


def op_reference(op: str) -> Callable[..., None]:
    """The reference of ``op`` (its record's ``reference``): ``f(layout, *the kernel's tensors)``."""
    return op_spec(op).reference


def op_name(kernel: object) -> str:
    """The op ``kernel`` implements: its ``op`` attribute, or ``concat_and_cache_mla`` without one."""
    op = getattr(kernel, "op", MLA_OP)
    return op if isinstance(op, str) else repr(op)


def op_spec(name: str) -> OpSpec:
    """The record of op ``name``; an unknown name raises RtpRefError listing the valid ones."""
    try:
        return OPS[name]
    except KeyError:
        raise RtpRefError(f"op {name!r} is not an op rtp-ref certifies; valid: {', '.join(OPS)}") from None


def claimed_variants(kernel: object) -> tuple[str, ...]:
    """The variants ``kernel`` claims, read from its op's claims attribute (empty when it has none)."""
    claimed = getattr(kernel, op_spec(op_name(kernel)).claims, ())
    return tuple(claimed) if not isinstance(claimed, str) else ()


def supported_variants(platform: Platform, op: str) -> tuple[str, ...]:
    """The variants of ``op`` a platform table supports: its ``supported_layouts`` for the MLA ops (write and
    gather), its ``mha_variants`` for the MHA write and its ``indexer_variants`` for the indexer ops (write and
    gather); every variant of the op where the table lists none."""
    family = OPS[op].family
    if family == "mla":
        return tuple(platform.supported_layouts)
    listed = {"mha": platform.mha_variants, "indexer": platform.indexer_variants}.get(family)
    if listed is not None:
        return tuple(v for v in OPS[op].variants if v in listed)
    return OPS[op].variants


def every_variant(platform: Platform) -> list[str]:
    """Every variant name of every op the platform supports, each once (``fp8`` is an MLA layout and an MHA
    cache dtype): what ``--layout`` may name."""
    return list(dict.fromkeys(v for op in OPS for v in supported_variants(platform, op)))
