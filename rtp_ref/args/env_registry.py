"""Per-parser record of which arguments read which environment variables, and which must never.

rtp-llm kept this in a class-level dict shared by every parser, where "command line only" was just
a missing entry that any later registration could fill. Here each parser owns one registry, and
``enable_env=False`` is recorded as a rejection that later registrations cannot undo.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from rtp_ref.errors import RtpRefError


@dataclass(frozen=True)
class EnvMapping:
    """``dest`` is filled from ``env_name``, applied through ``action`` as ``option_string``."""

    dest: str
    env_name: str
    option_string: str
    action: argparse.Action


@dataclass(frozen=True)
class CliOnly:
    """``dest`` is command line only; setting one of ``conventional_env_names`` earns a warning."""

    dest: str
    option_string: str
    conventional_env_names: tuple[str, ...]


class EnvRegistry:
    """Env mappings and command-line-only rejections of one parser, keyed by ``dest``."""

    def __init__(self) -> None:
        self._mapped: dict[str, EnvMapping] = {}
        self._cli_only: dict[str, CliOnly] = {}
        self._dest_by_env: dict[str, str] = {}

    @property
    def mapped(self) -> Mapping[str, EnvMapping]:
        """Read-only view, in registration order."""
        return MappingProxyType(self._mapped)

    @property
    def cli_only(self) -> Mapping[str, CliOnly]:
        """Read-only view, in registration order."""
        return MappingProxyType(self._cli_only)

    def check_map(self, mapping: EnvMapping) -> bool:
        """Whether ``map(mapping)`` would add an entry (False: an alias of an identical mapping).

        Raises RtpRefError if the dest is command line only, already reads another variable, or
        the variable already fills another dest.
        """
        rejected = self._cli_only.get(mapping.dest)
        if rejected is not None:
            raise RtpRefError(
                f"argument {mapping.option_string}: {mapping.dest!r} is command line only "
                f"({rejected.option_string} was registered with enable_env=False), so it cannot read "
                f"environment variable {mapping.env_name}"
            )
        owner = self._dest_by_env.get(mapping.env_name)
        if owner is not None and owner != mapping.dest:
            raise RtpRefError(
                f"argument {mapping.option_string}: environment variable {mapping.env_name} already fills "
                f"{owner!r} (from {self._mapped[owner].option_string}); pass a different env_name"
            )
        existing = self._mapped.get(mapping.dest)
        if existing is None:
            return True
        if existing.env_name != mapping.env_name:
            raise RtpRefError(
                f"argument {mapping.option_string}: {mapping.dest!r} already reads environment variable "
                f"{existing.env_name} (from {existing.option_string}); an alias must use the same name "
                f"(env_name={existing.env_name!r}) or enable_env=False with a dest of its own"
            )
        return False

    def map(self, mapping: EnvMapping) -> None:
        """Record that ``mapping.dest`` reads ``mapping.env_name``; errors as in ``check_map``.

        An alias registering the same dest and variable again keeps the first entry, whose flag is
        the one the env -> CLI generator writes.
        """
        if self.check_map(mapping):
            self._mapped[mapping.dest] = mapping
            self._dest_by_env[mapping.env_name] = mapping.dest

    def check_forbid(self, entry: CliOnly) -> None:
        """Raise RtpRefError if ``forbid(entry)`` would contradict an existing env mapping."""
        existing = self._mapped.get(entry.dest)
        if existing is not None:
            raise RtpRefError(
                f"argument {entry.option_string}: {entry.dest!r} already reads environment variable "
                f"{existing.env_name} (from {existing.option_string}); a command-line-only alias cannot "
                "take that back: give it a dest of its own"
            )

    def forbid(self, entry: CliOnly) -> None:
        """Record ``entry.dest`` as command line only, for good; errors as in ``check_forbid``."""
        self.check_forbid(entry)
        earlier = self._cli_only.get(entry.dest)
        if earlier is None:
            self._cli_only[entry.dest] = entry
        else:
            names = tuple(dict.fromkeys(earlier.conventional_env_names + entry.conventional_env_names))
            self._cli_only[entry.dest] = CliOnly(entry.dest, earlier.option_string, names)
