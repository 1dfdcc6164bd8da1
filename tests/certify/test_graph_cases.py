"""The graph tier's cases are built on any host: every op's case of every variant holds inputs its reference takes.

The tier itself needs a CUDA device (conformance/test_graph.py); what each case holds does not. A case whose inputs
its variant refuses (per-head scales for nvfp4, whose scales are global) fails every kernel's capture on a GPU, which
a CPU run would never see.
"""

from __future__ import annotations

import pytest
import torch

from rtp_ref.certify.graph_cases import SCENARIOS, GraphSpec, build_graph_case, graph_ops
from rtp_ref.contract import WriteContract
from rtp_ref.ops import op_spec
from rtp_ref.platform import load_platform

CONTRACT = WriteContract.for_platform(load_platform("cpu"))
CASES = [(op, variant) for op in graph_ops() for variant in op_spec(op).variants]


@pytest.mark.parametrize(("op", "variant"), CASES, ids=[f"{op}-{variant}" for op, variant in CASES])
def test_every_graph_case_holds_inputs_its_reference_takes(op: str, variant: str) -> None:
    case = build_graph_case(GraphSpec(op, variant, SCENARIOS[0], 7), CONTRACT, "cpu", 7)
    storage = case.storage.clone()
    case.reference_on(storage)  # raises RtpRefError naming the argument where the variant refuses an input
    assert not torch.equal(storage, case.storage), "the case writes nothing"
