"""Launching a compiled Triton kernel again without the JIT's per-call work.

``kernel[grid](...)`` binds every argument, computes the specialisation key and looks the compiled kernel up
on each call: tens of microseconds for a kernel with forty constexprs, more than a decode-sized write takes on
the GPU. From Triton 3.3 the JIT launches the compiled kernel it returns with every bound argument in the
signature's order, constexprs included (``kernel.run(..., *bound_args.values())`` in
``triton/runtime/jit.py``); ``compiled[(x, y, z)](*arguments)`` makes that same launch (all three grid
dimensions: the JIT pads the grid, the compiled kernel's launcher does not). It is reused only for calls
whose specialisation cannot differ: rtp_ref.kernels.call_signature keys a launch on every shape, stride, dtype,
device and start address modulo 16, and the kernel's integer arguments are fixed by those.
"""

from __future__ import annotations

import re
from typing import Any

import triton


def release_of(version: str) -> tuple[int, int]:
    """``(major, minor)`` of a Triton version string (``3.6.0``, ``3.3.1+git``, ``3.4rc1``)."""
    found = re.match(r"(\d+)\.(\d+)", version)
    return (int(found[1]), int(found[2])) if found else (0, 0)


#: whether this Triton launches a compiled kernel with all bound arguments (3.3 and later)
FULL_ARGUMENT_LAUNCH = release_of(triton.__version__) >= (3, 3)


def has_backend(name: str) -> bool:
    """Whether this Triton build has the backend ``name`` (``nvidia``, ``amd``): what ahead-of-time builds for a
    GPU this machine lacks need."""
    from triton.backends import backends

    return name in backends


def reusable(made: object) -> bool:
    """Whether ``made`` (what ``kernel[grid](...)`` returned) can be launched again as ``made[grid](*arguments)``:
    a compiled kernel of a Triton that takes every argument there; never under the interpreter (it returns none)."""
    from triton.compiler import CompiledKernel

    return FULL_ARGUMENT_LAUNCH and isinstance(made, CompiledKernel)


class CompiledLaunch:
    """One Triton kernel launched again and again with the same grid and constexprs (the kernel's last
    parameters): through the JIT the first time, then its compiled kernel directly (``reusable``). The caller keys
    it on the call signature, so the runtime arguments' specialisation cannot change between calls."""

    def __init__(self, kernel: Any, grid: tuple[int, ...], constexprs: dict[str, Any], **options: Any) -> None:
        self.kernel, self.grid, self.constexprs, self.options = kernel, grid, constexprs, options
        self.full_grid = (*grid, *(1,) * (3 - len(grid)))  # a compiled kernel's launcher takes all three
        names = list(getattr(kernel, "arg_names", []))
        tail = names[len(names) - len(constexprs):] if constexprs else []
        # the constexpr values in signature order; none (the JIT every call) if the signature is not as expected
        self.tail = tuple(constexprs[n] for n in tail) if sorted(tail) == sorted(constexprs) else ()
        self.compiled: Any = None

    def __call__(self, *runtime: Any) -> None:
        """Launch with the runtime arguments, in the kernel's signature order."""
        if self.compiled is not None:
            self.compiled[self.full_grid](*runtime, *self.tail)
            return
        made = self.kernel[self.grid](*runtime, **self.options, **self.constexprs)
        if self.tail and reusable(made):
            self.compiled = made


def mha_write_launch(kernel: Any, tokens: int, block_t: int, constexprs: dict[str, Any], num_warps: int,
                     key_cache: Any, flags: Any, scalars: tuple[Any, ...]) -> Any:
    """The launch of an MHA paged writer's ``kernel`` over ``tokens`` tokens, ``block_t`` a program:
    ``launch(key, value, key_cache, value_cache, slots, k_scale, v_scale)`` calls it with those, ``flags`` and the
    cache's slot capacity in the kernel's order (``key, value, key_cache, value_cache, slot_mapping, flags, capacity,
    k_scale, v_scale``), then ``scalars``, on ``key_cache``'s device (rtp_ref.kernels.call_signature.Launch)."""
    from rtp_ref.kernels.call_signature import on_device

    steps = (flags, key_cache.shape[0] * key_cache.shape[1])
    write = CompiledLaunch(kernel, (triton.cdiv(tokens, block_t),), constexprs, enable_fp_fusion=False,
                           num_warps=num_warps)
    index = key_cache.device.index if key_cache.is_cuda else None

    def launch(key: Any, value: Any, key_cache: Any, value_cache: Any, slots: Any, k_scale: Any,
               v_scale: Any) -> None:
        with on_device(index):
            write(key, value, key_cache, value_cache, slots, *steps, k_scale, v_scale, *scalars)

    return launch
