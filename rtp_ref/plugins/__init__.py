"""External model packages: the ``--external_model_packages`` flag, loading, registry, inference.

Reference for rtp-llm's plugin loading (ROCm/ATOM is the first user). The contract is in
docs/args-and-plugins.md.
"""

from rtp_ref.plugins.inference import ModelTypeInferenceError, infer_model_type, read_checkpoint_config
from rtp_ref.plugins.loader import ExternalPackageImportError, Importer, load_external_model_packages
from rtp_ref.plugins.model_args import ModelArgs, derive_propose_args
from rtp_ref.plugins.packages import (
    add_external_model_packages_argument,
    parse_external_model_packages,
    validate_package_name,
)
from rtp_ref.plugins.registry import (
    ModelRegistrationError,
    ModelRegistry,
    RegistrySnapshot,
    UnknownModelTypeError,
    default_registry,
)
from rtp_ref.plugins.resolve import ResolvedModel, resolve_model

__all__ = [
    "ExternalPackageImportError",
    "Importer",
    "ModelArgs",
    "ModelRegistrationError",
    "ModelRegistry",
    "ModelTypeInferenceError",
    "RegistrySnapshot",
    "ResolvedModel",
    "UnknownModelTypeError",
    "add_external_model_packages_argument",
    "default_registry",
    "derive_propose_args",
    "infer_model_type",
    "load_external_model_packages",
    "parse_external_model_packages",
    "read_checkpoint_config",
    "resolve_model",
    "validate_package_name",
]
