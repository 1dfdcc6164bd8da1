"""One bench point's figures as recorded in bench.json: a (kernel, variant, tokens) point's eager call, its graph
replay and its cold call, each with its timer, spread and validity."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BenchRow:
    """One measured (kernel, variant, tokens) point: the eager call and, on a GPU, its CUDA-graph replay and its
    cold call (the L2 flushed before each call: the headline)."""

    kernel: str
    op: str
    layout: str
    tokens: int
    bytes: int
    #: the eager call: median seconds, effective bandwidth, its fraction of the copy roof
    seconds: float | None
    bandwidth: float | None
    roof_fraction: float | None
    #: the call replayed in a CUDA graph (None on the CPU, or where the capture failed: ``graph_note``)
    graph_seconds: float | None = None
    graph_roof_fraction: float | None = None
    note: str = ""
    graph_note: str = ""
    #: what timed each figure (rtp_ref.bench.measure ``timer_name``) and the cache state the calls ran in
    #: (rtp_ref.bench.integrity ``l2_state``)
    timer: str = ""
    graph_timer: str = ""
    l2: str = ""
    #: the spread of each figure: its fastest and slowest sample, seconds per call
    seconds_low: float | None = None
    seconds_high: float | None = None
    graph_seconds_low: float | None = None
    graph_seconds_high: float | None = None
    #: bytes the calls go through in turn (every input set), and the fastest bandwidth a figure may show
    #: (rtp_ref.bench.integrity ``speed_limit``)
    footprint: int = 0
    limit_bytes_per_s: float | None = None
    #: why the eager or graph figure is not a measurement of the op ("" when it is one)
    invalid: str = ""
    graph_invalid: str = ""
    #: the cold call (rtp_ref.bench.measure ``time_cold``; None on the CPU, or where it could not be timed:
    #: ``cold_note``): median seconds, its spread, its fraction of the copy roof, its timer and why it is invalid
    cold_seconds: float | None = None
    cold_roof_fraction: float | None = None
    cold_seconds_low: float | None = None
    cold_seconds_high: float | None = None
    cold_timer: str = ""
    cold_note: str = ""
    cold_invalid: str = ""
    #: the eager calls' host seconds per call while queueing them (rtp_ref.bench.measure ``Timing.host``; GPU only)
    host_seconds: float | None = None
    #: layers written per timed write (the same write into each layer's caches; 1 for a read) and the calls that
    #: took: 1 for a grouped kernel's ``write_layers``, one per layer otherwise
    layers: int = 1
    launches: int = 1
