"""The stream tier (``--rtp-tier stream``, ``rtp-ref certify --tier stream``): each write op's call made on a
non-default stream right after a producer that writes its inputs late (rtp_ref.certify.stream_cases says how). The
engine runs, grades and judges it as the regular case it is built from; the record names the tier and the
scenario."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from rtp_ref.certify.engine import Subject, run_case
from rtp_ref.certify.stream_cases import late_inputs, scenario_device

from .conftest import StreamCaseParam, show
from .matrix import suite


def test_stream(stream_case: StreamCaseParam, record_case: Callable[..., None], pytestconfig: pytest.Config) -> None:
    s = suite(pytestconfig)
    k, spec = stream_case.kut, stream_case.spec
    device = scenario_device(spec)
    assert device is not None  # the case is skipped where its device is absent (conftest)
    result = run_case(Subject(k.name, k.kernel, k.op, device, k.execution), spec.key, s.contract, s.platform,
                      stream_case.deviation, invoke_with=late_inputs)
    record_case(**{**result.record, "tier": "stream", "case": spec.case_id, "device": k.device})
    show(result.judgement)
