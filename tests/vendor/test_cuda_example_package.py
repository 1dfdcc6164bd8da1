"""The CUDA example vendor package (examples/cuda_vendor_kernel), built and installed for real.

pip builds it into a private target directory (no network, no effect on this environment). On any
machine a fresh process discovers both kernels through the entry point without compiling anything;
on an H200 (cuda-sm90) ``rtp-ref certify`` builds and certifies them, and the report must show each
production behaviour the package copies on purpose, under its own name.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.processes import child_env
from tests.vendor.install import install_example

KERNELS = ("acme-cuda", "acme-cuda-crashy")
#: case kinds of the write cases (docs/conformance.md), as opposed to the support-matrix records
WRITE_KINDS = {"random", "edge", "noncontig", "fused", "elem_aligned", "padded", "padding_only"}


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_example("cuda_vendor_kernel", tmp_path_factory)


def _child(code: str, installed: Path, **extra: str) -> list[str]:
    proc = subprocess.run([sys.executable, "-c", code], env=child_env(installed, **extra), capture_output=True,
                          text=True, check=False, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout.splitlines()


def test_the_cuda_sources_ship_as_package_data(installed: Path) -> None:
    csrc = installed / "acme_cuda_mla" / "csrc"
    assert sorted(p.name for p in csrc.iterdir()) == ["cache_kernels.cu", "ops.h", "torch_bindings.cpp"]


def test_both_kernels_are_discovered_without_building(installed: Path, tmp_path: Path) -> None:
    extensions = tmp_path / "torch_extensions"
    code = (
        "import sys\n"
        "from rtp_ref.kernels.discovery import discover_kernels\n"
        f"found = discover_kernels({list(KERNELS)!r})\n"
        "for name, e in found.items():\n"
        "    k = e.kernel\n"
        "    print(name, '|', e.origin, '|', sorted(k.kv_cache_dtypes), '|', sorted(k.devices), '|',\n"
        "          hasattr(k, 'bind'))\n"
        "import acme_cuda_mla\n"
        "print('built:', acme_cuda_mla._ops.cache_info().currsize)\n"
    )
    out = _child(code, installed, TORCH_EXTENSIONS_DIR=str(extensions))
    origin = "entry point acme-cuda = acme_cuda_mla:kernels (acme-cuda-mla 1.0.0)"
    assert out == [
        f"acme-cuda | {origin} | ['auto', 'fp8'] | ['cuda'] | False",
        f"acme-cuda-crashy | {origin} | ['auto', 'fp8'] | ['cuda'] | False",
        "built: 0",
    ]
    assert not extensions.exists() or not any(extensions.iterdir()), "discovery compiled something"


def test_import_and_entry_point_do_not_touch_the_extension_builder(installed: Path) -> None:
    code = ("import sys, acme_cuda_mla\n"
            "print([k.name for k in acme_cuda_mla.kernels()])\n"
            "print('torch.utils.cpp_extension' in sys.modules)\n")
    assert _child(code, installed) == ["['acme-cuda', 'acme-cuda-crashy']", "False"]


def test_the_good_kernel_refuses_unclaimed_layouts_before_building(installed: Path) -> None:
    """The refusal comes first: it needs no GPU, no compiler and writes nothing."""
    code = (
        "import torch, acme_cuda_mla\n"
        "k = acme_cuda_mla.AcmeCudaKernel()\n"
        "cache = torch.zeros(2, 16, 656, dtype=torch.uint8)\n"
        "args = (torch.ones(3, 512, dtype=torch.bfloat16), torch.ones(3, 64, dtype=torch.bfloat16), cache,\n"
        "        torch.arange(3), 'fp8_ds_mla', torch.ones(1))\n"
        "try:\n"
        "    k(*args)\n"
        "except NotImplementedError as exc:\n"
        "    print(str(exc))\n"
        "print(int(cache.count_nonzero()), acme_cuda_mla._ops.cache_info().currsize)\n"
    )
    out = _child(code, installed)
    assert out == ["acme-cuda does not support kv_cache_dtype='fp8_ds_mla'; supported: auto, fp8", "0 0"]


def _rows(report: dict[str, Any], kernel: str) -> dict[str, dict[str, Any]]:
    return {r["layout"]: r for r in report["summary"]["by_kernel_layout"] if r["kernel"] == kernel}


def _write_cases(report: dict[str, Any], kernel: str, layout: str) -> list[dict[str, Any]]:
    return [c for c in report["cases"]
            if c.get("kernel") == kernel and c.get("layout") == layout and c.get("kind") in WRITE_KINDS]


@pytest.mark.cuda
@pytest.mark.slow
def test_cuda_kernels_are_certified_on_an_h200(installed: Path, tmp_path: Path) -> None:
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip(f"cuda-sm90 is certified natively on compute capability 9.0; this GPU is "
                    f"{torch.cuda.get_device_capability()}")
    env = child_env(installed)
    # Build once up front (about a minute the first time; later runs reuse $TORCH_EXTENSIONS_DIR), so no
    # case's timeout has to cover the compiler.
    build = subprocess.run([sys.executable, "-c", "import acme_cuda_mla; acme_cuda_mla.build()"], env=env,
                           capture_output=True, text=True, check=False, timeout=900)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]

    out = tmp_path / "report"
    proc = subprocess.run(
        [sys.executable, "-m", "rtp_ref.cli", "certify", "--platform", "cuda-sm90",
         *[arg for name in KERNELS for arg in ("--kernel", name)], "--case-timeout", "120", "--report", str(out)],
        env=env, cwd=tmp_path, capture_output=True, text=True, check=False, timeout=3000,
    )
    log = proc.stdout[-4000:] + proc.stderr[-2000:]
    assert (out / "report.json").exists(), log
    report = json.loads((out / "report.json").read_text())

    good = _rows(report, "acme-cuda")
    for layout in ("auto", "fp8"):
        assert good[layout]["verdict"] == "certified", (layout, good[layout], log)
        # no slot validation, on purpose: the out-of-range slot is reported, not failed
        assert good[layout]["input_checks"] == "unchecked", (layout, good[layout])
        # its vector loads need aligned rows: declared, and the element-aligned cases refused as declared
        assert good[layout]["refused"] == ["elem_aligned (aligned16)", "noncontig (aligned16)",
                                           "random (slot_mapping int32, declared int64)"], good[layout]
        assert good[layout]["domain"] == "slot_mapping int64, aligned16 inputs", good[layout]
        # it launches nothing for 0 tokens
        assert good[layout]["hardening"] == "clean", good[layout]

    crashy = _rows(report, "acme-cuda-crashy")
    auto = _write_cases(report, "acme-cuda-crashy", "auto")
    # the empty grid of a 0-token call leaves a launch error pending: the hardening column says so, from the empty
    # calls themselves, and no write case carries it
    empty = {c["case"]: c.get("hardening") for c in report["cases"] if c.get("kernel") == "acme-cuda-crashy"
             and c.get("layout") == "auto" and c.get("kind") == "empty"}
    assert empty == {"empty-t0-b16-bf16": "device error", "empty-t0-b16-fp16": "device error"}, empty
    assert crashy["auto"]["hardening"] == "device error", crashy["auto"]
    faulted = [c for c in auto if "support.device_fault" in c.get("failed_checks", [])]
    launch_errors = {c["case"] for c in auto if "support.device_error" in c.get("failed_checks", [])
                     and c not in faulted}
    assert launch_errors == set(), launch_errors
    # the strided, element-aligned rows fault in the 16-byte vector loads (the context dies), each on its own case
    assert {c["kind"] for c in faulted} == {"noncontig", "elem_aligned"}, [(c["case"], c["reason"]) for c in faulted]
    assert all("misaligned address" in str(c.get("reason", "")) for c in faulted), faulted
    assert all(c["outcome"] == "passed" for c in auto if not c.get("failed_checks")), auto
    assert crashy["auto"]["verdict"] == crashy["fp8"]["verdict"] == "failed"
    # its fp8 path kills the CUDA context (a device fault, or torch aborts the process); after --crash-limit (2)
    # deaths of the pair's cases (the determinism case among them; the out-of-range slot and the empty call are
    # hardening, run whatever the write did, and do not count) its remaining cases are not run
    fp8 = [c for c in report["cases"] if c.get("kernel") == "acme-cuda-crashy" and c.get("layout") == "fp8"
           and c.get("kind") not in ("bad_input", "empty")]
    died = [c for c in fp8 if {"support.device_fault", "support.worker_died"} & set(c.get("failed_checks", []))]
    not_run = [c for c in fp8 if str(c.get("reason", "")).startswith("not run: acme-cuda-crashy/fp8 crashed 2 times")]
    assert len(died) == 2 and len(not_run) == len(fp8) - 2 > 15, [(c.get("case"), c.get("reason")) for c in fp8]
    assert report["complete"] is True and proc.returncode == 1, log
