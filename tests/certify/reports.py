"""Small, valid certification reports for the tests of reports and of the commands that read them."""

from __future__ import annotations

from typing import Any

from rtp_ref.certify.report import build_report


def case_row(kernel: str, layout: str, outcome: str, grade: str | None = "bit_exact", **extra: Any) -> dict[str, Any]:
    """One case of a report (its node id unique per kernel, layout, outcome and number of extras)."""
    return {
        "nodeid": f"x::{kernel}-{layout}-{outcome}-{len(extra)}",
        "kernel": kernel,
        "layout": layout,
        "outcome": outcome,
        "grade": grade,
        "execution": "native",
        **extra,
    }


def minimal_report(cases: list[dict[str, Any]], name: str = "cpu", complete: bool = True) -> dict[str, Any]:
    """A report of platform ``name`` with ``cases``, built by ``build_report`` as certify builds it."""
    platform = {
        "name": name,
        "source": f"platforms/{name}.toml",
        "sha256": "0" * 64,
        "execution": "native",
        "element_format": "e4m3fn",
        "conversion_mode": "satfinite",
        "required_grade": "bit_exact",
        "table": {},
    }
    return build_report(
        platform=platform,
        environment={"device": "cpu"},
        flags={"lora_alignment": "strict"},
        selection={},
        cases=cases,
        unmatched_deviations=[],
        complete=complete,
        exit_status=0,
    )
