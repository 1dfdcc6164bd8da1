"""``rtp-ref read-check``: what a platform's attention reader will see in a golden file's written cache."""

from __future__ import annotations

import argparse
from dataclasses import asdict
from typing import Any

from rtp_ref.commands._output import add_json_flag, print_json
from rtp_ref.errors import RtpRefError
from rtp_ref.kv.flags import resolve_flags
from rtp_ref.kv.golden_file import GoldenFile
from rtp_ref.kv.golden_read import read_golden
from rtp_ref.kv.layouts import MlaLayout
from rtp_ref.kv.mha_paged import MhaPagedLayout
from rtp_ref.kv.nvfp4_page import ScaleOrder
from rtp_ref.kv.nvfp4_reader_view import nvfp4_reader_changes
from rtp_ref.kv.reader_view import reader_changes
from rtp_ref.ops import MLA_OP, OPS
from rtp_ref.platform import Platform, resolve_platform


def no_reader_convention(golden: GoldenFile) -> str:
    """Why read-check does not read ``golden``, a file of another op than the MLA write: one line naming the file,
    what read-check reads and why (a platform table's ``[reader]`` speaks of the attention readers of an MLA cache
    only), and what reads the file's cache instead (its family's read op, or none)."""
    spec = OPS[golden.op]
    readers = [s.name for s in OPS.values() if s.reads and s.family == spec.family]
    read_by = (f"its read op, {' and '.join(readers)}, copies the stored bytes as they are" if readers else
               "it has no read op: attention kernels read it in place through the block table")
    return (f"{golden.where}: a call of {golden.op}, whose cache no platform table's [reader] describes ({read_by}; "
            f"[reader] states how the attention readers of an MLA cache take it); valid: read-check reads golden "
            f"files of {MLA_OP} (`rtp-ref golden --family mla`); `rtp-ref golden-check` checks this one")


def _read_check(args: argparse.Namespace) -> int:
    platform = resolve_platform(args.platform)
    reader = platform.reader
    if reader is None:
        raise RtpRefError(f"--platform {args.platform!r}: its table states no [reader]; valid: a table with a "
                          "[reader] section (every bundled table has one)")
    golden = read_golden(args.file)
    layout, meta = golden.layout, golden.metadata
    if isinstance(layout, MhaPagedLayout) and layout.fp4 is not None:
        return _nvfp4_read_check(args, golden, layout, platform)
    if not isinstance(layout, MlaLayout):
        raise RtpRefError(no_reader_convention(golden))
    if reader.reads and layout.name not in reader.reads:
        # the table says which layouts its reader reads: another layout's view would be a reader that does not exist
        raise RtpRefError(f"{golden.path}: layout {layout.name} is read by no reader of {platform.name} ({reader.name} "
                          f"reads {', '.join(reader.reads)}); valid: a golden file of one of those layouts")
    changes = reader_changes(layout, golden.tensors["kv_cache_expected"], golden.tensors["slot_mapping"], reader)
    changed = any(c.changed for c in changes)
    # the flags of this layout's scales (ds_mla_*, model1_*, fp8_*): the rule the file was written under
    prefix = layout.name.removeprefix("fp8_").removesuffix("_mla")
    flags = {k: v for k, v in sorted(layout.flags.as_dict().items()) if k.startswith(prefix)}
    if args.json:
        print_json({"file": golden.path, "layout": layout.name, "written_for": meta["platform"],
                    "fp8_format": meta["fp8_format"], "scale_flags": flags, "platform": platform.name,
                    "reader": {"name": reader.name, "tile_scale": reader.tile_scale,
                               "element_format": reader.element_format.name, "source": reader.source},
                    "changes": [asdict(c) for c in changes], "changed": changed})
        return 1 if changed else 0
    rule = ", ".join(f"{k} {v}" for k, v in flags.items())
    print(f"{golden.path}: {layout.name} written for {meta['platform']} ({meta['fp8_format']}"
          f"{', ' + rule if rule else ''}), read by {reader.name} ({platform.name}: tile scales as "
          f"{reader.tile_scale}, fp8 as {reader.element_format.name}; {reader.source})")
    for c in changes:
        print(f"  {c.describe()}")
    if not changes:
        print("  nothing a reader interprets: the layout stores no fp8 value and no fp32 tile scale (16-bit values, "
              "E2M1 codes and their scales read one way)")
    verdict = "CHANGES stored values on read" if changed else "reads every stored value as written"
    print(f"rtp-ref: {reader.name} {verdict}")
    return 1 if changed else 0


def _nvfp4_read_check(args: argparse.Namespace, golden: GoldenFile, layout: MhaPagedLayout,
                      platform: Platform) -> int:
    """read-check of an ``nvfp4`` MHA golden file: its caches as the platform's NVFP4 readers take them (the table's
    ``nvfp4_v_scale_order``), against the order the file was written in."""
    order = ScaleOrder(resolve_flags(platform).nvfp4_v_scale_order)
    t = golden.tensors
    key_cache, value_cache = (golden.cache_view(t[f"{name}_expected"]) for name in golden.caches)
    changes = nvfp4_reader_changes(layout, key_cache, value_cache, t["slot_mapping"], t["k_scale"], t["v_scale"],
                                   order)
    changed = any(c.changed for c, _ in changes)
    if args.json:
        print_json({"file": golden.path, "layout": layout.kv_cache_dtype, "written_for": golden.metadata["platform"],
                    "written_v_scale_order": layout.v_scale_order.value, "platform": platform.name,
                    "reader_v_scale_order": order.value,
                    "changes": [{**asdict(c), "rel_l2": err} for c, err in changes], "changed": changed})
        return 1 if changed else 0
    print(f"{golden.path}: nvfp4 written for {golden.metadata['platform']} (V scales {layout.v_scale_order.value}), "
          f"read by {platform.name}'s NVFP4 readers (V scales {order.value}: layout flag nvfp4_v_scale_order)")
    for c, err in changes:
        print(f"  {c.describe()}; relative L2 error of what is read {err:.3g}")
    verdict = "CHANGES stored values on read" if changed else "reads every stored value as written"
    print(f"rtp-ref: {platform.name}'s NVFP4 readers {verdict}")
    return 1 if changed else 0


def register(sub: Any) -> None:
    """Add ``read-check``."""
    parser = sub.add_parser(
        "read-check",
        help="what a platform's attention reader sees in a golden file's cache: tile scales and fp8 values it "
             "takes differently from what was stored",
        description="Read the written entries of an MLA golden file (rtp-ref golden --family mla) as the platform "
        "table's [reader] takes them (FlashMLA SM90: fp32 tile scales as bf16; SM100: as e8m0 rounded toward zero; "
        "AITER: as stored, in the platform's fp8 format) and report, per kind of value, how many change on read and by "
        "how much. An nvfp4 MHA golden file (rtp-ref golden --family mha --layout nvfp4) is read with the V-scale "
        "order of the platform's NVFP4 readers (layout flag nvfp4_v_scale_order: SM100 swizzled, SM120 linear). "
        "Exits 0 when the reader sees every value as stored, 1 when some change, 2 on a bad file or argument (a "
        "golden file of another MHA variant or of the indexer write among them: no table states a reader of those "
        "caches). Example: rtp-ref read-check ds_mla.safetensors --platform cuda-sm100",
    )
    parser.add_argument("file", metavar="FILE", help="the golden .safetensors file (an MLA layout, or MHA nvfp4)")
    parser.add_argument("--platform", required=True, help="platform name or .toml path whose [reader] reads it")
    add_json_flag(parser)
    parser.set_defaults(func=_read_check)
