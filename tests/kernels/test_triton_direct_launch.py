"""The direct Triton launch (rtp_ref.kernels.triton_launch.DirectLaunch): used only where Triton's own launch was
seen passing the grid, the stream, the function handle, the packed metadata, the hooks and the arguments in that
order, never while a launch hook is set.

The first tests drive the decision with compiled-kernel stand-ins, one launching in Triton's order and one in
another release's order (the decision is ours; Triton's real order is what the GPU test checks). The GPU test
launches a real compiled kernel: every direct launch writes what it was given, and a hook set later is called
(Triton's path) and not bypassed.
"""

# Triton ships no type information: every @triton.jit is an untyped decorator to mypy.
# mypy: disable-error-code="untyped-decorator"

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
import triton
import triton.language as tl

from rtp_ref.kernels import triton_launch
from rtp_ref.kernels.triton_launch import CompiledLaunch, DirectLaunch, hook_is_set, launch_hooks

STREAM = 0x5EED


class Launcher:
    """A compiled kernel's launcher stand-in: records each call's arguments."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def __call__(self, *arguments: Any) -> None:
        self.calls.append(arguments)


class StandIn:
    """A compiled kernel whose ``[grid](*args)`` calls its launcher as Triton 3.3-3.8 do (``tritons_order``), or
    without the packed metadata (another order, which the direct launch must not assume); as in Triton, the
    launcher is a read-only property over ``_run``."""

    def __init__(self, tritons_order: bool) -> None:
        self._run = self.launcher = Launcher()
        self.function, self.packed_metadata, self.tritons_order = object(), object(), tritons_order

    @property
    def run(self) -> Launcher:
        """The launcher (read-only, as Triton's ``CompiledKernel.run``)."""
        return self._run

    def __getitem__(self, grid: tuple[int, int, int]) -> Callable[..., None]:
        def runner(*arguments: Any) -> None:
            hooks = launch_hooks()
            assert hooks is not None
            if self.tritons_order:
                self.run(*grid, STREAM, self.function, self.packed_metadata, None, *hooks, *arguments)
            else:
                self.run(*grid, STREAM, self.function, None, *hooks, *arguments)

        return runner


@pytest.fixture
def stream(monkeypatch: pytest.MonkeyPatch) -> None:
    """Device 0's current stream is ``STREAM`` (no GPU needed to drive the decision)."""
    monkeypatch.setattr(triton_launch, "current_device", lambda: 0)
    monkeypatch.setattr(triton_launch, "raw_stream", lambda index: STREAM)


@contextlib.contextmanager
def enter_hook_set(hook: Callable[[object], None]) -> Iterator[None]:
    """``hook`` set as a Triton launch enter hook inside the block, removed after it."""
    runtime = triton.knobs.runtime
    chain = runtime.launch_enter_hook
    if hasattr(chain, "add"):  # Triton 3.5+: a chain of hooks
        chain.add(hook)
        try:
            yield
        finally:
            chain.remove(hook)
    else:
        runtime.launch_enter_hook = hook
        try:
            yield
        finally:
            runtime.launch_enter_hook = None


def test_the_launch_is_direct_where_triton_passed_its_order(stream: None) -> None:
    compiled = StandIn(tritons_order=True)
    direct = DirectLaunch.watching(compiled, (3, 2, 1), ("a", 7))
    assert isinstance(direct, DirectLaunch) and len(compiled.launcher.calls) == 1  # the watched launch itself ran, once
    assert direct("b", 8) is True
    assert compiled.launcher.calls[1] == (3, 2, 1, STREAM, compiled.function, compiled.packed_metadata,
                                          None, None, None, "b", 8)


def test_another_order_keeps_tritons_path(stream: None) -> None:
    compiled = StandIn(tritons_order=False)
    why = DirectLaunch.watching(compiled, (1, 1, 1), ("a",))
    assert isinstance(why, str) and why.startswith("Triton's launch passed another order: ['int', 'int', 'int'"), why
    assert len(compiled.launcher.calls) == 1


def test_a_set_hook_keeps_tritons_path(stream: None) -> None:
    compiled = StandIn(tritons_order=True)
    with enter_hook_set(print):
        hooks = launch_hooks()
        assert hooks is not None and hook_is_set(hooks[0])
        assert DirectLaunch.watching(compiled, (1, 1, 1), ("a",)) == "a launch hook is set"
        direct = DirectLaunch(compiled.launcher, (1, 1, 1), compiled.function, compiled.packed_metadata)
        assert direct("a") is False and len(compiled.launcher.calls) == 1  # nothing launched: Triton's path is taken
    assert direct("a") is True  # the hook removed: direct again


@triton.jit
def _store(out, value, SCALE: tl.constexpr):  # type: ignore[no-untyped-def]
    tl.store(out, value * SCALE)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="a compiled Triton kernel needs a GPU")
def test_a_compiled_kernel_launches_directly_and_a_hook_set_later_is_called() -> None:
    out = torch.zeros(1, device="cuda")
    launch = CompiledLaunch(_store, (1,), {"SCALE": 1.0})  # a constexpr: the compiled kernel is reused
    for value in (1.0, 2.0, 3.0, 4.0):
        launch(out, value)
        torch.cuda.synchronize()
        assert out.item() == value
    assert launch.direct is not None, f"Triton {triton.__version__}: {launch.why_not}"
    seen: list[object] = []
    with enter_hook_set(seen.append):
        launch(out, 5.0)
        torch.cuda.synchronize()
    assert out.item() == 5.0 and len(seen) == 1, "a set launch hook must be called (Triton's path)"
