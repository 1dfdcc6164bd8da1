"""Packages whose public names are imported on first use (PEP 562), so that importing their torch-free
parts (a platform table's loader does) does not pay for the torch-based ones."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, namespace: dict[str, Any], exports: Mapping[str, tuple[str, ...]]
                 ) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: ``exports`` maps each submodule to the public names it
    defines; a name is imported from its submodule on first use and kept in ``namespace`` (the package's
    globals) for later look-ups. An unknown name raises AttributeError as a module would."""
    home = {name: module for module, names in exports.items() for name in names}

    def getattr_(name: str) -> Any:
        if name not in home:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{home[name]}"), name)
        namespace[name] = value
        return value

    return getattr_
