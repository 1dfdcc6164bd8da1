"""The plugins kit over the emulation of rtp-llm's main branch: the worked example of an adapter to a module-global
registry, to entry points that are no single ``resolve_model``, and to an engine that lacks features.

rtp_ref/suites/plugins/rtp_llm_main_plugins.py is written like the engine: plugins register into tables held in
module globals, by calling the engine's ``register_model`` at import. The steps of the recipe in
docs/args-and-plugins.md ("Writing an adapter", numbered as there) that this module shows:

5. ``isolated_default_registry`` yields the engine's own global registry (here the module that holds its tables)
   and restores its tables in place afterwards: the tables are never replaced, the engine's functions and every
   imported plugin hold them; ``new_registry`` empties those same tables: the suite asks for a new registry only
   inside ``isolated_default_registry``, so an engine with one global registry needs no second one;
6. ``resolve_model`` stands in for what a worker does at start-up with the engine's own entry points, in the
   order production calls them (``setup_default_args``, then ``create_model_config``), adding no step the engine
   does not take;
7. what the engine lacks is listed in ``absent_features`` and its kit members are left out: those tests end
   absent, never failed (or passed) by an adapter's invention.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

from rtp_ref.suites.plugins import rtp_llm_main_plugins as registry_module


class RtpLlmMainPluginsKit:
    """The plugins behaviour tests' kit (rtp_ref/suites/plugins/kit.py) over the emulation of rtp-llm's main."""

    name = "rtp-llm main emulation"
    #: step 7: main has no --external_model_packages, no loader, and no override
    absent_features: frozenset[str] = frozenset({"package_list", "package_loading", "override_registration"})
    #: the module of the engine's ModelArgs and entry points (a branch with a PR applied names its own)
    tree: ClassVar[ModuleType] = registry_module

    @staticmethod
    def _tables() -> tuple[dict[str, Any], ...]:
        return (registry_module._model_factory, registry_module._hf_architecture_2_ft,
                registry_module._hf_repo_2_ft)

    def new_registry(self) -> ModuleType:
        """Step 5: the global registry, emptied in place (isolated_default_registry restores it)."""
        for table in self._tables():
            table.clear()
        return registry_module

    @contextmanager
    def isolated_default_registry(self) -> Iterator[ModuleType]:
        """Step 5: the global registry itself, its tables restored in place afterwards."""
        saved = [dict(table) for table in self._tables()]
        try:
            yield registry_module
        finally:
            for table, before in zip(self._tables(), saved, strict=True):
                table.clear()
                table.update(before)

    def register(self, registry: ModuleType, name: str, cls: type, *, architectures: Sequence[str] = (),
                 repos: Sequence[str] = ()) -> None:
        registry.register_model(name, cls, list(architectures), list(repos))

    def model_class(self, registry: ModuleType, name: str) -> type:
        cls: type = registry.ModelFactory.get_model_cls(name)
        return cls

    def model_type_for_architecture(self, registry: ModuleType, architecture: str) -> str | None:
        found: str | None = registry.ModelDict.get_ft_model_type_by_hf_architectures(architecture)
        return found

    def infer_model_type(self, checkpoint: Path, registry: ModuleType) -> str:
        """The engine infers from the global registry (``registry`` is it) in ``setup_default_args``."""
        args = self.tree.ModelArgs()
        args.ckpt_path = os.fspath(checkpoint)
        self.tree.setup_default_args(args)
        model_type: str = args.model_type
        return model_type

    def new_model_args(self, **fields: Any) -> Any:
        args = self.tree.ModelArgs()
        for name, value in fields.items():
            setattr(args, name, value)
        return args

    def derive_propose_args(self, args: Any, *, ckpt_path: str, model_type: str) -> Any:
        return registry_module.create_propose_model_args(args, ckpt_path, model_type)

    def resolve_model(self, args: Any) -> tuple[str, type]:
        """Step 6: start-up's entry points, in production's order."""
        self.tree.setup_default_args(args)
        cls: type = self.tree.create_model_config(args)
        return args.model_type, cls


def rtp_llm_main_plugins_kit() -> RtpLlmMainPluginsKit:
    """Factory for ``--impl rtp_ref.suites.plugins.rtp_llm_main_plugins_adapter:rtp_llm_main_plugins_kit``."""
    return RtpLlmMainPluginsKit()
