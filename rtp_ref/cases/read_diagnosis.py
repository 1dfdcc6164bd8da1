"""How an MLA reader's output was computed, when it is not the contract's: the contract-fingerprint search of
``gather_and_maybe_dequant_cache``, like rtp_ref.cases.diagnosis for the MLA write.

The contract decodes each fp8 value, multiplies it by its stored scale in fp32 and rounds the product once to
``dst``'s dtype, to nearest even, a NaN as the dtype's canonical NaN (rtp_ref.kv.gather). The alternatives are the
ways production readers compute it: a tile scale read as bf16 or as an e8m0 power of two rounded toward zero (the
platform tables' reader conventions: FlashMLA SM90 and SM100), the product rounded toward zero, and a NaN stored as
the hardware conversion's 0x7FFF (``cvt.rn.bf16.f32`` / ``cvt.rn.f16.f32`` of a NaN on NVIDIA GPUs). Every
combination is tried on every row read, the contract's first; the first that reproduces the reader's rows bit for
bit is named.
"""

from __future__ import annotations

import itertools

import torch

from rtp_ref.cases.gather_cases import GatherCase
from rtp_ref.kv.cache import gather_entries
from rtp_ref.kv.entries import decode_entries
from rtp_ref.kv.fields import ELEMENT_FP32, Source
from rtp_ref.kv.gather import CANONICAL_NAN, read16
from rtp_ref.kv.reader_convention import TILE_SCALE_READS
from rtp_ref.kv.reader_view import scale_as_read

_BITS = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32}
#: the NaN a GPU's fp32 -> 16-bit conversion writes for any NaN
HARDWARE_NAN16 = 0x7FFF


def _entries(case: GatherCase, tile_read: str) -> torch.Tensor:
    """The entries the case's rows read, their fp32 tile scales as ``tile_read`` takes them."""
    lay = case.layout
    entries = gather_entries(lay, case.cache_view(case.cache_storage.cpu()), case.read_slots()).clone()
    scale_name = lay.value_field(Source.KV_C).scale_field
    f = lay.field(scale_name) if scale_name else None
    if tile_read != TILE_SCALE_READS[0] and f is not None and f.tile_scale is not None and f.element == ELEMENT_FP32:
        at = lay.entry_offset(f)
        stored = entries[:, at: at + f.size].contiguous().view(torch.float32)
        entries[:, at: at + f.size] = scale_as_read(stored, tile_read).view(torch.uint8)
    return entries


def rows_under(case: GatherCase, tile_read: str, toward_zero: bool, hardware_nan: bool) -> torch.Tensor:
    """The bits of the rows a reader following one alternative writes: ``[rows, R + P]`` integers."""
    kv_c, k_pe = decode_entries(case.layout, _entries(case, tile_read), case.scale.cpu(),
                                read16(case.cache_view(case.cache_storage.cpu())))
    values = torch.cat([kv_c, k_pe], dim=1)
    dtype = case.out_dtype
    bits = values.to(dtype).view(_BITS[dtype]).clone()
    if toward_zero and dtype != torch.float32:
        rounded_up = values.to(dtype).float().abs() > values.abs()  # False for NaN and inf
        bits[rounded_up] -= 1  # one step toward zero: sign and magnitude bits
    nan = HARDWARE_NAN16 if hardware_nan and dtype != torch.float32 else CANONICAL_NAN[dtype]
    bits[torch.isnan(values)] = nan
    return bits


def _words(tile_read: str, toward_zero: bool, hardware_nan: bool, dtype: torch.dtype) -> str:
    nan = HARDWARE_NAN16 if hardware_nan and dtype != torch.float32 else CANONICAL_NAN[dtype]
    scales = "as stored (fp32)" if tile_read == TILE_SCALE_READS[0] else f"read as {tile_read}"
    return (f"tile scales {scales}, rounded {'toward zero' if toward_zero else 'to nearest even'}, NaN as "
            f"0x{nan:x}")


def diagnose_read(case: GatherCase, dst_after: torch.Tensor) -> str:
    """Which alternative the reader's rows (``dst_after``: the output storage after the call, CPU) follow: one line
    naming it and the contract, or that none matches."""
    got = case.dst_view(dst_after)[: case.spec.tokens].contiguous().view(_BITS[case.out_dtype])
    contract = _words(TILE_SCALE_READS[0], False, False, case.out_dtype)
    tried = 0
    for tile_read, toward_zero, hardware_nan in itertools.product(TILE_SCALE_READS, (False, True), (False, True)):
        tried += 1
        if torch.equal(rows_under(case, tile_read, toward_zero, hardware_nan), got):
            if (tile_read, toward_zero, hardware_nan) == (TILE_SCALE_READS[0], False, False):
                return "the rows are the contract's: the bytes are wrong elsewhere"
            return (f"the reader follows {_words(tile_read, toward_zero, hardware_nan, case.out_dtype)}; the contract "
                    f"is {contract}")
    return f"the rows match no known reading (tried {tried}); the contract is {contract}"
