"""From ModelArgs to the model class: load the plugins, then name or infer the model type."""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from rtp_ref.plugins.inference import ModelTypeInferenceError, infer_model_type
from rtp_ref.plugins.loader import Importer, load_external_model_packages
from rtp_ref.plugins.model_args import ModelArgs
from rtp_ref.plugins.registry import ModelRegistry, default_registry


@dataclass(frozen=True)
class ResolvedModel:
    """The model type and its class."""

    model_type: str
    model_cls: type[object]


def resolve_model(
    args: ModelArgs,
    *,
    registry: ModelRegistry | None = None,
    importer: Importer = importlib.import_module,
) -> ResolvedModel:
    """Load ``args.external_model_packages``, then resolve ``args.model_type`` or infer it.

    Loading comes first, always, so a plugin's model type and architectures are known to the
    lookup; every entry point (main model, draft model, spawned worker) goes through here, so none
    depends on another having loaded the plugins. ``registry`` defaults to ``default_registry()``,
    the one plugins register into. Raises ExternalPackageImportError, ModelTypeInferenceError or
    UnknownModelTypeError with what went wrong and what to do.
    """
    reg = default_registry() if registry is None else registry
    load_external_model_packages(args.external_model_packages, importer=importer)
    if args.model_type:
        model_type = args.model_type
    elif args.ckpt_path:
        model_type = infer_model_type(args.ckpt_path, reg)
    else:
        raise ModelTypeInferenceError("model_type is not set and there is no ckpt_path to infer it from")
    return ResolvedModel(model_type, reg.model_class(model_type))
