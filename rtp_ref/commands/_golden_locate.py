"""Which element of which token a differing byte of a golden file's caches belongs to, for every write op.

An MLA file's bytes are placed in its layout by rtp_ref.kv.golden_read_mla. The MHA and indexer files' are named by
the locator the conformance cases use (rtp_ref.cases.storage): a storage map of one block of each cache (every
block is laid out alike), whose fields are the views a kernel is given (an HND cache through its permutation) and
the layout's own field table, so that the map never repeats the layout arithmetic; each listed element shows its
expected value and what the writer left, decoded, or that the writer did not write it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from rtp_ref.cases.mha_indexer_cases import nvfp4_field_places
from rtp_ref.cases.storage import FieldPlaces, StorageMap, field_places, slot_namer, value_text
from rtp_ref.fp8.elements import ElementTraits, dtype_element
from rtp_ref.kv.fields import ELEMENT_INPUT16, Field, Placement, field_element
from rtp_ref.kv.golden import GOLDEN_INPUT_DTYPES
from rtp_ref.kv.golden_file import LISTED_MISMATCHES, GoldenFile, Mismatch
from rtp_ref.kv.golden_read_mla import locate_mla
from rtp_ref.kv.indexer import IndexerLayout
from rtp_ref.kv.mha_paged import MhaPagedLayout
from rtp_ref.kv.nvfp4_page import ScaleOrder, order_of
from rtp_ref.ops import INDEXER_OP, MHA_OP, MLA_OP

#: names the places of the first differing bytes (``positions``: ascending, over the caches' bytes one after the
#: other in ``GoldenFile.caches`` order), given the expected, the compared and the initial caches' bytes
Locate = Callable[[GoldenFile, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], tuple[Mismatch, ...]]


@dataclass(frozen=True)
class ElementMismatch:
    """One cache element holding other bytes than the expected cache, named as the conformance cases name it.

    ``cache``/``byte``: the cache tensor and the element's first byte in it, as the file stores it; ``slot``,
    ``token`` (the index in ``slot_mapping`` that writes the slot; None: no token does), ``field`` and ``element``
    (``token 3 (slot 17) key head 1 [5]``) say what it is; ``expected`` and ``got`` are its value and bytes in the
    expected cache and in the compared one; ``written`` is False where the writer left it as it was before the
    call; ``differing_bytes`` counts its bytes that differ.
    """

    cache: str
    byte: int
    slot: int
    token: int | None
    field: str
    element: str
    expected: str
    got: str
    written: bool
    differing_bytes: int

    def describe(self, writer: str) -> str:
        """``value_cache byte 25733: token 1 (slot 25) value head 1 [5]: value_cache_expected has -1 (0xb8), the
        reference wrote -1.125 (0xb9)``."""
        left = f"{writer} wrote {self.got}" if self.written else f"{writer} did not write it (still {self.got})"
        return f"{self.cache} byte {self.byte}: {self.element}: {self.cache}_expected has {self.expected}, {left}"


def _element(golden: GoldenFile, f: Field) -> ElementTraits:
    """The element format of field ``f``'s values: the inputs' own type (``auto``), or the named format."""
    if f.element == ELEMENT_INPUT16:
        return dtype_element(GOLDEN_INPUT_DTYPES[golden.metadata["input_dtype"]])
    return field_element(f.element)


#: the fields of one block of a cache: (the golden file, the cache's name, the kernel's view of a one-block cache
#: over the layer, the layer)
FieldsOf = Callable[[GoldenFile, str, torch.Tensor, torch.Tensor], list[FieldPlaces]]


def _mha_fields(golden: GoldenFile, cache: str, view: torch.Tensor, layer: torch.Tensor) -> list[FieldPlaces]:
    """The cache's one value field (``key`` or ``value``): every head of every row, through the kernel's view."""
    layout = golden.layout
    assert isinstance(layout, MhaPagedLayout), "an MHA golden file has an MHA layout"
    if layout.fp4 is not None:  # nvfp4: the side's codes and scales, where its page puts them
        order = layout.v_scale_order if cache == "value_cache" else ScaleOrder.LINEAR
        page = layout.page(view.shape[1], order_of(view))
        return nvfp4_field_places(cache.removesuffix("_cache"), view, layer, page, order)
    f = next(f for f in layout.fields if f.area == cache and f.placement is Placement.PER_TOKEN)
    return [field_places(f.name, view, layer, _element(golden, f), 2, ("head",))]


def _indexer_fields(golden: GoldenFile, cache: str, view: torch.Tensor, layer: torch.Tensor) -> list[FieldPlaces]:
    """The indexer cache's fields where its layout places them: a block holds every token's values, then every
    token's scales."""
    layout = golden.layout
    assert isinstance(layout, IndexerLayout), "an indexer golden file has an indexer layout"
    blocks, rows = view.reshape(view.shape[0], -1), view.shape[1]
    data, trailing = layout.data_bytes_per_token, layout.trailing_bytes_per_token
    areas = {Placement.PER_TOKEN: blocks[:, : rows * data].view(-1, rows, data),
             Placement.BLOCK_TRAILING: blocks[:, rows * data: rows * (data + trailing)].view(-1, rows, trailing)}
    return [field_places(f.name, areas[f.placement][:, :, f.offset: f.end], layer, _element(golden, f), 2)
            for f in layout.fields if f.placement in areas]


