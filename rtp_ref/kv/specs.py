"""rtp-llm's KV-cache specs (``rtp_llm/cpp/cache``) as a reference, on any machine.

Notation (docs/sources.md#rtp-llm-kv-cache-specs): S = ``seq_size_per_block`` (0 means 1),
T = the dtype's size (``KvDtype.size``). Element counts follow rtp-llm's formulas; byte counts are
elements x T. The MLA spec's per-token size comes from the layout's field table (``MlaLayout``), and
the layout it uses is chosen by a pure function of dtype, sparsity and the layout flags, never by
the build (rtp-llm's ``#if USING_ROCM``).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass

from rtp_ref.errors import RtpRefError
from rtp_ref.fp8.formats import ConversionMode, Fp8Format
from rtp_ref.kv.dtypes import KvDtype
from rtp_ref.kv.flags import LayoutFlags
from rtp_ref.kv.layouts import MlaLayout, build_layout


def _positive(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise RtpRefError(f"{name}={value!r} is not valid; valid: an integer >= 1")


def effective_seq_size_per_block(seq_size_per_block: int) -> int:
    """Tokens per block as the specs use it: 0 means 1 (rtp-llm's fallback); negative is an error."""
    if isinstance(seq_size_per_block, bool) or not isinstance(seq_size_per_block, int) or seq_size_per_block < 0:
        raise RtpRefError(f"seq_size_per_block={seq_size_per_block!r} is not valid; valid: an integer >= 0 (0 means 1)")
    return max(seq_size_per_block, 1)


@dataclass(frozen=True)
class KvPartition:
    """One partition's byte ranges inside a block: k at ``[k_offset, k_offset + k_size)``, v likewise."""

    k_offset: int
    k_size: int
    v_offset: int
    v_size: int


def split_kv_partition_bytes(
    full_block_bytes: int,
    k_block_bytes: int,
    v_block_bytes: int,
    heads: int,
    partition_count: int,
    partition_id: int,
) -> KvPartition:
    """Byte ranges of partition ``partition_id`` of ``partition_count`` equal head groups.

    rtp-llm's ``splitKVPartitionBytes`` (``KVCacheSpecBase.h`` 26-71).

    Checks, in rtp-llm's order, each raising RtpRefError with the values: ``partition_count > 0``;
    ``0 <= partition_id < partition_count``; ``heads > 0``; ``k + v == full``; ``k % heads == 0``;
    ``v % heads == 0``; ``heads % partition_count == 0``. With ``hc = heads / partition_count``:
    ``k_off = id*hc*k/heads``, ``v_off = k + id*hc*v/heads``, ``k_sz = hc*k/heads``, ``v_sz = hc*v/heads``.
    """
    if partition_count <= 0:
        raise RtpRefError(f"partition_count={partition_count} is not valid; valid: > 0")
    if not 0 <= partition_id < partition_count:
        raise RtpRefError(f"partition_id={partition_id} is out of range; valid: 0..{partition_count - 1}")
    if heads <= 0:
        raise RtpRefError(f"heads={heads} is not valid; valid: > 0")
    if k_block_bytes + v_block_bytes != full_block_bytes:
        raise RtpRefError(
            f"block bytes mismatch: full={full_block_bytes} but k={k_block_bytes} + v={v_block_bytes} "
            f"= {k_block_bytes + v_block_bytes}; the split needs k + v == full"
        )
    for name, value in (("k_block_bytes", k_block_bytes), ("v_block_bytes", v_block_bytes)):
        if value % heads != 0:
            raise RtpRefError(f"{name}={value} is not divisible by heads={heads}")
    if heads % partition_count != 0:
        raise RtpRefError(f"heads={heads} is not divisible by partition_count={partition_count}")
    head_count = heads // partition_count
    k_per_head, v_per_head = k_block_bytes // heads, v_block_bytes // heads
    first = partition_id * head_count
    return KvPartition(
        first * k_per_head,
        head_count * k_per_head,
        k_block_bytes + first * v_per_head,
        head_count * v_per_head,
    )


class _BytesFromElements(ABC):
    """Byte sizes as rtp-llm's ``KVCacheSpecBase`` derives them: element counts times the dtype's size."""

    dtype: KvDtype
    seq_size_per_block: int

    @property
    def tokens_per_block(self) -> int:
        """S: ``seq_size_per_block`` with 0 read as 1."""
        return effective_seq_size_per_block(self.seq_size_per_block)

    @property
    @abstractmethod
    def block_size(self) -> int:
        """Elements per block."""

    @property
    @abstractmethod
    def k_block_size(self) -> int:
        """k elements per block."""

    @property
    @abstractmethod
    def v_block_size(self) -> int:
        """v elements per block."""

    @property
    def block_size_bytes(self) -> int:
        """Bytes per block: the block stride rtp-llm allocates (scales outside the block excluded)."""
        return self.block_size * self.dtype.size

    @property
    def k_block_size_bytes(self) -> int:
        """k bytes per block as rtp-llm reports them."""
        return self.k_block_size * self.dtype.size

    @property
    def v_block_size_bytes(self) -> int:
        """v bytes per block as rtp-llm reports them (for MLA fp8, the rope counted at the dtype's size)."""
        return self.v_block_size * self.dtype.size


@dataclass(frozen=True)
class MhaSpec(_BytesFromElements):
    """MHA spec (``MHAKVCacheSpec.h``): k and v of E = local_kv * size_per_head elements per token."""

    dtype: KvDtype
    head_num_kv: int
    size_per_head: int
    tp_size: int = 1
    seq_size_per_block: int = 1

    def __post_init__(self) -> None:
        for name in ("head_num_kv", "size_per_head", "tp_size"):
            _positive(name, getattr(self, name))
        effective_seq_size_per_block(self.seq_size_per_block)

    @property
    def local_head_num_kv(self) -> int:
        """``kv / tp`` when tp divides kv, else ``kv / gcd(kv, tp)`` (rtp-llm's rule, verbatim)."""
        kv, tp = self.head_num_kv, self.tp_size
        return kv // tp if kv % tp == 0 else kv // math.gcd(kv, tp)

    @property
    def k_block_size(self) -> int:
        """k elements per block: local_kv * size_per_head * S."""
        return self.local_head_num_kv * self.size_per_head * self.tokens_per_block

    @property
    def v_block_size(self) -> int:
        """v elements per block (equal to k)."""
        return self.k_block_size

    @property
    def block_size(self) -> int:
        """Elements per block: k + v."""
        return self.k_block_size + self.v_block_size

    @property
    def scale_size_per_block(self) -> int:
        """fp32 scales per block: 2 * local_kv * S for INT8 and FP8_E4M3 (not E8M0), else 0."""
        return 2 * self.local_head_num_kv * self.tokens_per_block if self.dtype.has_mha_scale else 0

    @property
    def scale_block_size_bytes(self) -> int:
        """Scale bytes per block (4 per fp32 scale), kept outside the block."""
        return 4 * self.scale_size_per_block

    @property
    def k_scale_block_size_bytes(self) -> int:
        """k's half of the scale bytes."""
        return self.scale_block_size_bytes // 2

    @property
    def v_scale_block_size_bytes(self) -> int:
        """v's half of the scale bytes."""
        return self.scale_block_size_bytes // 2


def resolve_sparse_fp8_layout(flags: LayoutFlags) -> str:
    """The layout rtp-llm's *sparse* fp8 MLA spec uses: ``fp8_rocm_compact`` or ``fp8_ds_mla``, by flag."""
    return "fp8_rocm_compact" if flags.compact_fp8_for_sparse else "fp8_ds_mla"


def resolve_mla_spec_layout(dtype: KvDtype, is_sparse: bool, flags: LayoutFlags) -> str:
    """The layout rtp-llm's MLA spec stores: ``auto`` for 16-bit dtypes; for fp8 (E4M3 or E8M0)
    ``fp8_ds_mla``, or for sparse attention whatever ``resolve_sparse_fp8_layout`` says."""
    if dtype not in _MLA_DTYPES:
        raise RtpRefError(
            f"MLA KV-cache dtype {dtype.value!r} is not valid; valid: {', '.join(d.value for d in _MLA_DTYPES)}"
        )
    if not dtype.is_mla_fp8:
        return "auto"
    return resolve_sparse_fp8_layout(flags) if is_sparse else "fp8_ds_mla"


_MLA_DTYPES = (KvDtype.FP16, KvDtype.BF16, KvDtype.FP8_E4M3, KvDtype.FP8_E8M0)


@dataclass(frozen=True)
class MlaSpec(_BytesFromElements):
    """MLA spec (``MLAKVCacheSpec.h``, local_head_num_kv = 1) over the layout it stores.

    Elements per token = ``layout.bytes_per_token / T`` (rtp-llm: ``R + P``, or for fp8
    ``R + R/128*4 + 2P``); k = R*S and v = P*S elements as in rtp-llm. rtp-llm counts v in elements of
    the cache dtype, so for fp8_ds_mla (bf16 rope in a 1-byte dtype) ``v_block_size_bytes`` is half the
    rope field: the layout's ``k/v/scale_bytes_per_token`` give the fields' true sizes. MLA has no
    scale outside the block: ``scale_block_size_bytes`` is 0 (inline scales are in the block).
    """

    dtype: KvDtype
    layout: MlaLayout
    seq_size_per_block: int = 1

    def __post_init__(self) -> None:
        effective_seq_size_per_block(self.seq_size_per_block)
        if self.dtype not in _MLA_DTYPES or self.layout.stores_input_dtype == self.dtype.is_mla_fp8:
            raise RtpRefError(
                f"MLA dtype {self.dtype.value!r} does not match layout {self.layout.name!r}; "
                "16-bit dtypes store 'auto', fp8 dtypes (e4m3, e8m0) an fp8 layout"
            )

    @property
    def elems_per_token(self) -> int:
        """Cache elements per token, from the layout's fields."""
        return self.layout.bytes_per_token // self.dtype.size

    @property
    def block_size(self) -> int:
        """Elements per block."""
        return self.elems_per_token * self.tokens_per_block

    @property
    def k_block_size(self) -> int:
        """k elements per block: R * S."""
        return self.layout.kv_lora_rank * self.tokens_per_block

    @property
    def v_block_size(self) -> int:
        """v elements per block: P * S."""
        return self.layout.rope_dim * self.tokens_per_block

    @property
    def scale_block_size_bytes(self) -> int:
        """0: an MLA cache keeps no scale outside its blocks."""
        return 0

    @property
    def k_plus_v_equals_block(self) -> bool:
        """Whether rtp-llm's k + v bytes equal its block bytes (the split's precondition)."""
        return self.k_block_size_bytes + self.v_block_size_bytes == self.block_size_bytes


def mla_spec(
    dtype: KvDtype,
    *,
    kv_lora_rank: int,
    rope_dim: int,
    flags: LayoutFlags,
    element_format: Fp8Format,
    conversion_mode: ConversionMode,
    seq_size_per_block: int = 1,
    is_sparse: bool = False,
) -> MlaSpec:
    """rtp-llm's MLA spec for these inputs: picks the layout (``resolve_mla_spec_layout``) and builds it.

    An fp8 rank the chosen layout cannot hold raises RtpRefError with what to change (see
    ``lora_alignment``); ``element_format``/``conversion_mode`` only name the fp8 encoding.
    """
    name = resolve_mla_spec_layout(dtype, is_sparse, flags)
    layout = build_layout(
        name,
        kv_lora_rank=kv_lora_rank,
        rope_dim=rope_dim,
        flags=flags,
        element_format=element_format,
        conversion_mode=conversion_mode,
    )
    return MlaSpec(dtype, layout, seq_size_per_block)
