"""Conformance cases of the read op, ``gather_and_maybe_dequant_cache``: a cache whose every slot the reference
wrote, sequences laid out in it through a shuffled block table, and a canary-filled ``dst``.

Every slot holds a token (so a reader that reads the wrong slot reads real, different values, never the canary),
drawn on the CPU from the case's seed; the cache storage and ``dst`` are built on the device under test, each
inside guard bytes (``dst`` has three rows more than the sequences fill: a reader must leave them). The
reference reads CPU copies. A case also reads under named wrong hypotheses (the block table ignored, fp8 codes decoded
as the other e4m3 or e5m2 format, a 16-bit rope decoded as fp8): a reader whose ``dst`` equals one of them fails
the check that names the fault (a tile read with another tile's scale is found tile by tile:
rtp_ref.cases.gather_grading).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from rtp_ref.cases.cases import CANARY, GUARD_BYTES, CaseSpec, cache_view, make_cache
from rtp_ref.cases.domain import BLOCK_SIZE, BLOCK_TABLE, Dimension, Value
from rtp_ref.cases.input_checks import EMPTY_CALL_KIND
from rtp_ref.cases.storage import StorageMap, field_places
from rtp_ref.contract import WriteContract
from rtp_ref.errors import RtpRefError
from rtp_ref.fp8 import decode
from rtp_ref.fp8.elements import dtype_element
from rtp_ref.fp8.formats import E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ, Fp8Format
from rtp_ref.kv.cache import gather_entries, reference_write
from rtp_ref.kv.fields import ELEMENT_INPUT16, Source
from rtp_ref.kv.gather import gather_and_maybe_dequant_cache, sequence_slots, to_dst_dtype
from rtp_ref.kv.layouts import MlaLayout, build_layout, default_dims
from rtp_ref.kv.op_names import MLA_GATHER_OP

#: ``dst`` dtypes by the names case ids use
OUT_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
#: rows ``dst`` has past the sequences (the reader must leave them)
EXTRA_ROWS = 3
#: each fp8 format and the one a reader confuses it with (fnuz bytes read as OCP e4m3: vLLM #45562)
_CONFUSED = {E4M3FN: E4M3FNUZ, E4M3FNUZ: E4M3FN, E5M2: E5M2FNUZ, E5M2FNUZ: E5M2}
#: the index tensors' dtypes by the names case ids and domains use
INDEX_DTYPES = {"int32": torch.int32, "int64": torch.int64}
#: the arguments of the MLA gather a kernel may narrow (``input_domain``: rtp_ref.cases.domain)
GATHER_DOMAIN = (BLOCK_TABLE,
                 Dimension("dst", "the dtype of dst", tuple(OUT_DTYPES), ("bf16",),
                           "vLLM gathers DeepSeek's MLA cache into bf16 (its fp8_ds_mla gather takes a bf16 dst only: "
                           "csrc/cache_kernels.cu)"),
                 BLOCK_SIZE)


@dataclass(frozen=True)
class GatherSpec(CaseSpec):
    """One gather case: a CaseSpec (``tokens``: the rows the sequences fill; ``input_dtype``: what the writer of
    the cache was given) with the batch, ``dst``'s dtype and whether ``seq_starts`` is passed."""

    op: str = MLA_GATHER_OP
    batch: int = 1
    out: str = "bf16"
    starts: bool = False
    #: rows of one block the cache leaves unused (a padded block stride, as FlashMLA's tests allocate)
    padded_rows: int = 0
    #: the dtype of block_table, cu_seq_lens and seq_starts
    index: str = "int32"

    @property
    def arguments(self) -> dict[str, Value]:
        """The case's value of each of ``GATHER_DOMAIN``."""
        return {"block_table": self.index, "dst": self.out, "block_size": self.block_size}

    @property
    def case_id(self) -> str:
        """``random-t37-b16-bf16-n3-fp32-starts``, ``-i64`` for int64 index tensors."""
        return (f"{super().case_id}-n{self.batch}-{self.out}{'-starts' if self.starts else ''}"
                f"{'-padded' if self.padded_rows else ''}{'-i64' if self.index == 'int64' else ''}")


