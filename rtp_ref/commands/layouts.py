"""``rtp-ref layouts``: every KV-cache family's layouts on a platform (MLA field tables, MHA paged, indexer)."""

from __future__ import annotations

import argparse
from typing import Any

from rtp_ref.commands._output import add_json_flag, add_layout_flag, json_number, positive_int, print_json
from rtp_ref.contract import WriteContract
from rtp_ref.errors import RtpRefError
from rtp_ref.kv.describe import layout_as_dict, layout_table
from rtp_ref.kv.describe_mha_indexer import indexer_as_dict, indexer_layouts, indexer_table, mha_as_dict, mha_table
from rtp_ref.kv.dtypes import KvDtype
from rtp_ref.kv.flags import parse_overrides
from rtp_ref.kv.layout_records import ALL_LAYOUT_NAMES, DESCRIBED_LAYOUT_NAMES
from rtp_ref.kv.layouts import layout_for_platform
from rtp_ref.kv.mha_paged import MHA_CACHE_DTYPES, MhaPagedLayout, mha_layout
from rtp_ref.kv.specs import MhaSpec, resolve_sparse_fp8_layout
from rtp_ref.platform import Platform, resolve_platform

#: the cache families ``--family`` selects
FAMILIES = ("mla", "mha", "indexer")


def add_layout_arguments(parser: argparse.ArgumentParser) -> None:
    """``--layout-flag`` (repeatable), ``--kv-lora-rank`` and ``--rope-dim``, shared with ``golden``."""
    add_layout_flag(parser)
    parser.add_argument(
        "--kv-lora-rank", type=positive_int, metavar="R", help="latent rank (default: 512; 448 for fp8_model1_mla)"
    )
    parser.add_argument("--rope-dim", type=positive_int, metavar="P", help="rope dimension (default: 64)")


def add_family_arguments(parser: argparse.ArgumentParser) -> None:
    """The MHA paged cache's ``--num-kv-heads`` and ``--head-size``, the indexer's ``--indexer-dim`` and
    ``--quant-block-size``, shared with ``golden``."""
    mha = parser.add_argument_group("mha paged")
    mha.add_argument("--num-kv-heads", type=positive_int, default=8, metavar="H",
                     help="KV heads of the model (default: 8)")
    mha.add_argument("--head-size", type=positive_int, default=128, metavar="D", help="values per head (default: 128)")
    indexer = parser.add_argument_group("indexer")
    indexer.add_argument("--indexer-dim", type=positive_int, default=128, metavar="D",
                         help="indexer head dim (default: 128)")
    indexer.add_argument("--quant-block-size", type=positive_int, metavar="Q",
                         help="values per scale of the fp8 variants (none, ue8m0; default: 128); mxfp4's is 32, "
                              "fixed")


def _json_floats(value: Any) -> Any:
    if isinstance(value, float):
        return json_number(value)
    if isinstance(value, dict):
        return {k: _json_floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_floats(v) for v in value]
    return value


def _families(args: argparse.Namespace) -> list[str]:
    families = args.family or (["mla"] if args.layout else list(FAMILIES))
    if args.layout and "mla" not in families:
        raise RtpRefError(f"--layout {args.layout}: an MLA layout; valid: with --family mla (or no --family)")
    return families


def _mla(args: argparse.Namespace, platform: Platform) -> tuple[list[dict[str, Any]], list[list[str]]]:
    overrides = parse_overrides(args.layout_flag)
    names = [args.layout] if args.layout else list(ALL_LAYOUT_NAMES)
    reads = platform.reader.reads if platform.reader is not None else ()
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
        described = name in DESCRIBED_LAYOUT_NAMES
        views.append({"supported": supported, "described": described, "read_by_reader": name in reads,
                      **layout_as_dict(layout, args.block_size)})
        mark = (f"supported by {platform.name}" if supported else
                f"described; certified by no op; read by {platform.name}'s reader" if described and name in reads else
                "described; certified by no op" if described else f"not claimed by {platform.name}")
        table = layout_table(layout, args.block_size)
        texts.append([f"{table[0]}  [{mark}]", *table[1:]])
    return views, texts


