"""``rtp-ref golden-check`` and ``read-check`` on golden files of the MHA paged and indexer writes, written by
``rtp-ref golden --family mha|indexer``.

The checker must pass every such file with the op's built-in kernels bound to the file's contract (a gfx942 file
holds e4m3fnuz codes and an fp8_max_divisor of 224, which an unbound kernel on the CPU would not write), must
name the element of a byte flipped by hand in the stored expected caches (its place worked out here from the
byte maps of docs/layouts.md, not from the reader), must name what a mutant kernel of tests/mutants got wrong
(expected bytes derived from the file itself), and must refuse, with exit 2 and one line, a kernel of another op,
a kernel that does not claim the file's variant or declares it does not write its layout, damaged metadata and
tensors, and read-check on a cache no platform table's reader convention speaks of.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from rtp_ref.cli import main
from rtp_ref.commands._golden_locate import LOCATORS
from rtp_ref.commands._golden_run import kernel_arguments, reference_arguments, reference_cache
from rtp_ref.kv.golden_mha_indexer import GoldenShape, make_indexer_golden, make_mha_golden
from rtp_ref.kv.golden_read import GOLDEN_FORMS, call_values, fresh_caches, read_golden
from rtp_ref.kv.golden_read_mha_indexer import (
    INDEXER_METADATA_KEYS,
    INDEXER_TENSOR_KEYS,
    MHA_METADATA_KEYS,
    MHA_TENSOR_KEYS,
)
from rtp_ref.kv.indexer import IndexerLayout
from rtp_ref.ops import WRITE_OPS
from rtp_ref.platform import load_platform
from tests.kv.test_golden_check import check, check_subprocess, contents, flip_byte

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs" / "layouts.md"
MUTANTS = "tests.mutants.kernels:mutants"
OP_OF = {"mla": "concat_and_cache_mla", "mha": "reshape_and_cache_flash", "indexer": "indexer_k_quant_and_cache"}


def golden(path: Path, family: str, layout: str, platform: str = "cpu", *extra: str) -> Path:
    """Write a golden file with ``rtp-ref golden --family FAMILY`` (in process) and return its path."""
    assert main(["golden", "--family", family, "--layout", layout, "--platform", platform, "--out", str(path),
                 *extra]) == 0
    return path


def error_line(capsys: pytest.CaptureFixture[str], argv: Sequence[str]) -> str:
    """``rtp-ref ARGV`` in process, which must exit 2 with nothing on stdout and one line on stderr: that line."""
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert (code, out) == (2, ""), err
    assert len(err.splitlines()) == 1, err
    return err


def test_every_write_op_has_a_golden_form_whose_call_names_resolve(tmp_path: Path) -> None:
    assert set(GOLDEN_FORMS) == set(LOCATORS) == set(WRITE_OPS)
    for family, op in OP_OF.items():
        read = read_golden(golden(tmp_path / f"{family}.safetensors", family, "none" if family == "indexer" else "fp8"))
        assert read.op == op
        values = call_values(read, fresh_caches(read))
        assert set(kernel_arguments(op)) == set(values), op  # every argument of the call, and nothing else
        assert set(reference_arguments(op)) < set(kernel_arguments(op)), op


def test_reader_keys_are_the_writers_keys() -> None:
    platform = load_platform("cpu")
    shape = GoldenShape(tokens=4, block_size=4, num_blocks=1)
    for case, metadata_keys, tensor_keys in (
            (make_mha_golden(platform, "fp8", 2, 8, "HND", True, shape), MHA_METADATA_KEYS, MHA_TENSOR_KEYS),
            (make_indexer_golden(platform, "ue8m0", 128, 64, shape), INDEXER_METADATA_KEYS, INDEXER_TENSOR_KEYS)):
        assert set(case.metadata) == set(metadata_keys)
        assert set(case.tensors) == set(tensor_keys)


def test_the_docs_name_every_key_of_these_files() -> None:
    section = DOCS.read_text().split("### Golden files of the MHA and indexer caches", 1)[1].split("\n## ", 1)[0]
    for key in {*MHA_METADATA_KEYS, *INDEXER_METADATA_KEYS, *MHA_TENSOR_KEYS, *INDEXER_TENSOR_KEYS}:
        assert f"`{key}`" in section, key


@pytest.mark.parametrize(
    ("family", "layout", "platform", "extra"),
    [
        ("mha", "fp8", "rocm-gfx942", ["--cache-order", "HND", "--per-head-scales", "--num-kv-heads", "4"]),
        ("mha", "fp8_e5m2", "cuda-sm90", []),
        ("mha", "auto", "cpu", ["--input-dtype", "fp16", "--cache-order", "HND"]),
        ("indexer", "ue8m0", "rocm-gfx942", ["--quant-block-size", "64"]),
        ("indexer", "none", "cpu", ["--block-size", "3", "--num-blocks", "5", "--tokens", "13"]),
    ],
)
def test_every_file_golden_writes_checks_clean_with_the_ops_kernels(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], family: str, layout: str, platform: str,
        extra: list[str]) -> None:
    path = golden(tmp_path / "g.safetensors", family, layout, platform, *extra)
    for kernel in (f"reference-{family}", f"torch-eager-{family}"):
        code, out, _ = check(capsys, str(path), "--kernel", kernel, "--json")
        document = json.loads(out)
        assert code == 0 and document["ok"] is True, out
        assert document["op"] == OP_OF[family] and document["metadata"]["layout"] == layout
        assert document["reference"]["mismatched_bytes"] == 0
        assert document["kernel"]["name"] == kernel and document["kernel"]["matches"]
        cache_bytes = sum(t.numel() * t.element_size() for k, t in contents(path)[0].items() if k.endswith("_before"))
        assert document["kernel"]["bytes"] == cache_bytes  # every cache compared: both of an MHA call


def test_the_generic_reference_run_is_the_ops_reference_called_directly(tmp_path: Path) -> None:
    """golden-check's run of the reference (arguments by name, an HND cache through its permutation) writes what the
    op's reference writes when called here by hand on the stored inputs: the stored expected caches."""
    from rtp_ref.kv.mha_paged import mha_layout, reference_reshape_and_cache_flash

    path = golden(tmp_path / "g.safetensors", "mha", "fp8", "rocm-gfx942", "--cache-order", "HND",
                  "--num-kv-heads", "2", "--head-size", "16")
    t, _ = contents(path)
    kc, vc = t["key_cache_before"].clone(), t["value_cache_before"].clone()
    layout = mha_layout(load_platform("rocm-gfx942"), "fp8", 2, 16)
    reference_reshape_and_cache_flash(layout, t["key"], t["value"], kc.permute(0, 2, 1, 3), vc.permute(0, 2, 1, 3),
                                      t["slot_mapping"], t["k_scale"], t["v_scale"])
    assert torch.equal(kc, t["key_cache_expected"]) and torch.equal(vc, t["value_cache_expected"])
    assert not torch.equal(kc, t["key_cache_before"])
    run = reference_cache(read_golden(path))
    assert torch.equal(run["key_cache"], kc) and torch.equal(run["value_cache"], vc)


