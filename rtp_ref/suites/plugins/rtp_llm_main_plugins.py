"""An emulation of rtp-llm's model registry, model-type inference and ModelArgs on its main branch, bugs included.

Written for this test suite from the behaviour spec (``docs/sources.md#rtp-llm-model-registry-and-plugins``:
rtp-llm HEAD ``4b8d39cd5``, ``model_factory_register.py``, ``ModelDict``, ``server_config_setup.py``,
``model_factory.py``, ``config/model_args.py``); it is not rtp-llm's code. Main has no external model packages
(no flag, no loader, no ``ModelArgs.external_model_packages``; PR #1266 adds them:
legacy_rtp_llm_plugins.py, which builds on this module) and no way for a plugin to replace a model type. Its one
job: run the plugins behaviour tests against it and check that the tests covering listed bugs fail and the tests
needing what main lacks end absent. Keep it faithful.

Like the engine, the registry is module-global tables that plugins fill at import by calling ``register_model``;
rtp_ref/suites/plugins/rtp_llm_main_plugins_adapter.py adapts it to the kit.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

_lock = threading.Lock()
_model_factory: dict[str, type] = {}
_hf_architecture_2_ft: dict[str, str] = {}
_hf_repo_2_ft: dict[str, str] = {}


def register_model(
    name: str, model_type: type, support_architectures: Sequence[str] = (), support_hf_repos: Sequence[str] = ()
) -> None:
    """25-43: the name under the lock ("confict!" for another class; the same class is a no-op); the
    architectures and repos after it, outside."""
    with _lock:
        existing = _model_factory.get(name)
        if existing is not None and existing is not model_type:
            raise Exception(f"try register model {name} with type {model_type} and {existing}, confict!")
        _model_factory[name] = model_type
    for arch in support_architectures:
        register_hf_architecture(arch, name)
    for repo in support_hf_repos:
        register_hf_repo(repo, name)


def register_hf_architecture(arch: str, name: str) -> None:
    """49-57: an architecture already mapped to another model type raises."""
    existing = _hf_architecture_2_ft.get(arch)
    if existing is not None and existing != name:
        raise Exception(f"hf architecture {arch} registered as {existing} and {name}, confict!")
    _hf_architecture_2_ft[arch] = name


def register_hf_repo(repo: str, name: str) -> None:
    """63-71: a repo already mapped to another model type raises."""
    existing = _hf_repo_2_ft.get(repo)
    if existing is not None and existing != name:
        raise Exception(f"hf repo {repo} registered as {existing} and {name}, confict!")
    _hf_repo_2_ft[repo] = name


class ModelDict:
    """347-409: the lookups."""

    @staticmethod
    def get_ft_model_type_by_hf_architectures(architecture: str) -> str | None:
        return _hf_architecture_2_ft.get(architecture)

    @staticmethod
    def get_ft_model_type_by_config(config: dict[str, Any]) -> str | None:
        """``architectures[0]`` only; missing architectures -> None (the repo map is never read)."""
        architectures = config.get("architectures")
        if not architectures:
            return None
        return _hf_architecture_2_ft.get(architectures[0])


class ModelFactory:
    """``model_factory.py``: the class of a registered model type."""

    @staticmethod
    def get_model_cls(name: str) -> type:
        if name not in _model_factory:
            raise Exception(f"model type {name} not registered!")
        return _model_factory[name]


class ModelArgs:
    """``config/model_args.py`` 18-63: 14 slots, default slot pickling; ``extra_data_path`` and
    ``local_extra_data_path`` are never set (reading them raises AttributeError), and an object unpickled from a
    version without a slot raises on that slot."""

    __slots__ = (
        "act_type",
        "ckpt_path",
        "enable_fp32_lm_head",
        "enable_vocab_pruning",
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


def _infer_model_type(ckpt_path: str) -> str | None:
    """``server_config_setup.py`` 364-381: local config.json; every error -> None."""
    try:
        config = json.loads((Path(ckpt_path) / "config.json").read_text())
        return ModelDict.get_ft_model_type_by_config(config)
    except Exception:
        return None


def setup_default_args(args: ModelArgs) -> None:
    """397-404: infer an empty model_type; None -> ValueError."""
    if not args.model_type:
        model_type = _infer_model_type(args.ckpt_path)
        if not model_type:
            raise ValueError("model_type is not set and could not be inferred, please set MODEL_TYPE")
        args.model_type = model_type


def create_model_config(args: ModelArgs) -> type:
    """``model_factory.py`` 306-379, as far as the model class: ``get_model_cls``."""
    return ModelFactory.get_model_cls(args.model_type)


def create_propose_model_args(main: ModelArgs, ckpt_path: str, model_type: str) -> ModelArgs:
    """404-482: a fresh ModelArgs of the tree's class copying four fields, then the draft's own."""
    propose = type(main)()
    propose.tokenizer_path = main.tokenizer_path
    propose.act_type = main.act_type
    propose.mla_ops_type = main.mla_ops_type
    propose.enable_fp32_lm_head = main.enable_fp32_lm_head
    propose.ckpt_path = ckpt_path
    propose.model_type = model_type
    propose.max_seq_len = main.max_seq_len
    propose.quantization = main.quantization
    return propose
