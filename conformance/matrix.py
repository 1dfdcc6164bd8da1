"""The case matrix: platform x kernel x layout x shapes, generated from the platform table.

Everything here is computed at collection time from the pytest options, so test ids are stable
and readable: ``triton-fp8_ds_mla-random-t37-b16-bf16``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from rtp_ref.certify.selection import blocker, layouts_under_test, run_device
from rtp_ref.certify.session import execution_mode, run_platform
from rtp_ref.contract import WriteContract
from rtp_ref.errors import RtpRefError
from rtp_ref.kernels.discovery import discover_kernels
from rtp_ref.kv.layouts import check_layout_bytes
from rtp_ref.ops import MLA_OP, OPS, claimed_variants, op_name
from rtp_ref.platform import Platform


@dataclass(frozen=True)
class KernelUnderTest:
    """A discovered kernel bound to the platform's contract, with the device it runs on here and its op."""

    name: str
    #: a KVCacheKernel for the MLA write; rtp_ref.ops names the other ops' calls
    kernel: Any
    device: str
    execution: str
    skip_reason: str | None
    op: str = MLA_OP

    @property
    def claims(self) -> tuple[str, ...]:
        """The variants (layouts) the kernel claims."""
        return claimed_variants(self.kernel)


@dataclass(frozen=True)
class Suite:
    """What one session certifies: the kernels of every op, per op the layouts (variants) under test, and whether
    the hardening cases are required (the platform table's ``require_input_checks`` / ``require_hardening``, or
    ``--rtp-require-input-checks`` / ``--rtp-require-hardening``)."""

    platform: Platform
    contract: WriteContract
    kernels: list[KernelUnderTest]
    layouts_by_op: dict[str, list[str]]
    input_checks_required: bool = False
    hardening_required: bool = False

    @property
    def layouts(self) -> list[str]:
        """The MLA layouts under test."""
        return self.layouts_by_op[MLA_OP]

    def kernels_of(self, op: str) -> list[KernelUnderTest]:
        """The kernels of ``op``."""
        return [k for k in self.kernels if k.op == op]


_SUITE = pytest.StashKey["Suite"]()


def suite(config: pytest.Config) -> Suite:
    """The session's suite, built once from ``--platform``, ``--kernel``, ``--layout``, ``--layout-flag``."""
    if _SUITE not in config.stash:
        platform = run_platform(config)
        try:
            check_layout_bytes(platform)
        except RtpRefError as exc:
            raise pytest.UsageError(f"--platform: {exc}") from None
        contract = WriteContract.for_platform(platform, config.rtp_ref_layout_flags)  # type: ignore[attr-defined]
        kernels = []
        for name, entry in discover_kernels(config.getoption("rtp_kernel") or None, ops=OPS).items():
            # the same rules certify checks a selection by before it runs (rtp_ref.certify.selection)
            device = run_device(entry.kernel, platform) or "cuda"
            execution = execution_mode(platform, device)
            reason = blocker(entry.kernel, platform)
            bind = getattr(entry.kernel, "bind", None)
            bound = bind(contract) if bind is not None else entry.kernel
            # a software fp8 conversion emulates a GPU table's hardware; the cpu table's contract IS software
            software = getattr(bound, "conversion_path", "hardware") == "software" and platform.backend != "cpu"
            path_execution = "emulated" if software else execution
            kernels.append(KernelUnderTest(name, bound, device, path_execution, reason and f"{name}: {reason}",
                                           op_name(entry.kernel)))
        config.stash[_SUITE] = Suite(
            platform, contract, kernels, _layouts_by_op(config, platform),
            platform.require_input_checks or bool(config.getoption("rtp_require_input_checks")),
            platform.require_hardening or bool(config.getoption("rtp_require_hardening")))
    return config.stash[_SUITE]


def _layouts_by_op(config: pytest.Config, platform: Platform) -> dict[str, list[str]]:
    """Per op, the layouts under test: ``--layout`` names variants of any op (``fp8`` is both an MLA layout and
    an MHA cache dtype); without it, the platform's MLA layouts and every variant of the other ops."""
    wanted: list[str] = config.getoption("rtp_layout") or []
    unknown = [n for n in wanted if not any(n in spec.variants for spec in OPS.values())]
    if unknown:
        valid = ", ".join(dict.fromkeys(v for spec in OPS.values() for v in spec.variants))
        raise pytest.UsageError(f"--layout {unknown[0]!r}: unknown; valid: {valid}")
    return {op: layouts_under_test(platform, op, wanted) for op in OPS}