def _written(path: Path) -> list[tuple[int, int]]:
    """(token, slot) of every written token, by slot."""
    return sorted(((tok, s) for tok, s in enumerate(contents(path)[0]["slot_mapping"].tolist()) if s >= 0),
                  key=lambda ts: ts[1])


def test_a_flipped_byte_of_an_hnd_value_cache_is_named_by_token_head_and_dim(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    heads, size, block_size = 2, 16, 16
    path = golden(tmp_path / "g.safetensors", "mha", "fp8", "cpu", "--cache-order", "HND", "--num-kv-heads",
                  str(heads), "--head-size", str(size))
    token, slot = _written(path)[3]
    block, row = divmod(slot, block_size)
    # HND storage [blocks, heads, rows, dim] of one-byte codes: head 1, dim 5 of that token
    byte = ((block * heads + 1) * block_size + row) * size + 5
    flip_byte(path, "value_cache_expected", byte)
    code, out, _ = check(capsys, str(path))
    assert code == 1
    assert "reference: MISMATCH: 1 of 4096 bytes of key_cache_expected and value_cache_expected differ" in out
    assert f"  value_cache byte {byte}: token {token} (slot {slot}) value head 1 [5]: value_cache_expected has " \
           in out
    assert out.rstrip().endswith("rtp-ref: golden-check FAILED")
    code, out, _ = check(capsys, str(path), "--json")
    (entry,) = json.loads(out)["reference"]["first_mismatches"]
    assert (entry["cache"], entry["byte"], entry["token"], entry["slot"], entry["field"]) == \
        ("value_cache", byte, token, slot, "value")
    assert entry["written"] and entry["differing_bytes"] == 1


def test_a_flipped_scale_byte_of_an_indexer_cache_is_named_by_token_and_scale(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = golden(tmp_path / "g.safetensors", "indexer", "ue8m0", "cpu", "--quant-block-size", "64")
    token, slot = _written(path)[0]
    block, row = divmod(slot, 16)
    # a block: 16 tokens x 128 codes, then 16 tokens x 2 fp32 scales; byte 2 of this token's second scale
    scale = block * 16 * 136 + 16 * 128 + row * 8 + 4
    flip_byte(path, "kv_cache_expected", scale + 2)
    code, out, _ = check(capsys, str(path))
    assert code == 1 and "reference: MISMATCH: 1 of 8704 bytes of kv_cache_expected differ" in out
    assert f"  kv_cache byte {scale}: token {token} (slot {slot}) k_scale[1]: kv_cache_expected has " in out


def test_a_changed_contract_is_caught(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A file whose flags and divisor say 224 while its cache was written with 448: the reference follows the
    file's own contract, so every written scale differs."""
    path = golden(tmp_path / "g.safetensors", "indexer", "none", "cpu")
    tensors, metadata = contents(path)
    flags = json.loads(metadata["flags"])
    flags["fp8_max_divisor"] = 224.0
    save_file(tensors, str(path), metadata={**metadata, "flags": json.dumps(flags), "scale_divisor": "224.0"})
    code, out, _ = check(capsys, str(path))
    assert code == 1 and "reference: MISMATCH" in out


def test_a_swapping_mutant_is_shown_with_the_other_caches_bytes(tmp_path: Path) -> None:
    path = golden(tmp_path / "g.safetensors", "mha", "fp8", "cpu", "--num-kv-heads", "2", "--head-size", "16")
    t, _ = contents(path)
    # the mutant writes the values into the key cache: its first differing byte is the first byte of a written
    # slot where the expected key and value caches differ (NHD: 2 heads x 16 one-byte codes a slot)
    key, value = t["key_cache_expected"].reshape(-1), t["value_cache_expected"].reshape(-1)
    written = torch.zeros(64, dtype=torch.bool)
    written[[s for s in t["slot_mapping"].tolist() if s >= 0]] = True
    byte = int(((key != value) & written.repeat_interleave(32)).nonzero()[0])
    slot, element = divmod(byte, 32)
    token = t["slot_mapping"].tolist().index(slot)
    done = check_subprocess(str(path), "--kernel", "mutant-mha-kv-swapped", kernels_env=MUTANTS)
    assert done.returncode == 1, done.stderr
    assert "reference: key_cache_expected and value_cache_expected are what the reference writer" in done.stdout
    assert "kernel mutant-mha-kv-swapped on cpu: MISMATCH:" in done.stdout
    first = done.stdout.split("MISMATCH:", 2)[1].splitlines()[1]
    assert first.startswith(f"  key_cache byte {byte}: token {token} (slot {slot}) key head {element // 16} "
                            f"[{element % 16}]: key_cache_expected has ")
    assert f"(0x{int(key[byte]):02x}), the kernel wrote " in first and first.endswith(f"(0x{int(value[byte]):02x})")
    assert done.stderr == ""


def test_a_scale_the_kernel_skips_is_reported_as_not_written(tmp_path: Path) -> None:
    path = golden(tmp_path / "g.safetensors", "indexer", "none", "cpu", "--quant-block-size", "64")
    t, _ = contents(path)
    before, expected = t["kv_cache_before"].reshape(4, -1), t["kv_cache_expected"].reshape(4, -1)
    differing = 0
    for _, slot in _written(path):
        block, row = divmod(slot, 16)
        at = 16 * 128 + row * 8 + 4
        differing += int((before[block, at:at + 4] != expected[block, at:at + 4]).sum())
    token, slot = _written(path)[0]
    done = check_subprocess(str(path), "--kernel", "mutant-indexer-skips-second-scale", kernels_env=MUTANTS)
    assert done.returncode == 1, done.stderr
    assert f"MISMATCH: {differing} of 8704 bytes differ from kv_cache_expected" in done.stdout
    assert f"token {token} (slot {slot}) k_scale[1]: kv_cache_expected has " in done.stdout
    assert "the kernel did not write it (still " in done.stdout


class _Limited:
    """A reference-indexer stand-in that declares it writes no quant block but 128 (``supports``)."""

    name = "limited-indexer"
    op = "indexer_k_quant_and_cache"
    scale_fmts = ("none", "ue8m0")
    devices = ("cpu",)

    def supports(self, layout: IndexerLayout) -> str | None:
        return None if layout.quant_block_size == 128 else f"quant_block_size {layout.quant_block_size}: 128 only"

    def __call__(self, *args: object) -> None:
        raise AssertionError("golden-check must not call a kernel that declared it does not write the layout")


def limited() -> list[object]:
    """The entry point for ``RTP_REF_KERNELS`` of the refusal test: a kernel with a ``supports`` limit."""
    return [_Limited(), *_mutants()]


def _mutants() -> list[object]:
    from tests.mutants.kernels import mutants

    return mutants()


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    return {"mha": golden(tmp_path / "mha.safetensors", "mha", "auto", "cpu", "--tokens", "4", "--num-blocks", "1"),
            "indexer": golden(tmp_path / "indexer.safetensors", "indexer", "none", "cpu", "--quant-block-size", "64"),
            "mla": golden(tmp_path / "mla.safetensors", "mla", "fp8_ds_mla")}


@pytest.mark.parametrize(
    ("file", "kernel", "message"),
    [
        ("mha", "torch-eager", "--kernel 'torch-eager': a kernel of concat_and_cache_mla, but golden file '{path}' "
         "holds a call of reshape_and_cache_flash; valid: a kernel of reshape_and_cache_flash (reference-mha, "
         "torch-eager-mha"),
        ("mla", "reference-indexer", "--kernel 'reference-indexer': a kernel of indexer_k_quant_and_cache, but golden "
         "file '{path}' holds a call of concat_and_cache_mla; valid: a kernel of concat_and_cache_mla (reference, "
         "torch-eager"),
        ("indexer", "reference-indexer-gather", "--kernel 'reference-indexer-gather': a kernel of "
         "cp_gather_indexer_k_quant_cache, but golden file '{path}' holds a call of indexer_k_quant_and_cache; valid: "
         "a kernel of indexer_k_quant_and_cache (reference-indexer, torch-eager-indexer"),
        ("mha", "mutant-mha-per-tensor-scale", "--kernel 'mutant-mha-per-tensor-scale' does not claim layout 'auto' "
         "of golden file '{path}'; valid: a kernel whose kv_cache_dtypes lists it (mutant-mha-per-tensor-scale "
         "claims fp8)"),
        ("indexer", "limited-indexer", "--kernel 'limited-indexer' declares it does not write the layout of golden "
         "file '{path}': quant_block_size 64: 128 only; valid: a kernel that writes it"),
    ],
)
def test_a_kernel_the_file_cannot_take_exits_2_naming_it(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, files: dict[str, Path], file: str,
        kernel: str, message: str) -> None:
    monkeypatch.setenv("RTP_REF_KERNELS", f"{__name__}:limited")
    err = error_line(capsys, ["golden-check", str(files[file]), "--kernel", kernel])
    assert err.startswith("rtp-ref: error: " + message.format(path=files[file])), err


def _rewrite(path: Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> Path:
    save_file(tensors, str(path), metadata=metadata)
    return path


@pytest.mark.parametrize(
    ("file", "change", "message"),
    [
        ("mha", {"op": "reshape_and_cache"}, "metadata 'op' is 'reshape_and_cache'; valid: concat_and_cache_mla, "
         "reshape_and_cache_flash, indexer_k_quant_and_cache"),
        ("mha", {"fp8_format": "e5m2"}, "metadata 'fp8_format' is 'e5m2', but kv_cache_dtype auto under these flags "
         "and platform_fp8_format gives 'none'; valid: 'none'"),
        ("mha", {"cache_order": "NDH"}, "metadata 'cache_order' is 'NDH'; valid: NHD, HND"),
        ("mha", {"cache_order": "HND"}, "tensor 'key_cache_before' is bfloat16 [1, 16, 8, 128]; valid: bfloat16 "
         "[1, 8, 16, 128] (from the metadata)"),
        ("mha", {"scales": "per_head"}, "tensor 'k_scale' is float32 [1]; valid: float32 [8] (from the metadata)"),
        ("mha", {"platform_fp8_format": "e4m3"}, "metadata 'platform_fp8_format' is 'e4m3'; valid: e4m3fn"),
        ("mha", {"flags": "{"}, "metadata 'flags' is not JSON"),
        ("indexer", {"scale_divisor": "224.0"}, "metadata 'scale_divisor' is '224.0', but head_dim 128, "
         "quant_block_size 64 and these flags gives '448.0'; valid: '448.0'"),
        ("indexer", {"quant_block_size": "48"}, "the metadata does not describe a layout: head_dim 128 is not a "
         "multiple of quant_block_size 48"),
        ("indexer", {"layout": "e8m0"}, "metadata 'layout' is 'e8m0'; valid: none, ue8m0"),
        ("indexer", {"num_tokens": "31"}, "tensor 'k' is bfloat16 [32, 128]; valid: bfloat16 [31, 128]"),
        ("indexer", {"flags": None}, "metadata lacks key 'flags'; valid keys of indexer_k_quant_and_cache files: "),
        ("indexer", {"kv_lora_rank": "512"}, "metadata has unknown key 'kv_lora_rank'"),
    ],
)
def test_damaged_metadata_exits_2_naming_the_key(capsys: pytest.CaptureFixture[str], files: dict[str, Path],
                                                 file: str, change: dict[str, str | None], message: str) -> None:
    tensors, metadata = contents(files[file])
    for key, value in change.items():
        if value is None:
            del metadata[key]
        else:
            metadata[key] = value
    path = _rewrite(files[file], tensors, metadata)
    err = error_line(capsys, ["golden-check", str(path)])
    assert err.startswith(f"rtp-ref: error: golden file '{path}'") and message in err, err


def test_a_missing_tensor_and_stored_inputs_that_are_no_valid_call_exit_2(
        capsys: pytest.CaptureFixture[str], files: dict[str, Path]) -> None:
    tensors, metadata = contents(files["indexer"])
    k = tensors.pop("k")
    _rewrite(files["indexer"], tensors, metadata)
    assert "lacks tensor 'k'; valid tensors: k, kv_cache_before, kv_cache_expected, slot_mapping" in \
        error_line(capsys, ["golden-check", str(files["indexer"])])
    slots = tensors["slot_mapping"]
    slots[1] = slots[0]
    _rewrite(files["indexer"], {**tensors, "k": k}, metadata)
    err = error_line(capsys, ["golden-check", str(files["indexer"])])
    assert "the stored inputs are not a valid write: slot_mapping: slot_mapping[1]" in err


@pytest.mark.parametrize(("file", "why"), [
    ("mha", "a call of reshape_and_cache_flash, whose cache no platform table's [reader] describes (it has no read "
     "op: attention kernels read it in place through the block table;"),
    ("indexer", "a call of indexer_k_quant_and_cache, whose cache no platform table's [reader] describes (its read "
     "op, cp_gather_indexer_k_quant_cache, copies the stored bytes as they are;"),
])
def test_read_check_refuses_a_cache_no_reader_convention_speaks_of(
        capsys: pytest.CaptureFixture[str], files: dict[str, Path], file: str, why: str) -> None:
    err = error_line(capsys, ["read-check", str(files[file]), "--platform", "cuda-sm100"])
    assert err.startswith(f"rtp-ref: error: golden file '{files[file]}': {why}")
    assert err.rstrip().endswith("valid: read-check reads golden files of concat_and_cache_mla (`rtp-ref golden "
                                 "--family mla`); `rtp-ref golden-check` checks this one")
    assert main(["read-check", str(files["mla"]), "--platform", "cuda-sm100"]) == 0  # the MLA file it reads
