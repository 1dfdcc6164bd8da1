"""A new op is its module (its record and its cases) and its reference, and no conformance, conftest or verdict file:
a made-up op (rows copied into a cache at their slots) is added to a copy of the tree as two new files, and a real
``rtp-ref certify`` run in that copy certifies a kernel of it and fails a broken one, with examples from the shared
locator (rtp_ref.cases.storage). docs/conformance.md records the count."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from tests.processes import child_env

REPO = Path(__file__).resolve().parents[2]

#: the op's reference: rows of ``x`` copied verbatim into their slots of a ``[blocks, block_size, width]`` cache
REFERENCE = '''
"""The scratch op's reference: each row of ``x`` copied into its slot of the cache (a negative slot: nothing)."""

import torch


def reference_copy_rows(layout: object, x: torch.Tensor, cache: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    keep = slot_mapping >= 0
    rows = cache.view(-1, cache.shape[-1])
    rows[slot_mapping[keep]] = x[keep]
'''

#: the op's module: its record, with its conformance cases (keys, the built case, its grading from the shared checks)
OP_MODULE = '''
"""``scratch_copy_rows``: a made-up op of tests/certify/test_add_an_op.py, its record and its cases."""

from dataclasses import dataclass

import torch

from rtp_ref.cases.cases import CANARY, GUARD_BYTES
from rtp_ref.cases.checks import grade_reached
from rtp_ref.cases.grading import Grading
from rtp_ref.cases.op_cases import OpCases
from rtp_ref.cases.storage import StorageMap, field_places, slot_namer
from rtp_ref.cases.value_checks import failing, with_examples
from rtp_ref.fp8.elements import dtype_element
from rtp_ref.kv.scratch_copy_rows import reference_copy_rows
from rtp_ref.ops.record import OpSpec


@dataclass(frozen=True)
class Key:
    layout: str
    kind: str
    tokens: int
    seed: int

    @property
    def case_id(self):
        return f"{self.kind}-t{self.tokens}"


class Case:
    def __init__(self, key, contract, device):
        self.key, self.layout = key, key.layout
        g = torch.Generator().manual_seed(key.seed)
        self.x = torch.randn(key.tokens, 64, generator=g).to(torch.bfloat16).to(device)
        self.slots = torch.randperm(4 * 16, generator=g)[: key.tokens].to(device)
        self.storage = torch.full((2 * GUARD_BYTES + 4 * 16 * 64 * 2,), CANARY, dtype=torch.uint8, device=device)
        self.cache = self.view(self.storage)

    def view(self, storage):
        return storage[GUARD_BYTES:-GUARD_BYTES].view(torch.bfloat16).view(4, 16, 64)

    def check_as_built(self, device):
        assert self.storage.device.type == device

    def snapshot(self):
        return self.storage.cpu().clone()

    def call(self, kernel):
        kernel(self.x, self.cache, self.slots, self.key.layout)

    def value_inputs(self):
        return (self.x,)

    def grade(self, before, after, max_ulp):
        ref = before.clone()
        reference_copy_rows(self.layout, self.x.cpu(), self.view(ref), self.slots.cpu())
        layer = torch.empty_like(before)
        place = StorageMap(layer.numel(), [field_places("row", self.view(layer), layer, dtype_element(torch.bfloat16),
                                                        2)], [("cache", GUARD_BYTES, layer.numel() - GUARD_BYTES)],
                           slot_namer(self.slots))
        differ = after != ref
        examples = place.examples(torch.nonzero(differ).flatten(), after, ref, before)
        checks = [failing("bit_exact.bytes", not bool(differ.any()), lambda: with_examples(
            f"{int(differ.sum())} byte(s) differ from the reference", examples))]
        return Grading(checks, grade_reached([c.name for c in checks if not c.passed]), {})

    def diagnose(self, after, contract):
        return None

    def record_fields(self):
        return {}


def _specs(variant):
    return [Key(variant, "random", tokens, seed) for seed, tokens in enumerate((1, 9, 37), start=1)]


OP = OpSpec("scratch_copy_rows", "scratch", "variants", ("auto",), "kernel(x, cache, slot_mapping, variant)",
            "-scratch", reference_copy_rows,
            OpCases("scratch_copy_rows", _specs, Case, lambda variant: _specs(variant)[-1], names_variant=True),
            rank=50)
'''

#: two kernels of the op, out of tree (RTP_REF_KERNELS): a correct one and one that drops each row's last value
KERNELS = '''
import torch


class Copy:
    op = "scratch_copy_rows"
    variants = ("auto",)
    devices = ("cpu",)

    def __init__(self, name, drop_last):
        self.name, self.drop_last = name, drop_last

    def bind(self, contract):
        return self

    def __call__(self, x, cache, slot_mapping, variant):
        if variant not in self.variants:
            raise ValueError(f"{self.name} does not support {variant}")
        keep = slot_mapping >= 0
        rows = cache.view(-1, cache.shape[-1])
        width = x.shape[1] - (1 if self.drop_last else 0)
        rows[slot_mapping[keep], :width] = x[keep][:, :width]


def kernels():
    return [Copy("scratch-copy", False), Copy("scratch-copy-short", True)]
'''


def test_a_new_op_is_its_module_and_its_reference(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    for part in ("rtp_ref", "conformance", "platforms"):
        shutil.copytree(REPO / part, tree / part, ignore=shutil.ignore_patterns("__pycache__"))
    added = {"rtp_ref/kv/scratch_copy_rows.py": REFERENCE, "rtp_ref/ops/scratch_copy_rows.py": OP_MODULE}
    for path, text in added.items():
        (tree / path).write_text(text)
    (tmp_path / "scratch_kernels.py").write_text(KERNELS)
    out = tmp_path / "report"
    done = subprocess.run([sys.executable, "-m", "rtp_ref.cli", "certify", "--platform", "cpu", "--kernel",
                           "scratch-copy", "--kernel", "scratch-copy-short", "--report", str(out), "-n", "1"],
                          env=child_env(tree, tmp_path, RTP_REF_KERNELS="scratch_kernels:kernels"), cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert (out / "report.json").exists(), done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    rows = {r["kernel"]: r for r in report["summary"]["by_kernel_layout"] if r["kernel"].startswith("scratch")}
    assert rows["scratch-copy"]["verdict"] == "certified" and rows["scratch-copy"]["op"] == "scratch_copy_rows"
    assert rows["scratch-copy-short"]["verdict"] == "failed"
    failed = [c for c in report["cases"] if c.get("kernel") == "scratch-copy-short" and c.get("kind") == "random"]
    detail = failed[0]["checks"]["bit_exact.bytes"]
    assert "row[63]: kernel not written (still 0xa5a5) vs reference" in detail, detail
    assert done.returncode == 1
