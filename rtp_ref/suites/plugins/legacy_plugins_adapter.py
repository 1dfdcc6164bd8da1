"""The plugins kit over the emulation of rtp-llm with PR #1266 applied (legacy_rtp_llm_plugins.py).

The PR adds the flag, the loader and the ``ModelArgs`` slot and leaves the registry as it is, so this kit is the
main branch's (rtp_llm_main_plugins_adapter.py, where the registry steps of the adapter recipe are shown) with the
PR's entry points and the members of the features the PR brings. It also shows two more parts of the recipe
(docs/args-and-plugins.md, "Writing an adapter"):

* step 7, the engine's functions are called with their own signatures: the loader has no importer parameter, and the kit
  passes the suite's importer on anyway, so the engine's ``TypeError`` marks the feature absent (an adapter never
  papers over a missing feature, nor needs to declare one the engine refuses by itself);
* step 5, ``plugin_source`` writes a plugin the way a vendor would, importing the engine's public registration function,
  so loading it runs the engine's real import path.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any, ClassVar

from rtp_ref.suites.args.legacy_rtp_llm import LegacyEnvArgumentParser
from rtp_ref.suites.plugins import legacy_rtp_llm_plugins as engine
from rtp_ref.suites.plugins import rtp_llm_main_plugins as registry_module
from rtp_ref.suites.plugins.rtp_llm_main_plugins_adapter import RtpLlmMainPluginsKit


class LegacyPluginsKit(RtpLlmMainPluginsKit):
    """The plugins behaviour tests' kit (rtp_ref/suites/plugins/kit.py) over the emulation of rtp-llm with PR #1266."""

    name = "legacy rtp-llm emulation (PR #1266)"
    #: the PR gives no way to replace a model type (ROCm/ATOM writes the registry's tables instead)
    absent_features: frozenset[str] = frozenset({"override_registration"})
    tree: ClassVar[ModuleType] = engine

    def parse_package_list(self, text: str) -> list[str]:
        return engine.parse_external_model_packages(text)

    def package_list_parser(self) -> LegacyEnvArgumentParser:
        parser = LegacyEnvArgumentParser(prog="prog")
        engine.init_model_group_args(parser)
        return parser

    def load_packages(self, names: Sequence[str], importer: Callable[[str], ModuleType] | None = None) -> None:
        if importer is None:
            engine.load_external_model_packages(names)
        else:  # the engine has no importer parameter: its TypeError says so
            engine.load_external_model_packages(names, importer=importer)  # type: ignore[call-arg]

    def plugin_source(self, model_type: str, class_name: str, architectures: Sequence[str]) -> str:
        """A plugin registering through the engine's public function, as a vendor's would."""
        return (
            f"from {registry_module.__name__} import register_model\n\n\n"
            f"class {class_name}:\n    pass\n\n\n"
            f"register_model({model_type!r}, {class_name}, {list(architectures)!r})\n"
        )

    def model_config_class(self, args: Any) -> type:
        """The second entry point that loads the packages, on its own: ``create_model_config``."""
        return engine.create_model_config(args)


def legacy_plugins_kit() -> LegacyPluginsKit:
    """Factory for ``--impl rtp_ref.suites.plugins.legacy_plugins_adapter:legacy_plugins_kit``."""
    return LegacyPluginsKit()
