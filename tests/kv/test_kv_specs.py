"""rtp-llm's KV-cache specs: MHA and MLA sizes and the partition split, against hand-computed figures
(docs/sources.md#rtp-llm-kv-cache-specs) and exact arithmetic."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rtp_ref.errors import RtpRefError
from rtp_ref.fp8.formats import E4M3FN, ConversionMode
from rtp_ref.kv.dtypes import KvDtype, kv_dtype
from rtp_ref.kv.flags import resolve_flags
from rtp_ref.kv.specs import MhaSpec, MlaSpec, mla_spec, resolve_mla_spec_layout, split_kv_partition_bytes
from rtp_ref.platform import load_platform

CPU_FLAGS = resolve_flags(load_platform("cpu"))
ROCM_FLAGS = resolve_flags(load_platform("rocm-gfx942"))


def test_dtype_sizes_are_the_same_on_every_build() -> None:
    # getTypeSize; FP8_E4M3 is 1 even where rtp-llm's non-FP8 builds return 0
    assert {d.value: d.size for d in KvDtype} == {
        "fp32": 4,
        "fp16": 2,
        "bf16": 2,
        "int8": 1,
        "fp8_e4m3": 1,
        "fp8_e8m0": 1,
    }
    assert [d.value for d in KvDtype if d.is_mla_fp8] == ["fp8_e4m3", "fp8_e8m0"]
    assert [d.value for d in KvDtype if d.has_mha_scale] == ["int8", "fp8_e4m3"]
    with pytest.raises(RtpRefError, match=r"unknown KV-cache dtype 'fp8'; valid dtypes: fp32, fp16"):
        kv_dtype("fp8")


@pytest.mark.parametrize(
    ("spec", "local_kv", "k_elems", "block_bytes", "scale_bytes"),
    [
        # kv=8, tp=2 -> 4 heads; 4*128*64 = 32768 elements each for k and v; bf16 -> 2*32768*2 bytes
        (MhaSpec(KvDtype.BF16, 8, 128, tp_size=2, seq_size_per_block=64), 4, 32768, 131072, 0),
        # kv=6, tp=4: 4 does not divide 6 -> 6 / gcd(6, 4) = 3; S = 0 means 1; int8 -> 2*3*1 fp32 scales
        (MhaSpec(KvDtype.INT8, 6, 64, tp_size=4, seq_size_per_block=0), 3, 192, 384, 24),
        # kv=4, tp=8: 4 / gcd(4, 8) = 1; fp8 e4m3 has scales (2*1*16 floats), e8m0 has none
        (MhaSpec(KvDtype.FP8_E4M3, 4, 128, tp_size=8, seq_size_per_block=16), 1, 2048, 4096, 128),
        (MhaSpec(KvDtype.FP8_E8M0, 4, 128, tp_size=8, seq_size_per_block=16), 1, 2048, 4096, 0),
    ],
)
def test_mha_sizes(spec: MhaSpec, local_kv: int, k_elems: int, block_bytes: int, scale_bytes: int) -> None:
    assert spec.local_head_num_kv == local_kv
    assert spec.k_block_size == spec.v_block_size == k_elems
    assert spec.block_size == 2 * k_elems
    assert spec.block_size_bytes == block_bytes == spec.k_block_size_bytes + spec.v_block_size_bytes
    assert spec.scale_block_size_bytes == scale_bytes
    assert spec.k_scale_block_size_bytes == spec.v_scale_block_size_bytes == scale_bytes // 2


def test_seq_size_per_block_zero_means_one_and_negative_is_refused() -> None:
    assert MhaSpec(KvDtype.BF16, 1, 64, seq_size_per_block=0).block_size == MhaSpec(KvDtype.BF16, 1, 64).block_size
    with pytest.raises(RtpRefError, match=r"seq_size_per_block=-1 is not valid; valid: an integer >= 0"):
        MhaSpec(KvDtype.BF16, 1, 64, seq_size_per_block=-1)
    with pytest.raises(RtpRefError, match=r"tp_size=0 is not valid; valid: an integer >= 1"):
        MhaSpec(KvDtype.BF16, 1, 64, tp_size=0)


def _mla(
    dtype: KvDtype, *, sparse: bool = False, rank: int = 512, rope: int = 64, s: int = 1, rocm_flags: bool = False
) -> MlaSpec:
    return mla_spec(
        dtype,
        kv_lora_rank=rank,
        rope_dim=rope,
        flags=ROCM_FLAGS if rocm_flags else CPU_FLAGS,
        element_format=E4M3FN,
        conversion_mode=ConversionMode.SATFINITE,
        seq_size_per_block=s,
        is_sparse=sparse,
    )


# The PR's MLAKVCacheSpecTest figures (R=512, P=64, S=1), with the compact choice injected by flag.
@pytest.mark.parametrize(
    ("dtype", "sparse", "rocm_flags", "block_bytes", "k_plus_v"),
    [
        (KvDtype.BF16, False, False, 1152, True),
        (KvDtype.BF16, True, True, 1152, True),  # 16-bit caches never depend on sparsity
        (KvDtype.FP8_E4M3, False, False, 656, False),
        (KvDtype.FP8_E4M3, False, True, 656, False),  # dense fp8 is ds_mla on every platform
        (KvDtype.FP8_E4M3, True, False, 656, False),
        (KvDtype.FP8_E4M3, True, True, 576, True),
        (KvDtype.FP8_E8M0, False, False, 656, False),  # E8M0 counts as fp8
        (KvDtype.FP8_E8M0, True, True, 576, True),
    ],
)
def test_mla_block_bytes(dtype: KvDtype, sparse: bool, rocm_flags: bool, block_bytes: int, k_plus_v: bool) -> None:
    for s in (1, 16):
        spec = _mla(dtype, sparse=sparse, rocm_flags=rocm_flags, s=s)
        assert spec.block_size_bytes == block_bytes * s
        assert spec.k_block_size == 512 * s and spec.v_block_size == 64 * s
        assert spec.k_plus_v_equals_block is k_plus_v
        assert spec.scale_block_size_bytes == 0


def test_dense_fp8_k_plus_v_is_576_of_a_656_byte_block() -> None:
    """The review's point: in ds_mla the inline scales (and half the bf16 rope, which rtp-llm counts in
    1-byte elements) are in no partition, so splitKVPartitionBytes' k + v == full check cannot hold."""
    spec = _mla(KvDtype.FP8_E4M3)
    assert (spec.k_block_size_bytes, spec.v_block_size_bytes, spec.block_size_bytes) == (512, 64, 656)
    with pytest.raises(RtpRefError, match=r"block bytes mismatch: full=656 but k=512 \+ v=64 = 576"):
        split_kv_partition_bytes(spec.block_size_bytes, spec.k_block_size_bytes, spec.v_block_size_bytes, 1, 1, 0)
    layout = spec.layout  # the field table's own figures: 512 + 128 + 16 scale bytes
    assert (layout.k_bytes_per_token, layout.v_bytes_per_token, layout.scale_bytes_per_token) == (512, 128, 16)


