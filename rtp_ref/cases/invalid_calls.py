"""Calls a conforming kernel must refuse: part of the write's contract and graded with it, not hardening
(rtp_ref.cases.input_checks), because a kernel that returns from one has silently written bytes no reader can use.

``mismatched_cache`` (rtp_ref.cases.cases.MISMATCHED_CACHE_KIND): under ``auto`` the cache holds the inputs' own
16-bit type. Called with bf16 inputs and an fp16 cache (the MLA and the MHA write), a kernel that copies bits stores
bf16 patterns that every reader decodes as fp16: fluent nonsense, with no error and no non-finite value (vLLM
#54338). The kernel must raise before writing a byte; one that returns, or writes and then raises, fails
``support.mismatched_cache_raises``.
"""

from __future__ import annotations

import torch

from rtp_ref.cases.cases import MISMATCHED_CACHE_KIND
from rtp_ref.cases.checks import Check

#: the kinds of case whose call a kernel must refuse before writing
MUST_RAISE_KINDS = (MISMATCHED_CACHE_KIND,)
#: the check a kernel that does not refuse them fails
MISMATCHED_CACHE_CHECK = "support.mismatched_cache_raises"


def refused_before_writing(before: torch.Tensor, after: torch.Tensor, error: str | None) -> Check:
    """``support.mismatched_cache_raises`` for a call that must be refused: ``before``/``after`` are the case's bytes
    around it (CPU), ``error`` what the kernel raised (None: it returned). Passed when it raised and changed
    nothing."""
    changed = int((after != before).sum())
    if error is not None and not changed:
        return Check(MISMATCHED_CACHE_CHECK, True)
    if error is not None:
        detail = f"it raised ({error}) only after changing {changed} byte(s)"
    elif changed:
        detail = (f"it returned after changing {changed} byte(s): the inputs' bits in a cache of the other 16-bit "
                  f"type read back as other numbers (vLLM #54338)")
    else:
        detail = "it returned without raising (and wrote nothing): the engine is never told its cache is wrong"
    return Check(MISMATCHED_CACHE_CHECK, False, f"under auto, a cache of another dtype than the inputs': {detail}")
