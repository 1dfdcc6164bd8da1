"""The call a golden file holds, run: the op's reference or a kernel of the op on the stored inputs, and the caches
compared with the stored expected ones.

Generic over the write ops: a kernel's arguments are named as in its op record's signature (rtp_ref.ops), and
rtp_ref.kv.golden_read.call_values gives each by that name from the file; the op's reference takes those of its
own parameters after the layout (the kernel's, less those the layout holds). ``compare_cache`` counts every byte
where caches differ from the stored expected ones and names the first places (rtp_ref.commands._golden_locate). A
mismatch of the reference means the file was damaged, or the reference changed between the rtp-ref version that
wrote the file and this one.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Mapping

import torch

from rtp_ref.commands._golden_locate import LOCATORS
from rtp_ref.errors import RtpRefError
from rtp_ref.kv.golden_file import LISTED_MISMATCHES, CacheComparison, GoldenFile
from rtp_ref.kv.golden_read import call_values, fresh_caches
from rtp_ref.ops import OPS


def kernel_arguments(op: str) -> tuple[str, ...]:
    """The argument names of a kernel of ``op``, in call order, from its record's signature
    (``kernel(k, kv_cache, slot_mapping, quant_block_size, scale_fmt)``)."""
    found = re.fullmatch(r"kernel\((.*)\)", OPS[op].signature)
    assert found is not None, f"{op}: its signature is not of the form kernel(a, b, ...)"
    return tuple(name.strip() for name in found.group(1).split(","))


def reference_arguments(op: str) -> tuple[str, ...]:
    """The argument names ``op``'s reference takes after its layout: the kernel's, less those the layout holds
    (the variant of the MLA and MHA writes, the indexer's ``quant_block_size``)."""
    return tuple(inspect.signature(OPS[op].reference).parameters)[1:]


def reference_cache(golden: GoldenFile) -> dict[str, torch.Tensor]:
    """The caches (as the file stores them, by name) this rtp-ref's reference of the file's op writes from its
    inputs and initial caches.

    Stored inputs that are not a valid call (a slot outside the cache or used twice, a scale of 0: signs of a
    damaged file) raise RtpRefError naming the file and the argument.
    """
    caches = fresh_caches(golden)
    values = call_values(golden, caches)
    try:
        OPS[golden.op].reference(golden.layout, *(values[name] for name in reference_arguments(golden.op)))
    except RtpRefError as exc:
        raise RtpRefError(f"{golden.where}: the stored inputs are not a valid write: {exc}") from exc
    return caches


def _bytes(tensors: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat([t.detach().to("cpu").contiguous().view(torch.uint8).reshape(-1) for t in tensors])


def compare_cache(golden: GoldenFile, caches: Mapping[str, torch.Tensor]) -> CacheComparison:
    """Compare ``caches`` (by name, as the file stores them: ``fresh_caches`` after a call; any device) with the
    stored expected ones.

    Counts every differing byte and names the first ``LISTED_MISMATCHES`` places by the op's locator.
    """
    want = _bytes([golden.tensors[f"{name}_expected"] for name in golden.caches])
    have = _bytes([caches[name] for name in golden.caches])
    before = _bytes([golden.tensors[f"{name}_before"] for name in golden.caches])
    differ = (have != want).nonzero().flatten()
    # an element has at most 4 bytes: the first 4 x LISTED_MISMATCHES differing bytes hold enough elements
    first = LOCATORS[golden.op](golden, differ[: 4 * LISTED_MISMATCHES], want, have, before)
    return CacheComparison(want.numel(), int(differ.numel()), first[:LISTED_MISMATCHES])
