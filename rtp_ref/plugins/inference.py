"""Model type inference from a local checkpoint's ``config.json``.

Run it after the external model packages are loaded (``resolve.resolve_model`` does), so that an
architecture a plugin registers is inferred without ``--model_type``. Every architecture listed
is tried (rtp-llm looked at the first only), then the ``_name_or_path`` repo id; the registry's
repo mapping was never consulted by rtp-llm. Nothing matching is an error that says what was
found and what would help, not a silent None.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from rtp_ref.errors import RtpRefError
from rtp_ref.plugins.registry import ModelRegistry

CONFIG_FILE = "config.json"


class ModelTypeInferenceError(RtpRefError):
    """The model type could not be inferred from the checkpoint."""


def read_checkpoint_config(checkpoint: str | os.PathLike[str]) -> dict[str, object]:
    """The JSON object in ``checkpoint/config.json``; ModelTypeInferenceError naming the path otherwise."""
    directory = Path(checkpoint)
    if not directory.is_dir():
        raise ModelTypeInferenceError(
            f"checkpoint {str(checkpoint)!r} is not a local directory; the model type is inferred from a "
            f"local checkpoint's {CONFIG_FILE}, so pass --model_type"
        )
    path = directory / CONFIG_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelTypeInferenceError(
            f"no {CONFIG_FILE} in checkpoint {str(directory)!r}; pass --model_type"
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelTypeInferenceError(f"cannot read {str(path)!r}: {exc}") from exc
    if not isinstance(data, dict):
        raise ModelTypeInferenceError(f"{str(path)!r} holds {type(data).__name__}, expected a JSON object")
    return data


def _architectures(config: dict[str, object], path: Path) -> list[str]:
    archs = config.get("architectures", [])
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise ModelTypeInferenceError(
            f"'architectures' in {str(path)!r} is {archs!r}, expected a list of strings"
        )
    return archs


def infer_model_type(checkpoint: str | os.PathLike[str], registry: ModelRegistry) -> str:
    """The model type of ``checkpoint``: from its architectures, else its ``_name_or_path`` repo.

    Raises ModelTypeInferenceError when the config cannot be read, when architectures map to
    different model types, or when nothing matches (the message lists the architectures found,
    the registered ones, and the two remedies: ``--model_type`` or loading the plugin).
    """
    config = read_checkpoint_config(checkpoint)
    path = Path(checkpoint) / CONFIG_FILE
    archs = _architectures(config, path)
    found = {arch: registry.model_type_for_architecture(arch) for arch in archs}
    model_types = list(dict.fromkeys(t for t in found.values() if t is not None))
    if len(model_types) == 1:
        return model_types[0]
    if model_types:
        pairs = ", ".join(f"{arch} -> {t}" for arch, t in found.items() if t is not None)
        raise ModelTypeInferenceError(
            f"architectures in {str(path)!r} map to different model types ({pairs}); pass --model_type"
        )
    repo = config.get("_name_or_path")
    by_repo = registry.model_type_for_repo(repo) if isinstance(repo, str) else None
    if by_repo is not None:
        return by_repo
    known = ", ".join(sorted(registry.architectures())) or "none"
    raise ModelTypeInferenceError(
        f"cannot infer the model type of checkpoint {str(checkpoint)!r}: its architectures {archs} match no "
        f"registered architecture (registered: {known}); pass --model_type, or load the package that "
        "registers it with --external_model_packages"
    )
