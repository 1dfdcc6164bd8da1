"""An emulation of rtp-llm's plugin loading with PR #1266 applied, bugs included.

Written for this test suite from the behaviour spec (``docs/sources.md#rtp-llm-server-arguments`` and
``#rtp-llm-model-registry-and-plugins``: PR #1266's ``parse_external_model_packages``, the flag in
``model_group_args.py``, ``load_external_model_packages`` and its two call sites, the new ``ModelArgs`` slot);
it is not rtp-llm's code. The PR leaves the registry, the lookups and ``create_propose_model_config`` as they are:
those are the main branch's (rtp_llm_main_plugins.py). Its one job: run the plugins behaviour tests against it
and check that exactly the tests covering listed bugs fail. Keep it faithful.
rtp_ref/suites/plugins/legacy_plugins_adapter.py adapts it to the kit.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from rtp_ref.suites.args.legacy_rtp_llm import LegacyEnvArgumentParser
from rtp_ref.suites.plugins import rtp_llm_main_plugins as main


def parse_external_model_packages(value: str) -> list[str]:
    """PR ``model_group_args.py`` 7-19: split, strip, drop empties, isidentifier per part, dedupe."""
    packages: list[str] = []
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        if not all(part.isidentifier() for part in item.split(".")):
            raise argparse.ArgumentTypeError(f"invalid external model package path: {item!r}")
        if item not in packages:
            packages.append(item)
    return packages


def init_model_group_args(parser: LegacyEnvArgumentParser) -> None:
    """PR ``model_group_args.py`` 90-100: the flag, command line only, default None; its help says only that
    (review of PR #1330: nothing about importing, and so running, the packages' code)."""
    parser.add_argument_group("model").add_argument(
        "--external_model_packages",
        type=parse_external_model_packages,
        default=None,
        enable_env=False,
        help="comma-separated external model package paths; command line only",
    )


def load_external_model_packages(package_names: Sequence[str] | None) -> None:
    """PR ``import_util.py`` 27-45: import in order, each logged at INFO; the first failure raises RuntimeError
    from it."""
    if not package_names:
        return
    for name in package_names:
        try:
            importlib.import_module(name)
        except Exception as exc:
            raise RuntimeError(
                f"Failed to import external model package '{name}'; module search path: {sys.path}"
            ) from exc
        logging.info("loaded external model package %s", name)


class ModelArgs(main.ModelArgs):
    """The PR's ``config/model_args.py``: one more slot, default None."""

    __slots__ = ("external_model_packages",)

    def __init__(self) -> None:
        super().__init__()
        self.external_model_packages: list[str] | None = None


def setup_default_args(args: ModelArgs) -> None:
    """PR ``server_config_setup.py`` 398: load the packages, then infer as main does."""
    load_external_model_packages(args.external_model_packages)
    main.setup_default_args(args)


def create_model_config(args: ModelArgs) -> type:
    """PR ``model_factory.py`` 342: load the packages, then as main does."""
    load_external_model_packages(args.external_model_packages)
    return main.create_model_config(args)
