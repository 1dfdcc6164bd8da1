"""``rtp-ref layouts``: every MLA KV-cache layout's fields, offsets and sizes on a platform."""

from __future__ import annotations

import argparse
from typing import Any

from rtp_ref.commands._output import add_json_flag, add_layout_flag, json_number, print_json
from rtp_ref.errors import RtpRefError
from rtp_ref.kv.describe import layout_as_dict, layout_table
from rtp_ref.kv.flags import parse_overrides, resolve_flags
from rtp_ref.kv.layouts import LAYOUT_BUILDERS, layout_for_platform
from rtp_ref.kv.specs import resolve_sparse_fp8_layout
from rtp_ref.platform import resolve_platform


def add_layout_arguments(parser: argparse.ArgumentParser) -> None:
    """``--layout-flag`` (repeatable), ``--kv-lora-rank`` and ``--rope-dim``, shared with ``golden``."""
    add_layout_flag(parser)
    parser.add_argument(
        "--kv-lora-rank", type=int, metavar="R", help="latent rank (default: 512; 448 for fp8_model1_mla)"
    )
    parser.add_argument("--rope-dim", type=int, metavar="P", help="rope dimension (default: 64)")


def _json_floats(value: Any) -> Any:
    if isinstance(value, float):
        return json_number(value)
    if isinstance(value, dict):
        return {k: _json_floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_floats(v) for v in value]
    return value


def _layouts(args: argparse.Namespace) -> int:
    platform = resolve_platform(args.platform)
    overrides = parse_overrides(args.layout_flag)
    flags = resolve_flags(platform, overrides)
    names = [args.layout] if args.layout else list(LAYOUT_BUILDERS)
    if args.block_size < 1:
        raise RtpRefError(f"--block-size {args.block_size} is not valid; valid: >= 1")
    # Checked here, not per layout: every layout would refuse the value, and the command would still
    # exit 0 with only per-layout errors to show for it.
    for option, value in (("--kv-lora-rank", args.kv_lora_rank), ("--rope-dim", args.rope_dim)):
        if value is not None and value < 1:
            raise RtpRefError(f"{option} {value} is not valid; valid: >= 1")
    views: list[dict[str, Any]] = []
    texts: list[list[str]] = []
    for name in names:
        supported = name in platform.supported_layouts
        try:
            layout = layout_for_platform(
                platform, name, kv_lora_rank=args.kv_lora_rank, rope_dim=args.rope_dim, overrides=overrides
            )
        except RtpRefError as exc:
            if args.layout:
                raise
            views.append({"name": name, "supported": supported, "error": str(exc)})
            texts.append([f"{name}: not available with these arguments: {exc}"])
            continue
        views.append({"supported": supported, **layout_as_dict(layout, args.block_size)})
        mark = "supported" if supported else "not claimed"
        table = layout_table(layout, args.block_size)
        texts.append([f"{table[0]}  [{mark} by {platform.name}]", *table[1:]])
    sparse = resolve_sparse_fp8_layout(flags)
    if args.json:
        print_json(
            _json_floats(
                {
                    "platform": platform.name,
                    "source": platform.source,
                    "fp8_format": platform.element_format.name,
                    "conversion_mode": platform.conversion_mode.value,
                    "flags": flags.as_dict(),
                    "sparse_fp8_layout": sparse,
                    "layouts": views,
                }
            )
        )
        return 0
    print(
        f"platform {platform.name} ({platform.source}): fp8 {platform.element_format.name}, "
        f"conversion {platform.conversion_mode.value}"
    )
    print(f"layout flags: {flags.as_text()}")
    print(f"rtp-llm's sparse fp8 MLA spec stores: {sparse}")
    for lines in texts:
        print()
        print("\n".join(lines))
    return 0


def register(sub: Any) -> None:
    """Add ``layouts``."""
    parser = sub.add_parser(
        "layouts",
        help="every MLA KV-cache layout's fields, offsets and sizes on a platform",
        description="Print each MLA layout's field table (byte offset, size, element format, placement) "
        "and the "
        "byte counts derived from it, built with the platform's fp8 format and layout flags. Example: "
        "rtp-ref layouts --platform rocm-gfx942 --layout-flag lora_alignment=round_up --kv-lora-rank 100",
    )
    parser.add_argument(
        "--platform",
        default="auto",
        help="platform name, a .toml path, or auto to detect the running device (default: auto)",
    )
    parser.add_argument(
        "--layout",
        choices=list(LAYOUT_BUILDERS),
        help="show only this layout (then arguments it cannot take are an error)",
    )
    parser.add_argument(
        "--block-size",
        type=int,
        default=64,
        metavar="B",
        help="tokens per block for the per-block sizes (default: 64)",
    )
    add_layout_arguments(parser)
    add_json_flag(parser)
    parser.set_defaults(func=_layouts)
