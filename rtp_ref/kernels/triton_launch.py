"""Launching a compiled Triton kernel again without the JIT's per-call work.

``kernel[grid](...)`` binds every argument, computes the specialisation key and looks the compiled kernel up
on each call: tens of microseconds for a kernel with forty constexprs, more than a decode-sized write takes on
the GPU. From Triton 3.3 the JIT launches the compiled kernel it returns with every bound argument in the
signature's order, constexprs included (``kernel.run(..., *bound_args.values())`` in
``triton/runtime/jit.py``); ``compiled[(x, y, z)](*arguments)`` makes that same launch (all three grid
dimensions: the JIT pads the grid, the compiled kernel's launcher does not). It is reused only for calls
whose specialisation cannot differ: rtp_ref.kernels.call_signature keys a launch on every shape, stride, dtype,
device and start address modulo 16, and the kernel's integer arguments are fixed by those.

Past that, ``compiled[grid](...)`` itself costs a Triton launch about 16 us of host time on an H100 host
(scripts/host_profile.py): it asks the driver for the current device and stream, builds launch metadata for the
launch hooks, then calls the compiled launcher (``compiled.run``) with the grid, the stream, the kernel's function
handle, its packed metadata, that metadata, the two hooks and the arguments. ``DirectLaunch`` makes that last call
itself, with torch's own stream accessor, when no launch hook is set (the profilers' hooks keep Triton's path).
Which positions the launcher takes is not assumed: the first launch goes through Triton's path with the launcher
watched, and the direct call is used only if Triton passed exactly the grid, this stream, the function, the
packed metadata, the hooks and the arguments in the order above (else every launch keeps Triton's path).
"""

from __future__ import annotations

import re
from typing import Any

import triton

from rtp_ref.kernels.call_signature import current_device, on_device, raw_stream


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


def launch_hooks() -> tuple[Any, Any] | None:
    """Triton's launch enter and exit hooks as its compiled kernels pass them to their launcher (``triton.knobs``
    from 3.4, ``CompiledKernel``'s class attributes before); None where this Triton has neither."""
    knobs = getattr(triton, "knobs", None)
    runtime = getattr(knobs, "runtime", None)
    if runtime is not None and hasattr(runtime, "launch_enter_hook"):
        return runtime.launch_enter_hook, runtime.launch_exit_hook
    from triton.compiler import CompiledKernel

    if hasattr(CompiledKernel, "launch_enter_hook"):
        return CompiledKernel.launch_enter_hook, getattr(CompiledKernel, "launch_exit_hook", None)
    return None


def hook_is_set(hook: Any) -> bool:
    """Whether a launch hook would call anything: not None, and not an empty chain (Triton 3.5's ``HookChain``)."""
    return hook is not None and bool(getattr(hook, "calls", True))


class _Watched:
    """A compiled kernel's launcher that keeps the arguments of the one call made through it."""

    def __init__(self, run: Any) -> None:
        self.run = run
        self.seen: tuple[Any, ...] | None = None

    def __call__(self, *arguments: Any) -> Any:
        self.seen = arguments
        return self.run(*arguments)


