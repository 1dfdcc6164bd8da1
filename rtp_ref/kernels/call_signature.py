"""What a checked kernel call depended on, so that a call with the same metadata skips the checks.

The built-in kernels check a call's shapes, dtypes, strides and devices on the host (rtp_ref.kernels.input_flags:
never its values) and work out a launch from them: tens of microseconds of Python, as long as a decode-sized
write takes on the GPU. A later call whose tensors have the same metadata (and the same start addresses modulo
16, which decide the vector widths and Triton's specialisation) reuses the checked launch, and pays only for
reading that metadata.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch

#: a checked launch: called with the call's tensors (their addresses change from call to call)
Launch = Callable[..., None]
#: checked launches a kernel keeps; past it the oldest half is dropped (a server sees a few hundred batch shapes)
MAX_LAUNCHES = 1024


def call_signature(*args: object) -> tuple[Any, ...] | None:
    """Shape, strides, dtype, device and start address modulo 16 of each tensor in ``args``, strings and integers
    as they are; None when an argument is neither (the checked path then names it).

    Runs on every call of a built-in kernel, so it is written for speed: one pass, each tensor's five facts read
    once, anything without them ending it (a bool is not taken for an integer: exact types)."""
    try:
        return tuple([x if type(x) is str or type(x) is int
                      else (x.shape, x.stride(), x.dtype, x.device, x.data_ptr() & 15)  # type: ignore[attr-defined]
                      for x in args])
    except (AttributeError, TypeError):
        return None


class LaunchCache:
    """Checked launches by call signature, bounded by ``MAX_LAUNCHES``."""

    def __init__(self) -> None:
        self._launches: dict[tuple[Any, ...], Launch] = {}

    def get(self, signature: tuple[Any, ...] | None) -> Launch | None:
        """The launch checked for ``signature``, or None (also for a None signature)."""
        return None if signature is None else self._launches.get(signature)

    def put(self, signature: tuple[Any, ...] | None, launch: Launch) -> None:
        """Keep ``launch`` for ``signature`` (nothing for None)."""
        if signature is None:
            return
        if len(self._launches) >= MAX_LAUNCHES:
            for old in list(self._launches)[: MAX_LAUNCHES // 2]:
                del self._launches[old]
        self._launches[signature] = launch


def no_launch(*tensors: torch.Tensor) -> None:
    """The launch of a write of no tokens: nothing (an empty grid is a launch error)."""


#: torch's own accessors of the current device and of a device's current stream (what Triton's launcher reads),
#: where this torch build has them: ``torch.cuda.current_device()`` and ``current_stream().cuda_stream`` wrap them in
#: several microseconds of Python a call (an H100 host's profile: 40% of a CUDA writer's host time)
_GET_DEVICE: Callable[[], int] | None = getattr(torch._C, "_cuda_getDevice", None)
_RAW_STREAM: Callable[[int], int] | None = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def current_device() -> int:
    """The current CUDA (HIP) device's index; CUDA is initialised (a CUDA tensor exists) where this is called."""
    return _GET_DEVICE() if _GET_DEVICE is not None else torch.cuda.current_device()


def raw_stream(index: int) -> int:
    """The handle of device ``index``'s current stream, as a launch takes it (``cudaStream_t``/``hipStream_t``)."""
    if _RAW_STREAM is not None:
        return _RAW_STREAM(index)
    return int(torch.cuda.current_stream(index).cuda_stream)


def on_device(index: int | None) -> Any:
    """A context that makes CUDA device ``index`` current, or nothing when it already is: entering
    ``torch.cuda.device`` costs microseconds a decode-sized call cannot spare. For None (a CPU call: a Triton kernel
    in Triton's interpreter), numpy's RuntimeWarnings are silenced for the call: the interpreter computes in numpy,
    which warns where a kernel divides by zero or rounds an inf exactly as its contract wants (a compiled kernel says
    nothing), and those warnings read as problems in a report."""
    if index is None:
        return _quiet_numpy()
    if index == current_device():
        return _SAME_DEVICE
    return torch.cuda.device(index)


#: the context of a call already on its device (stateless: one for every call)
_SAME_DEVICE = contextlib.nullcontext()


@contextlib.contextmanager
def _quiet_numpy() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield
