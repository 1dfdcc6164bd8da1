"""An emulation of rtp-llm's plugin loading, model registry and ModelArgs, bugs included.

Written for this test suite from the behaviour spec (``docs/sources.md#rtp-llm-server-arguments``
and ``#rtp-llm-model-registry-and-plugins``: PR #1266's ``parse_external_model_packages`` and
``load_external_model_packages``, ``model_factory_register.py``, ``ModelDict``,
``server_config_setup.py``, ``model_factory.py``, ``config/model_args.py``, and ROCm/ATOM's way of
replacing a built-in model); it is not rtp-llm's code. Its one job: run the plugins behaviour tests
against it and check that exactly the tests covering listed bugs fail. Keep it faithful.

Like the engine, it keeps its registry in a module global that plugins register into at import;
rtp_ref/suites/plugins/legacy_plugins_adapter.py adapts it to the kit.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any


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


def load_external_model_packages(package_names: Sequence[str] | None) -> None:
    """PR ``import_util.py`` 27-45: import in order; the first failure raises RuntimeError from it."""
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


class LegacyModelRegistry:
    """``model_factory_register.py``: name, architecture and repo dicts; conflicts raise "confict!"."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._model_factory: dict[str, type] = {}
        self._hf_architecture_2_ft: dict[str, str] = {}
        self._hf_repo_2_ft: dict[str, str] = {}

    def register_model(
        self,
        name: str,
        model_type: type,
        support_architectures: Sequence[str] = (),
        support_hf_repos: Sequence[str] = (),
    ) -> None:
        """25-43: the name under the lock; the architectures and repos after it, outside."""
        with self._lock:
            existing = self._model_factory.get(name)
            if existing is not None and existing is not model_type:
                raise Exception(f"try register model {name} with type {model_type} and {existing}, confict!")
            self._model_factory[name] = model_type
        for arch in support_architectures:
            self.register_hf_architecture(arch, name)
        for repo in support_hf_repos:
            self.register_hf_repo(repo, name)

    def register_hf_architecture(self, arch: str, name: str) -> None:
        """49-57."""
        existing = self._hf_architecture_2_ft.get(arch)
        if existing is not None and existing != name:
            raise Exception(f"hf architecture {arch} registered as {existing} and {name}, confict!")
        self._hf_architecture_2_ft[arch] = name

    def register_hf_repo(self, repo: str, name: str) -> None:
        """63-71."""
        existing = self._hf_repo_2_ft.get(repo)
        if existing is not None and existing != name:
            raise Exception(f"hf repo {repo} registered as {existing} and {name}, confict!")
        self._hf_repo_2_ft[repo] = name

    def get_model_cls(self, name: str) -> type:
        if name not in self._model_factory:
            raise Exception(f"model type {name} not registered!")
        return self._model_factory[name]

    def get_ft_model_type_by_config(self, config: dict[str, Any]) -> str | None:
        """``ModelDict`` 347-409: ``architectures[0]`` only; missing architectures -> None."""
        architectures = config.get("architectures")
        if not architectures:
            return None
        return self._hf_architecture_2_ft.get(architectures[0])


_DEFAULT_REGISTRY = LegacyModelRegistry()


def register_model(
    name: str,
    model_type: type,
    support_architectures: Sequence[str] = (),
    support_hf_repos: Sequence[str] = (),
) -> None:
    """The module-level function plugins call."""
    _DEFAULT_REGISTRY.register_model(name, model_type, support_architectures, support_hf_repos)


class LegacyModelArgs:
    """``config/model_args.py`` (+ PR slot): ``extra_data_path``/``local_extra_data_path`` never set."""

    __slots__ = (
        "act_type",
        "ckpt_path",
        "enable_fp32_lm_head",
        "enable_vocab_pruning",
        "external_model_packages",
        "extra_data_path",
        "json_config_override_args",
        "json_model_override_args",
        "local_extra_data_path",
        "max_seq_len",
        "mla_ops_type",
        "model_type",
        "quantization",
        "task_type",
        "tokenizer_path",
    )

    def __init__(self) -> None:
        self.ckpt_path = ""
        self.tokenizer_path = ""
        self.model_type = ""
        self.task_type = None
        self.act_type = None
        self.mla_ops_type = None
        self.max_seq_len = None
        self.quantization = None
        self.enable_fp32_lm_head = None
        self.json_model_override_args = "{}"
        self.json_config_override_args = "{}"
        self.enable_vocab_pruning = False
        self.external_model_packages = None


def _infer_model_type(ckpt_path: str, registry: LegacyModelRegistry) -> str | None:
    """``server_config_setup.py`` 364-381: local config.json; every error -> None."""
    try:
        config = json.loads((Path(ckpt_path) / "config.json").read_text())
        return registry.get_ft_model_type_by_config(config)
    except Exception:
        return None


def setup_default_args(args: LegacyModelArgs, registry: LegacyModelRegistry) -> None:
    """397-404: load the packages, infer an empty model_type; None -> ValueError."""
    load_external_model_packages(args.external_model_packages)
    if not args.model_type:
        model_type = _infer_model_type(args.ckpt_path, registry)
        if not model_type:
            raise ValueError("model_type is not set and could not be inferred, please set MODEL_TYPE")
        args.model_type = model_type


def create_model_config(args: LegacyModelArgs, registry: LegacyModelRegistry) -> type:
    """``model_factory.py`` 306-379 (PR 342): load the packages, then ``get_model_cls``."""
    load_external_model_packages(args.external_model_packages)
    return registry.get_model_cls(args.model_type)


def create_propose_model_args(main: LegacyModelArgs, ckpt_path: str, model_type: str) -> LegacyModelArgs:
    """404-482 (PR 447): a fresh ModelArgs copying four fields; no package loading, packages not copied."""
    propose = LegacyModelArgs()
    propose.tokenizer_path = main.tokenizer_path
    propose.act_type = main.act_type
    propose.mla_ops_type = main.mla_ops_type
    propose.enable_fp32_lm_head = main.enable_fp32_lm_head
    propose.ckpt_path = ckpt_path
    propose.model_type = model_type
    propose.max_seq_len = main.max_seq_len
    propose.quantization = main.quantization
    return propose
