"""Which op a kernel without ``op`` evidently implements, when it is not the op it is taken for.

A kernel without ``op`` is a ``concat_and_cache_mla`` kernel (rtp_ref.ops.op_name: vendor kernels written before
the other ops keep working). A kernel of another op that forgets the attribute then fails as an MLA kernel: its
protocol check complains about MLA claims it never meant to make, or, when its claims happen to be MLA layouts
too (``auto``, ``fp8``), every case fails with a TypeError from a call of the wrong arity. Its own attributes
usually say which op it is, and this module reads them so that the error names the fix in one line.

An op *fits* a kernel when the kernel has the op's claims attribute holding only variants of that op, and its
``__call__`` accepts as many positional arguments as the op's call has (a call whose signature cannot be read
accepts any number). It *matches* when it also names its first parameters as the op's call does
(rtp_ref.ops.OpSpec.signature). A kernel that matches the MLA op, or fits it and matches no other op, is an MLA
kernel. Otherwise the other ops that match (else those that fit) are what it looks like: the indexer write and the
indexer gather both take five arguments and claim ``scale_fmts``, so only the parameter names tell them apart.
"""

from __future__ import annotations

import inspect
from collections.abc import Collection

from rtp_ref.ops import MLA_OP, OPS, OpSpec

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def call_parameters(spec: OpSpec) -> tuple[str, ...]:
    """The parameter names of ``spec``'s call as its record states it: ``kernel(k, kv_cache, slot_mapping,
    quant_block_size, scale_fmt)`` gives ``("k", "kv_cache", "slot_mapping", "quant_block_size", "scale_fmt")``."""
    inner = spec.signature[spec.signature.index("(") + 1: spec.signature.rindex(")")]
    return tuple(name.strip() for name in inner.split(",") if name.strip())


def _signature(kernel: object) -> inspect.Signature | None:
    """The signature of calling ``kernel`` (``self`` bound), or None when Python cannot read it (an extension
    type's ``__call__``, a callable without metadata)."""
    try:
        return inspect.signature(kernel)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def _accepts(signature: inspect.Signature | None, count: int) -> bool:
    """Whether a call of ``count`` positional arguments binds to ``signature`` (an unknown one takes any)."""
    if signature is None:
        return True
    try:
        signature.bind(*range(count))
    except TypeError:
        return False
    return True


def _claims(kernel: object, spec: OpSpec) -> tuple[str, ...] | None:
    """The kernel's claims under ``spec``'s attribute when they are a non-empty collection of ``spec``'s variants,
    else None."""
    claims = getattr(kernel, spec.claims, None)
    if isinstance(claims, str) or not isinstance(claims, Collection) or not claims:
        return None
    if not all(isinstance(c, str) for c in claims) or set(claims) - set(spec.variants):
        return None
    return tuple(claims)


def _fits(kernel: object, spec: OpSpec, signature: inspect.Signature | None) -> bool:
    return _claims(kernel, spec) is not None and _accepts(signature, len(call_parameters(spec)))


def _matches(kernel: object, spec: OpSpec, signature: inspect.Signature | None) -> bool:
    if signature is None or not _fits(kernel, spec, signature):
        return False
    wanted = call_parameters(spec)
    names = [p.name for p in signature.parameters.values() if p.kind in _POSITIONAL]
    return tuple(names[: len(wanted)]) == wanted


def likely_ops(kernel: object) -> tuple[str, ...]:
    """The ops a kernel evidently implements when it has no ``op`` and is not an MLA kernel (module doc): one op,
    or the few it could be; empty for a kernel with ``op``, an MLA kernel, or one that fits no op."""
    if hasattr(kernel, "op"):
        return ()
    signature = _signature(kernel)
    others = [name for name in OPS if name != MLA_OP]
    matching = [name for name in others if _matches(kernel, OPS[name], signature)]
    if _matches(kernel, OPS[MLA_OP], signature):
        return ()
    if matching:
        return tuple(matching)
    if _fits(kernel, OPS[MLA_OP], signature):
        return ()
    return tuple(name for name in others if _fits(kernel, OPS[name], signature))


def missing_op_hint(kernel: object) -> str | None:
    """One line naming the fix for a kernel without ``op`` that evidently implements another op (``likely_ops``):
    ``kernel 'x' has no `op`, so it is taken as a concat_and_cache_mla kernel; it looks like a
    reshape_and_cache_flash kernel (kv_cache_dtypes auto, fp8; a call of 8 arguments): set op =
    'reshape_and_cache_flash'``. None when there is nothing to say."""
    ops = likely_ops(kernel)
    if not ops:
        return None
    name = getattr(kernel, "name", None)
    who = f"kernel {name!r}" if isinstance(name, str) and name else "a kernel without a name"
    start = f"{who} has no `op`, so it is taken as a {MLA_OP} kernel; it looks like"
    if len(ops) > 1:
        return f"{start} a kernel of {' or '.join(ops)}: set op to the one it implements, e.g. op = {ops[0]!r}"
    spec = OPS[ops[0]]
    evidence = f"{spec.claims} {', '.join(_claims(kernel, spec) or ())}"
    signature = _signature(kernel)
    if signature is not None and not any(p.kind is inspect.Parameter.VAR_POSITIONAL
                                         for p in signature.parameters.values()):
        evidence += f"; a call of {len(call_parameters(spec))} arguments"
    article = "an" if ops[0][0] in "aeiou" else "a"
    return f"{start} {article} {ops[0]} kernel ({evidence}): set op = {ops[0]!r}"