def test_mla_spec_layout_is_a_function_of_dtype_sparsity_and_flag() -> None:
    assert resolve_mla_spec_layout(KvDtype.FP16, True, ROCM_FLAGS) == "auto"
    assert resolve_mla_spec_layout(KvDtype.FP8_E4M3, False, ROCM_FLAGS) == "fp8_ds_mla"
    assert resolve_mla_spec_layout(KvDtype.FP8_E4M3, True, ROCM_FLAGS) == "fp8_rocm_compact"
    assert resolve_mla_spec_layout(KvDtype.FP8_E4M3, True, CPU_FLAGS) == "fp8_ds_mla"
    with pytest.raises(RtpRefError, match=r"MLA KV-cache dtype 'int8' is not valid; valid: fp16, bf16, fp8_e4m3"):
        resolve_mla_spec_layout(KvDtype.INT8, False, CPU_FLAGS)


def test_mla_spec_refuses_a_dtype_that_does_not_match_its_layout() -> None:
    with pytest.raises(RtpRefError, match=r"MLA dtype 'fp8_e4m3' does not match layout 'auto'"):
        MlaSpec(KvDtype.FP8_E4M3, _mla(KvDtype.BF16).layout)


def test_split_hand_example() -> None:
    # 8 heads of a 512 + 512 byte block in 2 partitions: partition 1 holds heads 4..7
    part = split_kv_partition_bytes(1024, 512, 512, heads=8, partition_count=2, partition_id=1)
    assert (part.k_offset, part.k_size, part.v_offset, part.v_size) == (256, 256, 768, 256)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((1024, 512, 512, 8, 0, 0), r"partition_count=0 is not valid; valid: > 0"),
        ((1024, 512, 512, 8, 2, 2), r"partition_id=2 is out of range; valid: 0\.\.1"),
        ((1024, 512, 512, 0, 1, 0), r"heads=0 is not valid; valid: > 0"),
        ((1024, 512, 511, 8, 2, 0), r"block bytes mismatch: full=1024 but k=512 \+ v=511 = 1023"),
        ((1024, 516, 508, 8, 2, 0), r"k_block_bytes=516 is not divisible by heads=8"),
        ((1024, 512, 512, 8, 3, 0), r"heads=8 is not divisible by partition_count=3"),
        ((1020, 512, 508, 8, 2, 0), r"v_block_bytes=508 is not divisible by heads=8"),
    ],
)
def test_split_checks_every_invariant(args: tuple[int, int, int, int, int, int], message: str) -> None:
    with pytest.raises(RtpRefError, match=message):
        split_kv_partition_bytes(*args)


@given(
    heads_per_part=st.integers(1, 8),
    parts=st.integers(1, 8),
    k_per_head=st.integers(1, 64),
    v_per_head=st.integers(1, 64),
)
def test_partitions_tile_k_then_v_exactly(heads_per_part: int, parts: int, k_per_head: int, v_per_head: int) -> None:
    heads = heads_per_part * parts
    k, v = heads * k_per_head, heads * v_per_head
    ranges = [split_kv_partition_bytes(k + v, k, v, heads, parts, i) for i in range(parts)]
    k_bytes = [b for p in ranges for b in range(p.k_offset, p.k_offset + p.k_size)]
    v_bytes = [b for p in ranges for b in range(p.v_offset, p.v_offset + p.v_size)]
    assert k_bytes == list(range(k)) and v_bytes == list(range(k, k + v))
