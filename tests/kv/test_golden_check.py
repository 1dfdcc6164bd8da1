"""``rtp-ref golden-check``: golden files read back, on real files, with real kernels.

The checker must pass every file ``rtp-ref golden`` writes, and must catch a flipped byte in the
stored expected cache, a reference that changed under a file, a kernel that writes one wrong byte
(the mutants of tests/mutants, loaded through $RTP_REF_KERNELS in a real subprocess) and a kernel
that raises. Damaged files exit 2 (tests/cli/test_hardening.py covers the damage through the
command line); the cases here that need a file built by hand use the safetensors library to write it.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from rtp_ref.cli import main
from rtp_ref.kv.golden import GoldenContract, make_golden
from rtp_ref.kv.golden_read import METADATA_KEYS, TENSOR_KEYS, read_golden
from rtp_ref.kv.layouts import MlaLayout
from rtp_ref.platform import load_platform
from tests.processes import child_env
from tests.zygote import CliRun, shared_zygote

REPO = Path(__file__).resolve().parents[2]


def golden(path: Path, layout: str, platform: str = "cpu", *extra: str) -> Path:
    """Write a golden file with ``rtp-ref golden`` (in process) and return its path."""
    assert main(["golden", "--layout", layout, "--platform", platform, "--out", str(path), *extra]) == 0
    return path


def check(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``rtp-ref golden-check ARGV`` in process: (exit code, stdout, stderr); earlier output is dropped."""
    capsys.readouterr()
    code = main(["golden-check", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def check_subprocess(*argv: str, kernels_env: str) -> CliRun:
    """``rtp-ref golden-check ARGV`` as a real process with ``$RTP_REF_KERNELS`` set (run from the repo), GPUs
    hidden: the test kernels' faults and mutations are the CPU's, and the report names the device ("on cpu")."""
    env = child_env(REPO, RTP_REF_KERNELS=kernels_env, CUDA_VISIBLE_DEVICES="")
    return shared_zygote().run(["golden-check", *argv], env, REPO, timeout=120)


def contents(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    with safe_open(str(path), "pt") as handle:
        return {k: handle.get_tensor(k) for k in handle.keys()}, dict(handle.metadata())  # noqa: SIM118


def flip_byte(path: Path, tensor: str, byte: int) -> None:
    """Flip the lowest bit of byte ``byte`` of ``tensor``'s data in the file, in place."""
    data = bytearray(path.read_bytes())
    (size,) = struct.unpack("<Q", data[:8])
    start = json.loads(data[8:8 + size])[tensor]["data_offsets"][0]
    data[8 + size + start + byte] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("layout", "platform", "extra"),
    [
        ("auto", "cpu", ["--input-dtype", "fp16"]),
        ("fp8", "cuda-sm90", []),
        ("fp8_ds_mla", "rocm-gfx942", ["--kv-lora-rank", "200", "--layout-flag", "lora_alignment=round_up"]),
        ("fp8_model1_mla", "cpu", ["--block-size", "3", "--num-blocks", "5", "--tokens", "13"]),
        ("fp8_rocm_compact", "rocm-gfx942", ["--rope-dim", "32"]),
    ],
)
def test_every_file_golden_writes_checks_clean(tmp_path: Path, capsys: pytest.CaptureFixture[str], layout: str,
                                               platform: str, extra: list[str]) -> None:
    path = golden(tmp_path / "g.safetensors", layout, platform, *extra)
    code, out, _ = check(capsys, str(path), "--kernel", "reference", "--json")
    document = json.loads(out)
    assert code == 0 and document["ok"] is True
    assert document["reference"]["matches"] and document["reference"]["mismatched_bytes"] == 0
    assert document["kernel"]["name"] == "reference" and document["kernel"]["matches"]
    assert document["metadata"]["layout"] == layout


def test_reader_keys_are_the_writers_keys() -> None:
    case = make_golden(load_platform("cpu"), "fp8", tokens=4, num_blocks=1, block_size=4)
    assert set(case.metadata) == set(METADATA_KEYS)
    assert set(case.tensors) == set(TENSOR_KEYS)


def test_flipped_byte_in_the_expected_cache_is_located(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = golden(tmp_path / "g.safetensors", "fp8_ds_mla")
    slots = contents(path)[0]["slot_mapping"].tolist()
    written = slots[1]  # token 1 is written (every 4th token, from index 3, is skipped)
    block, row = divmod(written, 16)
    # byte 2 of the second fp32 tile scale of that token's entry (entry: 512 nope, 16 scale, 128 rope)
    flip_byte(path, "kv_cache_expected", (block * 16 + row) * 656 + 512 + 4 + 2)
    code, out, _ = check(capsys, str(path))
    assert code == 1
    assert "reference: MISMATCH: 1 of 41984 bytes of kv_cache_expected differ" in out
    assert f"block {block} byte {row * 656 + 518}: row {row} (token 1), field nope_scale byte 6" in out
    assert out.rstrip().endswith("rtp-ref: golden-check FAILED")


def test_flipped_byte_outside_the_written_entries_is_caught(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = golden(tmp_path / "g.safetensors", "fp8", "cpu", "--tokens", "2", "--num-blocks", "2")
    slots = contents(path)[0]["slot_mapping"].tolist()
    free = next(s for s in range(32) if s not in slots)
    flip_byte(path, "kv_cache_expected", free * 576 + 7)
    code, out, _ = check(capsys, str(path), "--json")
    mismatch = json.loads(out)["reference"]["first_mismatches"]
    assert code == 1 and len(mismatch) == 1
    assert mismatch[0]["token"] is None and mismatch[0]["field"] == "nope" and mismatch[0]["field_byte"] == 7


def test_a_changed_reference_contract_is_caught(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The cache of a file written under one contract does not check under another: what a reference
    change between rtp-ref versions looks like to the checker."""
    path = golden(tmp_path / "g.safetensors", "fp8_ds_mla")
    tensors, metadata = contents(path)
    flags = json.loads(metadata["flags"])
    flags["fp8_max_divisor"] = 224.0
    metadata["flags"] = json.dumps(flags)
    save_file(tensors, str(path), metadata=metadata)
    code, out, _ = check(capsys, str(path))
    assert code == 1 and "reference: MISMATCH" in out and "field nope byte" in out


def test_stored_inputs_that_are_no_valid_write_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = golden(tmp_path / "g.safetensors", "fp8", "cpu", "--tokens", "3")
    tensors, metadata = contents(path)
    tensors["slot_mapping"][1] = tensors["slot_mapping"][0]
    save_file(tensors, str(path), metadata=metadata)
    code, out, err = check(capsys, str(path))
    assert (code, out) == (2, "")
    assert "the stored inputs are not a valid write: slot_mapping: slot_mapping[1]" in err
    assert "repeats slot_mapping[0]" in err


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("block_size", "sixteen", "metadata 'block_size' is 'sixteen'; valid: an integer >= 1"),
        ("layout", "fp9", "metadata 'layout' is 'fp9'; valid: auto, fp8, fp8_ds_mla"),
        ("flags", "{", "metadata 'flags' is not JSON"),
        ("flags", '{"lora_alignment": "strict"}', "missing layout flag(s) compact_fp8_for_sparse"),
        ("bytes_per_token", "575", "metadata 'bytes_per_token' is 575, but layout fp8 with R=512 P=64"),
        ("num_tokens", "31", "tensor 'kv_c' is bfloat16 [32, 512]; valid: bfloat16 [31, 512] (from the metadata)"),
        ("rope_dim", "0", "metadata 'rope_dim' is '0'; valid: an integer >= 1"),
        ("fp8_format", "e4m3", "metadata 'fp8_format' is 'e4m3'; valid: e4m3fn, e4m3fnuz, e5m2, e5m2fnuz"),
    ],
)
def test_bad_metadata_exits_2_naming_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str,
                                            value: str, message: str) -> None:
    path = golden(tmp_path / "g.safetensors", "fp8")
    tensors, metadata = contents(path)
    save_file(tensors, str(path), metadata={**metadata, key: value})
    code, out, err = check(capsys, str(path))
    assert (code, out) == (2, "")
    assert err.startswith(f"rtp-ref: error: golden file '{path}'") and message in err
    assert len(err.splitlines()) == 1


def test_read_golden_gives_the_layout_of_the_files_own_contract(tmp_path: Path) -> None:
    path = golden(tmp_path / "g.safetensors", "fp8_ds_mla", "rocm-gfx942")
    read = read_golden(path)
    layout = read.layout
    assert isinstance(layout, MlaLayout) and layout.element_format.name == "e4m3fnuz"
    assert layout.flags.fp8_max_divisor == 224.0 and layout.flags.ds_mla_scale_rule.value == "amax_div"
    assert read.contract == GoldenContract(layout.element_format, layout.conversion_mode, layout.flags)


def _first_mismatch_of_inline_model1_scales(path: Path) -> str:
    """Where a writer of 584-byte model1 rows (scales inline) first differs: the 8 scale bytes of the
    first written row r of block 0 land on the 576-byte data row r + 1, at its nope byte 0."""
    slots = contents(path)[0]["slot_mapping"].tolist()
    row = min(s for s in slots if 0 <= s < 16) + 1
    return f"row {row} (token {slots.index(row)}), field nope byte 0"


@pytest.mark.parametrize(
    ("layout", "mutant"), [("fp8_ds_mla", "mutant-swapped-scales"), ("fp8_model1_mla", "mutant-model1-scales-inline")]
)
def test_a_mutant_kernels_wrong_bytes_are_reported(tmp_path: Path, layout: str, mutant: str) -> None:
    path = golden(tmp_path / "g.safetensors", layout)
    field = "field nope_scale" if layout == "fp8_ds_mla" else _first_mismatch_of_inline_model1_scales(path)
    done = check_subprocess(str(path), "--kernel", mutant, kernels_env="tests.mutants.kernels:mutants")
    assert done.returncode == 1, done.stderr
    assert "reference: kv_cache_expected is what the reference writer" in done.stdout
    assert f"kernel {mutant} on cpu: MISMATCH:" in done.stdout and field in done.stdout
    assert done.stderr == ""


def test_a_kernel_that_raises_fails_the_check(tmp_path: Path) -> None:
    # tests/mutants/faults.py's kernels fault on layout auto, 1 bf16 token, block size 16.
    path = golden(tmp_path / "g.safetensors", "auto", "cpu", "--tokens", "1", "--num-blocks", "1")
    done = check_subprocess(str(path), "--kernel", "fault-raises", kernels_env="tests.mutants.faults:kernels")
    assert done.returncode == 1, done.stderr
    assert "kernel fault-raises on cpu: RAISED RuntimeError: fault-raises: simulated kernel launch failure" \
        in done.stdout
    assert "Traceback" not in done.stdout + done.stderr


def test_the_builtin_kernels_pass_a_golden_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = golden(tmp_path / "g.safetensors", "fp8_model1_mla", "cpu", "--tokens", "8", "--num-blocks", "1")
    code, out, _ = check(capsys, str(path), "--kernel", "torch-eager")
    device = "cuda" if torch.cuda.is_available() else "cpu"  # golden-check runs a kernel on its GPU when there is one
    assert code == 0 and f"kernel torch-eager on {device}: the cache matches kv_cache_expected" in out

