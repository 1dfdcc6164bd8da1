"""Run the triton and cuda kernels once per layout and input dtype, for compute-sanitizer memcheck.

Usage (on a GPU host): compute-sanitizer --tool memcheck --error-exitcode 9 python3 scripts/sanitize_kernels.py
[KERNEL ...] (default: triton cuda)
Covers padded block strides, non-contiguous inputs and negative slots (the cases where an
address computation can go wrong), with the bytes checked against the reference as well.
"""

from __future__ import annotations

import sys

import torch

from rtp_ref.certify.cases import CaseSpec, build_case, num_blocks_for
from rtp_ref.certify.grading import grade_write, reference_image
from rtp_ref.kernels.contract import WriteContract
from rtp_ref.kernels.discovery import discover_kernels
from rtp_ref.kv.layouts import default_dims
from rtp_ref.platform import load_platform


def main() -> None:
    platform = load_platform("cuda-sm90")
    contract = WriteContract.for_platform(platform)
    kernels = discover_kernels(sys.argv[1:] or ["triton", "cuda"])
    checked = 0
    for name, entry in kernels.items():
        kernel = entry.kernel.bind(contract)  # type: ignore[attr-defined]
        for layout_name in platform.supported_layouts:
            layout = contract.layout(layout_name, *default_dims(layout_name))
            for kind, dtype in (("padded", torch.bfloat16), ("noncontig", torch.float16), ("random", torch.bfloat16)):
                spec = CaseSpec(layout_name, kind, 37, 16, num_blocks_for(37, 16), dtype, 11)
                case = build_case(spec, layout, "cuda")
                before = case.storage.cpu().clone()
                kernel(case.kv_c, case.k_pe, case.kv_cache, case.slot_mapping, layout_name, case.scale)
                torch.cuda.synchronize()
                grading = grade_write(layout, kind, case, before, case.storage.cpu(), reference_image(layout, case),
                                      platform.numerics_max_ulp)
                assert grading.grade == "bit_exact", (name, layout_name, kind, grading.failed)
                checked += 1
    print(f"kernels checked: {checked} launches of {', '.join(kernels)}, all bit-exact")


if __name__ == "__main__":
    main()
