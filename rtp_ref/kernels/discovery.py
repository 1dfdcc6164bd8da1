"""Find kernels: rtp-ref's built-ins plus every ``rtp_ref.kernels`` entry point.

An entry point may load a kernel object, or a callable returning one kernel or a list of them
(so a vendor can build kernels lazily, e.g. after checking its extension imports). A failing entry
point is an error naming it, never silently skipped: a certification that quietly loses a vendor
kernel would report a pass for nothing.

A kernel is checked against the protocol of its op (rtp_ref.kernels.protocol.check_kernel). One without ``op`` that
evidently implements another op than ``concat_and_cache_mla`` (rtp_ref.kernels.op_hint) is refused first, with the
one line that names the fix (``set op = 'reshape_and_cache_flash'``): taken as an MLA kernel it would fail that
op's protocol check for claims it never meant to make, or be called with the MLA write's arguments in every case.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterable
from importlib import metadata
from typing import Any

from rtp_ref import __version__
from rtp_ref.errors import RtpRefError
from rtp_ref.kernels.op_hint import missing_op_hint
from rtp_ref.kernels.protocol import KernelEntry, check_kernel
from rtp_ref.ops import MLA_OP, op_name

ENTRY_POINT_GROUP = "rtp_ref.kernels"
#: Comma-separated ``module:attribute`` specs of extra kernels, for kernels that are not installed
#: as a distribution (a vendor's work tree, rtp-ref's own test mutants). Loaded like entry points.
KERNELS_ENV = "RTP_REF_KERNELS"


def _checked(kernel: Any, origin: str) -> Any:
    """``kernel`` when it satisfies its op's protocol; RtpRefError naming ``origin`` and what is wrong otherwise (a
    missing ``op`` first, where the kernel evidently implements another op)."""
    hint = missing_op_hint(kernel)
    if hint is not None:
        raise RtpRefError(f"kernel from {origin} does not satisfy the rtp-ref kernel protocol: {hint}")
    return check_kernel(kernel, origin)


def _expand(loaded: Any, origin: str) -> list[Any]:
    if isinstance(getattr(loaded, "name", None), str) and callable(loaded):
        return [_checked(loaded, origin)]
    if callable(loaded):
        try:
            produced = loaded()
        except Exception as exc:  # the vendor's factory: whatever it raises is named with its origin
            raise RtpRefError(f"{origin} failed to load: {type(exc).__name__}: {exc}") from exc
        items = produced if isinstance(produced, list | tuple) else [produced]
        return [_checked(k, origin) for k in items]
    raise RtpRefError(f"{origin} loaded {loaded!r}: expected a kernel object or a callable returning kernels")


def entry_point_kernels(entry_points: Iterable[metadata.EntryPoint] | None = None) -> list[KernelEntry]:
    """Kernels registered by installed distributions under the ``rtp_ref.kernels`` group."""
    eps = entry_points if entry_points is not None else metadata.entry_points(group=ENTRY_POINT_GROUP)
    found = []
    for ep in eps:
        dist = f"{ep.dist.name} {ep.dist.version}" if ep.dist is not None else "unknown distribution"
        origin = f"entry point {ep.name} = {ep.value} ({dist})"
        try:
            loaded = ep.load()
        except Exception as exc:
            raise RtpRefError(f"{origin} failed to load: {type(exc).__name__}: {exc}") from exc
        found += [KernelEntry(k, origin) for k in _expand(loaded, origin)]
    return found


def env_items(spec: str | None = None) -> list[str]:
    """The items of ``$RTP_REF_KERNELS`` (or ``spec``), ``pkg.module:attr`` each, in order, blanks dropped."""
    text = os.environ.get(KERNELS_ENV, "") if spec is None else spec
    return [part.strip() for part in text.split(",") if part.strip()]


def env_kernels(spec: str | None = None) -> list[KernelEntry]:
    """Kernels named by ``$RTP_REF_KERNELS`` (or ``spec``): ``pkg.module:attr,other:attr``."""
    found = []
    for item in env_items(spec):
        module, sep, attr = item.partition(":")
        origin = f"{KERNELS_ENV} item {item!r}"
        if not sep or not module or not attr:
            raise RtpRefError(f"{origin}: expected module:attribute, e.g. my_pkg.kernels:all_kernels")
        try:
            loaded = getattr(importlib.import_module(module), attr)
        except Exception as exc:
            raise RtpRefError(f"{origin} failed to load: {type(exc).__name__}: {exc}") from exc
        found += [KernelEntry(k, origin) for k in _expand(loaded, origin)]
    return found


def builtin_kernels() -> list[KernelEntry]:
    """rtp-ref's own kernels of every op: the reference and torch-eager always (the reference only, for the
    gather); triton and cuda when their toolchains are present."""
    from rtp_ref.kernels.builtin import available_builtin_kernels
    from rtp_ref.kernels.gather_builtin import gather_kernels
    from rtp_ref.kernels.mha_indexer_builtin import mha_indexer_kernels
    from rtp_ref.kernels.reference import ReferenceKernel

    origin = f"builtin (rtp-ref {__version__})"
    kernels = [ReferenceKernel(), *available_builtin_kernels(), *mha_indexer_kernels(), *gather_kernels()]
    return [KernelEntry(k, origin) for k in kernels]


def unavailable_kernels() -> dict[str, str]:
    """Built-in kernels that cannot run in this process, and why (reports list them; so do error messages)."""
    from rtp_ref.kernels.builtin import unavailable_builtin_kernels

    return unavailable_builtin_kernels()


def discover_kernels(names: Iterable[str] | None = None, ops: Iterable[str] = (MLA_OP,)) -> dict[str, KernelEntry]:
    """The kernels of ``ops`` (rtp_ref.ops; default the MLA write) by name: built-ins, entry points,
    ``$RTP_REF_KERNELS``. ``names`` selects some: a name no kernel has is an error, and so is the name of a
    kernel of another op (a command certifying or measuring one op says which op it takes); a name the
    selection spans several ops with is fine when ``ops`` holds them all.

    Two kernels with one name is an error naming both origins.
    """
    table: dict[str, KernelEntry] = {}
    for entry in [*builtin_kernels(), *entry_point_kernels(), *env_kernels()]:
        other = table.get(entry.kernel.name)
        if other is not None:
            raise RtpRefError(
                f"two kernels are named {entry.kernel.name!r}: {other.origin} and {entry.origin}; rename one"
            )
        table[entry.kernel.name] = entry
    wanted_ops = tuple(ops)
    if names is None:
        return {n: e for n, e in table.items() if op_name(e.kernel) in wanted_ops}
    wanted = list(dict.fromkeys(names))
    unknown = [n for n in wanted if n not in table]
    missing = unavailable_kernels()
    for name in unknown:
        if name in missing:  # a known kernel that cannot run here is not "unknown": say why
            raise RtpRefError(f"{name}: not available here: {missing[name]}")
    if unknown:
        raise RtpRefError(f"unknown kernel(s) {', '.join(map(repr, unknown))}; known kernels: {', '.join(table)}")
    for name in wanted:
        op = op_name(table[name].kernel)
        if op not in wanted_ops:
            raise RtpRefError(f"kernel {name!r} implements {op}; this command takes {' or '.join(wanted_ops)} kernels")
    return {n: table[n] for n in wanted}
