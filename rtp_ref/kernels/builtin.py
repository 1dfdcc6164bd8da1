"""rtp-ref's own kernels: which ones run here, and why the others do not.

* ``torch-eager`` always (CPU and CUDA);
* ``triton`` when ``import triton`` works and it has somewhere to run: a CUDA/ROCm GPU, or the CPU
  under ``TRITON_INTERPRET=1`` (Triton's interpreter);
* ``cuda`` on an NVIDIA GPU with the CUDA toolkit (nvcc) and ninja; it is compiled at first use.

``unavailable_builtin_kernels()`` gives the reason for each missing one, so a report can show it.
"""

from __future__ import annotations

from rtp_ref.kernels.protocol import KVCacheKernel


def _triton_unavailable_reason() -> str | None:
    try:
        import triton
    except ImportError as exc:
        return f"triton is not installed ({exc}); pip install 'rtp-ref[triton]'"
    import torch

    try:
        from rtp_ref.kernels.triton_fp8 import interpreted
    except Exception as exc:  # an incompatible Triton build: report it, never break kernel discovery
        return f"rtp_ref.kernels.triton_mla does not load with triton {triton.__version__}: {type(exc).__name__}: {exc}"

    if not interpreted() and not torch.cuda.is_available():
        return "torch sees no GPU and TRITON_INTERPRET is not set (set TRITON_INTERPRET=1 to run it on the CPU)"
    return None


def unavailable_builtin_kernels() -> dict[str, str]:
    """Built-in kernel name -> why it cannot run in this process (empty when all can): ``triton`` and ``cuda``,
    and their kernels of the other ops (``triton-mha``...), which need the same toolchains."""
    from rtp_ref.kernels.cuda_mla import unavailable_reason
    from rtp_ref.ops import OPS

    reasons = {"triton": _triton_unavailable_reason(), "cuda": unavailable_reason()}
    return {f"{name}{op.name_suffix}": reason for name, reason in reasons.items() if reason is not None
            for op in OPS.values()}


def available_builtin_kernels() -> list[KVCacheKernel]:
    """The built-in kernels that can run here, unbound (each follows its device's platform table)."""
    from rtp_ref.kernels.torch_eager import TorchEagerKernel

    missing = unavailable_builtin_kernels()
    kernels: list[KVCacheKernel] = [TorchEagerKernel()]
    if "triton" not in missing:
        from rtp_ref.kernels.triton_mla import TritonMlaKernel

        kernels.append(TritonMlaKernel())
    if "cuda" not in missing:
        from rtp_ref.kernels.cuda_mla import CudaMlaKernel

        kernels.append(CudaMlaKernel())
    return kernels
