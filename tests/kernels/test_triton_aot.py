"""Ahead-of-time builds of the triton kernel for AMD targets, on a machine without an AMD GPU.

The gfx942 build must convert with the hardware fnuz instruction (``v_cvt_pk_fp8_f32`` on
``tl.float8e4b8``) and the gfx950 build with the OCP one (``v_cvt_pk_fp8_f32``, or
``v_cvt_scalef32_pk_fp8_f32`` as newer Triton emits it, on ``tl.float8e4nv``); the software
path must use neither. The builds run in a subprocess without TRITON_INTERPRET: an interpreted
kernel (this folder's conftest sets the interpreter on CPU-only machines) cannot be compiled.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

pytestmark = pytest.mark.triton

_SCRIPT = r"""
import json, re
from rtp_ref.kernels.contract import WritePlan
from rtp_ref.kernels.triton_mla import amdgcn_for
from tests.kernels.cases import contract

def fp8_converts(platform, arch, hardware):
    plan = WritePlan.of(contract(platform).layout("fp8_ds_mla", 512, 64))
    return sorted(set(re.findall(r"\bv_cvt\w*fp8\w*", amdgcn_for(plan, arch, hardware))))

try:
    found = {"gfx942": fp8_converts("rocm-gfx942", "gfx942", True),
             "gfx950": fp8_converts("rocm-gfx950", "gfx950", True),
             "gfx942-software": fp8_converts("rocm-gfx942", "gfx942", False)}
except RuntimeError as exc:
    found = {"skip": str(exc)}
print(json.dumps(found))
"""


@pytest.fixture(scope="module")
def conversions() -> dict[str, list[str]]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, cwd=root, capture_output=True, text=True,
                          timeout=600, check=False)
    assert proc.returncode == 0, f"AOT build failed:\n{proc.stderr[-4000:]}"
    found: dict[str, list[str]] = json.loads(proc.stdout.strip().splitlines()[-1])
    if "skip" in found:
        pytest.skip(str(found["skip"]))
    return found


def test_gfx942_build_converts_with_the_fnuz_hardware_instruction(conversions: dict[str, list[str]]) -> None:
    assert "v_cvt_pk_fp8_f32" in conversions["gfx942"], conversions


def test_gfx950_build_converts_with_the_ocp_hardware_instruction(conversions: dict[str, list[str]]) -> None:
    assert {"v_cvt_pk_fp8_f32", "v_cvt_scalef32_pk_fp8_f32"} & set(conversions["gfx950"]), conversions


def test_software_path_uses_no_fp8_conversion_instruction(conversions: dict[str, list[str]]) -> None:
    assert conversions["gfx942-software"] == [], conversions
