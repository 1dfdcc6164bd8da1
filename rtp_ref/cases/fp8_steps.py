"""How far a decoded fp8 value is from the exact quotient, in steps of the format's grid (the unit of the
``numerics.error_bound`` check of every op)."""

from __future__ import annotations

import functools

import torch

from rtp_ref.fp8 import decode_table


@functools.cache
def _grid(fmt_name: str) -> torch.Tensor:
    table = decode_table(fmt_name).double()
    grid: torch.Tensor = torch.unique(table[torch.isfinite(table)])  # sorted; +0 and -0 collapse
    return grid


def step_errors(q: torch.Tensor, v: torch.Tensor, fmt_name: str) -> torch.Tensor:
    """|q - v| in units of the fp8 grid spacing of format ``fmt_name`` around v (float64)."""
    grid = _grid(fmt_name)
    idx = torch.searchsorted(grid, v.contiguous(), right=True).clamp(1, grid.numel() - 1)
    spacing = grid[idx] - grid[idx - 1]
    return (q - v).abs() / spacing
