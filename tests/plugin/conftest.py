"""Shared by the plugin tests: their in-process inner runs must not leave a hypothesis profile behind."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _keep_hypothesis_profile() -> Iterator[None]:
    """An in-process inner run that activates the plugin loads ``ci`` or ``dev`` into hypothesis's global
    settings, which this outer run shares: its own profile (``thorough``, say) is loaded back afterwards."""
    from hypothesis import settings

    name = settings.get_current_profile_name()
    yield
    settings.load_profile(name)
