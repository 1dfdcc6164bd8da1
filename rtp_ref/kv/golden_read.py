"""Golden files read back: load one with safetensors, validate it, re-derive its expected cache.

``rtp_ref.kv.golden`` writes the file; this module is its reader. ``read_golden`` checks every key,
dtype, shape and metadata value against what the writer produces (docs/layouts.md, "Golden files")
and rebuilds the layout from the file's own metadata (fp8 format, conversion mode, resolved flags),
so a file written for an out-of-tree platform table reads the same. ``reference_cache`` runs this
rtp-ref's reference writer on the stored inputs; ``compare_cache`` locates every byte where a cache
differs from the stored expected one. A mismatch there means the file was damaged, or the reference
writer changed between the rtp-ref version that wrote the file and this one.

Every problem with the file itself raises RtpRefError naming the file, the item and what is valid.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from rtp_ref.errors import RtpRefError
from rtp_ref.fp8.formats import FP8_FORMATS, ConversionMode
from rtp_ref.kv.cache import reference_write
from rtp_ref.kv.fields import Placement
from rtp_ref.kv.flags import check_flag_table
from rtp_ref.kv.golden import GOLDEN_FORMAT, GOLDEN_INPUT_DTYPES
from rtp_ref.kv.layout_records import MLA_LAYOUT_NAMES
from rtp_ref.kv.layouts import MlaLayout, build_layout
from rtp_ref.kv.validate import dtype_name

#: Tensor keys of a golden file, in the order docs/layouts.md lists them.
TENSOR_KEYS = ("kv_c", "k_pe", "slot_mapping", "scale", "kv_cache_before", "kv_cache_expected")
#: Metadata keys of a golden file (``golden_format`` 1), in the order docs/layouts.md lists them.
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
#: How many mismatching bytes a comparison lists one by one (all of them are counted).
LISTED_MISMATCHES = 10


@dataclass(frozen=True)
class GoldenFile:
    """A validated golden file: its tensors (CPU), string metadata and the layout they were written for."""

    path: str
    tensors: dict[str, torch.Tensor]
    metadata: dict[str, str]
    layout: MlaLayout
    block_size: int
    num_blocks: int

    @property
    def where(self) -> str:
        """How messages name the file."""
        return _where(self.path)


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

    def describe(self, writer: str) -> str:
        """One line: where the byte is, the stored value, and the value ``writer`` (who wrote ``got``) wrote."""
        token = f"token {self.token}" if self.token is not None else "no token writes this row"
        return (
            f"block {self.block} byte {self.offset}: row {self.row} ({token}), field {self.field} byte "
            f"{self.field_byte}: kv_cache_expected has 0x{self.expected:02x}, {writer} wrote 0x{self.got:02x}"
        )


@dataclass(frozen=True)
class CacheComparison:
    """How a cache compares with the stored ``kv_cache_expected``, byte for byte."""

    total_bytes: int
    mismatched_bytes: int
    #: the first ``LISTED_MISMATCHES`` mismatches, in byte order
    first: tuple[ByteMismatch, ...]

    @property
    def matches(self) -> bool:
        """True when every byte is identical."""
        return self.mismatched_bytes == 0


def _where(path: str) -> str:
    return f"golden file {path!r}"


def _load(path: str) -> tuple[dict[str, torch.Tensor], dict[str, str] | None]:
    where = _where(path)
    try:
        # safetensors reports a directory as "No such device": open() first gives the plain reason.
        with open(path, "rb"):
            pass
        with safe_open(path, framework="pt") as handle:
            metadata = handle.metadata()
            tensors = {key: handle.get_tensor(key) for key in handle.keys()}  # noqa: SIM118 (no __iter__)
    except OSError as exc:
        raise RtpRefError(f"{where} cannot be read: {exc.strerror or exc}") from exc
    except SafetensorError as exc:
        raise RtpRefError(
            f"{where} is not a valid safetensors file ({exc}); truncated or corrupt? "
            "valid: a file written by `rtp-ref golden`"
        ) from exc
    return tensors, metadata


def _integer(where: str, metadata: dict[str, str], key: str, low: int | None) -> int:
    text = metadata[key]
    valid = re.fullmatch(r"-?[0-9]+", text) is not None and (low is None or int(text) >= low)
    if not valid:
        shown = "an integer" if low is None else f"an integer >= {low}"
        raise RtpRefError(f"{where}: metadata {key!r} is {text!r}; valid: {shown}")
    return int(text)


def _one_of(where: str, metadata: dict[str, str], key: str, valid: list[str]) -> str:
    value = metadata[key]
    if value not in valid:
        raise RtpRefError(f"{where}: metadata {key!r} is {value!r}; valid: {', '.join(valid)}")
    return value


def _check_metadata_keys(where: str, metadata: dict[str, str] | None) -> dict[str, str]:
    if metadata is None:
        raise RtpRefError(f"{where} has no __metadata__; valid: a file written by `rtp-ref golden`")
    # The format is checked first: another format version may have other keys.
    version = metadata.get("golden_format")
    if version != GOLDEN_FORMAT:
        raise RtpRefError(
            f"{where}: metadata 'golden_format' is {version!r}; this rtp-ref reads golden_format "
            f"{GOLDEN_FORMAT!r} (check the file with the rtp-ref version that wrote it, "
            f"{metadata.get('rtp_ref_version', 'unknown')}, or write it again with `rtp-ref golden`)"
        )
    op = metadata.get("op")
    if op is not None:  # only the other families' files carry an op (rtp_ref.kv.golden_mha_indexer)
        raise RtpRefError(f"{where} is a golden file of {op}; golden-check reads concat_and_cache_mla files "
                          f"(written by `rtp-ref golden --family mla`)")
    missing = [key for key in METADATA_KEYS if key not in metadata]
    unknown = sorted(set(metadata) - set(METADATA_KEYS))
    if missing or unknown:
        what = f"lacks key {missing[0]!r}" if missing else f"has unknown key {unknown[0]!r}"
        raise RtpRefError(f"{where}: metadata {what}; valid keys: {', '.join(METADATA_KEYS)}")
    return metadata


def _layout(where: str, metadata: dict[str, str]) -> MlaLayout:
    name = _one_of(where, metadata, "layout", list(MLA_LAYOUT_NAMES))
    fmt = _one_of(where, metadata, "fp8_format", sorted(FP8_FORMATS))
    mode = _one_of(where, metadata, "conversion_mode", [m.value for m in ConversionMode])
    try:
        table = json.loads(metadata["flags"])
    except json.JSONDecodeError as exc:
        raise RtpRefError(
            f"{where}: metadata 'flags' is not JSON ({exc}); valid: a JSON object of layout flags"
        ) from exc
    flags = check_flag_table(f"{where}: metadata 'flags'", table)
    try:
        layout = build_layout(
            name,
            kv_lora_rank=_integer(where, metadata, "kv_lora_rank", 1),
            rope_dim=_integer(where, metadata, "rope_dim", 1),
            flags=flags,
            element_format=FP8_FORMATS[fmt],
            conversion_mode=ConversionMode(mode),
        )
    except RtpRefError as exc:
        raise RtpRefError(f"{where}: the metadata does not describe a layout: {exc}") from exc
    stated = _integer(where, metadata, "bytes_per_token", 1)
    if stated != layout.bytes_per_token:
        raise RtpRefError(
            f"{where}: metadata 'bytes_per_token' is {stated}, but layout {name} with R={layout.kv_lora_rank} "
            f"P={layout.rope_dim} and these flags has {layout.bytes_per_token}; valid: {layout.bytes_per_token}"
        )
    return layout


_TensorSpec = tuple[torch.dtype, tuple[int, ...]]


def _check_tensors(where: str, tensors: dict[str, torch.Tensor], expected: dict[str, _TensorSpec]) -> None:
    missing = [key for key in TENSOR_KEYS if key not in tensors]
    unknown = sorted(set(tensors) - set(TENSOR_KEYS))
    if missing or unknown:
        what = f"lacks tensor {missing[0]!r}" if missing else f"has unknown tensor {unknown[0]!r}"
        raise RtpRefError(f"{where} {what}; valid tensors: {', '.join(TENSOR_KEYS)}")
    for key in TENSOR_KEYS:
        dtype, shape = expected[key]
        tensor = tensors[key]
        if tensor.dtype != dtype or tuple(tensor.shape) != shape:
            raise RtpRefError(
                f"{where}: tensor {key!r} is {dtype_name(tensor.dtype)} {list(tensor.shape)}; "
                f"valid: {dtype_name(dtype)} {list(shape)} (from the metadata)"
            )


def read_golden(path: str | Path) -> GoldenFile:
    """Load and validate the golden file at ``path``.

    Checks, in order: the file reads and is valid safetensors; ``golden_format`` is this reader's;
    the metadata keys are exactly ``METADATA_KEYS`` and each value is valid; they describe a layout
    whose bytes per token match; the tensors are exactly ``TENSOR_KEYS`` with the dtypes and shapes
    the metadata implies. The first problem raises RtpRefError naming the file, the item and what is
    valid. The stored *values* are checked by ``reference_cache`` / ``compare_cache``.
    """
    text = str(path)
    where = _where(text)
    tensors, raw_metadata = _load(text)
    metadata = _check_metadata_keys(where, raw_metadata)
    layout = _layout(where, metadata)
    input_dtype = GOLDEN_INPUT_DTYPES[_one_of(where, metadata, "input_dtype", list(GOLDEN_INPUT_DTYPES))]
    tokens = _integer(where, metadata, "num_tokens", 1)
    block_size = _integer(where, metadata, "block_size", 1)
    num_blocks = _integer(where, metadata, "num_blocks", 1)
    _integer(where, metadata, "seed", 0)
    cache = (layout.cache_dtype(input_dtype), layout.cache_shape(num_blocks, block_size))
    _check_tensors(where, tensors, {
        "kv_c": (input_dtype, (tokens, layout.kv_lora_rank)),
        "k_pe": (input_dtype, (tokens, layout.rope_dim)),
        "slot_mapping": (torch.int64, (tokens,)),
        "scale": (torch.float32, (1,)),
        "kv_cache_before": cache,
        "kv_cache_expected": cache,
    })
    return GoldenFile(text, tensors, metadata, layout, block_size, num_blocks)


def reference_cache(golden: GoldenFile) -> torch.Tensor:
    """The cache this rtp-ref's reference writer produces from the file's inputs and initial cache.

    Stored inputs that are not a valid call (a slot outside the cache or used twice, a scale of 0:
    signs of a damaged file) raise RtpRefError naming the file and the argument.
    """
    t = golden.tensors
    cache = t["kv_cache_before"].clone()
    try:
        reference_write(golden.layout, t["kv_c"], t["k_pe"], cache, t["slot_mapping"], t["scale"])
    except RtpRefError as exc:
        raise RtpRefError(f"{golden.where}: the stored inputs are not a valid write: {exc}") from exc
    return cache


def _locate(golden: GoldenFile, index: int, expected: int, got: int) -> ByteMismatch:
    layout, block_size = golden.layout, golden.block_size
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


def compare_cache(golden: GoldenFile, cache: torch.Tensor) -> CacheComparison:
    """Compare ``cache`` (shape and dtype of ``kv_cache_before``, any device) with ``kv_cache_expected``.

    Counts every differing byte and locates the first ``LISTED_MISMATCHES`` of them in the layout.
    """
    want = golden.tensors["kv_cache_expected"].contiguous().view(torch.uint8).reshape(-1)
    have = cache.detach().to("cpu").contiguous().view(torch.uint8).reshape(-1)
    differ = (have != want).nonzero().flatten()
    first = tuple(
        _locate(golden, i, int(want[i]), int(have[i])) for i in differ[:LISTED_MISMATCHES].tolist()
    )
    return CacheComparison(want.numel(), int(differ.numel()), first)
