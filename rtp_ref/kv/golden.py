"""Golden vectors: inputs and the expected cache of one ``concat_and_cache_mla`` call, as a safetensors file.

A vendor's C++ or Rust test loads the file, fills its cache with ``kv_cache_before``, runs its kernel
on ``kv_c``, ``k_pe``, ``slot_mapping`` and ``scale``, and compares every byte with
``kv_cache_expected``; no Python needed. docs/layouts.md lists the keys.

The same arguments give the same bytes: inputs come from a seeded CPU ``torch.Generator``, and the file
is serialised here with sorted keys, because safetensors 0.8 writes ``__metadata__`` in hash-map order,
which differs between runs. The bytes are a valid safetensors file (tests load them with safetensors).
"""

from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from rtp_ref import __version__
from rtp_ref.errors import RtpRefError
from rtp_ref.fp8.formats import ConversionMode, Fp8Format
from rtp_ref.kv.cache import reference_write
from rtp_ref.kv.flags import LayoutFlags
from rtp_ref.kv.layouts import MlaLayout, layout_for_platform

if TYPE_CHECKING:
    from rtp_ref.kv.platform_table import PlatformTable

#: Version of the file's key set; bumped when a key changes meaning.
GOLDEN_FORMAT = "1"
#: Input dtypes by the names the CLI and the metadata use.
GOLDEN_INPUT_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
#: One token in this many (token i with i % SKIP_EVERY == SKIP_EVERY - 1) gets slot -1.
SKIP_EVERY = 4
#: Largest file ``make_golden`` builds. A golden vector is a test fixture; past this size the arguments
#: are a mistake, and building it would end in an allocation failure instead of a message.
GOLDEN_MAX_BYTES = 1 << 30
#: Seeds ``torch.Generator.manual_seed`` takes without wrapping (a negative seed would alias a positive one).
SEED_RANGE = range(2**64)
_SAFETENSORS_DTYPES = {
    torch.uint8: "U8",
    torch.int64: "I64",
    torch.float32: "F32",
    torch.bfloat16: "BF16",
    torch.float16: "F16",
}


@dataclass(frozen=True)
class GoldenContract:
    """The platform half of the call a golden file holds, as the file states it: the cache's fp8 format (the
    platform's own unless flag ``cache_fp8_format`` names another), the conversion mode and the resolved layout
    flags: what ``rtp_ref.contract.WriteContract.for_platform`` gives a kernel of the op on that platform. A
    format source (rtp_ref.fp8.formats.FormatSource) the layouts are built from."""

    element_format: Fp8Format
    conversion_mode: ConversionMode
    flags: LayoutFlags


@dataclass(frozen=True)
class GoldenCase:
    """One golden vector: its tensors (by file key) and its string metadata."""

    tensors: dict[str, torch.Tensor]
    metadata: dict[str, str]


def _inputs(generator: torch.Generator, tokens: int, width: int, tile: int, dtype: torch.dtype) -> torch.Tensor:
    """Normal values with a random power-of-two magnitude per group of ``tile`` values (2^-6 .. 2^6),
    so tiles get different scales; returned in ``dtype``."""
    groups = math.ceil(width / tile)
    exponents = torch.randint(-6, 7, (tokens, groups), generator=generator).repeat_interleave(tile, dim=1)
    values = torch.randn(tokens, width, generator=generator) * torch.exp2(exponents[:, :width].to(torch.float32))
    return values.to(dtype)


def make_golden(
    platform: PlatformTable,
    layout_name: str,
    *,
    overrides: Mapping[str, str] | None = None,
    kv_lora_rank: int | None = None,
    rope_dim: int | None = None,
    tokens: int = 32,
    block_size: int = 16,
    num_blocks: int = 4,
    seed: int = 0,
    input_dtype: str = "bf16",
) -> GoldenCase:
    """Build the golden vector of ``layout_name`` on ``platform``.

    Inputs: ``tokens`` tokens, token 0 all zero (exercises the scale floor), every ``SKIP_EVERY``-th
    token on slot -1, the others on distinct random slots of a ``num_blocks x block_size`` cache whose
    initial bytes are random. ``scale`` is ``max|input| / fp8 max`` (used by the per-tensor layouts).
    Arguments out of range (a seed outside 0..2^64-1, a file over ``GOLDEN_MAX_BYTES``) raise RtpRefError.
    """
    layout = layout_for_platform(
        platform, layout_name, kv_lora_rank=kv_lora_rank, rope_dim=rope_dim, overrides=overrides
    )
    dtype = input_dtype_of(input_dtype)
    capacity = num_blocks * block_size
    for name, value, low in (
        ("tokens", tokens, 1),
        ("block_size", block_size, 1),
        ("num_blocks", num_blocks, 1),
    ):
        if value < low:
            raise RtpRefError(f"{name}={value} is not valid; valid: >= {low}")
    if tokens > capacity:
        raise RtpRefError(f"tokens={tokens} do not fit the cache; valid: <= num_blocks x block_size = {capacity}")
    if seed not in SEED_RANGE:
        raise RtpRefError(f"seed={seed} is not valid; valid: 0..{SEED_RANGE.stop - 1}")
    size = _file_bytes(layout, dtype, tokens, capacity)
    if size > GOLDEN_MAX_BYTES:
        raise RtpRefError(
            f"the golden file would hold {size} bytes; valid: at most {GOLDEN_MAX_BYTES} "
            "(fewer --tokens, --num-blocks, --block-size or a smaller --kv-lora-rank)"
        )
    generator = torch.Generator().manual_seed(seed)
    kv_c = _inputs(generator, tokens, layout.kv_lora_rank, 64, dtype)
    kv_c[0] = 0
    k_pe = _inputs(generator, tokens, layout.rope_dim, layout.rope_dim, dtype)
    slots = torch.randperm(capacity, generator=generator)[:tokens]
    slots[SKIP_EVERY - 1 :: SKIP_EVERY] = -1
    amax = float(torch.cat([kv_c.flatten(), k_pe.flatten()]).abs().max().to(torch.float32))
    scale = torch.tensor([amax / layout.element_format.max_value], dtype=torch.float32)
    cache_shape = layout.cache_shape(num_blocks, block_size)
    byte_shape = (*cache_shape[:2], layout.bytes_per_token)
    before = torch.randint(0, 256, byte_shape, dtype=torch.uint8, generator=generator)
    before = before.view(layout.cache_dtype(dtype))
    expected = before.clone()
    reference_write(layout, kv_c, k_pe, expected, slots, scale)
    tensors = {
        "kv_c": kv_c,
        "k_pe": k_pe,
        "slot_mapping": slots,
        "scale": scale,
        "kv_cache_before": before,
        "kv_cache_expected": expected,
    }
    return GoldenCase(tensors, _metadata(platform, layout, input_dtype, block_size, num_blocks, tokens, seed))


