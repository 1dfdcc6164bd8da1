"""The plugins kit over the emulation of rtp-llm: the worked example of an adapter to a module-global registry.

rtp_ref/suites/plugins/legacy_rtp_llm_plugins.py is written like the engine: plugins register into a registry held
in a module global, by calling the engine's ``register_model`` at import. The steps of the recipe in
docs/args-and-plugins.md ("Writing an adapter") that this module shows:

1. ``isolated_default_registry`` yields the engine's own global registry and restores its tables in place
   afterwards (the registry object is never replaced: the engine's functions and every imported plugin hold it);
2. ``plugin_source`` writes a plugin the way a vendor would, importing the engine's public registration
   function, so loading it runs the engine's real import path;
3. the engine's functions are called with their own signatures: the loader has no importer parameter, and the
   kit passes the suite's importer on anyway, so the test fails as the engine would (a finding, not an adapter
   bug: an adapter never papers over a missing feature);
4. a plugin that replaces a built-in model does what ROCm's ATOM does (writes the registry's dictionaries).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

from rtp_ref.suites.args.legacy_rtp_llm import LegacyEnvArgumentParser
from rtp_ref.suites.plugins import legacy_rtp_llm_plugins as engine


class LegacyPluginsKit:
    """The plugins behaviour tests' kit (rtp_ref/suites/plugins/kit.py) over the emulation of rtp-llm."""

    name = "legacy rtp-llm emulation"

    def parse_package_list(self, text: str) -> list[str]:
        return engine.parse_external_model_packages(text)

    def package_list_parser(self) -> LegacyEnvArgumentParser:
        parser = LegacyEnvArgumentParser(prog="prog")
        parser.add_argument_group("model").add_argument(
            "--external_model_packages", type=engine.parse_external_model_packages, default=None, enable_env=False
        )
        return parser

    def load_packages(
        self, names: Sequence[str], importer: Callable[[str], ModuleType] | None = None
    ) -> None:
        if importer is None:
            engine.load_external_model_packages(names)
        else:  # step 3: fails as rtp-llm's loader does (TypeError: no such parameter), the finding shown
            engine.load_external_model_packages(names, importer=importer)  # type: ignore[call-arg]

    def new_registry(self) -> engine.LegacyModelRegistry:
        return engine.LegacyModelRegistry()

    @contextmanager
    def isolated_default_registry(self) -> Iterator[engine.LegacyModelRegistry]:
        """Step 1: the global registry itself, its tables restored in place afterwards."""
        registry = engine._DEFAULT_REGISTRY
        tables: tuple[dict[str, Any], ...] = (
            registry._model_factory, registry._hf_architecture_2_ft, registry._hf_repo_2_ft)
        saved = [dict(table) for table in tables]
        try:
            yield registry
        finally:
            for table, before in zip(tables, saved, strict=True):
                table.clear()
                table.update(before)

    def register(
        self,
        registry: engine.LegacyModelRegistry,
        name: str,
        cls: type,
        *,
        architectures: Sequence[str] = (),
        repos: Sequence[str] = (),
        override: bool = False,
    ) -> None:
        if override:
            # step 4, ROCm/ATOM base_model_wrapper.py 11-40: write into the dicts, bypassing the checks.
            registry._model_factory[name] = cls
            for arch in architectures:
                registry._hf_architecture_2_ft[arch] = name
            for repo in repos:
                registry._hf_repo_2_ft[repo] = name
            return
        registry.register_model(name, cls, architectures, repos)

    def model_class(self, registry: engine.LegacyModelRegistry, name: str) -> type:
        return registry.get_model_cls(name)

    def model_type_for_architecture(self, registry: engine.LegacyModelRegistry, architecture: str) -> str | None:
        return registry._hf_architecture_2_ft.get(architecture)

    def infer_model_type(self, checkpoint: Path, registry: engine.LegacyModelRegistry) -> str:
        args = engine.LegacyModelArgs()
        args.ckpt_path = os.fspath(checkpoint)
        engine.setup_default_args(args, registry)
        return args.model_type

    def plugin_source(self, model_type: str, class_name: str, architectures: Sequence[str]) -> str:
        """Step 2: a plugin registering through the engine's public function, as a vendor's would."""
        return (
            f"from {engine.__name__} import register_model\n\n\n"
            f"class {class_name}:\n    pass\n\n\n"
            f"register_model({model_type!r}, {class_name}, {list(architectures)!r})\n"
        )

    def new_model_args(self, **fields: Any) -> engine.LegacyModelArgs:
        args = engine.LegacyModelArgs()
        for name, value in fields.items():
            setattr(args, name, value)
        return args

    def derive_propose_args(
        self, args: engine.LegacyModelArgs, *, ckpt_path: str, model_type: str
    ) -> engine.LegacyModelArgs:
        return engine.create_propose_model_args(args, ckpt_path, model_type)

    def resolve_model(self, args: engine.LegacyModelArgs) -> tuple[str, type]:
        engine.setup_default_args(args, engine._DEFAULT_REGISTRY)
        return args.model_type, engine.create_model_config(args, engine._DEFAULT_REGISTRY)


def legacy_plugins_kit() -> LegacyPluginsKit:
    """Factory for ``--impl rtp_ref.suites.plugins.legacy_plugins_adapter:legacy_plugins_kit``."""
    return LegacyPluginsKit()
