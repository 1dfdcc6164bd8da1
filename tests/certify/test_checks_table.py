"""The one table of checks (rtp_ref.cases.checks): the docs state it, the code records nothing else, and
grades follow from it rather than from a name's prefix."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rtp_ref.cases.checks import CHECKS, GRADES, GRAPH, INPUT, Check, grade_reached, rank, spec

REPO = Path(__file__).resolve().parents[2]
#: a check name as a string literal in the code
LITERAL = re.compile(r"""["'](?:support|input|graph|read|layout|numerics|bit_exact)\.[a-z_<>{}]+["']""")


def test_the_docs_check_table_is_the_code_table() -> None:
    text = (REPO / "docs" / "conformance.md").read_text()
    rows = re.findall(r"^\| `([^`]+)` \| ([^|]+) \| (.+) \|$", text, flags=re.MULTILINE)
    documented = [(name, grade.strip(), meaning) for name, grade, meaning in rows if "." in name]
    shown = {INPUT: "(input checks)", GRAPH: "(graph tier)"}
    table = [(c.name, shown.get(c.grade, c.grade), c.meaning) for c in CHECKS]
    assert documented == table


def test_every_check_name_in_the_code_is_a_row_of_the_table() -> None:
    found = set()
    for path in [*(REPO / "rtp_ref").rglob("*.py"), *(REPO / "conformance").rglob("*.py")]:
        if path.name == "checks.py":
            continue
        for literal in LITERAL.findall(path.read_text()):
            name = literal.strip("\"'")
            if name.endswith(".") or "{" in name:
                continue  # a prefix or a format string ("layout.{f.name}_exact")
            found.add(name)
            spec(name)
    assert len(found) >= 15, sorted(found)  # the scan sees the code's checks at all


def test_a_check_outside_the_table_is_refused() -> None:
    with pytest.raises(ValueError, match=r"'layout\.untuoched_bytes' is not in"):
        Check("layout.untuoched_bytes", False)
    assert spec("layout.kv_c_exact").name == "layout.<field>_exact"


@pytest.mark.parametrize(("failed", "grade"), [
    ([], "bit_exact"),
    (["bit_exact.bytes"], "numerics"),
    (["numerics.nan", "bit_exact.bytes"], "layout"),
    (["support.hang"], "none"),
    (["layout.rope_exact", "numerics.nan"], "none"),
    (["input.rejects_bad_slot"], "bit_exact"),  # input hardening grades no case
])
def test_the_grade_reached_follows_the_table(failed: list[str], grade: str) -> None:
    assert grade_reached(failed) == grade


def test_every_row_has_a_grade_and_the_order_explains_a_call_before_its_bytes() -> None:
    assert {c.grade for c in CHECKS} == {*GRADES, INPUT, GRAPH}
    assert rank("support.kernel_raised") < rank("layout.untouched_bytes") < rank("numerics.nan") \
        < rank("bit_exact.bytes") < rank("from.another_version")
