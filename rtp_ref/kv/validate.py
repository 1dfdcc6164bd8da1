"""Argument checks of the cache writer and reader, in one place a kernel can call before touching memory.

Every check raises RtpRefError (a ValueError) naming the argument, its value and what is valid, and
runs before any byte is written. Device checks come before anything reads a tensor's values.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import NoReturn

import torch

from rtp_ref.errors import RtpRefError
from rtp_ref.kv.layouts import MlaLayout

#: dtypes the writer takes for kv_c and k_pe.
INPUT_DTYPES = (torch.bfloat16, torch.float16)
#: dtypes the writers take for slot_mapping, by the names argument domains use (rtp_ref.cases.domain): vLLM passes
#: int64; an int32 mapping names the same slots (a kernel that reads one at the other width writes other slots)
SLOT_DTYPES = {"int32": torch.int32, "int64": torch.int64}


def _fail(arg: str, problem: str) -> NoReturn:
    raise RtpRefError(f"{arg}: {problem}")


def dtype_name(dtype: torch.dtype) -> str:
    """``bfloat16`` for ``torch.bfloat16``: how error messages name a dtype."""
    return str(dtype).removeprefix("torch.")


def _valid_inputs() -> str:
    return ", ".join(dtype_name(d) for d in INPUT_DTYPES)


def check_tensor(arg: str, x: object, device: torch.device | None) -> torch.Tensor:
    """``x`` as a tensor on ``device`` (None: any); RtpRefError naming ``arg`` otherwise."""
    if not isinstance(x, torch.Tensor):
        _fail(arg, f"{type(x).__name__} is not a torch.Tensor")
    if device is not None and x.device != device:
        _fail(arg, f"is on device {x.device}; valid: the cache's device {device}")
    return x


def check_input_dtype(arg: str, dtype: object) -> None:
    """RtpRefError naming ``arg`` unless ``dtype`` is bf16 or fp16."""
    if dtype not in INPUT_DTYPES:
        _fail(arg, f"dtype {dtype} is not supported; valid: {_valid_inputs()}")


def accepted_slot_dtypes(domain: Mapping[str, Collection[object]]) -> tuple[torch.dtype, ...]:
    """The slot_mapping dtypes a writer whose declared input domain (rtp_ref.cases.domain) is ``domain`` takes: those
    it names under ``slot_mapping``, every one of ``SLOT_DTYPES`` when it names none."""
    names = domain.get("slot_mapping", tuple(SLOT_DTYPES))
    return tuple(dtype for name, dtype in SLOT_DTYPES.items() if name in names)


def _check_slot_dtype(slots: torch.Tensor, accepted: Collection[torch.dtype]) -> None:
    if slots.dim() != 1 or slots.dtype not in accepted:
        valid = " or ".join(dtype_name(d) for d in accepted)
        _fail("slot_mapping", f"{dtype_name(slots.dtype)} {list(slots.shape)}; valid: {valid} [num_tokens]")


def cache_capacity(kv_cache: torch.Tensor) -> int:
    """Number of slots of a ``[num_blocks, block_size, entry]`` cache."""
    return int(kv_cache.shape[0] * kv_cache.shape[1])


def validate_cache(layout: MlaLayout, kv_cache: object, input_dtype: torch.dtype) -> torch.Tensor:
    """Check ``kv_cache`` against ``layout``'s cache contract (see ``rtp_ref.kv.layouts``); returns it."""
    cache = check_tensor("kv_cache", kv_cache, None)
    entry = layout.cache_entry
    expected = layout.cache_dtype(input_dtype)
    if cache.dim() != 3:
        _fail(
            "kv_cache",
            f"shape {list(cache.shape)} has {cache.dim()} dims; valid: [num_blocks, block_size, {entry}]",
        )
    if cache.dtype != expected:
        why = "the inputs' dtype" if layout.stores_input_dtype else "fp8 layouts store bytes"
        _fail(
            "kv_cache",
            f"dtype {dtype_name(cache.dtype)} is not valid for layout {layout.name}; "
            f"valid: {dtype_name(expected)} ({why})",
        )
    if cache.shape[2] != entry:
        size = "too small" if cache.shape[2] < entry else "not the entry size"
        _fail(
            "kv_cache",
            f"entry size shape[2]={cache.shape[2]} is {size} for layout {layout.name}; valid: "
            f"{entry} ({layout.bytes_per_token} bytes per token)",
        )
    num_blocks, block_size = cache.shape[0], cache.shape[1]
    if num_blocks < 1 or block_size < 1:
        _fail("kv_cache", f"shape {list(cache.shape)} holds no slot; valid: num_blocks >= 1 and block_size >= 1")
    if cache.stride(2) != 1 or cache.stride(1) != entry:
        _fail(
            "kv_cache",
            f"strides {cache.stride()}: the per-token stride must equal the entry size; valid: "
            f"(>= {block_size * entry}, {entry}, 1)",
        )
    if cache.stride(0) < block_size * entry:
        _fail(
            "kv_cache",
            f"block stride {cache.stride(0)} is smaller than a block (block_size {block_size} x "
            f"entry {entry}), so blocks overlap; valid: stride(0) >= {block_size * entry}",
        )
    return cache


