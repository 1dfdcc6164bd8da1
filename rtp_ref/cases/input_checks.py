"""Hardening, apart from write conformance: what a kernel does with a call engines do not make.

The grades (layout, numerics, bit_exact) are about the write. Two cases of every (kernel, variant) are reported in
columns of their own instead:

* input checks: a slot one past the cache (the ops that write through a slot mapping). Engines own slot validity,
  and a kernel that checks slots on the host forces a device sync and cannot be captured in a CUDA graph, so no
  bundled table requires it (``[tolerances] require_input_checks`` or ``certify --require-input-checks`` does). A
  kernel that checks slots on the device instead (rtp_ref.kernels.input_flags) writes nothing for the bad slot and
  says so when asked (``take_input_errors``): ``flagged``, which meets the requirement as ``validated`` does.
* hardening: the empty call (no tokens, no rows), every op. Engines do not make it, and a kernel that launches an
  empty grid for it leaves a launch error pending (``cudaErrorInvalidValue``) while writing every real call
  bit-exactly; ``[tolerances] require_hardening`` or ``certify --require-hardening`` makes ``clean`` (or a refusal
  of an empty call outside the kernel's declared domain) a requirement.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

#: the kind of the conformance case that passes an out-of-range slot
BAD_INPUT_KIND = "bad_input"
#: values of the input-checks column, best first
VALIDATED, FLAGGED, UNCHECKED, CRASHED = "validated", "flagged", "unchecked", "crashed"
INPUT_CHECK_VALUES = (VALIDATED, FLAGGED, UNCHECKED, CRASHED)
#: the values that meet ``require_input_checks``: the bad slot refused, before writing or on the device
REFUSING = (VALIDATED, FLAGGED)

#: the kind of the conformance cases that call a kernel with no tokens (no rows, for a reader)
EMPTY_CALL_KIND = "empty"
#: the cases reported apart from the write, whose verdict they decide only where required
HARDENING_KINDS = (BAD_INPUT_KIND, EMPTY_CALL_KIND)
#: values of the hardening column (the empty call), best first: it returned and changed nothing; it refused a case
#: outside its declared domain (rtp_ref.cases.domain) before writing; it raised without writing; it changed bytes;
#: it left a device error (a launch error pending, an asynchronous fault); its worker died
CLEAN, REFUSED_AS_DECLARED, RAISED, WROTE, DEVICE_ERROR = "clean", "refused as declared", "raised", "wrote", \
    "device error"
HARDENING_VALUES = (CLEAN, REFUSED_AS_DECLARED, RAISED, WROTE, DEVICE_ERROR, CRASHED)
#: the values that meet ``require_hardening``
HARDENED = (CLEAN, REFUSED_AS_DECLARED)


def classify_empty_call(before: torch.Tensor, after: torch.Tensor, error: str | None, device_error: str | None,
                        declared: str | None) -> tuple[str, str]:
    """(value, what happened) for a call with no tokens: ``before``/``after`` are the case's bytes around it (CPU),
    ``error`` what the kernel raised, ``device_error`` the device error it left (None: none) and ``declared`` why
    the case is outside the kernel's declared domain (None: it is inside)."""
    if device_error is not None:
        return DEVICE_ERROR, f"the empty call left a device error: {device_error}"
    changed = int((after != before).sum())
    if changed:
        return WROTE, f"the empty call changed {changed} byte(s)" + (f" and raised {error}" if error else "")
    if error is not None and declared:
        return REFUSED_AS_DECLARED, f"the empty call is outside the declared domain ({declared}) and raised: {error}"
    if error is not None:
        return RAISED, f"the empty call raised before writing: {error}"
    return CLEAN, "the empty call returned and changed nothing"


def classify_bad_slot(before: torch.Tensor, after: torch.Tensor, valid_footprint: torch.Tensor, error: str | None,
                      guards: Sequence[tuple[str, int, int]], flagged: list[str] | None = None) -> tuple[str, str]:
    """(value, what happened) for a call given ``slot == capacity`` (one past the cache) among valid slots.

    ``before``/``after``: the case's bytes around the call (CPU); ``valid_footprint``: the bytes the valid tokens'
    entries occupy (a kernel that writes those and drops the bad token is still unchecked); ``guards``: each cache's
    trailing guard (at least one block), as ``(cache name, start, end)`` positions; ``error``: what the kernel
    raised, or None; ``flagged``: what its ``take_input_errors`` said after the call (None: it has none). The guard
    canaries show where an unchecked write went.
    """
    changed = after != before
    strays = torch.nonzero(changed & ~valid_footprint).flatten()
    if error is not None and not bool(changed.any()):
        return VALIDATED, f"raised before writing: {error}"
    told = f"raised ({error}) only after writing" if error is not None else "slot == capacity was accepted and wrote"
    if strays.numel() == 0:
        if error is None and flagged:
            return FLAGGED, f"wrote the valid tokens, skipped the bad one and flagged it on the device: {flagged[0]}"
        return UNCHECKED, f"{told} the valid tokens, dropping the bad one"
    where, inside = [], strays.numel()
    for name, start, end in guards:
        hit = strays[(strays >= start) & (strays < end)]
        if hit.numel():
            inside -= hit.numel()
            first, last = int(hit[0]) - start, int(hit[-1]) - start
            span = f"+{first}" if first == last else f"+{first}..+{last}"
            where.append(f"{hit.numel()} byte(s) into the guard after {name} (bytes {span})")
    if inside:
        where.append(f"{inside} byte(s) inside the cache")
    return UNCHECKED, f"{told} {' and '.join(where)}"
