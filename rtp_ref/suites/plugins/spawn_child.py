"""What a spawned worker runs in the plugins tests: resolve the model (or only its class) from pickled args, in a
process that has imported nothing of the test (a ``multiprocessing`` 'spawn' child)."""

from __future__ import annotations

import sys
from typing import Any

from rtp_ref.suites.plugins.kit import load_plugins_kit


def resolve_in_worker(args: Any, package: str) -> dict[str, Any]:
    """The kit's ``resolve_model(args)``, as data the parent can check (errors included)."""
    imported_before = package in sys.modules
    try:
        model_type, model_cls = load_plugins_kit().resolve_model(args)
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}", "imported_before": imported_before}
    return {
        "model_type": model_type,
        "model_cls": f"{model_cls.__module__}.{model_cls.__qualname__}",
        "imported_before": imported_before,
    }


def model_config_class_in_worker(args: Any, package: str) -> dict[str, Any]:
    """The kit's ``model_config_class(args)`` alone (no start-up step before it), as data the parent can check."""
    imported_before = package in sys.modules
    try:
        model_cls = load_plugins_kit().model_config_class(args)
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}", "imported_before": imported_before}
    return {"model_cls": f"{model_cls.__module__}.{model_cls.__qualname__}", "imported_before": imported_before}
