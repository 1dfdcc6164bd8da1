"""The ``torch-eager`` built-in kernel: the cache write as a user first writes it, in plain torch ops.

Tile amax, divide, cast with torch's own ``.to(torch.float8_*)``, concatenate, scatter into the cache.
It is deliberately naive and is the baseline the suite measures deviations against:

* no clamp before the cast: torch's cast saturates on some builds (CPU, torch 2.13: 1000 -> 448)
  and not on others (CUDA: 1000 -> NaN), so the same code meets the contract on one device and
  breaks it on another; the platform tables list the CUDA behaviour as a known deviation;
* the power-of-two scale is ``exp2(ceil(log2(s)))`` in float32, which can round ``log2`` of a value
  just above a power of two down to the integer and so pick a scale one binade too small;
* E2M1 (torch has no cast to it) the way sglang's torch reference rounds: the magnitude clamped to 6, divided by
  the grid step of its binade, ``torch.round`` (half to even), times the step; the scale is torch's own e4m3 cast of
  the clamped quotient. It writes the e4m3 scales of nearest-even rounding only (``supports`` names the others).

Every value field is written as its layout's field table says (per token: copied, per-tensor fp8, tiled fp8 or
E2M1 with its scale field), so every per-token layout is written, a tile-scaled rope included.

``conversion_path`` is ``"torch"``: neither the hardware nor the rtp-ref software conversion.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Literal

import torch

from rtp_ref.contract import WriteContract
from rtp_ref.fp8.scales import ScaleRule
from rtp_ref.kernels.call_signature import Launch
from rtp_ref.kernels.write_plan import PlanLimits, PlannedKernel, ValueMode, WritePlan
from rtp_ref.kv.fields import ELEMENT_UE8M0, Field, Placement, Source, TileScale
from rtp_ref.kv.layouts import MlaLayout
from rtp_ref.platform import MLA_LAYOUT_NAMES


def _quantize(x: torch.Tensor, scale: torch.Tensor, fp8: torch.dtype) -> torch.Tensor:
    return (x.float() / scale).to(fp8).view(torch.uint8)


def _tiles(x: torch.Tensor, spec: TileScale, n_tiles: int) -> torch.Tensor:
    """``x`` [n, count] as float32 tiles ``[n, n_tiles, tile]``, the last padded with zeros."""
    n, count = x.shape
    padded = torch.nn.functional.pad(x.float(), (0, n_tiles * spec.tile - count))
    return padded.view(n, n_tiles, spec.tile)


def _tiled(x: torch.Tensor, spec: TileScale, n_tiles: int, fp8: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(fp8 bytes [n, count], float32 scales [n, n_tiles]) of rows ``x``: ``x / s``, or under a rule of reciprocal
    multiplies ``x * (1 / s)`` with ``s = amax * (1 / divisor)``, a zero scale storing zeros."""
    tiles = _tiles(x, spec, n_tiles)
    amax = tiles.abs().amax(dim=-1)
    if spec.reciprocal_amax:
        s = torch.clamp(amax * torch.tensor(1.0 / spec.divisor, dtype=torch.float32, device=amax.device),
                        min=spec.floor)
    else:
        s = torch.clamp(amax / spec.divisor, min=spec.floor)
    if spec.rule is ScaleRule.POW2_CEIL:
        s = torch.exp2(torch.ceil(torch.log2(s)))
    if spec.reciprocal_payload:
        quotient = tiles * (1.0 / s).unsqueeze(-1)
        codes = torch.where((s == 0).unsqueeze(-1), 0, quotient.to(fp8).view(torch.uint8))
    else:
        codes = (tiles / s.unsqueeze(-1)).to(fp8).view(torch.uint8)
    return codes.reshape(x.shape[0], n_tiles * spec.tile)[:, : x.shape[1]], s


def _e2m1_codes(q: torch.Tensor) -> torch.Tensor:
    """E2M1 codes (uint8) of float32 quotients ``q``: nearest, ties to even, saturating at 6, the sign kept."""
    magnitude = q.abs().clamp(max=6.0)
    step = torch.where(magnitude < 2.0, 0.5, torch.where(magnitude < 4.0, 1.0, 2.0))
    rounded = torch.round(magnitude / step) * step
    # 0, 0.5, 1, 1.5 -> codes 0..3; 2, 3 -> 4, 5; 4, 6 -> 6, 7
    code = torch.where(rounded < 2.0, rounded * 2, torch.where(rounded < 4.0, rounded + 2, rounded / 2 + 4))
    return code.to(torch.uint8) | (torch.signbit(q).to(torch.uint8) << 3)