@dataclass(frozen=True)
class _CacheMap:
    """One cache of a file: where its bytes start among the caches' bytes, the bytes of one of its blocks, and those
    bytes' fields (every block is laid out alike, and a stored cache's first dimension is its block)."""

    name: str
    origin: int
    size: int
    block_bytes: int
    block: StorageMap


def _cache_maps(golden: GoldenFile, fields_of: FieldsOf) -> list[_CacheMap]:
    """The file's caches, one after the other as stored, each with a map of one block as the cases' locator reads a
    case storage (a map of a whole cache would cost 24 bytes a cache byte)."""
    maps, origin = [], 0
    for cache in golden.caches:
        stored = golden.tensors[f"{cache}_expected"]
        size = stored.numel() * stored.element_size()
        block_bytes = size // golden.num_blocks
        layer = torch.empty(block_bytes, dtype=torch.uint8)
        one_block = golden.cache_view(layer.view(stored.dtype).view(1, *stored.shape[1:]))
        places = StorageMap(block_bytes, fields_of(golden, cache, one_block, layer), [(cache, 0, block_bytes)],
                            lambda row: f"row {row}")
        maps.append(_CacheMap(cache, origin, size, block_bytes, places))
        origin += size
    return maps


def _locator(fields_of: FieldsOf) -> Locate:
    def locate(golden: GoldenFile, positions: torch.Tensor, want: torch.Tensor, got: torch.Tensor,
               before: torch.Tensor) -> tuple[Mismatch, ...]:
        """The first ``LISTED_MISMATCHES`` elements holding a differing byte at ``positions``."""
        if positions.numel() == 0:
            return ()
        maps = _cache_maps(golden, fields_of)
        slot_name = slot_namer(golden.tensors["slot_mapping"])
        writer = {int(s): t for t, s in enumerate(golden.tensors["slot_mapping"].tolist()) if s >= 0}
        out: list[Mismatch] = []
        seen: set[int] = set()
        for pos in positions.tolist():
            cache = next(m for m in maps if m.origin <= pos < m.origin + m.size)
            block, within = divmod(pos - cache.origin, cache.block_bytes)
            place = cache.block.place(within)
            assert place is not None, "every byte of these caches is in a field"
            at = cache.origin + block * cache.block_bytes + place.positions
            if int(at[0]) in seen:
                continue
            seen.add(int(at[0]))
            slot = block * golden.block_size + place.slot
            element = place.field.element
            out.append(ElementMismatch(
                cache.name, int(at[0]) - cache.origin, slot, writer.get(slot), place.field.name,
                f"{slot_name(slot)} {place.field.index_text(place.index)}",
                value_text(element, want[at]), value_text(element, got[at]),
                # a listed element differs from the expected one: left as before, it was not written
                not torch.equal(got[at], before[at]),
                int((got[at] != want[at]).sum())))
            if len(out) == LISTED_MISMATCHES:
                break
        return tuple(out)

    return locate


#: how a differing byte is named, by write op (every write op has one: tests/kv say so)
LOCATORS: dict[str, Locate] = {MLA_OP: locate_mla, MHA_OP: _locator(_mha_fields),
                               INDEXER_OP: _locator(_indexer_fields)}