def gather_specs(variant: str) -> Iterator[GatherSpec]:
    """The cases of one layout: batches of 1-4 sequences, block sizes 16 and 64, every ``dst`` dtype, context
    chunks (``seq_starts``), a padded block stride, edge values in the cache (NaN, inf, saturated codes, zero
    tiles), sequences of no tokens, int32 index tensors and an int64 twin of a random case (only the index dtype
    differs: a reader refusing int64 refuses that case alone), the empty call (no rows at all)."""
    rows = [  # kind, rows, block, writer dtype, batch, dst dtype, seq_starts, padded rows, index dtype
        (EMPTY_CALL_KIND, 0, 16, torch.bfloat16, 2, "bf16", False, 0, "int32"),
        ("random", 1, 16, torch.bfloat16, 1, "bf16", False, 0, "int32"),
        ("random", 37, 16, torch.bfloat16, 3, "bf16", False, 0, "int32"),
        ("random", 37, 64, torch.float16, 3, "fp16", False, 0, "int32"),
        ("random", 37, 16, torch.bfloat16, 3, "fp32", False, 0, "int32"),
        ("chunked", 40, 16, torch.bfloat16, 3, "bf16", True, 0, "int32"),
        ("chunked", 29, 64, torch.bfloat16, 2, "fp32", True, 1, "int32"),
        ("edge", 8, 16, torch.bfloat16, 2, "bf16", False, 0, "int32"),
        ("edge", 8, 16, torch.bfloat16, 2, "fp16", False, 0, "int32"),
        ("ragged", 20, 16, torch.bfloat16, 4, "bf16", True, 0, "int32"),
        ("random", 37, 16, torch.bfloat16, 3, "bf16", False, 0, "int64"),
    ]
    for seed, (kind, tokens, block, dtype, batch, out, starts, padded, index) in enumerate(rows, start=1):
        # a byte cache's 16-bit rope is read as bf16 (rtp_ref.kv.gather): its writer is given bf16
        writer_dtype = dtype if variant == "auto" else torch.bfloat16
        yield GatherSpec(variant, kind, tokens, block, 0, writer_dtype, seed, batch=batch, out=out, starts=starts,
                         padded_rows=padded, index=index)


def _lengths(g: torch.Generator, batch: int, tokens: int, ragged: bool) -> list[int]:
    """Sequence lengths summing to ``tokens``; ``ragged``: the second and last sequences are empty."""
    if batch == 1:
        return [tokens]
    live = [i for i in range(batch) if not ragged or i not in (1, batch - 1)]
    cuts = sorted(torch.randint(0, tokens + 1, (len(live) - 1,), generator=g).tolist())
    sizes = [b - a for a, b in zip([0, *cuts], [*cuts, tokens], strict=True)]
    out = [0] * batch
    for i, n in zip(live, sizes, strict=True):
        out[i] = n
    return out