def _check_value_input(arg: str, x: torch.Tensor, width: int, what: str, layout: MlaLayout) -> None:
    if x.dim() != 2:
        _fail(arg, f"shape {list(x.shape)} has {x.dim()} dims; valid: [num_tokens, {width}]")
    if x.shape[1] != width:
        _fail(
            arg,
            f"shape {list(x.shape)} gives {what}={x.shape[1]}, but layout {layout.name} was built for "
            f"{what}={width}; valid: [num_tokens, {width}]",
        )
    if width > 1 and x.stride(1) != 1:
        _fail(
            arg,
            f"strides {x.stride()}: the last dimension must be contiguous (stride 1); rows may be strided",
        )


def validate_scale(layout: MlaLayout, scale: object, device: torch.device, values: bool = True) -> None:
    """``scale`` is a float32 tensor of one element; positive and finite when the layout uses it (that value
    check, a device sync, only with ``values``)."""
    s = check_tensor("scale", scale, device)
    if s.dtype != torch.float32 or s.numel() != 1:
        _fail("scale", f"{dtype_name(s.dtype)} with {s.numel()} elements; valid: float32 with 1 element")
    if values and layout.external_scale is not None:
        value = float(s.reshape(()).item())
        if not (value > 0 and value != float("inf")):
            _fail("scale", f"{value} cannot divide values for layout {layout.name}; valid: a finite number > 0")


def validate_write_args(
    layout: MlaLayout, kv_c: object, k_pe: object, kv_cache: object, slot_mapping: object, scale: object,
    values: bool = True, slot_dtypes: Collection[torch.dtype] = tuple(SLOT_DTYPES.values()),
) -> None:
    """Check every argument of ``concat_and_cache_mla`` for ``layout``; raises before any byte is written.

    Rules: kv_c [N >= T, R] and k_pe [N' >= T, P] share a dtype in bf16/fp16, last dim contiguous
    (row strides free); slot_mapping [T] of one of ``slot_dtypes`` (int32 or int64 by default); kv_cache per
    ``validate_cache`` (under ``auto`` its dtype is the inputs'); scale float32 of one element ([1] or 0-D);
    all on the cache's device; each slot negative (skip) or below the capacity, and no slot twice.
    Without ``values`` only metadata is checked (no device sync): the slots' and the scale's values are not
    (rtp_ref.kernels.input_flags says who checks them then).
    """
    cache = check_tensor("kv_cache", kv_cache, None)
    device = cache.device
    nope = check_tensor("kv_c", kv_c, device)
    rope = check_tensor("k_pe", k_pe, device)
    slots = check_tensor("slot_mapping", slot_mapping, device)
    check_input_dtype("kv_c", nope.dtype)
    if rope.dtype != nope.dtype:
        _fail(
            "k_pe",
            f"dtype {dtype_name(rope.dtype)} differs from kv_c's {dtype_name(nope.dtype)}; valid: the same dtype",
        )
    _check_value_input("kv_c", nope, layout.kv_lora_rank, "kv_lora_rank", layout)
    _check_value_input("k_pe", rope, layout.rope_dim, "rope_dim", layout)
    _check_slot_dtype(slots, slot_dtypes)
    tokens = slots.shape[0]
    for arg, x in (("kv_c", nope), ("k_pe", rope)):
        if x.shape[0] < tokens:
            _fail(arg, f"has {x.shape[0]} rows but slot_mapping has {tokens} tokens; valid: >= {tokens} rows")
    validate_cache(layout, cache, nope.dtype)
    validate_scale(layout, scale, device, values)
    if values:
        check_write_slots(slots, cache_capacity(cache), cache.shape[0], cache.shape[1])


