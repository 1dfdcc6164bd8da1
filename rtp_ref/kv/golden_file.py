"""A golden file read back, whatever op's call it holds, and the checks its metadata and tensors go through.

``GoldenFile`` is what rtp_ref.kv.golden_read gives the commands: the op, its variant and layout, the contract the
file states, which tensors are the caches and what the call's other arguments are, so that running the op's
reference or a kernel on the stored inputs is one generic call (rtp_ref.kv.golden_read.call_values,
rtp_ref.commands._golden_run). Each write op reads its files by one ``GoldenForm`` (rtp_ref.kv.golden_read_mla,
rtp_ref.kv.golden_read_mha_indexer): its keys and how its metadata becomes a layout. Every problem with a file
raises RtpRefError naming the file, the item and what is valid.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import torch

from rtp_ref.errors import RtpRefError
from rtp_ref.fp8.formats import FP8_FORMATS, ConversionMode, Fp8Format
from rtp_ref.kv.flags import LayoutFlags, check_flag_table
from rtp_ref.kv.golden import GOLDEN_INPUT_DTYPES, GoldenContract
from rtp_ref.kv.indexer import IndexerLayout
from rtp_ref.kv.layouts import MlaLayout
from rtp_ref.kv.mha_paged import MhaPagedLayout
from rtp_ref.kv.validate import dtype_name

#: the layout an op's reference takes first, by op: MLA write, MHA paged write, indexer write
GoldenLayout = MlaLayout | MhaPagedLayout | IndexerLayout
#: How many differing places a comparison lists one by one (every differing byte is counted).
LISTED_MISMATCHES = 10


class Mismatch(Protocol):
    """One listed difference between a cache and the file's expected one: a dataclass (its fields are its JSON)."""

    __dataclass_fields__: ClassVar[dict[str, Any]]

    @property
    def differing_bytes(self) -> int:
        """How many differing bytes the entry stands for."""
        ...

    def describe(self, writer: str) -> str:
        """One line: where it is, the expected value, and what ``writer`` (who wrote the cache) left there."""
        ...


@dataclass(frozen=True)
class CacheComparison:
    """How the caches of a call compare with the file's expected ones, byte for byte."""

    total_bytes: int
    mismatched_bytes: int
    #: the first ``LISTED_MISMATCHES`` differences, in byte order (key cache before value cache)
    first: tuple[Mismatch, ...]

    @property
    def matches(self) -> bool:
        """True when every byte is identical."""
        return self.mismatched_bytes == 0

    @property
    def unlisted_bytes(self) -> int:
        """Differing bytes that no entry of ``first`` stands for."""
        return self.mismatched_bytes - sum(m.differing_bytes for m in self.first)


#: validates a file's metadata and tensors (their key sets already checked) into a GoldenFile
Read = Callable[[str, dict[str, torch.Tensor], dict[str, str]], "GoldenFile"]


@dataclass(frozen=True)
class GoldenForm:
    """What the golden files of one write op hold and how they are read back."""

    op: str
    #: the tensor keys, in the order docs/layouts.md lists them
    tensor_keys: tuple[str, ...]
    #: the metadata keys, in the order docs/layouts.md lists them
    metadata_keys: tuple[str, ...]
    read: Read


@dataclass(frozen=True)
class GoldenFile:
    """A validated golden file: its tensors (CPU), its string metadata and the call they describe."""

    path: str
    tensors: dict[str, torch.Tensor]
    metadata: dict[str, str]
    form: GoldenForm
    #: the op's variant the call names (an MLA layout, a kv_cache_dtype, a scale_fmt)
    variant: str
    layout: GoldenLayout
    contract: GoldenContract
    block_size: int
    num_blocks: int
    #: the caches the call writes, by argument name; the file holds each as NAME_before and NAME_expected
    caches: tuple[str, ...]
    #: the call's arguments that are not tensors of the file (the variant, quant_block_size), by argument name
    scalars: dict[str, str | int]
    #: one line saying what the file holds, for the text report
    summary: str
    #: how a kernel sees a stored cache: that tensor with its dimensions permuted so (an HND cache), or as stored
    cache_permutation: tuple[int, ...] | None = None

    @property
    def op(self) -> str:
        """The op whose call the file holds."""
        return self.form.op

    @property
    def where(self) -> str:
        """How messages name the file."""
        return where_of(self.path)

    def cache_view(self, stored: torch.Tensor) -> torch.Tensor:
        """The kernel's view of a cache tensor held as the file stores it."""
        return stored if self.cache_permutation is None else stored.permute(*self.cache_permutation)


