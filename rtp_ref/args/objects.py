"""Naming a Python object on a command line or in an environment variable: ``package.module:attr``."""

from __future__ import annotations

import importlib

from rtp_ref.errors import RtpRefError


def call_named(spec: str) -> object:
    """What the callable ``spec`` names (``resolve_object``) returns when called with no argument; RtpRefError
    naming the spec when it names no callable."""
    found = resolve_object(spec)
    if not callable(found):
        raise RtpRefError(f"{spec!r} names a {type(found).__name__}, not a callable")
    return found()


def resolve_object(spec: str) -> object:
    """The object ``spec`` names: ``"package.module:attribute"`` (the attribute may be dotted).

    Raises RtpRefError for a spec without exactly one ``:``, a module that fails to import (the
    import error chained) or a missing attribute, naming the spec each time.
    """
    module_name, sep, attr_path = spec.partition(":")
    if not sep or not module_name or not attr_path or ":" in attr_path:
        raise RtpRefError(f"{spec!r} is not of the form 'package.module:callable'")
    try:
        obj: object = importlib.import_module(module_name)
    except Exception as exc:
        raise RtpRefError(f"{spec!r}: cannot import {module_name!r}: {type(exc).__name__}: {exc}") from exc
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise RtpRefError(f"{spec!r}: {module_name!r} has no attribute {attr_path!r}") from None
    return obj
