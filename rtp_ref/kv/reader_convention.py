"""A platform's attention reader, as data: what it does with the bytes a writer stored (``[reader]`` of a platform
table). Torch-free: the platform loader builds it; rtp_ref.kv.reader_view applies it to a written cache."""

from __future__ import annotations

from dataclasses import dataclass

from rtp_ref.fp8.formats import Fp8Format

#: how a reader takes a stored fp32 tile scale: as it is, rounded to bf16 (nearest even), or as an e8m0 power of two
#: rounded toward zero (the exponent kept, the mantissa dropped)
TILE_SCALE_READS = ("fp32", "bf16", "e8m0_toward_zero")


@dataclass(frozen=True)
class ReaderConvention:
    """A platform's attention reader, as data (``[reader]``): what it does with the bytes a writer stored."""

    #: the reader, for messages (``FlashMLA SM100 sparse decode``)
    name: str
    #: one of TILE_SCALE_READS
    tile_scale: str
    #: the fp8 format it decodes the cache's codes as
    element_format: Fp8Format
    #: where this is stated: text holding at least one citation (rtp_ref.platform.CITATION_FORMS) in a bundled table
    source: str
    #: the layouts this reader reads (``[reader] reads``; empty: the table does not say)
    reads: tuple[str, ...] = ()