class DirectLaunch:
    """A compiled kernel's launcher called with the grid, stream, function handle and packed metadata as Triton's own
    launch passes them (module doc); made only by ``DirectLaunch.watching``, which proves that order first."""

    def __init__(self, run: Any, grid: tuple[int, int, int], function: Any, packed: Any) -> None:
        self.run, self.grid, self.function, self.packed = run, grid, function, packed

    @classmethod
    def watching(cls, compiled: Any, grid: tuple[int, int, int], arguments: tuple[Any, ...]) -> DirectLaunch | str:
        """Launch ``compiled`` over ``grid`` with ``arguments`` through Triton's path, watching its launcher; the
        direct launch if Triton passed what the module doc lists in that order, else why not. Launches once."""
        runner = compiled[grid]
        hooks = launch_hooks()
        run = getattr(compiled, "run", None)
        # Triton 3.3-3.8 keep the launcher in ``_run`` behind a read-only ``run`` property
        slot = "_run" if isinstance(getattr(type(compiled), "run", None), property) else "run"
        why = ("no launcher" if run is None else "no launch hooks found" if hooks is None
               else "a launch hook is set" if any(hook_is_set(h) for h in hooks)
               else f"no {slot} to watch" if not hasattr(compiled, slot) else None)
        if why is None:
            watched = _Watched(run)
            try:
                setattr(compiled, slot, watched)
            except (AttributeError, TypeError) as exc:  # a launcher this Triton does not let us watch
                why = f"the launcher cannot be watched ({exc})"
        if why is not None:
            runner(*arguments)
            return why
        try:
            runner(*arguments)
        finally:
            setattr(compiled, slot, run)
        seen = watched.seen
        lead = (*grid, raw_stream(current_device()), getattr(compiled, "function", None),
                getattr(compiled, "packed_metadata", None))
        if (seen is None or len(seen) != len(lead) + 3 + len(arguments) or seen[:3] != grid
                or seen[3] != lead[3] or seen[4] is not lead[4] or seen[5] is not lead[5] or lead[4] is None
                or seen[7] is not hooks[0] or seen[8] is not hooks[1]  # type: ignore[index]
                or any(a is not b for a, b in zip(seen[9:], arguments, strict=True))):
            shown = None if seen is None else [type(a).__name__ for a in seen[: len(seen) - len(arguments)]]
            return f"Triton's launch passed another order: {shown}"
        return cls(run, grid, lead[4], lead[5])

    def __call__(self, *arguments: Any) -> bool:
        """Launch with ``arguments`` on the current device's current stream; False (nothing launched) while a launch
        hook is set, for the caller to take Triton's path."""
        hooks = launch_hooks()
        if hooks is None or hook_is_set(hooks[0]) or hook_is_set(hooks[1]):
            return False
        x, y, z = self.grid
        self.run(x, y, z, raw_stream(current_device()), self.function, self.packed, None, None, None, *arguments)
        return True


class CompiledLaunch:
    """One Triton kernel launched again and again with the same grid and constexprs (the kernel's last
    parameters): through the JIT the first time, then its compiled kernel directly (``reusable``), by its launcher
    where that is proven to take Triton's own order (``DirectLaunch``). The caller keys it on the call signature, so
    the runtime arguments' specialisation cannot change between calls."""

    def __init__(self, kernel: Any, grid: tuple[int, ...], constexprs: dict[str, Any], **options: Any) -> None:
        self.kernel, self.grid, self.constexprs, self.options = kernel, grid, constexprs, options
        x, y, z = (*grid, 1, 1, 1)[:3]  # a compiled kernel's launcher takes all three dimensions
        self.full_grid = (x, y, z)
        names = list(getattr(kernel, "arg_names", []))
        tail = names[len(names) - len(constexprs):] if constexprs else []
        # the constexpr values in signature order; none (the JIT every call) if the signature is not as expected
        self.tail = tuple(constexprs[n] for n in tail) if sorted(tail) == sorted(constexprs) else ()
        self.compiled: Any = None
        self.direct: DirectLaunch | None = None
        #: why the direct launch is not used, once the first compiled launch was watched (None: not yet, or it is)
        self.why_not: str | None = None
        self.watched = False

    def __call__(self, *runtime: Any) -> None:
        """Launch with the runtime arguments, in the kernel's signature order."""
        if self.direct is not None and self.direct(*runtime, *self.tail):
            return
        if self.compiled is not None:
            if not self.watched:
                self.watched = True
                found = DirectLaunch.watching(self.compiled, self.full_grid, (*runtime, *self.tail))
                self.direct, self.why_not = (found, None) if isinstance(found, DirectLaunch) else (None, found)
                return
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
    steps = (flags, key_cache.shape[0] * key_cache.shape[1])
    write = CompiledLaunch(kernel, (triton.cdiv(tokens, block_t),), constexprs, enable_fp_fusion=False,
                           num_warps=num_warps)
    index = key_cache.device.index if key_cache.is_cuda else None

    def launch(key: Any, value: Any, key_cache: Any, value_cache: Any, slots: Any, k_scale: Any,
               v_scale: Any) -> None:
        with on_device(index):
            write(key, value, key_cache, value_cache, slots, *steps, k_scale, v_scale, *scalars)

    return launch