def _mha(args: argparse.Namespace, contract: WriteContract) -> list[MhaPagedLayout]:
    # one rank's heads by rtp-llm's rule (kv / tp, or kv / gcd(kv, tp)): the spec and the op agree on it
    local = MhaSpec(KvDtype.BF16, args.num_kv_heads, args.head_size, tp_size=args.tp_size).local_head_num_kv
    return [mha_layout(contract, dtype, local, args.head_size) for dtype in MHA_CACHE_DTYPES]


def _layouts(args: argparse.Namespace) -> int:
    platform = resolve_platform(args.platform)
    # the platform's encoding with the layout flags applied: the cache's fp8 format (cache_fp8_format) included
    contract = WriteContract.for_platform(platform, parse_overrides(args.layout_flag))
    flags = contract.flags
    families = _families(args)
    views, texts = _mla(args, platform) if "mla" in families else ([], [])
    mha = _mha(args, contract) if "mha" in families else None
    indexer = indexer_layouts(contract, flags, args.indexer_dim,
                              args.quant_block_size) if "indexer" in families else None
    mha_view = (args.num_kv_heads, args.tp_size, args.block_size)
    sparse = resolve_sparse_fp8_layout(flags)
    if args.json:
        document: dict[str, Any] = {
            "platform": platform.name,
            "source": platform.source,
            "fp8_format": platform.element_format.name,
            "conversion_mode": platform.conversion_mode.value,
            "flags": flags.as_dict(),
            "families": families,
        }
        if "mla" in families:
            document.update({"sparse_fp8_layout": sparse, "layouts": views})
        if mha is not None:
            document["mha"] = mha_as_dict(mha, *mha_view)
        if indexer is not None:
            document["indexer"] = indexer_as_dict(indexer, args.block_size)
        print_json(_json_floats(document))
        return 0
    print(
        f"platform {platform.name} ({platform.source}): fp8 {platform.element_format.name}, "
        f"conversion {platform.conversion_mode.value}"
    )
    print(f"layout flags: {flags.as_text()}")
    if "mla" in families:
        print(f"rtp-llm's sparse fp8 MLA spec stores: {sparse}")
    for lines in [*texts, *([mha_table(mha, *mha_view)] if mha else []),
                  *([indexer_table(indexer, args.block_size)] if indexer else [])]:
        print()
        print("\n".join(lines))
    return 0


def register(sub: Any) -> None:
    """Add ``layouts``."""
    parser = sub.add_parser(
        "layouts",
        help="every KV-cache family's layouts on a platform: MLA field tables, MHA paged and indexer sizes",
        description="Print each MLA layout's field table (byte offset, size, element format, placement) "
        "and the byte counts derived from it, built with the platform's fp8 format and layout flags; the MHA "
        "paged cache's K and V bytes per token for the given heads; the DeepSeek indexer cache's bytes. Example: "
        "rtp-ref layouts --platform rocm-gfx942 --layout-flag lora_alignment=round_up --kv-lora-rank 100",
    )
    parser.add_argument(
        "--family",
        action="append",
        choices=FAMILIES,
        help="show only this cache family (repeatable; default: every family, or mla with --layout)",
    )
    parser.add_argument(
        "--platform",
        default="auto",
        help="platform name, a .toml path, or auto to detect the running device (default: auto)",
    )
    parser.add_argument(
        "--layout",
        choices=list(ALL_LAYOUT_NAMES),
        help="show only this layout (then arguments it cannot take are an error)",
    )
    parser.add_argument(
        "--block-size",
        type=positive_int,
        default=64,
        metavar="B",
        help="tokens per block for the per-block sizes (default: 64)",
    )
    add_layout_arguments(parser)
    add_family_arguments(parser)
    parser.add_argument_group("mha paged").add_argument(
        "--tp-size", type=positive_int, default=1, metavar="N",
        help="tensor-parallel ranks: one rank's caches hold its share of the heads (default: 1)")
    add_json_flag(parser)
    parser.set_defaults(func=_layouts)
