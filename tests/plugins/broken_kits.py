"""Plugins kits that each get something wrong, to show the suite's checks fail (or end absent) on it
(tests/plugins/test_suite_checks_fail.py)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from rtp_ref.suites.args.rtp_llm_main import EnvArgumentParser, PyEnvConfigs, init_all_group_args
from rtp_ref.suites.plugins import legacy_rtp_llm_plugins as pr1266
from rtp_ref.suites.plugins import rtp_llm_main_plugins as main
from rtp_ref.suites.plugins.legacy_plugins_adapter import LegacyPluginsKit
from rtp_ref.suites.plugins.rtp_llm_main_plugins_adapter import RtpLlmMainPluginsKit


class SilentLoaderKit(LegacyPluginsKit):
    """PR #1266 with a loader that imports the packages and logs nothing."""

    def load_packages(self, names: Sequence[str], importer: Callable[[str], ModuleType] | None = None) -> None:
        for name in names:
            importlib.import_module(name)


class OneCallSiteKit(LegacyPluginsKit):
    """PR #1266 with the packages loaded at start-up only: the model-config entry point does not load them."""

    def model_config_class(self, args: Any) -> type:
        return main.create_model_config(args)


class MadeUpFeaturesKit(LegacyPluginsKit):
    """PR #1266 with the two features no rtp-llm version has, made up the way the recipe forbids: an override that
    writes the engine's tables past its conflict checks, as ROCm/ATOM's plugin does (§5), and an importer taken and
    ignored."""

    absent_features: frozenset[str] = frozenset()

    def register(self, registry: ModuleType, name: str, cls: type, *, architectures: Sequence[str] = (),
                 repos: Sequence[str] = (), override: bool = False) -> None:
        if not override:
            super().register(registry, name, cls, architectures=architectures, repos=repos)
            return
        registry._model_factory[name] = cls
        for arch in architectures:
            registry._hf_architecture_2_ft[arch] = name
        for repo in repos:
            registry._hf_repo_2_ft[repo] = name

    def load_packages(self, names: Sequence[str], importer: Callable[[str], ModuleType] | None = None) -> None:
        pr1266.load_external_model_packages(names)


class NaiveMainKit(RtpLlmMainPluginsKit):
    """An adapter for rtp-llm main that hands the suite main's server parser for the flag it does not have, and
    does not list the feature absent: the flag's tests must end absent, not pass on argparse's "unrecognized"."""

    absent_features: frozenset[str] = frozenset({"package_loading", "override_registration"})

    def parse_package_list(self, text: str) -> list[str]:
        return text.split(",")

    def package_list_parser(self) -> EnvArgumentParser:
        parser = EnvArgumentParser(prog="prog")
        init_all_group_args(parser, PyEnvConfigs())
        return parser


class UndeclaredMainKit(RtpLlmMainPluginsKit):
    """An adapter for rtp-llm main that leaves the flag's members out without listing the feature absent."""

    absent_features: frozenset[str] = frozenset({"package_loading", "override_registration"})


def silent_loader_kit() -> SilentLoaderKit:
    return SilentLoaderKit()


def one_call_site_kit() -> OneCallSiteKit:
    return OneCallSiteKit()


def made_up_features_kit() -> MadeUpFeaturesKit:
    return MadeUpFeaturesKit()


def naive_main_kit() -> NaiveMainKit:
    return NaiveMainKit()


def undeclared_main_kit() -> UndeclaredMainKit:
    return UndeclaredMainKit()
