"""The MLA reader's contract search (rtp_ref.cases.read_diagnosis), run by the engine on real readers: one that
takes its tile scales as bf16 (FlashMLA SM90's reading) is named, with the NaN it stores when that is the hardware's
0x7FFF (a NaN the NaN policy accepts, so a reader doing only that passes); one that takes another tile's scale matches
no known reading. The readers are written from their description."""

from __future__ import annotations

import torch

from rtp_ref.cases.gather_cases import gather_specs
from rtp_ref.certify.engine import CaseResult, Subject, run_case
from rtp_ref.contract import WriteContract
from rtp_ref.kv.gather import gather_and_maybe_dequant_cache
from rtp_ref.kv.layouts import MlaLayout
from rtp_ref.ops import MLA_GATHER_OP
from rtp_ref.platform import load_platform
from tests.mutants.gather_mutants import GatherMutant, NeighbourTileScale, with_tile_scales

PLATFORM = load_platform("cpu")
#: tile scales that are not powers of two (amax / divisor), so that a reader rounding them to bf16 shows
CONTRACT = WriteContract.for_platform(PLATFORM, {"ds_mla_scale_rule": "amax_div"})


class Bf16TileScales(GatherMutant):
    """Rounds each fp32 tile scale to bf16 before multiplying (a reader that keeps its scales in bf16)."""

    name = "gather-bf16-tile-scales"
    kv_cache_dtypes = ("fp8_ds_mla",)

    def read(self, layout: MlaLayout, kv_cache: torch.Tensor, dst: torch.Tensor, block_table: torch.Tensor,
             cu_seq_lens: torch.Tensor, scale: torch.Tensor, seq_starts: torch.Tensor | None) -> None:
        def rounded(raw: torch.Tensor) -> torch.Tensor:  # fp32 scales through bf16 and back
            return raw.view(torch.float32).to(torch.bfloat16).to(torch.float32).view(torch.uint8)

        gather_and_maybe_dequant_cache(layout, with_tile_scales(layout, kv_cache, rounded), dst, block_table,
                                       cu_seq_lens, scale, seq_starts)


class HardwareNan(GatherMutant):
    """The contract's values, but every NaN written as 0x7FFF (what cvt.rn.bf16.f32 gives for a NaN)."""

    name = "gather-hardware-nan"
    kv_cache_dtypes = ("fp8_ds_mla", "fp8")

    def read(self, layout: MlaLayout, kv_cache: torch.Tensor, dst: torch.Tensor, block_table: torch.Tensor,
             cu_seq_lens: torch.Tensor, scale: torch.Tensor, seq_starts: torch.Tensor | None) -> None:
        gather_and_maybe_dequant_cache(layout, kv_cache, dst, block_table, cu_seq_lens, scale, seq_starts)
        bits = dst.view(torch.int16)
        bits[torch.isnan(dst)] = 0x7FFF


class Bf16TileScalesHardwareNan(Bf16TileScales):
    """Bf16 tile scales, and every NaN written as 0x7FFF."""

    name = "gather-bf16-tile-scales-hardware-nan"

    def read(self, layout: MlaLayout, kv_cache: torch.Tensor, dst: torch.Tensor, block_table: torch.Tensor,
             cu_seq_lens: torch.Tensor, scale: torch.Tensor, seq_starts: torch.Tensor | None) -> None:
        super().read(layout, kv_cache, dst, block_table, cu_seq_lens, scale, seq_starts)
        dst.view(torch.int16)[torch.isnan(dst)] = 0x7FFF


def _run(kernel: object, variant: str, kind: str) -> CaseResult:
    key = next(s for s in gather_specs(variant) if s.kind == kind and s.out == "bf16" and s.tokens > 1)
    return run_case(Subject("r", kernel, MLA_GATHER_OP, "cpu", "native"), key, CONTRACT, PLATFORM, None)


def _diagnosis(kernel: object, variant: str, kind: str) -> str:
    result = _run(kernel, variant, kind)
    assert result.judgement.failed
    return str(result.record.get("diagnosis"))


def test_a_reader_of_bf16_tile_scales_is_named() -> None:
    assert _diagnosis(Bf16TileScales().bind(CONTRACT), "fp8_ds_mla", "random") == (
        "the reader follows tile scales read as bf16, rounded to nearest even, NaN as 0x7fc0; the contract is tile "
        "scales as stored (fp32), rounded to nearest even, NaN as 0x7fc0")


def test_a_reader_writing_the_hardware_nan_passes_and_its_nan_is_named_when_it_fails() -> None:
    assert _run(HardwareNan().bind(CONTRACT), "fp8", "edge").judgement.outcome == "passed"
    text = _diagnosis(Bf16TileScalesHardwareNan().bind(CONTRACT), "fp8_ds_mla", "edge")
    assert text.startswith("the reader follows tile scales read as bf16, rounded to nearest even, NaN as 0x7fff"), \
        text


def test_a_reader_taking_another_tiles_scale_matches_no_known_reading() -> None:
    text = _diagnosis(NeighbourTileScale().bind(CONTRACT), "fp8_ds_mla", "random")
    assert text.startswith("the rows match no known reading (tried 12)"), text
