"""Every regular case of every op, written once: the engine (rtp_ref.certify.engine) builds, calls, grades and
judges the case; this test records what it found and shows its outcome (a known deviation as an xfail, never a
pass). No op is named here: an op's cases are its module in rtp_ref/ops."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from rtp_ref.certify.engine import Subject, run_case

from .conftest import CaseParam, show
from .matrix import suite


def test_case(case: CaseParam, record_case: Callable[..., None], pytestconfig: pytest.Config) -> None:
    s = suite(pytestconfig)
    k = case.kut
    result = run_case(Subject(k.name, k.kernel, k.op, k.device, k.execution), case.key, s.contract, s.platform,
                      case.deviation, hardening_required=s.hardening_required)
    record_case(**result.record)
    show(result.judgement)
