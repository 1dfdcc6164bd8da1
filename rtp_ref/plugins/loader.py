"""Importing external model packages: in order, once, and failing loudly on the first that breaks."""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Callable, Iterable
from types import ModuleType

from rtp_ref.plugins.packages import validate_package_name

logger = logging.getLogger(__name__)

#: Imports one module by absolute name; the default is ``importlib.import_module``.
Importer = Callable[[str], ModuleType]


class ExternalPackageImportError(ImportError):
    """An external model package failed to import; ``name`` is the package, ``__cause__`` the error."""


def load_external_model_packages(
    names: Iterable[str], *, importer: Importer = importlib.import_module
) -> list[ModuleType]:
    """Import each package in order and return the modules (duplicates imported once).

    Every name is validated first (RtpRefError for a bad one, before anything is imported).
    Loading is idempotent: Python imports a module once per process, so calling this again, or
    from another entry point (a draft model's config, a spawned worker), does not run plugin code
    twice. The first failure stops the loading with an ExternalPackageImportError that names the
    package, chains the original exception and shows the module search path. Each loaded package
    is logged at INFO.
    """
    unique = list(dict.fromkeys(validate_package_name(name) for name in names))
    modules: list[ModuleType] = []
    for position, name in enumerate(unique, start=1):
        already = name in sys.modules
        try:
            module = importer(name)
        except Exception as exc:
            raise ExternalPackageImportError(
                f"failed to import external model package {name!r} ({position} of {len(unique)}: "
                f"{', '.join(unique)}): {type(exc).__name__}: {exc}; module search path: {sys.path}",
                name=name,
            ) from exc
        logger.info(
            "external model package %r %s (%s)",
            name,
            "was already imported" if already else "imported",
            getattr(module, "__file__", None) or "no file",
        )
        modules.append(module)
    return modules
