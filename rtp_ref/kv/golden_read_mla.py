"""Golden files of the MLA write (``concat_and_cache_mla``, rtp_ref.kv.golden) read back: their keys, the layout
their metadata describes, and where in that layout a differing cache byte lies (``locate_mla``).

The layout is rebuilt from the file's own metadata (fp8 format, conversion mode, resolved flags), so a file
written for an out-of-tree platform table reads the same.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rtp_ref.errors import RtpRefError
from rtp_ref.kv.fields import Placement
from rtp_ref.kv.golden import GoldenContract
from rtp_ref.kv.golden_file import (
    GoldenFile,
    GoldenForm,
    Mismatch,
    check_tensors,
    conversion_mode_of,
    flags_of,
    fp8_format_of,
    input_dtype,
    integer,
    one_of,
    where_of,
)
from rtp_ref.kv.layout_records import MLA_LAYOUT_NAMES
from rtp_ref.kv.layouts import MlaLayout, build_layout
from rtp_ref.kv.op_names import MLA_OP

#: Tensor keys of an MLA golden file, in the order docs/layouts.md lists them.
TENSOR_KEYS = ("kv_c", "k_pe", "slot_mapping", "scale", "kv_cache_before", "kv_cache_expected")
#: Metadata keys of an MLA golden file (``golden_format`` 1), in the order docs/layouts.md lists them.
METADATA_KEYS = (
    "golden_format",
    "rtp_ref_version",
    "layout",
    "platform",
    "platform_sha256",
    "flags",
    "fp8_format",
    "conversion_mode",
    "kv_lora_rank",
    "rope_dim",
    "input_dtype",
    "bytes_per_token",
    "block_size",
    "num_blocks",
    "num_tokens",
    "seed",
)


@dataclass(frozen=True)
class ByteMismatch:
    """One cache byte that differs from ``kv_cache_expected``, located in the layout.

    ``block``/``offset``: the byte's block and its offset in the block; ``row``: the token row of the
    block whose entry holds it; ``field``/``field_byte``: the layout field and the byte within it;
    ``token``: the index in ``slot_mapping`` that writes that row (None: no token of the call does).
    """

    block: int
    offset: int
    row: int
    field: str
    field_byte: int
    token: int | None
    expected: int
    got: int

    @property
    def differing_bytes(self) -> int:
        """One: an entry per byte."""
        return 1

    def describe(self, writer: str) -> str:
        """One line: where the byte is, the stored value, and the value ``writer`` (who wrote ``got``) wrote."""
        token = f"token {self.token}" if self.token is not None else "no token writes this row"
        return (
            f"block {self.block} byte {self.offset}: row {self.row} ({token}), field {self.field} byte "
            f"{self.field_byte}: kv_cache_expected has 0x{self.expected:02x}, {writer} wrote 0x{self.got:02x}"
        )


def _layout(where: str, metadata: dict[str, str]) -> MlaLayout:
    name = one_of(where, metadata, "layout", list(MLA_LAYOUT_NAMES))
    fmt = fp8_format_of(where, metadata, "fp8_format")
    mode = conversion_mode_of(where, metadata)
    flags = flags_of(where, metadata)
    try:
        layout = build_layout(
            name,
            kv_lora_rank=integer(where, metadata, "kv_lora_rank", 1),
            rope_dim=integer(where, metadata, "rope_dim", 1),
            flags=flags,
            element_format=fmt,
            conversion_mode=mode,
        )
    except RtpRefError as exc:
        raise RtpRefError(f"{where}: the metadata does not describe a layout: {exc}") from exc
    stated = integer(where, metadata, "bytes_per_token", 1)
    if stated != layout.bytes_per_token:
        raise RtpRefError(
            f"{where}: metadata 'bytes_per_token' is {stated}, but layout {name} with R={layout.kv_lora_rank} "
            f"P={layout.rope_dim} and these flags has {layout.bytes_per_token}; valid: {layout.bytes_per_token}"
        )
    return layout


def read_mla(path: str, tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> GoldenFile:
    """An MLA golden file whose key sets are checked: its metadata describes a layout whose bytes per token
    match, and its tensors have the dtypes and shapes that metadata implies."""
    where = where_of(path)
    layout = _layout(where, metadata)
    dtype = input_dtype(where, metadata)
    tokens = integer(where, metadata, "num_tokens", 1)
    block_size = integer(where, metadata, "block_size", 1)
    num_blocks = integer(where, metadata, "num_blocks", 1)
    integer(where, metadata, "seed", 0)
    cache = (layout.cache_dtype(dtype), layout.cache_shape(num_blocks, block_size))
    check_tensors(where, tensors, {
        "kv_c": (dtype, (tokens, layout.kv_lora_rank)),
        "k_pe": (dtype, (tokens, layout.rope_dim)),
        "slot_mapping": (torch.int64, (tokens,)),
        "scale": (torch.float32, (1,)),
        "kv_cache_before": cache,
        "kv_cache_expected": cache,
    })
    summary = (f"{layout.name} on {metadata['platform']} ({metadata['fp8_format']}, {metadata['conversion_mode']}), "
               f"R={layout.kv_lora_rank} P={layout.rope_dim}, {metadata['input_dtype']} inputs, {tokens} tokens "
               f"into {num_blocks} blocks x {block_size}")
    return GoldenFile(path, tensors, metadata, MLA_FORM, layout.name, layout,
                      GoldenContract(layout.element_format, layout.conversion_mode, layout.flags), block_size,
                      num_blocks, ("kv_cache",), {"kv_cache_dtype": layout.name}, summary)


def _locate_byte(golden: GoldenFile, layout: MlaLayout, index: int, expected: int, got: int) -> ByteMismatch:
    block_size = golden.block_size
    block, offset = divmod(index, layout.bytes_per_block(block_size))
    data = layout.data_bytes_per_token
    if offset < block_size * data:
        row, byte = divmod(offset, data)
        fields = layout.placed(Placement.PER_TOKEN)
    else:
        row, byte = divmod(offset - block_size * data, layout.trailing_bytes_per_token)
        fields = layout.placed(Placement.BLOCK_TRAILING)
    field = next(f for f in fields if f.offset <= byte < f.end)
    slots = golden.tensors["slot_mapping"].tolist()
    slot = block * block_size + row
    token = slots.index(slot) if slot in slots else None
    return ByteMismatch(block, offset, row, field.name, byte - field.offset, token, expected, got)


def locate_mla(golden: GoldenFile, positions: torch.Tensor, want: torch.Tensor, got: torch.Tensor,
               before: torch.Tensor) -> tuple[Mismatch, ...]:
    """Each differing byte at ``positions`` of the cache, by block, row, field and token."""
    layout = golden.layout
    assert isinstance(layout, MlaLayout), "an MLA golden file has an MLA layout"
    return tuple(_locate_byte(golden, layout, i, int(want[i]), int(got[i])) for i in positions.tolist())


MLA_FORM = GoldenForm(MLA_OP, TENSOR_KEYS, METADATA_KEYS, read_mla)
