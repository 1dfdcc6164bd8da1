"""``rtp-ref golden``: write one layout's golden vector (inputs + expected cache) as a safetensors file."""

from __future__ import annotations

import argparse
import hashlib
from typing import Any

from rtp_ref.commands._output import add_json_flag, print_json
from rtp_ref.commands.layouts import FAMILIES, add_family_arguments, add_layout_arguments
from rtp_ref.errors import RtpRefError
from rtp_ref.kv.flags import parse_overrides
from rtp_ref.kv.golden import GOLDEN_INPUT_DTYPES, GoldenCase, make_golden, write_golden
from rtp_ref.kv.golden_mha_indexer import GoldenShape, make_indexer_golden, make_mha_golden
from rtp_ref.kv.layout_records import MLA_LAYOUT_NAMES
from rtp_ref.kv.mha_paged import CACHE_ORDERS
from rtp_ref.ops import INDEXER_OP, MHA_OP, OPS
from rtp_ref.platform import Platform, resolve_platform


def _mha_indexer_case(args: argparse.Namespace, platform: Platform) -> GoldenCase:
    """The golden vector of an MHA paged or indexer write (``--family mha|indexer``)."""
    op = {"mha": MHA_OP, "indexer": INDEXER_OP}[args.family]
    given = [name for name, value in (("--kv-lora-rank", args.kv_lora_rank), ("--rope-dim", args.rope_dim),
                                      ("--layout-flag", args.layout_flag)) if value]
    if args.family == "indexer" and (args.cache_order != "NHD" or args.per_head_scales):
        given.append("--cache-order" if args.cache_order != "NHD" else "--per-head-scales")
    if given:
        raise RtpRefError(f"{given[0]}: not an argument of --family {args.family}; valid: the {args.family} "
                          f"family's arguments (rtp-ref golden --help)")
    if args.layout not in OPS[op].variants:
        raise RtpRefError(f"--layout {args.layout!r}: not a {op} variant; valid: {', '.join(OPS[op].variants)}")
    shape = GoldenShape(args.tokens, args.block_size, args.num_blocks, args.seed, args.input_dtype)
    if args.family == "mha":
        return make_mha_golden(platform, args.layout, args.num_kv_heads, args.head_size, args.cache_order,
                               args.per_head_scales, shape)
    return make_indexer_golden(platform, args.layout, args.indexer_dim, args.quant_block_size, shape)


def _golden(args: argparse.Namespace) -> int:
    platform = resolve_platform(args.platform)
    if args.family != "mla":
        case = _mha_indexer_case(args, platform)
        data = write_golden(args.out, case)
        digest = hashlib.sha256(data).hexdigest()
        if args.json:
            print_json({"out": args.out, "bytes": len(data), "sha256": digest, "metadata": case.metadata})
        else:
            meta = case.metadata
            print(f"wrote {args.out} ({len(data)} bytes, sha256 {digest[:16]}): {meta['op']} {meta['layout']} on "
                  f"{meta['platform']}, {meta['num_tokens']} tokens into {meta['num_blocks']} blocks x "
                  f"{meta['block_size']}, {meta['input_dtype']} inputs")
        return 0
    if args.cache_order != "NHD" or args.per_head_scales:
        raise RtpRefError(f"{'--cache-order' if args.cache_order != 'NHD' else '--per-head-scales'}: an argument of "
                          f"--family mha; valid: --family mha with it, or leave it out")
    if args.layout not in MLA_LAYOUT_NAMES:
        raise RtpRefError(f"--layout {args.layout!r}: not an MLA layout; valid: {', '.join(MLA_LAYOUT_NAMES)} "
                          f"(--family mha or indexer for their variants)")
    if args.layout not in platform.supported_layouts:
        # a golden file states what a platform's kernels must write: none is defined for a layout it lacks
        raise RtpRefError(f"--layout {args.layout!r}: platform {platform.name} does not support it; valid: "
                          f"{', '.join(platform.supported_layouts)}")
    case = make_golden(
        platform,
        args.layout,
        overrides=parse_overrides(args.layout_flag),
        kv_lora_rank=args.kv_lora_rank,
        rope_dim=args.rope_dim,
        tokens=args.tokens,
        block_size=args.block_size,
        num_blocks=args.num_blocks,
        seed=args.seed,
        input_dtype=args.input_dtype,
    )
    data = write_golden(args.out, case)
    digest = hashlib.sha256(data).hexdigest()
    skipped = int((case.tensors["slot_mapping"] < 0).sum())
    if args.json:
        print_json({"out": args.out, "bytes": len(data), "sha256": digest, "metadata": case.metadata})
        return 0
    meta = case.metadata
    print(
        f"wrote {args.out} ({len(data)} bytes, sha256 {digest[:16]}): "
        f"{meta['layout']} on {meta['platform']}, "
        f"{meta['num_tokens']} tokens ({skipped} on slot -1) into {meta['num_blocks']} blocks x "
        f"{meta['block_size']}, R={meta['kv_lora_rank']} P={meta['rope_dim']}, {meta['input_dtype']} inputs"
    )
    return 0