def check_write_slots(slots: torch.Tensor, capacity: int, num_blocks: int, block_size: int) -> None:
    """Every slot negative (skipped) or inside the cache's ``capacity`` slots, none repeated; RtpRefError
    naming the first bad one. Vectorised (kernels call this on millions of slots): one device sync, loops
    only on failure."""
    if slots.numel() == 0:
        return
    valid = slots[slots >= 0]
    ordered = torch.sort(valid).values
    repeats = ordered[1:] == ordered[:-1]
    too_big = bool((slots >= capacity).any())
    if not too_big and not bool(repeats.any()):
        return
    seen: dict[int, int] = {}
    for i, slot in enumerate(slots.tolist()):
        if slot >= capacity:
            _fail(
                "slot_mapping",
                f"slot_mapping[{i}]={slot} is outside the cache; valid: a negative value (skip the "
                f"token) or 0..{capacity - 1} (num_blocks {num_blocks} x block_size {block_size})",
            )
        if slot >= 0 and slot in seen:
            _fail(
                "slot_mapping",
                f"slot_mapping[{i}]={slot} repeats slot_mapping[{seen[slot]}]; valid: each slot at "
                "most once per call (a kernel's result would depend on thread order)",
            )
        seen[slot] = i


def validate_read_args(
    layout: MlaLayout, kv_cache: object, slots: object, scale: object, input_dtype: torch.dtype
) -> None:
    """Check the reader's arguments: a valid cache, int64 [n] slots each in 0..capacity-1, the scale."""
    check_input_dtype("input_dtype", input_dtype)
    cache = validate_cache(layout, kv_cache, input_dtype)
    s = check_tensor("slots", slots, cache.device)
    if s.dim() != 1 or s.dtype != torch.int64:
        _fail("slots", f"{dtype_name(s.dtype)} {list(s.shape)}; valid: int64 [n]")
    capacity = cache_capacity(cache)
    for i, slot in enumerate(s.tolist()):
        if not 0 <= slot < capacity:
            _fail("slots", f"slots[{i}]={slot} is not a slot of the cache; valid: 0..{capacity - 1}")
    validate_scale(layout, scale, cache.device)


def check_slot_mapping(slot_mapping: object, device: torch.device, num_blocks: int, block_size: int,
                       values: bool = True,
                       slot_dtypes: Collection[torch.dtype] = tuple(SLOT_DTYPES.values())) -> torch.Tensor:
    """``slot_mapping`` as a 1-D tensor of one of ``slot_dtypes`` (int32 or int64 by default) on ``device`` whose
    slots fit a ``num_blocks x block_size`` cache (check_write_slots, only with ``values``: it syncs); RtpRefError
    otherwise."""
    slots = check_tensor("slot_mapping", slot_mapping, device)
    _check_slot_dtype(slots, slot_dtypes)
    if values:
        check_write_slots(slots, num_blocks * block_size, num_blocks, block_size)
    return slots


def check_rows(arg: str, x: torch.Tensor, tokens: int, shape: tuple[int, ...]) -> None:
    """``x`` is ``[T', *shape]`` with ``T' >= tokens`` (longer inputs are padding), its last dim contiguous."""
    if x.dim() != 1 + len(shape) or tuple(x.shape[1:]) != shape or x.shape[0] < tokens:
        raise RtpRefError(f"{arg}: shape {tuple(x.shape)}; valid: [T, {', '.join(map(str, shape))}] with T >= "
                          f"{tokens} (the slot_mapping's length)")
    if x.stride(-1) != 1:
        raise RtpRefError(f"{arg}: strides {x.stride()}; valid: a contiguous last dimension")
