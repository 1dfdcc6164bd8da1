"""The ctypes Structures the CUDA kernels are called with mirror their C structs field by field (no GPU needed).

A field the C side has and the Python side lacks shifts every later field: the kernel then reads a double's bits
as a row count, and ctypes accepts an unknown keyword at construction without a word. Both sides are read here,
the C struct from the source the kernels are built from.
"""

from __future__ import annotations

import ctypes
import re
from pathlib import Path

import pytest

from rtp_ref.kernels import cuda_gather, cuda_mha_indexer, cuda_mla

CSRC = Path(cuda_mla.__file__).resolve().parent / "csrc"
C_TYPES = {"int64_t": ctypes.c_int64, "double": ctypes.c_double}

MIRRORS = [
    ("mha_indexer.cu", "RtpRefMhaParams", cuda_mha_indexer._MhaParams),
    ("mha_indexer.cu", "RtpRefIndexerParams", cuda_mha_indexer._IndexerParams),
    ("gather.cu", "RtpRefGatherParams", cuda_gather._GatherParams),
    ("gather.cu", "RtpRefIndexerGatherParams", cuda_gather._IndexerGatherParams),
    ("mla_cache.cu", "RtpRefMlaParams", cuda_mla._Params),
]


def c_struct_fields(source: str, name: str) -> list[tuple[str, type]]:
    """The ``(field, ctypes type)`` list of ``struct name { ... };`` in ``source``: declarations of int64_t and
    double, several names to a declaration, comments dropped."""
    body = re.search(rf"struct {name} \{{(.*?)\n\}};", source, flags=re.DOTALL)
    assert body is not None, f"struct {name} not found"
    text = re.sub(r"//[^\n]*", "", body.group(1))
    fields = []
    for declaration in filter(None, (d.strip() for d in text.split(";"))):
        c_type, names = declaration.split(None, 1)
        fields += [(n.strip(), C_TYPES[c_type]) for n in names.split(",")]
    return fields


@pytest.mark.parametrize(("source", "name", "mirror"), MIRRORS, ids=[m[1] for m in MIRRORS])
def test_the_ctypes_structure_mirrors_the_c_struct(source: str, name: str, mirror: type[ctypes.Structure]) -> None:
    want = c_struct_fields((CSRC / source).read_text(), name)
    got = [(field, c_type) for field, c_type, *_ in mirror._fields_]
    assert got == want


def test_the_c_struct_reader_sees_every_field() -> None:
    """Several names to a declaration, comments, both types: what the sources use."""
    source = "struct S {\n  int64_t a, b;  // two, with a comment\n  int64_t c;\n  double d, e_;\n};"
    assert c_struct_fields(source, "S") == [("a", ctypes.c_int64), ("b", ctypes.c_int64), ("c", ctypes.c_int64),
                                            ("d", ctypes.c_double), ("e_", ctypes.c_double)]
