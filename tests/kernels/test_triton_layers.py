"""The Triton MLA writer's grouped call (``write_layers``): several layers' writes of one step in one launch.

Each layer's cache is compared, every byte of every block, with what the op's reference writes for that layer's
inputs into a cache holding the same poison (rtp_ref.bench.verify ``LayeredCheck``, the bench's check; the inputs
are the bench's: other values per layer, one slot mapping). Runs compiled on a GPU, in Triton's interpreter
elsewhere.
"""

from __future__ import annotations

import pytest
import torch

from rtp_ref.bench.verify import LayeredCheck
from rtp_ref.bench.workloads import layered
from rtp_ref.ops import MLA_OP
from tests.kernels.cases import contract

pytest.importorskip("triton")
from rtp_ref.kernels.triton_fp8 import interpreted
from rtp_ref.kernels.triton_mla import TritonMlaKernel

pytestmark = [pytest.mark.triton, pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")]

DEVICE = torch.device("cpu" if interpreted() else "cuda")
if DEVICE.type == "cuda" and not torch.cuda.is_available():
    pytest.skip("compiled Triton needs a GPU (set TRITON_INTERPRET=1 for the interpreter)", allow_module_level=True)
#: a 16-bit copy, a per-tensor fp8, a tile-scaled fp8 with inline scales and an FP4 record with block-trailing ones
LAYOUTS = ("auto", "fp8", "fp8_ds_mla", "V41_FP4")
PLATFORM = "cpu" if DEVICE.type == "cpu" else "cuda-sm90"


@pytest.mark.parametrize("layout", LAYOUTS)
def test_one_launch_writes_every_layer_as_the_reference_does(layout: str) -> None:
    c = contract("cpu" if layout == "V41_FP4" else PLATFORM)
    kernel = TritonMlaKernel().bind(c)
    w = layered(MLA_OP, layout, 37, 3, c, DEVICE)
    check = LayeredCheck(w)
    for _ in range(2):  # both input sets: the second call reuses the first's launch and address tables' kind
        check.poison()
        before = kernel.launch_count
        w.call(kernel)
        assert kernel.launch_count == before + 1, "three layers of one slot mapping: one launch"
        assert check.mismatch() is None, check.mismatch()


def test_layers_that_differ_in_metadata_are_written_one_call_each() -> None:
    """A layer whose tensors differ from the first's (here its slots are another tensor) cannot share a launch:
    each layer is then written by a call of its own, as correctly."""
    c = contract(PLATFORM)
    kernel = TritonMlaKernel().bind(c)
    w = layered(MLA_OP, "fp8_ds_mla", 20, 2, c, DEVICE)
    check = LayeredCheck(w)
    check.poison()
    w.last = 0
    layers = [w.layers[0].arguments(w.layers[0].inputs[0]), w.layers[1].arguments(w.layers[1].inputs[0])]
    second = list(layers[1])
    second[3] = second[3].clone()  # the same slots in another tensor
    before = kernel.launch_count
    kernel.write_layers([layers[0], tuple(second)])
    assert kernel.launch_count == before + 2
    assert check.mismatch() is None, check.mismatch()
