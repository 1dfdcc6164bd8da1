"""Properties of the ``--external_model_packages`` value parser over random text (hypothesis).

The rules: split on commas, strip blanks, drop duplicates keeping the first, and each item must be
dotted parts that are identifiers and not keywords; an invalid item is named in the error, and a
text with no item at all is an error. Runs through the kit (rtp_ref/suites/plugins/kit.py); absent when the
implementation has no such flag. One property per test, so a failure is labelled by the rule that broke: the
items of a text that has some, and a text that has none.
"""

from __future__ import annotations

import argparse
import keyword

import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from rtp_ref.suites.absence import require
from rtp_ref.suites.plugins.kit import PluginsKit

IDENTIFIER = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,6}", fullmatch=True)
VALID_PART = IDENTIFIER.filter(lambda part: not keyword.iskeyword(part))
VALID_NAME = st.lists(VALID_PART, min_size=1, max_size=3).map(".".join)
PART = st.one_of(
    IDENTIFIER,
    st.sampled_from(keyword.kwlist),
    st.sampled_from(["", "..", "/", "a-b", "1x", "x y", "b.py", "é", "$", "*"]),
)
ITEM = st.lists(PART, min_size=1, max_size=3).map(".".join) | st.sampled_from(
    ["", " ", "../x", "a/b.py", ".a"]
)
BLANK = st.sampled_from(["", " ", "\t"])
TEXT = st.lists(st.tuples(BLANK, ITEM, BLANK).map("".join), min_size=1, max_size=4).map(",".join)
#: texts by the rule they exercise: some item present, or none at all
TEXTS = {
    "items": TEXT.filter(lambda text: any(raw.strip() for raw in text.split(","))),
    "no-name": st.lists(BLANK, min_size=1, max_size=4).map(",".join),
}


def _rule_outcome(text: str) -> list[str] | tuple[str, str]:
    """The names the rules give, or ("bad", item) / ("empty", "")."""
    present = [item for item in (raw.strip() for raw in text.split(",")) if item]
    if not present:
        return ("empty", "")
    for item in present:
        if not all(part.isidentifier() and not keyword.iskeyword(part) for part in item.split(".")):
            return ("bad", item)
    return list(dict.fromkeys(present))


@given(names=st.lists(VALID_NAME, min_size=1, max_size=5), blanks=st.lists(BLANK, min_size=10, max_size=10))
def test_valid_package_lists_parse_to_the_names_in_order(
    plugins_kit: PluginsKit, names: list[str], blanks: list[str]
) -> None:
    require(plugins_kit, "package_list")
    text = ",".join(f"{blanks[i % 10]}{name}{blanks[(i + 5) % 10]}" for i, name in enumerate(names))
    assert list(plugins_kit.parse_package_list(text)) == list(dict.fromkeys(names))


@pytest.mark.parametrize("rule", TEXTS)
@settings(report_multiple_bugs=False, phases=[phase for phase in Phase if phase is not Phase.explain])
@given(data=st.data())
def test_any_package_list_text_follows_the_rules(plugins_kit: PluginsKit, rule: str, data: st.DataObject) -> None:
    """§1 PR and review P3: keywords (``import.x``) passed as items; a list without a name gave []."""
    require(plugins_kit, "package_list")
    text = data.draw(TEXTS[rule], label="text")
    outcome = _rule_outcome(text)
    if isinstance(outcome, list):
        assert list(plugins_kit.parse_package_list(text)) == outcome
        return
    with pytest.raises((argparse.ArgumentTypeError, ValueError)) as error_info:
        plugins_kit.parse_package_list(text)
    kind, item = outcome
    if kind == "bad":
        assert repr(item) in str(error_info.value)
