"""``rtp-ref kernels``: every kernel rtp-ref finds here, whatever its op, with what certify would need to know about
it: its op, the variants it claims, the devices it runs on (and the one it would run on here), and where it comes
from (rtp-ref's built-ins, an entry point with its distribution and version, or a ``$RTP_REF_KERNELS`` item); then the
built-in kernels that cannot run here, each with why, and every source of kernels that failed to load, with its error.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from importlib import metadata
from typing import TYPE_CHECKING, Any

from rtp_ref.commands._output import add_json_flag, print_json
from rtp_ref.errors import RtpRefError

if TYPE_CHECKING:
    from rtp_ref.kernels.protocol import KernelEntry


@dataclass(frozen=True)
class Found:
    """What discovery found: the kernels in discovery order, the built-ins that cannot run here (name -> why), and
    the sources that failed to load or clashed (one line each)."""

    kernels: list[KernelEntry]
    unavailable: dict[str, str]
    problems: list[str]


def find_every_kernel() -> Found:
    """Every kernel of every op, as certify discovers them (built-ins, then each entry point, then each
    ``$RTP_REF_KERNELS`` item), except that a source failing to load is listed as a problem instead of ending the
    search: the others are still shown. A kernel that fails its protocol check (a missing ``op`` included, with the
    fix: rtp_ref.kernels.op_hint) fails its source. Two kernels with one name are a problem too (certify refuses
    them)."""
    # discovery imports torch: here, not when the parser is built (`rtp-ref platforms` needs no tensors)
    from rtp_ref.kernels.discovery import (
        ENTRY_POINT_GROUP,
        builtin_kernels,
        entry_point_kernels,
        env_items,
        env_kernels,
        unavailable_kernels,
    )

    entries: list[KernelEntry] = []
    problems: list[str] = []
    # one source at a time, each $RTP_REF_KERNELS item too: one that fails hides none of the others
    loaders = [builtin_kernels,
               *(lambda ep=ep: entry_point_kernels([ep]) for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)),
               *(lambda item=item: env_kernels(item) for item in env_items())]
    for load in loaders:
        try:
            entries += load()
        except RtpRefError as exc:
            problems.append(str(exc))
    seen: dict[str, KernelEntry] = {}
    for entry in entries:
        other = seen.setdefault(entry.kernel.name, entry)
        if other is not entry:
            problems.append(f"two kernels are named {entry.kernel.name!r}: {other.origin} and {entry.origin}; "
                            "certify refuses both until one is renamed")
    return Found(entries, unavailable_kernels(), problems)


def kernel_row(entry: KernelEntry) -> dict[str, Any]:
    """One kernel as JSON: name, op, the variants it claims, its devices, the device it runs on here (None: none
    torch sees) and its origin."""
    from rtp_ref.kernels.protocol import device_to_run
    from rtp_ref.ops import claimed_variants, op_name

    kernel = entry.kernel
    devices = sorted(kernel.devices)
    return {"name": kernel.name, "op": op_name(kernel), "claims": list(claimed_variants(kernel)), "devices": devices,
            "runs_here_on": device_to_run(devices), "origin": entry.origin}


def _print_text(rows: list[dict[str, Any]], found: Found) -> None:
    name_w = max((len(r["name"]) for r in rows), default=4)
    op_w = max((len(r["op"]) for r in rows), default=2)
    for origin in dict.fromkeys(r["origin"] for r in rows):
        print(origin)
        for r in (r for r in rows if r["origin"] == origin):
            here = f"here: {r['runs_here_on']}" if r["runs_here_on"] else "not here"
            print(f"  {r['name']:<{name_w}}  {r['op']:<{op_w}}  {', '.join(r['devices']):<9}  {here:<10}  "
                  f"claims {', '.join(r['claims']) or '(nothing)'}")
    if found.unavailable:
        print("not available here")
        width = max(len(name) for name in found.unavailable)
        for name, why in found.unavailable.items():
            print(f"  {name:<{width}}  {why}")
    for problem in found.problems:
        print(f"problem: {problem}")


def _kernels(args: argparse.Namespace) -> int:
    from rtp_ref.ops import OPS, op_name

    if args.op is not None and args.op not in OPS:
        raise RtpRefError(f"--op {args.op!r}: not an op rtp-ref certifies; valid: {', '.join(OPS)}")
    found = find_every_kernel()
    rows = [kernel_row(e) for e in found.kernels if args.op is None or op_name(e.kernel) == args.op]
    if args.json:
        print_json({"kernels": rows, "unavailable": found.unavailable, "problems": found.problems})
    else:
        _print_text(rows, found)
    # a source that failed to load is a kernel certify cannot run: the listing is not the whole story
    return 1 if found.problems else 0


def register(sub: Any) -> None:
    """Add ``kernels``: list every discovered kernel (``--op`` keeps one op's), ``--json`` for machines."""
    parser = sub.add_parser("kernels", help="list the kernels certify finds here: op, claims, devices, origin",
                            description="Every kernel certify would find here (built-ins, the rtp_ref.kernels entry "
                                        "points of installed packages, $RTP_REF_KERNELS), with its op, the variants it "
                                        "claims, its devices and its origin; the built-ins that cannot run here and "
                                        "why; any source that failed to load (exit 1).")
    # checked when the command runs (an unknown op is exit 2 naming the valid ones): the ops are scanned from
    # rtp_ref.ops, which imports torch
    parser.add_argument("--op", help="only the kernels of this op (concat_and_cache_mla, reshape_and_cache_flash, ...)")
    add_json_flag(parser)
    parser.set_defaults(func=_kernels)