def where_of(path: str) -> str:
    """How messages name the golden file at ``path``."""
    return f"golden file {path!r}"


def integer(where: str, metadata: Mapping[str, str], key: str, low: int | None) -> int:
    """Metadata ``key`` as an integer ``>= low``; RtpRefError naming it otherwise."""
    text = metadata[key]
    valid = re.fullmatch(r"-?[0-9]+", text) is not None and (low is None or int(text) >= low)
    if not valid:
        shown = "an integer" if low is None else f"an integer >= {low}"
        raise RtpRefError(f"{where}: metadata {key!r} is {text!r}; valid: {shown}")
    return int(text)


def one_of(where: str, metadata: Mapping[str, str], key: str, valid: list[str]) -> str:
    """Metadata ``key`` when it is one of ``valid``; RtpRefError naming it otherwise."""
    value = metadata[key]
    if value not in valid:
        raise RtpRefError(f"{where}: metadata {key!r} is {value!r}; valid: {', '.join(valid)}")
    return value


def flags_of(where: str, metadata: Mapping[str, str]) -> LayoutFlags:
    """Metadata ``flags``: a JSON object stating every layout flag."""
    try:
        table = json.loads(metadata["flags"])
    except json.JSONDecodeError as exc:
        raise RtpRefError(f"{where}: metadata 'flags' is not JSON ({exc}); valid: a JSON object of layout flags") \
            from exc
    return check_flag_table(f"{where}: metadata 'flags'", table)


def fp8_format_of(where: str, metadata: Mapping[str, str], key: str) -> Fp8Format:
    """Metadata ``key`` as an fp8 format."""
    return FP8_FORMATS[one_of(where, metadata, key, sorted(FP8_FORMATS))]


def conversion_mode_of(where: str, metadata: Mapping[str, str]) -> ConversionMode:
    """Metadata ``conversion_mode``."""
    return ConversionMode(one_of(where, metadata, "conversion_mode", [m.value for m in ConversionMode]))


def input_dtype(where: str, metadata: Mapping[str, str]) -> torch.dtype:
    """Metadata ``input_dtype`` as a torch dtype."""
    return GOLDEN_INPUT_DTYPES[one_of(where, metadata, "input_dtype", list(GOLDEN_INPUT_DTYPES))]


def stated(where: str, metadata: Mapping[str, str], key: str, value: str, because: str) -> None:
    """Refuse metadata ``key`` unless it is ``value``, what the rest of the metadata implies (``because``)."""
    if metadata[key] != value:
        raise RtpRefError(f"{where}: metadata {key!r} is {metadata[key]!r}, but {because} gives {value!r}; valid: "
                          f"{value!r}")


TensorSpec = tuple[torch.dtype, tuple[int, ...]]


def check_tensors(where: str, tensors: Mapping[str, torch.Tensor], expected: Mapping[str, TensorSpec]) -> None:
    """Refuse a tensor whose dtype or shape is not the one the metadata implies (``expected``, by key)."""
    for key, (dtype, shape) in expected.items():
        tensor = tensors[key]
        if tensor.dtype != dtype or tuple(tensor.shape) != shape:
            raise RtpRefError(
                f"{where}: tensor {key!r} is {dtype_name(tensor.dtype)} {list(tensor.shape)}; "
                f"valid: {dtype_name(dtype)} {list(shape)} (from the metadata)"
            )
