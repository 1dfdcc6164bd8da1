"""Every named check of the suite, the grade it guards and what its failure means: the one table.

A check's grade is looked up here, never read from its name's prefix; ``docs/conformance.md``'s check table
is tested against this one (tests/certify/test_checks_table.py), and a check the code records that is not
in it is an error at once (:func:`spec`).

Grades, weakest first: a case reaches ``layout`` when every check of grade ``layout`` passes, ``numerics``
when the ``numerics`` checks pass as well, ``bit_exact`` when the bytes are identical too. ``input`` checks
are input hardening: they grade no case, and count only where a platform requires input checks; ``graph``
checks (the CUDA-graph tier) grade no case either.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rtp_ref.grades import GRADES as GRADES  # re-exported: the ladder lives below the platform loader, which needs it

#: the grade of a check that grades no case (input hardening)
INPUT = "input"
#: the grade of the CUDA-graph tier's checks: they grade no write; they decide the graph-safe column, and fail
#: the pair only for a kernel that claims ``graph_safe``
GRAPH = "graph"


@dataclass(frozen=True)
class CheckSpec:
    """One check: its name (``group.what``: ``bit_exact.bytes``), the grade it guards (or ``input``), and what a
    failure means."""

    name: str
    grade: str
    meaning: str


def _c(name: str, grade: str, meaning: str) -> CheckSpec:
    return CheckSpec(name, grade, meaning)


#: the table, in the order failures are explained: what stopped the call first, then where bytes went,
#: then values. ``layout.<field>_exact`` stands for one check per copied field.
CHECKS: tuple[CheckSpec, ...] = (
    _c("support.kernel_ran", "layout", "its own launch counter (`launch_count`, when it has one) did not move "
       "during the suite's one call — it fell back instead of running"),
    _c("support.kernel_raised", "layout", "the kernel raised on a layout it claims (inputs it declared it "
       "cannot take are refused, not failed: see Cases)"),
    _c("support.device_error", "layout", "the call left a CUDA/HIP error (a launch error left pending, e.g. an "
       "empty grid for 0 tokens; an asynchronous fault), with the error text; checked after every call, so it "
       "lands on the case that caused it"),
    _c("support.device_fault", "layout", "the call left the device context unusable (an illegal or misaligned "
       "address); the worker was replaced"),
    _c("support.worker_died", "layout", "the kernel killed its process (a segmentation fault)"),
    _c("support.hang", "layout", "the case exceeded `--case-timeout` and its worker was ended"),
    _c("support.not_run", "layout", "the case never ran: its (kernel, layout) pair crashed or hung "
       "`--crash-limit` times, or the run stopped early"),
    _c("support.unclaimed_layout_raises", "layout", "called on a layout it does not claim, the kernel did not "
       "raise, or wrote to the cache before raising (claimed-unsupported must raise)"),
    _c("support.mismatched_cache_raises", "layout", "under `auto`, called with a cache of the other 16-bit dtype "
       "than the inputs' (bf16 inputs, an fp16 cache), the kernel did not raise before writing: a bit copy reads "
       "back as other numbers (vLLM #54338)"),
    _c("support.deterministic", "layout", "two calls on the same inputs wrote different bytes"),
    _c("support.declared_domain", "layout", "the kernel's declared input domain (`input_domain`) leaves out a value "
       "engines pass (an int32 block table, a bf16 `dst`, ...), named with its source"),
    _c("input.rejects_bad_slot", INPUT, "only where input checks are required: the kernel did not refuse the "
       "out-of-range slot"),
    _c("input.empty_call", INPUT, "only where hardening is required: the empty call (no tokens, no rows) raised, "
       "changed a byte or left a device error"),
    _c("layout.untouched_bytes", "layout", "any byte outside the footprint changed (guard zones, padding rows, "
       "other entries, pad bytes)"),
    _c("layout.entry_bounds", "layout", "a changed byte sits right next to a target entry (one byte past the "
       "entry, say)"),
    _c("layout.block_stride", "layout", "stray bytes sit where entries would be if the padded block stride were "
       "ignored"),
    _c("layout.negative_slots", "layout", "anything changed although every slot was negative"),
    _c("layout.reserved_slot", "layout", "under `padding_slot=zero`: a byte of slot 0, the engine's reserved padding "
       "sink, changed (sglang #36207: MLA writers overwrote it)"),
    _c("layout.slot_mapping", "layout", "a target entry was never written (its token went elsewhere or nowhere)"),
    _c("layout.<field>_exact", "layout", "a 16-bit field (ds_mla/model1 rope, the whole `auto` entry) is not a "
       "bit-for-bit copy"),
    _c("layout.block_scales", "layout", "fp8_model1_mla: a token has no scale bytes at "
       "`block_size * 576 + t * 8`"),
    _c("layout.scale_order", "layout", "the right tile scales sit in the wrong tiles"),
    _c("layout.kv_order", "layout", "reshape_and_cache_flash: the key cache holds the values and the value cache "
       "the keys (key and value exchanged)"),
    _c("layout.head_order", "layout", "reshape_and_cache_flash: a token's entry holds its values at other places "
       "(heads permuted, or head and dim exchanged)"),
    _c("layout.cache_order", "layout", "reshape_and_cache_flash: an HND cache (the order its strides give) was "
       "written as if it were NHD"),
    _c("layout.v_scale_order", "layout", "reshape_and_cache_flash, nvfp4: the V scales are in the other order than "
       "the platform's (swizzled in 4-token groups where its readers read them linearly, SM120/121: vLLM #50084; "
       "or linear where SM100's reader wants them swizzled)"),
    _c("layout.scale_placement", "layout", "indexer_k_quant_and_cache: the scales are not at the end of the block "
       "(written inside the token data, right after the token's values)"),
    _c("layout.offset_width", "layout", "large-address tier: the entries whose byte offset from the cache's base "
       "passes 2^31 or 2^32 are wrong and those below are right (an offset computed in 32 bits wrapped)"),
    _c("layout.large_entries", "layout", "large-address tier: a target block below 2^31 bytes differs from the "
       "reference's write of it (the regular tier names the fault)"),
    _c("read.cache_untouched", "layout", "read ops: a byte of the cache or of the guard zones around it changed (a "
       "reader must not write its cache)"),
    _c("read.untouched_rows", "layout", "read ops: a byte of the outputs outside their first `cu_seq_lens[-1]` rows "
       "changed (rows past the sequences, the guard zones)"),
    _c("read.block_table", "layout", "read ops: the output holds what a reader that ignores the block table reads "
       "(block j of every sequence taken from cache block j)"),
    _c("read.scale_placement", "layout", "indexer gather: each token's scales were read right after its own "
       "values (as if the block had no scale area at its end)"),
    _c("read.rope_as_fp8", "layout", "gather: a layout's 16-bit rope was decoded as fp8 codes (as a reader of the "
       "`fp8` layout would)"),
    _c("graph.capture", GRAPH, "graph tier: the call could not be captured in a CUDA graph (a host sync or a "
       "host-side read of an input inside the call), with the error"),
    _c("graph.replay", GRAPH, "graph tier: replaying the captured call with its own inputs did not write the "
       "reference's bytes"),
    _c("graph.new_values", GRAPH, "graph tier: after new values were copied into the input tensors, the replay "
       "did not write the reference's bytes of them (it says when it wrote the capture-time values)"),
    _c("graph.new_slots_and_scales", GRAPH, "graph tier: after new slots and scales were copied in as well, the "
       "replay did not write the reference's bytes (a slot map or scale read at capture)"),
    _c("graph.padding_untouched", GRAPH, "graph tier: a call captured with an all-padding slot map (an engine's "
       "warm-up) changed a byte when replayed (slot 0 written, say)"),
    _c("graph.after_padding_warmup", GRAPH, "graph tier: after the real slots were copied into the warm-up "
       "graph's slot map, the replay did not write the reference's bytes"),
    _c("numerics.scale_positive", "numerics", "a stored scale is zero, negative, inf or NaN (e.g. a missing "
       "floor on an all-zero tile; a zero where the contract has one is not: a tile rule with no floor)"),
    _c("numerics.scale_form", "numerics", "the platform's rule is `pow2_ceil` (the indexer's: `scale_fmt` "
       "`ue8m0`) and a stored fp32 scale is not a "
       "power of two (readers truncate it)"),
    _c("numerics.scale_value", "numerics", "a stored scale differs from the contract's scale for its tile "
       "(exactly for power-of-two rules, by more than 2^-22 relative for `amax_div`) — wrong divisor, wrong "
       "tile size, wrong floor"),
    _c("numerics.per_head_scale", "numerics", "reshape_and_cache_flash: per-head k/v scales were given and the "
       "first head's scale was used for every head"),
    _c("numerics.quant_block", "numerics", "indexer_k_quant_and_cache: the scales are those of another quant block "
       "than `quant_block_size` (one scale for the whole token)"),
    _c("numerics.error_bound", "numerics", "a decoded value is more than `numerics_max_ulp` fp8 grid steps from "
       "the exact quotient x / scale (the bound comes from the format's spacing at that value, not a "
       "percentage)"),
    _c("numerics.element_format", "numerics", "the bytes decode within the bound as another fp8 format (e4m3fn "
       "written where the platform is fnuz)"),
    _c("numerics.saturation", "numerics", "under `satfinite`, a value beyond +-max (or +-inf) was not stored as "
       "+-max"),
    _c("numerics.nan", "numerics", "a NaN input was not stored as NaN"),
    _c("read.fp8_format", "numerics", "gather: the fp8 codes were decoded as another format (fnuz bytes as OCP "
       "e4m3, or the reverse)"),
    _c("read.tile_scale", "numerics", "gather: a tile of `kv_c` holds its codes times another tile's stored scale"),
    _c("read.values", "numerics", "gather: a value of `dst` is more than `numerics_max_ulp` units in the last "
       "place of `dst`'s dtype from the reference's read (or NaN where it is not, or not where it is)"),
    _c("read.round_trip", "numerics", "gather: a cache written by a built-in writer and read back by the reader "
       "does not give the reference's read of the reference's write of the same tokens"),
    _c("bit_exact.bytes", "bit_exact", "any footprint byte differs from the reference; where the reference stored a "
       "NaN, the kernel stored no NaN of that format, or not the one the table pins (`[fp8] nan_pins`)"),
)

_BY_NAME = {c.name: c for c in CHECKS}
#: ``layout.kv_c_exact``, ``layout.entry_exact``...: one check per copied field, one row in the table
_FIELD_EXACT = re.compile(r"layout\.\w+_exact")


def spec(name: str) -> CheckSpec:
    """The table's row for check ``name``; a name the table lacks is a programming error (ValueError)."""
    found = _BY_NAME.get(name) or (_BY_NAME["layout.<field>_exact"] if _FIELD_EXACT.fullmatch(name) else None)
    if found is None:
        raise ValueError(f"check {name!r} is not in rtp_ref.cases.checks.CHECKS")
    return found


