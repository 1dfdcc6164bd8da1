"""``rtp-ref platforms``: list the platform tables, show one, or detect the running one."""

from __future__ import annotations

import argparse
from typing import Any

from rtp_ref.commands._output import add_json_flag, print_json
from rtp_ref.platform import Platform, all_platforms, detect_platform, load_platform


def platform_summary(p: Platform) -> dict[str, Any]:
    """The JSON view of a platform table (its file's data plus where it came from)."""
    return {"name": p.name, "source": p.source, "sha256": p.sha256, **p.raw}


def _list(args: argparse.Namespace) -> int:
    tables = all_platforms()
    if args.json:
        print_json([platform_summary(p) for p in tables])
        return 0
    width = max(len(p.name) for p in tables)
    for p in tables:
        print(f"{p.name:<{width}}  {p.backend:<4}  fp8={p.element_format.name:<8}  {p.description}")
    return 0


def _show(args: argparse.Namespace) -> int:
    p = load_platform(args.name)
    if args.json:
        print_json(platform_summary(p))
        return 0
    print(f"{p.name}: {p.description}")
    print(f"  file:            {p.source} (sha256 {p.sha256[:16]})")
    print(f"  backend:         {p.backend}")
    detect = ", ".join(p.cuda_capabilities or p.gcn_archs) or "(no GPU)"
    print(f"  detected from:   {detect}")
    fmt = p.element_format
    print(f"  fp8 element:     {fmt.name} (max {fmt.max_value:g}), conversion {p.conversion_mode.value}")
    print(f"  scale formats:   {', '.join(p.scale_formats)}")
    print(f"  conversion:      fp8 {', '.join(p.fp8_conversion) or 'none'} in one instruction, fp4 "
          f"{', '.join(p.fp4_conversion) or 'none'} (else in software)")
    print(f"  MLA layouts:     {', '.join(p.supported_layouts)}")
    print(f"  MHA variants:    {', '.join(p.mha_variants) if p.mha_variants is not None else 'every one'}")
    indexer = p.indexer_variants
    print(f"  indexer formats: {', '.join(indexer) if indexer is not None else 'every one'}")
    print("  layout flags:    " + ", ".join(f"{k}={v}" for k, v in p.layout_flags.items()))
    print(f"  tolerances:      numerics within {p.numerics_max_ulp:g} ulp; required grade {p.required_grade}")
    for d in p.deviations:
        layouts = ", ".join(d.layouts)
        before = f" (torch before {d.torch_before[0]}.{d.torch_before[1]})" if d.torch_before else ""
        print(f"  deviation:       {d.kernel} on {layouts} fails {d.check}{before}: {d.reason} [{d.source}]")
    uncited = p.uncited_claims()
    # a bundled table cites every claim; a user's table may not, and says so here (rtp_ref.platform, [sources])
    print(f"  sources:         {len(p.citations) - len(uncited)} of {len(p.citations)} claims cite one"
          + (f"; without a source: {', '.join(uncited)}" if uncited else ""))
    return 0


def _detect(args: argparse.Namespace) -> int:
    p = detect_platform()
    if args.json:
        print_json({"name": p.name, "source": p.source})
    else:
        print(p.name)
    return 0


def register(sub: Any) -> None:
    """Add ``platforms`` with its ``list`` (default), ``show NAME`` and ``detect`` actions."""
    parser = sub.add_parser("platforms", help="list, show or detect platform tables")
    add_json_flag(parser)
    parser.set_defaults(func=_list)
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    p_list = actions.add_parser("list", help="one line per platform table (default)")
    add_json_flag(p_list)
    p_list.set_defaults(func=_list)
    p_show = actions.add_parser("show", help="every field of one platform table")
    p_show.add_argument("name", help="platform name (see `rtp-ref platforms`) or a path to a .toml file")
    add_json_flag(p_show)
    p_show.set_defaults(func=_show)
    p_detect = actions.add_parser("detect", help="the platform of the GPU torch sees (cpu if none)")
    add_json_flag(p_detect)
    p_detect.set_defaults(func=_detect)
