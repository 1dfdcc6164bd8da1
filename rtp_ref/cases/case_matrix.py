"""Every conformance case of a layout: tokens, block sizes, input dtypes, shapes and edge kinds.

The conformance suite and ``rtp-ref memcheck`` draw their cases from here, so both run the same
inputs; a case is identified by its layout, ``case_id`` and (R, P).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from rtp_ref.cases.cases import MISMATCHED_CACHE_KIND, CaseSpec, num_blocks_for
from rtp_ref.cases.input_checks import EMPTY_CALL_KIND
from rtp_ref.cases.non_finite_cases import NON_FINITE_KINDS
from rtp_ref.cases.padding_cases import NAN_PADDING_KIND
from rtp_ref.kv.fields import ELEMENT_INPUT16
from rtp_ref.kv.layout_records import layout_record

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def layout_dims(layout: str) -> list[tuple[int, int]]:
    """(R, P) pairs each layout is certified at, from its record: its default, plus a smaller pair where R is
    free."""
    return layout_record(layout).certified_dims


def case_specs(layout: str) -> Iterator[tuple[CaseSpec, tuple[int, int]]]:
    """Every case of one layout: the empty call (no tokens: hardening, rtp_ref.cases.input_checks), tokens 1 and
    many; block sizes 1, 16, 64; bf16 and fp16; edge kinds; strided, fused-projection and element-aligned inputs;
    an int32 slot mapping and a 0-D scale; for ``auto``, a cache of the other 16-bit dtype, which must be refused
    (rtp_ref.cases.invalid_calls); a batch padded with NaN rows in the engine's convention
    (rtp_ref.cases.padding_cases); for a layout with a non-finite policy, a case per class
    (rtp_ref.cases.non_finite_cases). The launch-size case, sized by device, is the op's own
    (rtp_ref.cases.launch_size)."""
    seed = 0

    def spec(kind: str, tokens: int, block: int, dtype: str, slot_dtype: str = "int64",
             scale: str = "tensor") -> CaseSpec:
        nonlocal seed
        seed += 1
        return CaseSpec(layout, kind, tokens, block, num_blocks_for(tokens, block), DTYPES[dtype], seed, slot_dtype,
                        scale)

    dims = layout_dims(layout)
    for dtype in DTYPES:
        yield spec(EMPTY_CALL_KIND, 0, 16, dtype), dims[0]
        for tokens in (1, 37):
            for block in (1, 16, 64):
                yield spec("random", tokens, block, dtype), dims[0]
        yield spec("edge", 8, 16, dtype), dims[0]
    for extra in dims[1:]:
        yield spec("random", 37, 16, "bf16"), extra
    yield spec("noncontig", 37, 16, "bf16"), dims[0]
    yield spec("padded", 37, 16, "bf16"), dims[0]
    yield spec("padded", 20, 1, "fp16"), dims[0]
    yield spec("padding_only", 5, 16, "bf16"), dims[0]
    # production's input shapes (rtp_ref.cases.cases._strided_inputs), last so earlier cases keep their seeds
    yield spec("fused", 37, 16, "bf16"), dims[0]
    yield spec("elem_aligned", 37, 16, "fp16"), dims[0]
    # argument forms engines pass (rtp_ref.cases.domain), each alone on a random case
    yield spec("random", 20, 16, "bf16", slot_dtype="int32"), dims[0]
    yield spec("random", 20, 16, "fp16", scale="0d"), dims[0]
    if all(f.element == ELEMENT_INPUT16 for f in layout_record(layout).fields):
        yield spec(MISMATCHED_CACHE_KIND, 8, 16, "bf16"), dims[0]
    yield spec(NAN_PADDING_KIND, 37, 16, "bf16"), dims[0]
    if layout_record(layout).non_finite is not None:  # a dynamic-scale layout: its non-finite policy, class by class
        for kind in NON_FINITE_KINDS:
            yield spec(kind, 8, 16, "bf16"), dims[0]
