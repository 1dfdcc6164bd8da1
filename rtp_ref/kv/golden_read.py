"""Golden files read back, whatever write op's call they hold: load one with safetensors, validate it, and give the
call's arguments by name.

``rtp_ref.kv.golden`` and ``rtp_ref.kv.golden_mha_indexer`` write the files; this module is their reader.
``read_golden`` checks every key, dtype, shape and metadata value against what the writer produces
(docs/layouts.md, "Golden files") by the form of the file's op (``GOLDEN_FORMS``: a file without an ``op`` key
holds a ``concat_and_cache_mla`` call) and rebuilds the layout and contract from the file's own metadata, so a
file written for an out-of-tree platform table reads the same. ``call_values`` names every argument of the
call as the op's signature does (the file's tensors, the kernel's views of copies of its caches, its other
arguments), so that rtp_ref.commands._golden_run calls the op's reference or a kernel of any op the same way.

Every problem with the file itself raises RtpRefError naming the file, the item and what is valid.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from rtp_ref.errors import RtpRefError
from rtp_ref.kv.golden import GOLDEN_FORMAT
from rtp_ref.kv.golden_file import GoldenFile, GoldenForm, where_of
from rtp_ref.kv.golden_read_mha_indexer import INDEXER_FORM, MHA_FORM
from rtp_ref.kv.golden_read_mla import METADATA_KEYS, MLA_FORM, TENSOR_KEYS
from rtp_ref.kv.op_names import MLA_OP

__all__ = ["GOLDEN_FORMS", "METADATA_KEYS", "TENSOR_KEYS", "GoldenFile", "call_values", "fresh_caches", "read_golden"]

#: how golden files of each write op are read, by op (every write op of rtp_ref.ops has one: tests/kv say so)
GOLDEN_FORMS: dict[str, GoldenForm] = {form.op: form for form in (MLA_FORM, MHA_FORM, INDEXER_FORM)}


def _load(path: str) -> tuple[dict[str, torch.Tensor], dict[str, str] | None]:
    where = where_of(path)
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


def _form(where: str, metadata: dict[str, str] | None) -> tuple[GoldenForm, dict[str, str]]:
    """The form of the file's op, once its format version is this reader's and its metadata keys are the form's."""
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
    op = metadata.get("op", MLA_OP)  # an MLA file states no op: it is the one format 1 began with
    form = GOLDEN_FORMS.get(op)
    if form is None:
        raise RtpRefError(f"{where}: metadata 'op' is {op!r}; valid: {', '.join(GOLDEN_FORMS)} (the ops "
                          f"`rtp-ref golden` writes a call of)")
    missing = [key for key in form.metadata_keys if key not in metadata]
    unknown = sorted(set(metadata) - set(form.metadata_keys))
    if missing or unknown:
        what = f"lacks key {missing[0]!r}" if missing else f"has unknown key {unknown[0]!r}"
        raise RtpRefError(f"{where}: metadata {what}; valid keys of {op} files: {', '.join(form.metadata_keys)}")
    return form, metadata


def read_golden(path: str | Path) -> GoldenFile:
    """Load and validate the golden file at ``path``, of any write op.

    Checks, in order: the file reads and is valid safetensors; ``golden_format`` is this reader's; ``op`` (none
    for an MLA file) is a write op; the metadata keys are exactly its form's and each value is valid; they
    describe a layout whose byte counts match; the tensors are exactly its form's keys with the dtypes and shapes
    the metadata implies. The first problem raises RtpRefError naming the file, the item and what is valid. The
    stored *values* are checked by rtp_ref.commands._golden_run.
    """
    text = str(path)
    where = where_of(text)
    tensors, raw_metadata = _load(text)
    form, metadata = _form(where, raw_metadata)
    missing = [key for key in form.tensor_keys if key not in tensors]
    unknown = sorted(set(tensors) - set(form.tensor_keys))
    if missing or unknown:
        what = f"lacks tensor {missing[0]!r}" if missing else f"has unknown tensor {unknown[0]!r}"
        raise RtpRefError(f"{where} {what}; valid tensors: {', '.join(form.tensor_keys)}")
    return form.read(text, tensors, metadata)


def fresh_caches(golden: GoldenFile, device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """Each cache of the call as the file stores it before the call (a copy on ``device``), by argument name."""
    return {name: golden.tensors[f"{name}_before"].to(device, copy=True) for name in golden.caches}


def call_values(golden: GoldenFile, caches: Mapping[str, torch.Tensor],
                device: torch.device | str = "cpu") -> dict[str, object]:
    """Every argument of the file's call by name: its input tensors on ``device``, the kernel's views of
    ``caches`` (``fresh_caches``: stored as the file stores them, written in place), and its other arguments."""
    stored = {f"{name}_{when}" for name in golden.caches for when in ("before", "expected")}
    values: dict[str, object] = {key: t.to(device) for key, t in golden.tensors.items() if key not in stored}
    values.update(golden.scalars)
    values.update({name: golden.cache_view(cache) for name, cache in caches.items()})
    return values
