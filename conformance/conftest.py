"""Case generation and shared fixtures of the conformance suite (matrix.py holds the matrix)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from rtp_ref.certify.cases import CaseSpec
from rtp_ref.kv.layouts import default_dims
from rtp_ref.platform import MLA_LAYOUT_NAMES

from .matrix import KernelUnderTest, case_specs, matching_deviation, suite


@dataclass(frozen=True)
class WriteCase:
    """One generated write case: the bound kernel, the case spec, R/P, and a known deviation index."""

    kut: KernelUnderTest
    spec: CaseSpec
    dims: tuple[int, int]
    deviation: int | None


def _skip_marks(k: KernelUnderTest) -> list[pytest.MarkDecorator]:
    return [pytest.mark.skip(reason=k.skip_reason)] if k.skip_reason else []


def write_case_params(config: pytest.Config) -> list[Any]:
    """Every (kernel, layout, case) this session certifies, with deviations as strict xfails."""
    s = suite(config)
    params = []
    for k in s.kernels:
        for layout in s.layouts:
            if layout not in k.kernel.kv_cache_dtypes:
                continue
            for spec, dims in case_specs(layout):
                marks = _skip_marks(k)
                match = matching_deviation(s.platform, k.name, layout, spec.kind)
                if match is not None:
                    d = match[1]
                    marks.append(pytest.mark.xfail(strict=True, reason=f"known deviation: {d.reason} [{d.source}]"))
                suffix = "" if dims == default_dims(layout) else f"-r{dims[0]}p{dims[1]}"
                case = WriteCase(k, spec, dims, match[0] if match else None)
                params.append(pytest.param(case, marks=marks, id=f"{k.name}-{layout}-{spec.case_id}{suffix}"))
    return params


def _pairs(config: pytest.Config, claimed: bool) -> list[Any]:
    """(kernel, layout) pairs: the claimed ones under test, or every layout a kernel does not claim."""
    s = suite(config)
    out = []
    for k in s.kernels:
        for layout in s.layouts if claimed else MLA_LAYOUT_NAMES:
            if (layout in k.kernel.kv_cache_dtypes) == claimed:
                out.append(pytest.param((k, layout), marks=_skip_marks(k), id=f"{k.name}-{layout}"))
    return out


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "write_case" in metafunc.fixturenames:
        metafunc.parametrize("write_case", write_case_params(metafunc.config))
    if "claimed_pair" in metafunc.fixturenames:
        metafunc.parametrize("claimed_pair", _pairs(metafunc.config, claimed=True))
    if "unclaimed_pair" in metafunc.fixturenames:
        metafunc.parametrize("unclaimed_pair", _pairs(metafunc.config, claimed=False))


@pytest.fixture
def record_case(record_property: Callable[[str, object], None]) -> Callable[..., None]:
    """Attach a case record (kernel, layout, grade, checks...) for the report collector."""

    def record(**fields: Any) -> None:
        record_property("rtp_ref_case", fields)

    return record
