"""``--external_model_packages``: which Python packages to import at start-up, and their validation.

Importing a package runs its code, so the flag is command line only (never an environment
variable) and each name must be an absolute dotted module path: identifiers, no keywords, no
empty parts. That rejects paths (``../x``, ``a/b.py``), relative imports (``.a``), ``a-b`` and
``import.x``; rtp-llm's parser let keywords through and turned ``,,`` into an empty list.
"""

from __future__ import annotations

import argparse
import keyword

from rtp_ref.args.bindings import BindSpec
from rtp_ref.args.parser import EnvArgumentGroup, EnvArgumentParser
from rtp_ref.errors import RtpRefError

FLAG = "--external_model_packages"
EXAMPLE = "atom.plugin.rtpllm.models"


def validate_package_name(name: str) -> str:
    """``name`` if it is an absolute dotted module path; else RtpRefError naming it and the bad part."""
    for part in name.split("."):
        if not part.isidentifier():
            raise RtpRefError(
                f"invalid external model package path {name!r}: part {part!r} is not a Python identifier; "
                f"expected a dotted module name such as {EXAMPLE!r}"
            )
        if keyword.iskeyword(part):
            raise RtpRefError(
                f"invalid external model package path {name!r}: part {part!r} is a Python keyword, "
                "which no importable module is named"
            )
    return name


def parse_external_model_packages(text: str) -> list[str]:
    """argparse ``type`` of the flag: comma-separated names, blanks stripped, duplicates dropped in order.

    Raises ``argparse.ArgumentTypeError`` (argparse exits 2) naming the first invalid item, or
    saying that no name was given (``""``, ``",,"``): an explicit but empty list is a typo, not
    "no plugins" (leave the flag out for that).
    """
    names = [item.strip() for item in text.split(",")]
    present = [name for name in names if name]
    if not present:
        raise argparse.ArgumentTypeError(
            f"no package name in {text!r}; give comma-separated module names such as {EXAMPLE!r}, "
            "or leave the flag out"
        )
    try:
        return list(dict.fromkeys(validate_package_name(name) for name in present))
    except RtpRefError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_external_model_packages_argument(
    container: EnvArgumentParser | EnvArgumentGroup, *, bind_to: BindSpec | None = None
) -> argparse.Action:
    """Register ``--external_model_packages`` on a parser or group: command line only, default None."""
    return container.add_argument(
        FLAG,
        type=parse_external_model_packages,
        default=None,
        enable_env=False,
        bind_to=bind_to,
        metavar="PKG[,PKG...]",
        help="Python packages to import at start-up, in order, so that they can register model types; "
        "importing runs their code, so this is read from the command line only",
    )
