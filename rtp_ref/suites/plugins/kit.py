"""The implementation the plugins behaviour tests run against (like rtp_ref/suites/args/kit.py).

By default the reference (``rtp_ref.plugins``); ``RTP_REF_PLUGINS_IMPL=module:callable`` names a
callable returning another kit, e.g. ``rtp_ref.suites.plugins.legacy_plugins_adapter:legacy_plugins_kit``.
docs/args-and-plugins.md describes the protocol. A kit lists the features its implementation lacks in
``absent_features`` (rtp_ref/suites/features.py, suite "plugins") and may leave out the members only those need.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol, cast

from rtp_ref.args import EnvArgumentParser
from rtp_ref.args.objects import call_named
from rtp_ref.plugins import (
    ModelArgs,
    ModelRegistry,
    add_external_model_packages_argument,
    default_registry,
    derive_propose_args,
    infer_model_type,
    load_external_model_packages,
    parse_external_model_packages,
    resolve_model,
)
from rtp_ref.suites.features import declared_absent

KIT_ENV = "RTP_REF_PLUGINS_IMPL"


class PluginsKit(Protocol):
    """What the plugins behaviour tests need from an implementation.

    Members of a feature the kit lists in ``absent_features`` may be left out: ``parse_package_list`` and
    ``package_list_parser`` (``package_list``); ``load_packages``, ``plugin_source`` and ``model_config_class``
    (``package_loading``); ``register``'s ``override`` keyword (``override_registration``). The suite asks for
    ``new_registry`` only inside ``isolated_default_registry``, so a kit over one global registry may return it
    emptied.
    """

    name: str

    def parse_package_list(self, text: str) -> list[str]:
        """The ``--external_model_packages`` value parser (raises for bad input)."""

    def package_list_parser(self) -> Any:
        """An argument parser with ``--external_model_packages`` registered as the server does."""

    def load_packages(
        self, names: Sequence[str], importer: Callable[[str], ModuleType] | None = None
    ) -> None:
        """Import the packages (with ``importer`` when given)."""

    def new_registry(self) -> Any:
        """An empty model registry (called only inside ``isolated_default_registry``)."""

    @contextmanager
    def isolated_default_registry(self) -> Iterator[Any]:
        """The process-wide registry plugins register into, restored afterwards."""

    def register(
        self,
        registry: Any,
        name: str,
        cls: type,
        *,
        architectures: Sequence[str] = (),
        repos: Sequence[str] = (),
        override: bool = False,
    ) -> None:
        """Register a model type; ``override=True`` is how a plugin replaces an existing one."""

    def model_class(self, registry: Any, name: str) -> type:
        """The class registered as ``name`` (raises if none)."""

    def model_type_for_architecture(self, registry: Any, architecture: str) -> str | None:
        """The model type an HF architecture maps to."""

    def infer_model_type(self, checkpoint: Path, registry: Any) -> str:
        """The model type of a local checkpoint, from its config.json (raises if none)."""

    def plugin_source(self, model_type: str, class_name: str, architectures: Sequence[str]) -> str:
        """Python source of a plugin package that registers ``class_name`` into the default registry."""

    def new_model_args(self, **fields: Any) -> Any:
        """Model args with the given fields."""

    def derive_propose_args(self, args: Any, *, ckpt_path: str, model_type: str) -> Any:
        """The draft model's args derived from the main model's."""

    def resolve_model(self, args: Any) -> tuple[str, type]:
        """What a worker does at start-up: the model type and class for ``args``."""

    def model_config_class(self, args: Any) -> type:
        """The class the engine's model-config entry point (rtp-llm: ``create_model_config``) gives for
        ``args.model_type``, called on its own, as a process that skipped start-up's other steps calls it."""


class ReferencePluginsKit:
    """The kit of ``rtp_ref.plugins``."""

    name = "reference"

    def parse_package_list(self, text: str) -> list[str]:
        return parse_external_model_packages(text)

    def package_list_parser(self) -> EnvArgumentParser:
        parser = EnvArgumentParser(prog="prog")
        add_external_model_packages_argument(parser.add_argument_group("model"))
        return parser

    def load_packages(
        self, names: Sequence[str], importer: Callable[[str], ModuleType] | None = None
    ) -> None:
        if importer is None:
            load_external_model_packages(names)
        else:
            load_external_model_packages(names, importer=importer)

    def new_registry(self) -> ModelRegistry:
        return ModelRegistry()

    @contextmanager
    def isolated_default_registry(self) -> Iterator[ModelRegistry]:
        registry = default_registry()
        saved = registry.snapshot()
        try:
            yield registry
        finally:
            registry.restore(saved)

    def register(
        self,
        registry: ModelRegistry,
        name: str,
        cls: type,
        *,
        architectures: Sequence[str] = (),
        repos: Sequence[str] = (),
        override: bool = False,
    ) -> None:
        registry.register(name, cls, architectures=architectures, repos=repos, override=override)

    def model_class(self, registry: ModelRegistry, name: str) -> type:
        return registry.model_class(name)

    def model_type_for_architecture(self, registry: ModelRegistry, architecture: str) -> str | None:
        return registry.model_type_for_architecture(architecture)

    def infer_model_type(self, checkpoint: Path, registry: ModelRegistry) -> str:
        return infer_model_type(checkpoint, registry)

    def plugin_source(self, model_type: str, class_name: str, architectures: Sequence[str]) -> str:
        return (
            "from rtp_ref.plugins.registry import default_registry\n\n\n"
            f"class {class_name}:\n    pass\n\n\n"
            f"default_registry().register({model_type!r}, {class_name}, "
            f"architectures={list(architectures)!r})\n"
        )

    def new_model_args(self, **fields: Any) -> ModelArgs:
        return ModelArgs(**fields)

    def derive_propose_args(self, args: ModelArgs, *, ckpt_path: str, model_type: str) -> ModelArgs:
        return derive_propose_args(args, ckpt_path=ckpt_path, model_type=model_type)

    def resolve_model(self, args: ModelArgs) -> tuple[str, type]:
        resolved = resolve_model(args)
        return resolved.model_type, resolved.model_cls

    def model_config_class(self, args: ModelArgs) -> type:
        """The reference has one entry point, ``resolve_model``."""
        return resolve_model(args).model_cls


def load_plugins_kit() -> PluginsKit:
    """The kit named by ``$RTP_REF_PLUGINS_IMPL`` (``module:callable`` returning one), else the reference.
    RtpRefError when its ``absent_features`` names something that is not a feature of the plugins suite."""
    spec = os.environ.get(KIT_ENV)
    if not spec:
        return ReferencePluginsKit()
    kit = cast(PluginsKit, call_named(spec))
    declared_absent(kit, "plugins")
    return kit
