"""``rtp-ref fp8``: encode and decode values with the bit-exact codec, from the command line."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from rtp_ref.commands._output import add_json_flag, json_number, print_json
from rtp_ref.errors import RtpRefError
from rtp_ref.fp8 import FP8_FORMATS, ConversionMode, Pow2Rule

if TYPE_CHECKING:
    import torch

#: --input-dtype: the torch dtype of each name (torch is imported when a value is converted, not to build the parser)
_INPUT_DTYPES = ("float32", "bfloat16", "float16")
_FORMATS = [*sorted(FP8_FORMATS), "ue8m0"]
#: --mode of the fp8 element formats and --rule of ue8m0 when not given
DEFAULT_MODE = ConversionMode.SATFINITE.value
DEFAULT_RULE = Pow2Rule.CEIL.value


def _parse_float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number (examples: 1000, -31.74, inf, nan)"
        ) from None


def _parse_code(text: str) -> int:
    try:
        code = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a byte (examples: 126, 0x7e, 0b01111110)"
        ) from None
    if not 0 <= code <= 255:
        raise argparse.ArgumentTypeError(f"{text!r} is outside 0..255")
    return code


def ue8m0_note(value: float, code: int) -> str:
    """Why ``value`` encodes to a ue8m0 byte that is not its power of two, or "" when it is one: ue8m0 (OCP MX
    v1.0, E8M0) has no sign, no zero and no infinity, 0xFF is its NaN, and it spans 2^-127 to 2^127."""
    if value != value:
        return "NaN in: 0xff, ue8m0's NaN"
    if value < 0:
        return "a scale cannot be negative: ue8m0 has no sign bit; 0xff is its NaN"
    if value == 0:
        return "ue8m0 has no zero: 0x00 is 2^-127, its smallest scale"
    if code == 0xFF:
        return "past 2^127, ue8m0's largest scale: 0xff is its NaN"
    if code == 0 and value < 2.0 ** -127:
        return "below 2^-127, ue8m0's smallest scale: clamped to 0x00"
    return ""


def _codes_and_values(fmt: str, mode: str, rule: str, x: torch.Tensor) -> tuple[list[int], list[float]]:
    from rtp_ref.fp8 import decode, decode_ue8m0, encode, encode_ue8m0

    if fmt == "ue8m0":
        codes = encode_ue8m0(x, Pow2Rule(rule))
        return codes.tolist(), decode_ue8m0(codes).tolist()
    codes = encode(x, fmt, ConversionMode(mode))
    return codes.tolist(), decode(codes, fmt).tolist()


def _print_rows(rows: list[dict[str, Any]], as_json: bool) -> None:
    for row in rows:
        if as_json:
            print_json(row)
        else:
            value = row["value"]
            shown = value if isinstance(value, str) else format(value, ".9g")
            note = f"  ({row['note']})" if row.get("note") else ""
            print(f"{row['input']:>14}  {row['bits']}  {row['binary']}  {shown}{note}")


def _encode(args: argparse.Namespace) -> int:
    # --rule and --mode default to None so that one given for the other kind of format is refused,
    # not silently ignored.
    scale = args.format == "ue8m0"
    if args.rule is not None and not scale:
        raise RtpRefError(
            f"--rule {args.rule} applies only to --format ue8m0 (scale rounding), not to --format {args.format}; "
            "valid: --format ue8m0 with --rule, or no --rule"
        )
    if args.mode is not None and scale:
        raise RtpRefError(
            f"--mode {args.mode} applies only to fp8 element formats ({', '.join(sorted(FP8_FORMATS))}), "
            "not to --format ue8m0; valid: no --mode with --format ue8m0"
        )
    import torch

    dtype = getattr(torch, args.input_dtype)
    x = torch.tensor(args.values, dtype=torch.float64).to(dtype)
    codes, values = _codes_and_values(args.format, args.mode or DEFAULT_MODE, args.rule or DEFAULT_RULE, x)
    rows = [
        {"input": text, "bits": f"0x{c:02x}", "binary": f"{c:08b}", "value": json_number(v)}
        for text, c, v in zip(args.raw_values, codes, values, strict=True)
    ]
    if scale:  # the inputs no scale byte can hold say so (a negative one silently became NaN before)
        for row, given, code in zip(rows, x.tolist(), codes, strict=True):
            note = ue8m0_note(given, code)
            if note:
                row["note"] = note
    _print_rows(rows, args.json)
    return 0


def _decode(args: argparse.Namespace) -> int:
    import torch

    from rtp_ref.fp8 import decode, decode_ue8m0

    codes = torch.tensor(args.codes, dtype=torch.uint8)
    values = (decode_ue8m0(codes) if args.format == "ue8m0" else decode(codes, args.format)).tolist()
    rows = [
        {"input": text, "bits": f"0x{c:02x}", "binary": f"{c:08b}", "value": json_number(v)}
        for text, c, v in zip(args.raw_codes, args.codes, values, strict=True)
    ]
    _print_rows(rows, args.json)
    return 0


def _with_raw(dest: str, parse: Any) -> type[argparse.Action]:
    """An nargs='+' action keeping both the parsed values and the text the user typed."""

    class KeepRaw(argparse.Action):
        def __call__(self, parser: Any, namespace: Any, values: Any, option_string: Any = None) -> None:
            parsed = []
            for text in values:
                try:
                    parsed.append(parse(text))
                except argparse.ArgumentTypeError as exc:
                    raise argparse.ArgumentError(self, str(exc)) from None
            setattr(namespace, dest, parsed)
            setattr(namespace, f"raw_{dest}", list(values))

    return KeepRaw


def _format_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--format", required=True, choices=_FORMATS, help="fp8 element format, or ue8m0 for scales"
    )


def register(sub: Any) -> None:
    """Add ``fp8`` with its ``encode`` and ``decode`` actions."""
    parser = sub.add_parser("fp8", help="encode/decode fp8 values with the bit-exact reference codec")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    p_enc = actions.add_parser(
        "encode",
        help="float values -> fp8 bits and the value they decode to",
        description="Encode numbers to fp8 (round to nearest even). Example: "
        "rtp-ref fp8 encode --format e4m3fnuz --mode satfinite 1000 -31.74",
    )
    _format_arg(p_enc)
    p_enc.add_argument(
        "--mode",
        choices=[m.value for m in ConversionMode],
        help=f"overflow handling of the fp8 element formats (default: {DEFAULT_MODE}, as CUDA/HIP SATFINITE)",
    )
    p_enc.add_argument(
        "--rule",
        choices=[r.value for r in Pow2Rule],
        help=f"power-of-two rounding, for --format ue8m0 only (default: {DEFAULT_RULE})",
    )
    p_enc.add_argument(
        "--input-dtype",
        choices=sorted(_INPUT_DTYPES),
        default="float32",
        help="round each input to this dtype before encoding (default: float32)",
    )
    p_enc.add_argument(
        "values",
        nargs="+",
        metavar="VALUE",
        action=_with_raw("values", _parse_float),
        help="numbers, inf, -inf or nan",
    )
    add_json_flag(p_enc)
    p_enc.set_defaults(func=_encode)

    p_dec = actions.add_parser(
        "decode", help="fp8 bytes -> value", description="Decode fp8 bytes to float32."
    )
    _format_arg(p_dec)
    p_dec.add_argument(
        "codes",
        nargs="+",
        metavar="BYTE",
        action=_with_raw("codes", _parse_code),
        help="bytes as 126, 0x7e or 0b01111110",
    )
    add_json_flag(p_dec)
    p_dec.set_defaults(func=_decode)
