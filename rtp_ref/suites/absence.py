"""How a suite test ends ``absent`` when the implementation lacks a feature it needs (rtp_ref/suites/features.py).

``require`` at the start of a test ends it absent when the kit lists the feature in ``absent_features``;
``refused_keyword`` around a call that passes a feature's keyword ends it absent when the implementation refuses
the keyword itself (``TypeError: ... unexpected keyword argument``), so an adapter that passes the suite's
keyword on, as the recipe says, reports the absence without declaring it. Absent is a skip with a reason that
starts with ``ABSENT_PREFIX``: neither a pass nor a failure.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

import pytest

from rtp_ref.suites.features import ABSENT_PREFIX, FEATURES_BY_NAME, declared_absent


def absent(feature: str, why: str) -> NoReturn:
    """End the running test as absent: the implementation lacks ``feature`` (``why`` says how that showed).
    KeyError for a name features.py does not list (the suites' own mistake)."""
    if feature not in FEATURES_BY_NAME:
        raise KeyError(f"{feature!r} is not a feature of rtp_ref/suites/features.py")
    pytest.skip(f"{ABSENT_PREFIX}{feature}: {why}")


def require(kit: object, feature: str) -> None:
    """Go on only if ``kit`` has ``feature``: absent when the kit lists it in ``absent_features``; a failure
    naming what to do when the kit leaves out a member the feature needs without declaring the feature."""
    spec = FEATURES_BY_NAME[feature]
    if feature in declared_absent(kit, spec.suite):
        absent(feature, "the kit lists it in absent_features")
    missing = [member for member in spec.members if not hasattr(kit, member)]
    if missing:
        pytest.fail(f"the kit has no {', '.join(missing)}, which {feature!r} needs; if the implementation lacks "
                    f"the feature, list {feature!r} in the kit's absent_features")


@contextmanager
def refused_keyword(kit: object, feature: str, keyword: str) -> Iterator[None]:
    """Run a call that passes ``keyword=`` for ``feature``: absent when the kit declares the feature absent, or
    when the implementation raises ``TypeError: ... unexpected keyword argument 'keyword'`` (it has no such
    parameter). Any other exception, a ``TypeError`` about something else included, is the test's."""
    require(kit, feature)
    try:
        yield
    except TypeError as exc:
        if f"unexpected keyword argument '{keyword}'" in str(exc):
            absent(feature, f"TypeError: {exc}")
        raise