def register(sub: Any) -> None:
    """Add ``golden``."""
    parser = sub.add_parser(
        "golden",
        help="write a layout's golden vector (inputs and expected cache) as a safetensors file",
        description="Write the inputs of one call of a write op (--family mla: concat_and_cache_mla's kv_c, k_pe, "
        "slot_mapping with some -1 slots, scale; mha: reshape_and_cache_flash's; indexer: "
        "indexer_k_quant_and_cache's), the caches before it and the expected caches after it, plus metadata, to a "
        "safetensors file a C++ or Rust test can check a kernel with (keys: docs/layouts.md); `rtp-ref golden-check "
        "FILE` reads it back. The same arguments give the same bytes. Example: "
        "rtp-ref golden --layout fp8_ds_mla --platform cuda-sm90 --out ds_mla.safetensors",
    )
    parser.add_argument("--family", choices=FAMILIES, default="mla",
                        help="the cache family: mla (concat_and_cache_mla), mha (reshape_and_cache_flash) or indexer "
                             "(indexer_k_quant_and_cache); default: mla")
    parser.add_argument("--layout", required=True,
                        help=f"the layout to write: MLA {', '.join(MLA_LAYOUT_NAMES)}; mha "
                             f"{', '.join(OPS[MHA_OP].variants)}; indexer {', '.join(OPS[INDEXER_OP].variants)}")
    parser.add_argument(
        "--platform",
        required=True,
        help="platform name or .toml path (fp8 format, conversion mode, default flags)",
    )
    add_layout_arguments(parser)
    add_family_arguments(parser)
    parser.add_argument("--cache-order", choices=CACHE_ORDERS, default="NHD",
                        help="mha: the caches' order (HND is stored as [blocks, heads, rows, dim]; default: NHD)")
    parser.add_argument("--per-head-scales", action="store_true", help="mha: one k and v scale per head")
    parser.add_argument("--tokens", type=int, default=32, metavar="N", help="tokens written (default: 32)")
    parser.add_argument("--block-size", type=int, default=16, metavar="B", help="tokens per block (default: 16)")
    parser.add_argument("--num-blocks", type=int, default=4, metavar="M", help="cache blocks (default: 4)")
    parser.add_argument("--seed", type=int, default=0, metavar="S", help="random seed of the inputs (default: 0)")
    parser.add_argument(
        "--input-dtype",
        choices=list(GOLDEN_INPUT_DTYPES),
        default="bf16",
        help="dtype of kv_c and k_pe (default: bf16)",
    )
    parser.add_argument("--out", required=True, metavar="FILE", help="the .safetensors file to write")
    add_json_flag(parser)
    parser.set_defaults(func=_golden)
