"""Ahead-of-time builds of the triton kernel for AMD and NVIDIA targets, on a machine without their GPUs.

The platform tables' ``[hardware] triton_fp8_conversion`` (read through ``triton_converts``)
claim which fp8 format each AMD target converts with a hardware instruction under this Triton; the
builds check the claim both ways. gfx942 must convert fnuz (``tl.float8e4b8``) with
``v_cvt_pk_fp8_f32``. gfx950 converts OCP e4m3 (``tl.float8e4nv``) with ``v_cvt_scalef32_pk_fp8_f32``
from triton 3.8, while triton 3.6 emits no conversion instruction (the kernel then takes its software
path). The software path uses no conversion instruction.

On NVIDIA the kernels convert without clamping first: they rely on Triton emitting the saturating
``cvt.rn.satfinite.e4m3x2.f32`` (and ``cvt.rn.satfinite.e5m2x2.f32`` for an e5m2 cache), which the sm90 builds of
the MLA and the MHA kernels check.

The builds run in a subprocess without TRITON_INTERPRET: an interpreted kernel (this folder's
conftest sets the interpreter on CPU-only machines) cannot be compiled.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("triton")

pytestmark = pytest.mark.triton

_SCRIPT = r"""
import json, re
from rtp_ref.kernels.write_plan import WritePlan
from rtp_ref.kernels.triton_fp8 import triton_converts
from rtp_ref.platform import load_platform
from rtp_ref.kernels.triton_mla import amdgcn_for, ptx_for
from tests.kernels.cases import contract

def build(platform, arch, hardware):
    plan = WritePlan.of(contract(platform).layout("fp8_ds_mla", 512, 64))
    return sorted(set(re.findall(r"\bv_cvt\w*fp8\w*", amdgcn_for(plan, arch, hardware))))

found = {}
try:
    tables = {platform: load_platform(platform) for platform in ("rocm-gfx942", "rocm-gfx950")}
    found["amd"] = {arch: {"claimed": tables[platform].element_format.name
                           if triton_converts(tables[platform], tables[platform].element_format) else None,
                           "hardware": build(platform, arch, True), "software": build(platform, arch, False)}
                    for platform, arch in (("rocm-gfx942", "gfx942"), ("rocm-gfx950", "gfx950"))}
except RuntimeError as exc:  # no AMD backend in this Triton
    found["amd"] = {"skip": str(exc)}
try:
    sm90 = {layout: ptx_for(WritePlan.of(contract("cuda-sm90").layout(layout, 512, 64)), 90)
            for layout in ("fp8", "fp8_ds_mla")}
    found["sm90"] = {layout: sorted(set(re.findall(r"\bcvt\.[\w.]*e4m3x2[\w.]*", ptx))) for layout, ptx in sm90.items()}
    from rtp_ref.kernels.triton_mha_paged import ptx_for_mha
    from rtp_ref.kv.mha_paged import mha_layout
    mha = {dtype: ptx_for_mha(mha_layout(load_platform("cuda-sm90"), dtype, 8, 128), 90)
           for dtype in ("fp8", "fp8_e5m2")}
    found["sm90_mha"] = {dtype: sorted(set(re.findall(r"\bcvt\.[\w.]*(?:e4m3|e5m2)x2[\w.]*", ptx)))
                         for dtype, ptx in mha.items()}
except RuntimeError as exc:  # no NVIDIA backend in this Triton
    found["sm90"] = found["sm90_mha"] = {"skip": str(exc)}
print(json.dumps(found))
"""


@pytest.fixture(scope="module")
def all_builds() -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, cwd=root, capture_output=True, text=True,
                          timeout=600, check=False)
    assert proc.returncode == 0, f"AOT build failed:\n{proc.stderr[-4000:]}"
    found: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return found


def _backend(all_builds: dict[str, Any], name: str) -> dict[str, Any]:
    """One backend's builds; skipped (with Triton's reason) when this Triton lacks that backend."""
    builds: dict[str, Any] = all_builds[name]
    if "skip" in builds:
        pytest.skip(str(builds["skip"]))
    return builds


@pytest.fixture(scope="module")
def builds(all_builds: dict[str, Any]) -> dict[str, Any]:
    """The AMD builds (gfx942, gfx950)."""
    return _backend(all_builds, "amd")


@pytest.fixture(scope="module")
def sm90_builds(all_builds: dict[str, Any]) -> dict[str, Any]:
    """The fp8 conversions in the NVIDIA sm90 PTX, per layout."""
    return _backend(all_builds, "sm90")


def test_gfx942_converts_fnuz_with_the_hardware_instruction(builds: dict[str, Any]) -> None:
    assert builds["gfx942"]["claimed"] == "e4m3fnuz"
    assert "v_cvt_pk_fp8_f32" in builds["gfx942"]["hardware"], builds


def test_gfx950_claim_matches_what_this_triton_emits(builds: dict[str, Any]) -> None:
    gfx950 = builds["gfx950"]
    if gfx950["claimed"] == "e4m3fn":
        assert {"v_cvt_pk_fp8_f32", "v_cvt_scalef32_pk_fp8_f32"} & set(gfx950["hardware"]), builds
    else:
        assert gfx950["claimed"] is None and gfx950["hardware"] == [], builds


def test_software_path_uses_no_fp8_conversion_instruction(builds: dict[str, Any]) -> None:
    assert builds["gfx942"]["software"] == [] and builds["gfx950"]["software"] == [], builds


def test_nvidia_conversion_saturates_by_itself(sm90_builds: dict[str, Any]) -> None:
    """Without the clamp, only the satfinite conversion may appear: a plain ``cvt.rn.e4m3x2`` would turn
    overflow into NaN on the GPU (the kernel's unclamped path depends on this)."""
    for layout, found in sm90_builds.items():
        assert found == ["cvt.rn.satfinite.e4m3x2.f32"], (layout, sm90_builds)


def test_the_nvidia_mha_kernel_converts_each_format_with_its_saturating_instruction(
        all_builds: dict[str, Any]) -> None:
    """The MHA kernel's e4m3 and e5m2 caches (cuda-sm90 lists both under ``triton_fp8_conversion``): each converts
    with its own satfinite instruction and no other."""
    found = _backend(all_builds, "sm90_mha")
    assert found == {"fp8": ["cvt.rn.satfinite.e4m3x2.f32"], "fp8_e5m2": ["cvt.rn.satfinite.e5m2x2.f32"]}, found
