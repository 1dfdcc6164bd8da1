"""How the test suite deals its long tests out to xdist workers; torch-free, so a small inner pytest run
(tests/test_hygiene.py) imports it without paying for torch in each of its processes."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def long_tests_apart(items: list[T], rank: Callable[[T], int], first: int) -> list[T]:
    """``items`` with the long ones (``rank`` below ``first``) in rank order, each followed by one of the others,
    then the rest of the others in their order: dealt out two at a time, each worker starts one long test."""
    ranked = sorted(items, key=rank)  # stable: the others keep pytest's order
    long = [item for item in ranked if rank(item) < first]
    others = ranked[len(long):]
    paired = [x for pair in zip(long, others, strict=False) for x in pair]  # the shorter list ends the pairs
    return paired + long[len(others):] + others[len(long):]
