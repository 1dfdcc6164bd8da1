"""Kernels that forget ``op``, for tests/cli/test_kernel_hints.py: each is loaded into a real ``rtp-ref`` process
through ``RTP_REF_KERNELS=tests.cli.hint_kernels:ATTR`` (one item per kernel, so each is refused on its own).

They are declared only (their call raises): discovery must refuse the ones of another op before any call, and the
MLA one is listed, never called. ``FixedMha`` is ``OplessMha`` with the fix the hint names applied; ``CudaOnlyMla``
cannot run on a CPU-only host whatever it binds.
"""

from __future__ import annotations

from collections.abc import Collection

import torch

from rtp_ref.kv.op_names import MHA_OP


class _Declared:
    """A kernel that only declares itself: certify's selection and ``rtp-ref kernels`` never call one."""

    devices: Collection[str] = ("cpu",)

    def _declared_only(self) -> None:
        raise NotImplementedError(f"{type(self).__name__} is declared only")


class OplessMha(_Declared):
    """vLLM's MHA write without ``op``: its claims are MLA layout names too, so only its 8-argument call tells."""

    name = "opless-mha"
    kv_cache_dtypes: Collection[str] = ("auto", "fp8")

    def __call__(self, key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                 slot_mapping: torch.Tensor, kv_cache_dtype: str, k_scale: torch.Tensor,
                 v_scale: torch.Tensor) -> None:
        self._declared_only()


class FixedMha(OplessMha):
    """``OplessMha`` with ``op`` set, as the hint says."""

    name = "fixed-mha"
    op = MHA_OP


class OplessIndexer(_Declared):
    """The indexer write without ``op``: it claims ``scale_fmts``, which no MLA kernel has."""

    name = "opless-indexer"
    scale_fmts: Collection[str] = ("none", "ue8m0")

    def __call__(self, k: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor, quant_block_size: int,
                 scale_fmt: str) -> None:
        self._declared_only()


class OplessGather(_Declared):
    """The MLA gather without ``op``: MLA claims, and a call that also takes the MLA write's 6 arguments
    (``seq_starts`` has a default), so only its parameter names tell."""

    name = "opless-gather"
    kv_cache_dtypes: Collection[str] = ("auto", "fp8")

    def __call__(self, kv_cache: torch.Tensor, dst: torch.Tensor, block_table: torch.Tensor,
                 cu_seq_lens: torch.Tensor, kv_cache_dtype: str, scale: torch.Tensor,
                 seq_starts: torch.Tensor | None = None) -> None:
        self._declared_only()


class OplessMla(_Declared):
    """An MLA write without ``op``: the default op, nothing to hint."""

    name = "opless-mla"
    kv_cache_dtypes: Collection[str] = ("auto", "fp8")

    def __call__(self, kv_c: torch.Tensor, k_pe: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
                 kv_cache_dtype: str, scale: torch.Tensor) -> None:
        self._declared_only()


class CudaOnlyMla(OplessMla):
    """An MLA write that runs on CUDA only and has no ``bind``: on a CPU-only host it cannot run against any table,
    and ``bind`` would not change that."""

    name = "cuda-only-mla"
    devices: Collection[str] = ("cuda",)


def mha() -> list[object]:
    """``RTP_REF_KERNELS`` item of ``OplessMha``."""
    return [OplessMha()]


def fixed_mha() -> list[object]:
    """``RTP_REF_KERNELS`` item of ``FixedMha``."""
    return [FixedMha()]


def indexer() -> list[object]:
    """``RTP_REF_KERNELS`` item of ``OplessIndexer``."""
    return [OplessIndexer()]


def gather() -> list[object]:
    """``RTP_REF_KERNELS`` item of ``OplessGather``."""
    return [OplessGather()]


def mla() -> list[object]:
    """``RTP_REF_KERNELS`` item of ``OplessMla``."""
    return [OplessMla()]


def cuda_only() -> list[object]:
    """``RTP_REF_KERNELS`` item of ``CudaOnlyMla``."""
    return [CudaOnlyMla()]