@dataclass(frozen=True)
class Check:
    """One named check and its outcome; ``detail`` says what was found when it failed."""

    name: str
    passed: bool
    detail: str = ""

    def __post_init__(self) -> None:
        spec(self.name)  # every check is a row of CHECKS


def rank(name: str) -> int:
    """Where check ``name`` comes in the table (failures are explained in this order); a name from a report
    written by another version, not in this table, comes last."""
    try:
        return CHECKS.index(spec(name))
    except ValueError:
        return len(CHECKS)


def grade_reached(failed: list[str]) -> str:
    """The grade a case reaches with these checks failed: the strongest grade below the weakest failure's
    (``none`` when a ``layout`` check failed); ``input`` and ``graph`` checks do not count."""
    reached = GRADES[-1]
    for name in failed:
        grade = spec(name).grade
        if grade not in (INPUT, GRAPH):
            reached = min(reached, grade_below(grade), key=_order)
    return reached


def grade_below(grade: str) -> str:
    """The grade just weaker than ``grade`` (``none`` below ``layout``)."""
    return ("none", *GRADES)[_order(grade) - 1]


def grade_above(grade: str) -> str | None:
    """The grade just stronger than ``grade`` (``layout`` above ``none``; None above ``bit_exact``)."""
    order = ("none", *GRADES)
    i = _order(grade)
    return order[i + 1] if i + 1 < len(order) else None


def reaches(grade: str, required: str) -> bool:
    """Whether a case at ``grade`` (``none`` or one of GRADES) reaches ``required``."""
    return _order(grade) >= _order(required)


def _order(grade: str) -> int:
    return ("none", *GRADES).index(grade)
