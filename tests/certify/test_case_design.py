"""Each op's cases separate one defect each: a strided case is a random case of the same op with only its inputs
strided, so a kernel failing it and not its twin fails on the stride alone (and no stride hides behind another
parameter, as a strided indexer case at quant block 64 alone once did)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from rtp_ref.cases.cases import STRIDED_KINDS
from rtp_ref.cases.mha_indexer_cases import STRIDED_MHA_INDEXER_KINDS
from rtp_ref.ops import OPS


def _shape(key: Any) -> dict[str, object]:
    """Every field of a case key but its kind and seed."""
    spec = getattr(key, "spec", key)
    fields = {k: v for k, v in dataclasses.asdict(spec).items() if k not in ("kind", "seed")}
    return {**fields, "dims": getattr(key, "dims", None)}


@pytest.mark.parametrize("op", list(OPS))
def test_every_strided_case_has_a_contiguous_twin(op: str) -> None:
    for variant in OPS[op].variants:
        keys = list(OPS[op].cases.specs(variant))
        randoms = [_shape(k) for k in keys if k.kind == "random"]
        strided = [k for k in keys if k.kind in (*STRIDED_KINDS, *STRIDED_MHA_INDEXER_KINDS)]
        for key in strided:
            assert _shape(key) in randoms, f"{op} {variant}: {key.case_id} has no random twin"


def test_the_twin_check_fails_a_strided_case_that_changes_another_parameter() -> None:
    keys = list(OPS["indexer_k_quant_and_cache"].cases.specs("none"))
    fused = next(k for k in keys if k.kind == "fused")
    moved = dataclasses.replace(fused, quant_block=32)
    assert _shape(moved) not in [_shape(k) for k in keys if k.kind == "random"]