def block_table_for(g: torch.Generator, batch: int, tokens: int, block_size: int, ragged: bool,
                    with_starts: bool, index: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, int]:
    """Sequences of ``tokens`` rows in all laid out in a cache: ``(block_table, cu_seq_lens, seq_starts or None,
    num_blocks)``, index tensors of dtype ``index`` (``int32``, ``int64``). Each sequence gets its own shuffled
    blocks, the table one column more than any sequence reaches (filled with a block no sequence reads), the cache
    three blocks more than the sequences use; ``ragged``: empty sequences; ``with_starts``: a start of 0-49 per
    sequence."""
    lengths = _lengths(g, batch, tokens, ragged)
    starts = [int(torch.randint(0, 50, (1,), generator=g)) if with_starts else 0 for _ in lengths]
    widths = [-(-(s + n) // block_size) for s, n in zip(starts, lengths, strict=True)]
    num_blocks = sum(widths) + 3
    order = torch.randperm(num_blocks, generator=g)
    table = torch.empty(batch, max(widths) + 1, dtype=torch.int64)
    taken = 0
    for b, w in enumerate(widths):
        table[b, :w] = order[taken: taken + w]
        table[b, w:] = order[-1]  # never reached: the last, unread block
        taken += w
    dtype = INDEX_DTYPES[index]
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=dtype)
    return table.to(dtype), cu, torch.tensor(starts, dtype=dtype) if with_starts else None, num_blocks


def gather_layout_for(spec: CaseSpec, contract: WriteContract) -> MlaLayout:
    """The layout a case of ``spec`` reads, at the layout's default R and P (a reader's rope is 64 wide)."""
    r, p = default_dims(spec.layout)
    return contract.layout(spec.layout, r, p)


class GatherCase:
    """One gather case on a device: the written cache (a view into ``cache_storage``), the index tensors and a
    canary-filled ``dst`` (a view into ``dst_storage``)."""

    def __init__(self, spec: GatherSpec, contract: WriteContract, device: torch.device | str) -> None:
        self.spec = spec
        self.layout = gather_layout_for(spec, contract)
        g = torch.Generator().manual_seed(spec.seed)
        table, cu, starts, self.num_blocks = block_table_for(g, spec.batch, spec.tokens, spec.block_size,
                                                             spec.kind == "ragged", spec.starts, spec.index)
        self.block_table, self.cu_seq_lens = table.to(device), cu.to(device)
        self.seq_starts = starts.to(device) if starts is not None else None
        self.scale = torch.tensor([0.5 + 1.5 * float(torch.rand(1, generator=g))], dtype=torch.float32).to(device)
        host_storage, host_cache = make_cache(self.layout, self.num_blocks, spec.block_size, spec.input_dtype,
                                              spec.padded_rows, "cpu")
        self._fill(g, host_cache, table, cu)
        self.cache_storage = host_storage.to(device)
        self.kv_cache = self.cache_view(self.cache_storage)
        self.out_dtype = OUT_DTYPES[spec.out]
        width = self.layout.kv_lora_rank + self.layout.rope_dim
        self.dst_rows = spec.tokens + EXTRA_ROWS
        self.dst_bytes = self.dst_rows * width * self.out_dtype.itemsize
        self.dst_storage = torch.full((2 * GUARD_BYTES + self.dst_bytes,), CANARY, dtype=torch.uint8, device=device)
        self.dst = self.dst_view(self.dst_storage)

    def _fill(self, g: torch.Generator, cache: torch.Tensor, table: torch.Tensor, cu: torch.Tensor) -> None:
        """The reference writes a token into every slot; ``edge``: the first rows read hold edge values."""
        spec, lay = self.spec, self.layout
        capacity = self.num_blocks * spec.block_size
        spread = torch.exp2(torch.randint(-6, 7, (capacity, 1), generator=g).float())
        kv_c = (torch.randn(capacity, lay.kv_lora_rank, generator=g) * spread).to(spec.input_dtype)
        k_pe = (torch.randn(capacity, lay.rope_dim, generator=g) * spread).to(spec.input_dtype)
        slots = torch.arange(capacity)
        if spec.kind == "edge":  # the edge rows go to the slots the first rows of dst read
            first = sequence_slots(table, cu, spec.block_size, None)[:4]
            finfo = torch.finfo(spec.input_dtype)
            for i, slot in enumerate(first.tolist()):
                for source, t in ((Source.KV_C, kv_c), (Source.K_PE, k_pe)):
                    if i == 0:
                        t[slot] = 0.0  # an all-zero token: floor scales
                    elif i == 1:
                        t[slot, ::2] = finfo.max  # saturated codes
                    elif not lay.stores_non_finite(source):
                        # its tiles define no bytes for NaN or inf (rtp_ref.kv.non_finite): no writer defines that
                        # cache, so no reader can be held to it
                        continue
                    elif i == 2:
                        t[slot, :2] = torch.tensor([float("inf"), float("-inf")])
                    else:
                        t[slot, :1] = float("nan")
        reference_write(lay, kv_c, k_pe, cache, slots, self.scale.cpu())

    def cache_view(self, storage: torch.Tensor) -> torch.Tensor:
        """The ``kv_cache`` view over ``storage`` (this case's or a copy)."""
        return cache_view(self.layout, storage, self.num_blocks, self.spec.block_size, self.spec.input_dtype,
                          self.spec.padded_rows)

    def dst_view(self, storage: torch.Tensor) -> torch.Tensor:
        """The ``dst`` view over ``storage`` (this case's or a copy)."""
        width = self.layout.kv_lora_rank + self.layout.rope_dim
        region = storage[GUARD_BYTES: GUARD_BYTES + self.dst_bytes]
        return region.view(self.out_dtype).view(self.dst_rows, width)

    def storage_map(self) -> StorageMap:
        """The ``dst`` storage's fields, ``kv_c`` and ``k_pe`` of every row, each row named by the slot it reads."""
        layer = torch.empty(self.dst_storage.numel(), dtype=torch.uint8)
        dst, rank, element = self.dst_view(layer), self.layout.kv_lora_rank, dtype_element(self.out_dtype)
        fields = [field_places("kv_c", dst[:, :rank], layer, element, 1),
                  field_places("k_pe", dst[:, rank:], layer, element, 1)]
        return StorageMap(layer.numel(), fields, [("dst", GUARD_BYTES, GUARD_BYTES + self.dst_bytes)],
                          read_row_namer(self.read_slots()))

    def call(self, kernel: Callable[..., None]) -> None:
        """Call ``kernel`` the way engines call ``gather_and_maybe_dequant_cache``."""
        kernel(self.kv_cache, self.dst, self.block_table, self.cu_seq_lens, self.spec.layout, self.scale,
               self.seq_starts)

    def reference_dst(self, hypothesis: str | None = None) -> torch.Tensor:
        """The ``dst`` storage the reference (or the named wrong ``hypothesis``) leaves, on the CPU."""
        storage = torch.full_like(self.dst_storage, CANARY, device="cpu")
        dst = self.dst_view(storage)
        cache = self.cache_view(self.cache_storage.cpu())
        table, cu = self.block_table.cpu(), self.cu_seq_lens.cpu()
        starts = self.seq_starts.cpu() if self.seq_starts is not None else None
        layout = self.layout
        if hypothesis == "read.block_table":  # block j of every sequence read from cache block j
            table = torch.arange(table.shape[1], dtype=table.dtype).expand_as(table).contiguous()
        elif hypothesis == "read.fp8_format":
            layout = _with_format(layout, _CONFUSED[layout.element_format])
        elif hypothesis not in (None, "read.rope_as_fp8"):
            raise RtpRefError(f"unknown hypothesis {hypothesis!r}")
        gather_and_maybe_dequant_cache(layout, cache, dst, table, cu, self.scale.cpu(), starts)
        if hypothesis == "read.rope_as_fp8":
            slots = self.read_slots()
            rope = layout.value_field(Source.K_PE)
            at = layout.entry_offset(rope)
            codes = gather_entries(layout, cache, slots)[:, at: at + layout.rope_dim]
            values = decode(codes, layout.element_format) * self.scale.cpu()
            dst[: slots.numel(), layout.kv_lora_rank:] = to_dst_dtype(values, dst.dtype)
        return storage

    def read_slots(self) -> torch.Tensor:
        """The slot each row of the sequences reads (CPU int64)."""
        starts = self.seq_starts.cpu() if self.seq_starts is not None else None
        return sequence_slots(self.block_table.cpu(), self.cu_seq_lens.cpu(), self.spec.block_size, starts)

    def tiled(self) -> bool:
        """Whether ``kv_c`` has more than one tile scale (a reader can take the wrong one)."""
        name = self.layout.value_field(Source.KV_C).scale_field
        scale = self.layout.field(name) if name else None
        return scale is not None and scale.tile_scale is not None and scale.count > 1

    def hypotheses(self) -> list[str]:
        """The wrong hypotheses this case can tell apart from the contract."""
        if self.spec.tokens == 0:
            return []
        out = ["read.block_table"]
        nope, rope = self.layout.value_field(Source.KV_C), self.layout.value_field(Source.K_PE)
        if nope.element != ELEMENT_INPUT16:
            out.append("read.fp8_format")
        if rope.element == ELEMENT_INPUT16 and nope.element != ELEMENT_INPUT16:
            out.append("read.rope_as_fp8")
        return out


def read_row_namer(read_slots: torch.Tensor) -> Callable[[int], str]:
    """Names output row ``r`` of a read: ``row 3 (reads slot 17)``, or ``row 40 (past the sequences)``."""
    slots = read_slots.tolist()

    def name(row: int) -> str:
        return f"row {row} (reads slot {slots[row]})" if row < len(slots) else f"row {row} (past the sequences)"

    return name


def _with_format(layout: MlaLayout, fmt: Fp8Format) -> MlaLayout:
    return build_layout(layout.name, kv_lora_rank=layout.kv_lora_rank, rope_dim=layout.rope_dim, flags=layout.flags,
                        element_format=fmt, conversion_mode=layout.conversion_mode)

