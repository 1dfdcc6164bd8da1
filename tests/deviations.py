"""The verdicts the bundled ``cpu`` table's known deviations give the built-in kernels on the torch running the tests.

torch releases before 2.13 cast to fp8 on the CPU without saturating (past 448 and inf become NaN): the table lists
that as torch-eager's deviation on its fp8 e4m3 layouts' edge cases (platforms/cpu.toml, docs/sources.md), so a GPU
host's torch 2.11 certifies torch-eager "with deviations" there where CI's torch 2.13 certifies it plainly. Written
out by hand from the table, not read from it: a test that read it would agree with any table.
"""

from __future__ import annotations

import torch

#: whether this torch's CPU cast to float8_e4m3fn saturates (2.13 and later)
CPU_CAST_SATURATES = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 13)
#: the layouts of torch-eager's deviation on the cpu table
CPU_CAST_LAYOUTS = ("fp8", "fp8_rocm_compact", "nvfp4_fp8_ds_mla")


def cpu_table_verdict(kernel: str, layout: str) -> str:
    """The verdict a built-in kernel that follows its contract gets on the cpu table for ``layout``: torch-eager's
    is "certified with deviations" on its deviation's layouts where this torch does not saturate, else every
    built-in kernel is "certified", and a layout it does not claim (a row ``LAYOUT (unclaimed)``) "raises as
    required"."""
    if layout.endswith(" (unclaimed)"):
        return "raises as required"
    if kernel == "torch-eager" and layout in CPU_CAST_LAYOUTS and not CPU_CAST_SATURATES:
        return "certified with deviations"
    return "certified"