#: the e4m3fn NaN an FP4 layout's tile scale holds for a tile with NaN or inf (its only NaN of positive sign)
E4M3_NAN = 0x7F


def _fp4(x: torch.Tensor, spec: TileScale, n_tiles: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(packed E2M1 bytes [n, count / 2], e4m3 scale bytes [n, n_tiles]) of rows ``x`` under ``spec``'s FP4
    conventions (the layout requires ``count`` whole tiles of an even size)."""
    conventions = spec.fp4
    assert conventions is not None and conventions.scale.clamp is not None, "an FP4 tile scale with a clamp"
    tiles = _tiles(x, spec, n_tiles)
    amax = tiles.abs().amax(dim=-1)
    quotient = amax * (1.0 / 6.0) if conventions.scale.division == "mul_one_sixth" else amax / 6.0
    low, high = conventions.scale.clamp
    target = quotient.clamp(low, high)
    scale = target.to(torch.float8_e4m3fn)
    if conventions.scale.rounding == "bump":  # one code up where nearest-even rounding went below the target
        bits = scale.view(torch.uint8)
        scale = (bits + ((scale.float() < target) & (bits < 0x7E)).to(torch.uint8)).view(torch.float8_e4m3fn)
    s = scale.float().unsqueeze(-1)
    q = tiles / s if conventions.payload == "ieee_div" else tiles * (1.0 / s)
    q = torch.where(s == 0, tiles * 0.0, q)  # a scale with no floor can be 0: zeros of the values' signs
    if conventions.negative_zero == "positive":
        q = q + 0.0
    codes = _e2m1_codes(q)
    scale_bytes = scale.view(torch.uint8)
    if spec.non_finite_tile == "nan_scale_zero_codes":  # a tile holding NaN or inf: e4m3's NaN, every code 0
        poisoned = ~torch.isfinite(tiles).all(dim=-1)
        codes = codes.masked_fill(poisoned.unsqueeze(-1), 0)
        scale_bytes = scale_bytes.masked_fill(poisoned, E4M3_NAN)
    codes = codes.reshape(x.shape[0], n_tiles * spec.tile)[:, : x.shape[1]]
    return codes[:, 0::2] | (codes[:, 1::2] << 4), scale_bytes


class TorchEagerKernel(PlannedKernel):
    """``concat_and_cache_mla`` in eager torch ops, on CPU and CUDA (module doc)."""

    name = "torch-eager"
    kv_cache_dtypes: Collection[str] = MLA_LAYOUT_NAMES
    devices: Collection[str] = ("cpu", "cuda")
    conversion_path: Literal["torch"] = "torch"
    plan_limits = PlanLimits(tiled_rope=True, fp4=True, unscaled=True, scale_order=True, zero_pad=True,
                             reciprocal=True)

    def __init__(self, contract: WriteContract | None = None) -> None:
        # its boolean masking of padding slots reads the slots on the host: it validates there as well
        self._init_call_path("host")
        self.contract = contract

    def bind(self, contract: WriteContract) -> TorchEagerKernel:
        """This kernel following ``contract`` (its fp8 dtype, scale rule, divisor and floor)."""
        return TorchEagerKernel(contract)

    def supports(self, layout: MlaLayout) -> str | None:
        """None, or why it does not write ``layout``: an FP4 scale other than e4m3 by nearest-even rounding (or
        bumped one code up)."""
        for f in layout.fields:
            fp4 = f.tile_scale.fp4 if f.tile_scale is not None else None
            if fp4 is not None and (fp4.scale.element.value != "e4m3fn" or fp4.scale.rounding.value not in ("rne",
                                                                                                         "bump")):
                return (f"torch-eager writes FP4 scales as e4m3 rounded to nearest even (or bumped), not "
                        f"{fp4.scale.element.value} by {fp4.scale.rounding.value} ({f.name} of {layout.name})")
        return None

    def _prepare(self, plan: WritePlan, contract: WriteContract, kv_c: torch.Tensor, k_pe: torch.Tensor,
                 kv_cache: torch.Tensor, slot_mapping: torch.Tensor, scale: torch.Tensor,
                 flags: torch.Tensor) -> Launch:
        def launch(kv_c: torch.Tensor, k_pe: torch.Tensor, kv_cache: torch.Tensor, slots: torch.Tensor,
                   scale: torch.Tensor) -> None:
            write_eager(plan, contract, kv_c, k_pe, kv_cache, slots, scale)
            self.launch_count += 1

        return launch


def _field_bytes(layout: MlaLayout, f: Field, mode: ValueMode, x: torch.Tensor, scale: torch.Tensor,
                 fp8: torch.dtype) -> list[tuple[Field, torch.Tensor]]:
    """The bytes of value field ``f`` and, for a tile-scaled one, of its scale field: ``(field, bytes [n, size])``."""
    if mode is ValueMode.COPY16:
        return [(f, x.contiguous().view(torch.uint8))]
    if mode is ValueMode.PER_TENSOR:
        return [(f, _quantize(x, scale, fp8))]
    if mode is ValueMode.UNSCALED:
        return [(f, x.float().to(fp8).view(torch.uint8))]
    scale_field = layout.field(f.scale_field or "")
    spec = scale_field.tile_scale
    assert spec is not None, f"{f.name}'s scale is a tile scale"
    if mode is ValueMode.FP4:
        codes, scale_bytes = _fp4(x, spec, scale_field.count)
        return [(f, codes), (scale_field, scale_field.to_stored_order(scale_bytes))]
    codes, s = _tiled(x, spec, scale_field.count, fp8)
    if scale_field.element == ELEMENT_UE8M0:
        scale_bytes = (torch.log2(s) + 127).clamp(0, 255).to(torch.uint8)
    else:
        scale_bytes = s.contiguous().view(torch.uint8)
    return [(f, codes), (scale_field, scale_field.to_stored_order(scale_bytes))]


def write_eager(plan: WritePlan, contract: WriteContract, kv_c: torch.Tensor, k_pe: torch.Tensor,
                kv_cache: torch.Tensor, slot_mapping: torch.Tensor, scale: torch.Tensor) -> None:
    """torch-eager's write of validated arguments (no state: ``torch.compile`` takes it as it is)."""
    fp8 = getattr(torch, contract.element_format.torch_dtype_name)
    layout = plan.layout
    tokens = slot_mapping.shape[0]
    keep = slot_mapping >= 0
    slots = slot_mapping[keep]
    values = {Source.KV_C: kv_c[:tokens][keep], Source.K_PE: k_pe[:tokens][keep]}
    modes = {Source.KV_C: plan.nope_mode, Source.K_PE: plan.rope_mode}
    pieces = [piece for source, x in values.items()
              for piece in _field_bytes(layout, layout.value_field(source), modes[source], x, scale, fp8)]
    pieces += [(f, torch.zeros(slots.shape[0], f.size, dtype=torch.uint8, device=kv_cache.device))
               for f in layout.fields if f.source is Source.ZERO]

    # Each block as one row of bytes (its stride honoured), then an index_put per field.
    num_blocks, block_size = kv_cache.shape[0], kv_cache.shape[1]
    raw = kv_cache.view(torch.uint8)
    # A plain view where the cache is contiguous: under torch.compile an index_put into the as_strided
    # view did not reach the cache (tests/bench/test_bench.py's compiled-baseline test fails without it).
    if kv_cache.is_contiguous():
        blocks = raw.view(num_blocks, -1)
    else:
        stride = kv_cache.stride(0) * kv_cache.element_size()
        blocks = raw.as_strided((num_blocks, block_size * layout.bytes_per_token), (stride, 1))
    block, offset = (slots // block_size).unsqueeze(1), (slots % block_size).unsqueeze(1)
    for f, data in pieces:
        cols = torch.arange(f.offset, f.offset + data.shape[1], device=kv_cache.device)
        if f.placement is Placement.BLOCK_TRAILING:
            blocks[block, block_size * plan.data_bytes + offset * plan.trailing_bytes + cols] = data
        else:
            blocks[block, offset * plan.data_bytes + cols] = data
