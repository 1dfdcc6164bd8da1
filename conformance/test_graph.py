"""The CUDA-graph tier (``--rtp-tier graph``, ``rtp-ref certify --tier graph``): each kernel's call captured in a
CUDA graph and replayed with new inputs in the same tensors (rtp_ref.certify.graph_cases says how).

A kernel that claims ``graph_safe = True`` fails the pair on any graph check; one without the attribute is
tried and reported (the report's graph-safe column), never failed; one that declares ``graph_safe = False``
is not run."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from rtp_ref.certify.device_errors import describe_error, pending_device_error
from rtp_ref.certify.graph_cases import CLAIMED, GraphRun, graph_claim

from .conftest import GraphCaseParam
from .matrix import suite


def test_graph_replay(graph_case: GraphCaseParam, record_case: Callable[..., None],
                      pytestconfig: pytest.Config) -> None:
    s = suite(pytestconfig)
    k, spec = graph_case.kut, graph_case.spec
    claim = graph_claim(k.kernel)
    base = dict(op=spec.op, kernel=k.name, layout=spec.layout, platform=s.platform.name, case=spec.case_id,
                kind=spec.kind, seed=spec.seed, device=k.device, execution=k.execution, tier="graph",
                graph_claim=claim, worker=os.environ.get("PYTEST_XDIST_WORKER"),
                visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"))
    run = GraphRun(spec, s.contract, k.device)
    try:
        problems = {step.check: step.problem for step in run.run(k.kernel) if step.problem}
    except Exception as exc:  # the kernel's (or its capture's) failure is the finding
        problems = {"graph.capture": describe_error(exc)}
    device_error = pending_device_error(k.device)
    if device_error is not None:
        problems.setdefault("graph.capture", f"the capture or a replay left a device error: {device_error}")
    failed = claim == CLAIMED and bool(problems)
    record_case(**base, graph_safe="no" if problems else "yes", graph_checks=problems,
                failed_checks=sorted(problems) if failed else [])
    if failed:
        lines = "\n".join(f"  {check}: {detail}" for check, detail in problems.items())
        pytest.fail(f"{k.name} claims graph_safe, and its captured call failed:\n{lines}", pytrace=False)
