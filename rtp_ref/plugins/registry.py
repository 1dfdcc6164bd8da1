"""Model registry: model type name -> class, plus the HF architectures and repos that map to it.

Registration is checked and atomic: a name, architecture or repo already mapped to something
else is an error and leaves the registry unchanged (rtp-llm mapped the architectures after the
name, outside its lock, so a failing registration left half of itself behind).

A plugin that deliberately replaces a type says ``override=True``: the replacement is logged as a
warning and pinned, so a built-in module imported later (lazily, e.g. by a draft model) that
registers the original class again is ignored with a warning instead of failing. Two overrides of
one name conflict. (rtp-llm has no such option; ROCm/ATOM's plugin writes into the registry dicts
directly, and a later built-in registration of the same name then raises the conflict.)

Each ``ModelRegistry`` is independent; ``default_registry()`` is the process-wide instance that
plugins register into when imported.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from rtp_ref.errors import RtpRefError

logger = logging.getLogger(__name__)


class ModelRegistrationError(RtpRefError):
    """A registration that conflicts with an existing one, or a malformed registration."""


class UnknownModelTypeError(RtpRefError):
    """A model type name that nothing registered."""


@dataclass(frozen=True)
class _Model:
    cls: type[object]
    pinned: bool


@dataclass(frozen=True)
class _Alias:
    model_type: str
    pinned: bool


@dataclass(frozen=True)
class RegistrySnapshot:
    """The complete state of a registry at one moment (``ModelRegistry.snapshot``)."""

    models: Mapping[str, _Model]
    architectures: Mapping[str, _Alias]
    repos: Mapping[str, _Alias]


def _qualname(cls: type[object]) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _check_names(kind: str, names: Iterable[str]) -> tuple[str, ...]:
    checked = tuple(names)
    for name in checked:
        if not isinstance(name, str) or not name.strip():
            raise ModelRegistrationError(f"{kind} must be non-empty strings, got {name!r}")
    return checked


class ModelRegistry:
    """Model types with their classes and HF architectures/repos; thread-safe, atomic registration."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._models: dict[str, _Model] = {}
        self._architectures: dict[str, _Alias] = {}
        self._repos: dict[str, _Alias] = {}

    def register(
        self,
        name: str,
        model_cls: type[object],
        *,
        architectures: Iterable[str] = (),
        repos: Iterable[str] = (),
        override: bool = False,
    ) -> None:
        """Register ``model_cls`` as model type ``name``, reachable from ``architectures`` and ``repos``.

        Registering the same class again is a no-op. A name, architecture or repo mapped to
        something else raises ModelRegistrationError naming both, unless ``override=True`` (module
        doc); nothing is changed when it raises.
        """
        (name,) = _check_names("model type names", (name,))
        if not isinstance(model_cls, type):
            raise ModelRegistrationError(f"model type {name!r}: expected a class, got {model_cls!r}")
        archs = _check_names("architectures", architectures)
        repo_names = _check_names("repos", repos)
        notes: list[str] = []
        with self._lock:
            models, arch_map, repo_map = dict(self._models), dict(self._architectures), dict(self._repos)
            self._put_model(models, name, model_cls, override, notes)
            for arch in archs:
                self._put_alias(arch_map, "HF architecture", arch, name, override, notes)
            for repo in repo_names:
                self._put_alias(repo_map, "HF repo", repo, name, override, notes)
            self._models, self._architectures, self._repos = models, arch_map, repo_map
        for note in notes:
            logger.warning("%s", note)

    @staticmethod
    def _put_model(
        models: dict[str, _Model], name: str, cls: type[object], override: bool, notes: list[str]
    ) -> None:
        existing = models.get(name)
        if existing is None or existing.cls is cls:
            models[name] = _Model(cls, override or (existing is not None and existing.pinned))
        elif override and not existing.pinned:
            models[name] = _Model(cls, True)
            notes.append(f"model type {name!r}: {_qualname(cls)} overrides {_qualname(existing.cls)}")
        elif override:
            raise ModelRegistrationError(
                f"model type {name!r} is already overridden by {_qualname(existing.cls)}; "
                f"{_qualname(cls)} cannot override it too"
            )
        elif existing.pinned:
            notes.append(
                f"model type {name!r}: registration of {_qualname(cls)} ignored, "
                f"{_qualname(existing.cls)} overrides it"
            )
        else:
            raise ModelRegistrationError(
                f"model type {name!r} is already registered to {_qualname(existing.cls)}; cannot register "
                f"{_qualname(cls)} too (a plugin that replaces a model type must pass override=True)"
            )

    @staticmethod
    def _put_alias(
        table: dict[str, _Alias], kind: str, key: str, name: str, override: bool, notes: list[str]
    ) -> None:
        existing = table.get(key)
        if existing is None or existing.model_type == name:
            table[key] = _Alias(name, override or (existing is not None and existing.pinned))
        elif override and not existing.pinned:
            table[key] = _Alias(name, True)
            notes.append(f"{kind} {key!r}: now model type {name!r}, overriding {existing.model_type!r}")
        elif override:
            raise ModelRegistrationError(
                f"{kind} {key!r} is already overridden to model type {existing.model_type!r}; "
                f"{name!r} cannot override it too"
            )
        elif existing.pinned:
            notes.append(
                f"{kind} {key!r}: mapping to {name!r} ignored, overridden to {existing.model_type!r}"
            )
        else:
            raise ModelRegistrationError(
                f"{kind} {key!r} already maps to model type {existing.model_type!r}; cannot map it to "
                f"{name!r} too (pass override=True to replace it deliberately)"
            )

    def model_class(self, name: str) -> type[object]:
        """The class of model type ``name``; UnknownModelTypeError lists the registered types."""
        entry = self._models.get(name)
        if entry is None:
            known = ", ".join(sorted(self._models)) or "none"
            raise UnknownModelTypeError(
                f"model type {name!r} is not registered (registered: {known}); if a plugin provides it, "
                "load it with --external_model_packages"
            )
        return entry.cls

    def model_types(self) -> tuple[str, ...]:
        """The registered model type names, in registration order."""
        return tuple(self._models)

    def model_type_for_architecture(self, architecture: str) -> str | None:
        """The model type an HF architecture maps to, or None."""
        alias = self._architectures.get(architecture)
        return alias.model_type if alias else None

    def model_type_for_repo(self, repo: str) -> str | None:
        """The model type an HF repo id maps to, or None."""
        alias = self._repos.get(repo)
        return alias.model_type if alias else None

    def architectures(self) -> dict[str, str]:
        """``architecture -> model type`` for every registered architecture (a copy)."""
        return {arch: alias.model_type for arch, alias in self._architectures.items()}

    def snapshot(self) -> RegistrySnapshot:
        """The current state, for ``restore`` (tests; rolling back a failed plugin load)."""
        with self._lock:
            return RegistrySnapshot(
                MappingProxyType(dict(self._models)),
                MappingProxyType(dict(self._architectures)),
                MappingProxyType(dict(self._repos)),
            )

    def restore(self, snapshot: RegistrySnapshot) -> None:
        """Return to the state ``snapshot`` recorded."""
        with self._lock:
            self._models = dict(snapshot.models)
            self._architectures = dict(snapshot.architectures)
            self._repos = dict(snapshot.repos)


_DEFAULT_REGISTRY = ModelRegistry()


def default_registry() -> ModelRegistry:
    """The process-wide registry that plugins register into when imported.

    One per process: a spawned worker starts with an empty one and fills it by loading the same
    packages (``rtp_ref.plugins.resolve.resolve_model``).
    """
    return _DEFAULT_REGISTRY
