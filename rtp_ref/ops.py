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

Built-in kernels of the MLA op are named after their implementation (``triton``); those of the other ops
carry the family as a suffix (``triton-mha``, ``triton-indexer``), readers ``-gather`` and ``-indexer-gather``, so
every kernel name stays unique. The large-address and CUDA-graph tiers cover the writes (``OpSpec.reads``: not yet
the reads).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from rtp_ref.errors import RtpRefError
from rtp_ref.kv.indexer import SCALE_FORMATS
from rtp_ref.kv.mha_paged import MHA_CACHE_DTYPES
from rtp_ref.platform import MLA_LAYOUT_NAMES, Platform

#: the op of a kernel without an ``op`` attribute
MLA_OP = "concat_and_cache_mla"
MHA_OP = "reshape_and_cache_flash"
INDEXER_OP = "indexer_k_quant_and_cache"
MLA_GATHER_OP = "gather_and_maybe_dequant_cache"
INDEXER_GATHER_OP = "cp_gather_indexer_k_quant_cache"


@dataclass(frozen=True)
class OpSpec:
    """One op: what a kernel of it is called with and what it may claim."""

    name: str
    #: the cache family (``rtp-ref layouts --family``)
    family: str
    #: the kernel attribute listing the variants it claims
    claims: str
    #: every variant of the op: the values of its variant argument
    variants: tuple[str, ...]
    #: the call the suite makes, as the kernel implements it
    signature: str
    #: what built-in kernels of the op append to their implementation's name
    name_suffix: str
    #: the reference writer the op is defined by, ``module:function`` (``op_reference``): called as a kernel
    #: of the op is, with the variant's layout first
    reference: str
    #: the case generator of one variant, ``module:function`` (``op_cases``); named rather than imported, so
    #: that the records and the modules they name do not import each other
    cases: str
    #: a read op: it fills a dense output from a cache and leaves the cache as it is
    reads: bool = False


OPS: dict[str, OpSpec] = {
    MLA_OP: OpSpec(MLA_OP, "mla", "kv_cache_dtypes", MLA_LAYOUT_NAMES,
                   "kernel(kv_c, k_pe, kv_cache, slot_mapping, kv_cache_dtype, scale)", "",
                   "rtp_ref.kv.cache:reference_write", "rtp_ref.certify.case_matrix:case_specs"),
    MHA_OP: OpSpec(MHA_OP, "mha", "kv_cache_dtypes", MHA_CACHE_DTYPES,
                   "kernel(key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype, k_scale, v_scale)",
                   "-mha", "rtp_ref.kv.mha_paged:reference_reshape_and_cache_flash",
                   "rtp_ref.certify.family_cases:mha_specs"),
    INDEXER_OP: OpSpec(INDEXER_OP, "indexer", "scale_fmts", SCALE_FORMATS,
                       "kernel(k, kv_cache, slot_mapping, quant_block_size, scale_fmt)", "-indexer",
                       "rtp_ref.kv.indexer:reference_indexer_k_quant_and_cache",
                       "rtp_ref.certify.family_cases:indexer_specs"),
    MLA_GATHER_OP: OpSpec(MLA_GATHER_OP, "mla", "kv_cache_dtypes", MLA_LAYOUT_NAMES,
                          "kernel(kv_cache, dst, block_table, cu_seq_lens, kv_cache_dtype, scale, seq_starts)",
                          "-gather", "rtp_ref.kv.gather:gather_and_maybe_dequant_cache",
                          "rtp_ref.certify.gather_cases:gather_specs", reads=True),
    INDEXER_GATHER_OP: OpSpec(INDEXER_GATHER_OP, "indexer", "scale_fmts", SCALE_FORMATS,
                              "kernel(kv_cache, dst_k, dst_scale, block_table, cu_seq_lens)", "-indexer-gather",
                              "rtp_ref.kv.indexer_gather:gather_indexer_k_quant_cache",
                              "rtp_ref.certify.indexer_gather_cases:indexer_gather_specs", reads=True),
}
#: the ops that write a cache (the large-address and CUDA-graph tiers take these)
WRITE_OPS = tuple(name for name, spec in OPS.items() if not spec.reads)


def _named(path: str) -> Any:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def op_reference(op: str) -> Callable[..., None]:
    """The reference writer of ``op`` (its record's ``reference``): ``f(layout, *the kernel's tensors)``."""
    writer: Callable[..., None] = _named(op_spec(op).reference)
    return writer


def op_cases(op: str) -> Callable[[str], Iterable[Any]]:
    """The case generator of ``op`` (its record's ``cases``): ``f(variant)`` yields that variant's cases (MLA:
    ``(CaseSpec, (R, P))`` pairs; the other ops: ``FamilySpec``)."""
    cases: Callable[[str], Iterable[Any]] = _named(op_spec(op).cases)
    return cases


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
    gather); every variant of the other ops (their formats are the platform's e4m3 and OCP e5m2, which every
    table has)."""
    return tuple(platform.supported_layouts) if OPS[op].family == "mla" else OPS[op].variants


def every_variant(platform: Platform) -> list[str]:
    """Every variant name of every op the platform supports, each once (``fp8`` is an MLA layout and an MHA
    cache dtype): what ``--layout`` may name."""
    return list(dict.fromkeys(v for op in OPS for v in supported_variants(platform, op)))
