"""Config bindings: copy parsed values into attributes of a config object tree (``bind_to=``).

A binding target is a dotted path from the parser's config root (``"model_args.max_seq_len"``), an
explicit ``(object, "attribute")`` pair, or a list of those. Values are applied source by source in
precedence order (default, then env, then command line), so the command line always wins, also
when two arguments (a canonical flag and a deprecated alias) write the same attribute.

A ``None`` default is not applied: it means "no opinion" and leaves the config's own value, which
is what lets an alias with ``default=None`` coexist with its canonical flag. A ``None`` that the
user gave explicitly (through the environment or the command line) is applied like any value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rtp_ref.args.sources import PRECEDENCE, ArgSource
from rtp_ref.errors import RtpRefError

#: What ``bind_to=`` accepts.
BindSpec = str | tuple[object, str] | Sequence[str | tuple[object, str]]


class BindingError(RtpRefError):
    """A ``bind_to`` spec or target that cannot work: a definition bug, not bad user input."""


class BindingConflictError(RtpRefError):
    """Two sources of the same precedence give one config attribute different values."""


@dataclass(frozen=True, eq=False)
class BindTarget:
    """One attribute a parsed value is written to: via ``path`` from the root, or on ``owner``."""

    attr: str
    path: tuple[str, ...] = ()
    owner: object | None = None

    def describe(self) -> str:
        """The target as a reader would write it: ``model_args.max_seq_len`` or ``ModelArgs.max_seq_len``."""
        if self.owner is not None:
            return f"{type(self.owner).__name__}.{self.attr}"
        return ".".join((*self.path, self.attr))

    def resolve_owner(self, root: object) -> object:
        """The object holding ``attr``; BindingError names the first missing step of the path."""
        if self.owner is not None:
            return self.owner
        obj = root
        for depth, part in enumerate(self.path, start=1):
            try:
                obj = getattr(obj, part)
            except AttributeError:
                missing = ".".join(self.path[:depth])
                raise BindingError(
                    f"bind_to {self.describe()!r}: the config root ({type(root).__name__}) has no {missing!r}"
                ) from None
        return obj


@dataclass(frozen=True)
class Binding:
    """The targets of one argument, with the names its values can come from (for messages)."""

    dest: str
    argument: str
    env_name: str | None
    targets: tuple[BindTarget, ...]


def _dotted_target(spec: str, argument: str) -> BindTarget:
    parts = tuple(spec.split("."))
    if not all(part.isidentifier() for part in parts):
        raise BindingError(
            f"argument {argument}: bind_to {spec!r} is not a dotted attribute path "
            "such as 'model_args.max_seq_len'"
        )
    return BindTarget(attr=parts[-1], path=parts[:-1])


def _one_target(spec: object, argument: str) -> BindTarget:
    if isinstance(spec, str):
        return _dotted_target(spec, argument)
    if isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[1], str):
        owner, attr = spec
        if isinstance(owner, str) or not attr.isidentifier():
            raise BindingError(
                f"argument {argument}: bind_to pair {spec!r} must be (config_object, 'attribute'); "
                "write a dotted path as one string"
            )
        return BindTarget(attr=attr, owner=owner)
    raise BindingError(
        f"argument {argument}: bind_to {spec!r} must be 'dotted.path', (config_object, 'attribute') "
        "or a list of those"
    )


def parse_bind_spec(spec: object, *, argument: str) -> tuple[BindTarget, ...]:
    """The targets named by a ``bind_to`` value; BindingError (naming ``argument``) if malformed."""
    if isinstance(spec, list):
        if not spec:
            raise BindingError(f"argument {argument}: bind_to is an empty list; leave it out instead")
        return tuple(_one_target(item, argument) for item in spec)
    return (_one_target(spec, argument),)


def _describe_source(binding: Binding, source: ArgSource) -> str:
    if source is ArgSource.ENV and binding.env_name:
        return f"environment variable {binding.env_name}"
    return f"{binding.argument} ({source.value})"


def _assign(target: BindTarget, owner: object, value: object, binding: Binding) -> None:
    if not hasattr(owner, target.attr):
        raise BindingError(
            f"argument {binding.argument}: bind_to target {target.describe()!r} does not exist on "
            f"{type(owner).__name__}; bindings only set existing attributes"
        )
    try:
        setattr(owner, target.attr, value)
    except Exception as exc:
        raise BindingError(
            f"argument {binding.argument}: cannot set {target.describe()} = {value!r}: {exc}"
        ) from exc


def apply_bindings(
    bindings: Sequence[Binding], namespace: object, sources: Mapping[str, ArgSource], root: object
) -> None:
    """Write each bound argument's value into its targets under ``root``, lowest precedence first.

    Skips defaults that are None (module doc). Raises BindingConflictError when two arguments of
    the same source (two env vars, or two flags) give one attribute different values, and
    BindingError when a target cannot be resolved or set.
    """
    for source in PRECEDENCE:
        written: dict[tuple[int, str], tuple[object, Binding]] = {}
        for binding in bindings:
            if sources.get(binding.dest) is not source or not hasattr(namespace, binding.dest):
                continue
            value = getattr(namespace, binding.dest)
            if value is None and source is ArgSource.DEFAULT:
                continue
            for target in binding.targets:
                owner = target.resolve_owner(root)
                key = (id(owner), target.attr)
                earlier = written.get(key)
                if source is not ArgSource.DEFAULT and earlier is not None and earlier[0] != value:
                    first = _describe_source(earlier[1], source)
                    raise BindingConflictError(
                        f"{target.describe()} gets {earlier[0]!r} from {first} and {value!r} from "
                        f"{_describe_source(binding, source)}; set only one of them"
                    )
                written[key] = (value, binding)
                _assign(target, owner, value, binding)
