"""Known-bad kernels of the stream tier: rtp-ref's built-in triton writers of every write op, launched on the legacy
(default) stream whatever stream their caller made current, as a kernel that takes no stream from its caller does
(FlashAttention #2356, kekzl/imp #1709). Eager calls on the default stream, the regular tier's, write what the
reference writes; on the stream tier they run before the producer has written their inputs and write from zeros:
``values.*`` checks fail, with the tokens named."""

from __future__ import annotations

from typing import Any

import torch

from rtp_ref.contract import WriteContract
from rtp_ref.kernels.mha_indexer_builtin import mha_indexer_kernels
from rtp_ref.kernels.triton_mla import TritonMlaKernel
from rtp_ref.ops import op_name, op_spec


class WrongStream:
    """A built-in kernel called under the legacy stream: it takes every attribute of the kernel it wraps (op,
    claims, bind) and only moves the launch."""

    devices = ("cuda",)

    def __init__(self, inner: Any, name: str) -> None:
        self.inner = inner
        self.name = name
        self.op = op_name(inner)
        setattr(self, op_spec(self.op).claims, getattr(inner, op_spec(self.op).claims))

    def bind(self, contract: WriteContract) -> WrongStream:
        return WrongStream(self.inner.bind(contract), self.name)

    def __call__(self, *args: Any) -> None:
        with torch.cuda.stream(torch.cuda.default_stream()):
            self.inner(*args)


def stream_mutants() -> list[object]:
    """The entry point for ``RTP_REF_KERNELS``: the triton writer of each write op on the legacy stream, named
    ``wrong-stream-<built-in name>``."""
    writers = [TritonMlaKernel(), *(k for k in mha_indexer_kernels() if k.name.startswith("triton-"))]
    return [WrongStream(k, f"wrong-stream-{k.name}") for k in writers]