def _file_bytes(layout: MlaLayout, dtype: torch.dtype, tokens: int, capacity: int) -> int:
    """Tensor bytes of a golden file: inputs, slot map, scale, and the cache twice (before, expected)."""
    element = torch.empty((), dtype=dtype).element_size()
    return tokens * (layout.kv_lora_rank + layout.rope_dim) * element + tokens * 8 + 4 \
        + 2 * capacity * layout.bytes_per_token


def input_dtype_of(name: str) -> torch.dtype:
    """The torch dtype of a golden input dtype name (``bf16``, ``fp16``); another name raises RtpRefError."""
    if name not in GOLDEN_INPUT_DTYPES:
        raise RtpRefError(f"input_dtype={name!r} is not valid; valid: {', '.join(GOLDEN_INPUT_DTYPES)}")
    return GOLDEN_INPUT_DTYPES[name]


def _metadata(
    platform: PlatformTable,
    layout: MlaLayout,
    input_dtype: str,
    block_size: int,
    num_blocks: int,
    tokens: int,
    seed: int,
) -> dict[str, str]:
    return {
        "golden_format": GOLDEN_FORMAT,
        "rtp_ref_version": __version__,
        "layout": layout.name,
        "platform": platform.name,
        "platform_sha256": platform.sha256,
        "flags": json.dumps(layout.flags.as_dict()),
        "fp8_format": layout.element_format.name,
        "conversion_mode": layout.conversion_mode.value,
        "kv_lora_rank": str(layout.kv_lora_rank),
        "rope_dim": str(layout.rope_dim),
        "input_dtype": input_dtype,
        "bytes_per_token": str(layout.bytes_per_token),
        "block_size": str(block_size),
        "num_blocks": str(num_blocks),
        "num_tokens": str(tokens),
        "seed": str(seed),
    }


def safetensors_bytes(tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str]) -> bytes:
    """A safetensors file of ``tensors`` and string ``metadata``, byte-identical for equal inputs.

    Layout (the safetensors format): 8-byte little-endian header length, a JSON header (keys sorted,
    no spaces, padded with spaces to a multiple of 8), then the tensors' little-endian bytes in key order.
    """
    header: dict[str, object] = {"__metadata__": dict(sorted(metadata.items()))}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        tensor = tensors[name].detach().to("cpu").contiguous()
        if tensor.dtype not in _SAFETENSORS_DTYPES:
            raise RtpRefError(f"tensor {name!r}: dtype {tensor.dtype} has no safetensors name here")
        data = tensor.reshape(-1).view(torch.uint8).numpy().tobytes()
        header[name] = {
            "dtype": _SAFETENSORS_DTYPES[tensor.dtype],
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def write_golden(path: str | Path, case: GoldenCase) -> bytes:
    """Write ``case`` to ``path`` as a safetensors file; returns the bytes written.

    The bytes go to a temporary file beside ``path`` that is renamed over it once complete, so a
    failed write (disk full, file size limit) leaves no half-written golden file and any previous
    file at ``path`` intact. An unwritable path raises RtpRefError naming it.
    """
    data = safetensors_bytes(case.tensors, case.metadata)
    target = Path(path)
    if not target.name:
        raise RtpRefError(f"--out {str(path)!r} is not a file name; valid: a path such as out/golden.safetensors")
    # Named by process id, created with open() so that the umask applies as to any other output file.
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("wb") as handle:
            handle.write(data)
        tmp.replace(target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise RtpRefError(f"--out {str(path)!r} cannot be written: {exc.strerror or exc}") from exc
    return data
