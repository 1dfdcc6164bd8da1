"""``EnvArgumentParser``: argparse with environment-variable fallbacks and config bindings.

The public contract follows rtp-llm's ``EnvArgumentParser`` where it is sound (env names, groups,
``bind_to``); the parse itself is one mode, whatever the argv:

1. argparse parses the command line into a namespace pre-filled with a "not given" placeholder, so
   argparse alone decides what was given (``--flag=value``, abbreviations, short options, ``--``);
2. every argument that was not given and whose variable is set takes the variable's value, written
   as command-line tokens (``env_values``) and checked by argparse's own converter: type, choices,
   nargs and booleans exactly as on the command line; a bad value exits 2 with a message naming the
   variable, the argument and the value;
3. the rest take their defaults; then config bindings are applied, command line over env over
   default.

Arguments registered with ``enable_env=False`` are never read from the environment, the dest can
not be given a variable later, and a set variable of the conventional name is logged as ignored.
Control actions (``-h``, ``--version``, anything whose dest is ``SUPPRESS``) and positionals have no
variable. Each parser keeps its own mappings; parsing leaves no state behind.
"""

from __future__ import annotations

import argparse
import copy
import logging
import os
import sys
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar, overload

from rtp_ref.args.bindings import (
    Binding,
    BindingConflictError,
    BindSpec,
    apply_bindings,
    parse_bind_spec,
)
from rtp_ref.args.env_names import derive_env_name, long_option, normalize_env_prefix
from rtp_ref.args.env_registry import CliOnly, EnvMapping, EnvRegistry
from rtp_ref.args.env_values import (
    NEGATIVE_NUMBER,
    CommandLineForm,
    accumulating_kind,
    command_line_form,
    missing_env_form,
)
from rtp_ref.args.sources import ArgSource
from rtp_ref.errors import RtpRefError

_N = TypeVar("_N")

logger = logging.getLogger(__name__)


class _NotGiven:
    """Placeholder in the namespace while argparse runs: still there afterwards = not on the command line."""

    def __repr__(self) -> str:
        return "<not given on the command line>"


_NOT_GIVEN = _NotGiven()


def _is_control(action: argparse.Action) -> bool:
    """Help, version and any action storing nothing (dest SUPPRESS): they act, they hold no value."""
    return action.dest == argparse.SUPPRESS or isinstance(
        action, (argparse._HelpAction, argparse._VersionAction)
    )


@dataclass(frozen=True)
class EnvValue:
    """One set environment variable, validated for its argument.

    ``value`` is what the action receives (converted and checked); unused when ``form`` says the
    action is not taken (a boolean flag set to false).
    """

    mapping: EnvMapping
    raw: str
    form: CommandLineForm
    value: Any


@dataclass(frozen=True)
class ParseOutcome:
    """A parse result with the source of every argument's value (``extras``: unrecognized args)."""

    namespace: argparse.Namespace
    sources: Mapping[str, ArgSource]
    extras: list[str]


class _EnvOptions(argparse._ActionsContainer):
    """``add_argument`` with the environment and binding options, for the parser and its groups.

    ``_env_parser`` owns the registrations; ``_exclusive_group`` is the mutually exclusive group an
    argument added here joins (None outside one).
    """

    _env_parser: EnvArgumentParser
    _exclusive_group: EnvMutuallyExclusiveGroup | None = None

    def add_argument(
        self,
        *name_or_flags: str,
        env_name: str | None = None,
        enable_env: bool = True,
        bind_to: BindSpec | None = None,
        **kwargs: Any,
    ) -> argparse.Action:
        """``argparse.add_argument`` plus the environment and binding options.

        ``env_name`` overrides the derived variable name; ``enable_env=False`` makes the argument
        command line only (for good: a later env registration of the same dest is an error);
        ``bind_to`` names the config attribute(s) the value is copied to. Registration errors
        (contradictory options, name clashes, ``type=bool``) raise RtpRefError.
        """
        action = super().add_argument(*name_or_flags, **kwargs)
        self._env_parser._adopt(
            action, env_name=env_name, enable_env=enable_env, bind_to=bind_to, group=self._exclusive_group
        )
        return action

    def add_mutually_exclusive_group(self, *, required: bool = False) -> EnvMutuallyExclusiveGroup:
        """A mutually exclusive group; the exclusion and ``required`` also count environment values."""
        group = EnvMutuallyExclusiveGroup(self, self._env_parser, required=required)
        self._mutually_exclusive_groups.append(group)
        self._env_parser._env_groups.append(group)
        return group


class EnvArgumentParser(_EnvOptions, argparse.ArgumentParser):
    """An ``argparse.ArgumentParser`` whose options fall back to environment variables.

    ``env_prefix`` prefixes every variable name (``RTP_LLM`` -> ``RTP_LLM_TP_SIZE``);
    ``config_root`` is the object ``bind_to`` paths start from (bindings apply only when it is
    set). Everything else is passed to ``argparse.ArgumentParser``, except ``parents``, which
    would copy arguments without their env registrations (an RtpRefError says so).
    """

    def __init__(
        self, *args: Any, env_prefix: str = "", config_root: object | None = None, **kwargs: Any
    ) -> None:
        if kwargs.get("parents"):
            raise RtpRefError(
                "EnvArgumentParser does not take parents=: argparse copies the parents' arguments "
                "without their environment registrations; add the arguments to this parser instead"
            )
        # Set before argparse's __init__, which adds -h/--help through self.add_argument.
        self._env_parser = self
        self._env_prefix = normalize_env_prefix(env_prefix)
        self._config_root = config_root
        self._env = EnvRegistry()
        self._bindings: list[Binding] = []
        self._value_actions: list[argparse.Action] = []
        self._env_required: list[argparse.Action] = []
        self._env_groups: list[EnvMutuallyExclusiveGroup] = []
        self._negative_number_options = False
        super().__init__(*args, **kwargs)

    def add_argument_group(
        self, title: str | None = None, description: str | None = None, **kwargs: Any
    ) -> EnvArgumentGroup:
        """A titled group whose ``add_argument`` takes the same environment and binding options."""
        group = EnvArgumentGroup(self, title, description, **kwargs)
        self._action_groups.append(group)
        return group

    def add_subparsers(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refused: which subcommand's variables apply is undecidable before parsing."""
        raise RtpRefError(
            "EnvArgumentParser does not support subcommands; build one EnvArgumentParser per subcommand"
        )

    def parse_known_intermixed_args(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refused: argparse parses intermixed args in two passes, which would read the env twice."""
        raise RtpRefError("EnvArgumentParser does not support intermixed parsing; use parse_args")

    def get_env_mappings(self) -> dict[str, str]:
        """``dest -> variable name`` for every argument that reads the environment (a copy)."""
        return {dest: mapping.env_name for dest, mapping in self._env.mapped.items()}

    def get_cli_only_dests(self) -> frozenset[str]:
        """The dests registered with ``enable_env=False``: never read from the environment."""
        return frozenset(self._env.cli_only)

    @overload
    def parse_known_args(
        self, args: Iterable[str] | None = None, namespace: None = None
    ) -> tuple[argparse.Namespace, list[str]]: ...
    @overload
    def parse_known_args(self, args: Iterable[str] | None, namespace: _N) -> tuple[_N, list[str]]: ...
    @overload
    def parse_known_args(self, *, namespace: _N) -> tuple[_N, list[str]]: ...
    def parse_known_args(
        self, args: Iterable[str] | None = None, namespace: Any = None
    ) -> tuple[Any, list[str]]:
        """``argparse.parse_known_args`` with environment fallbacks (module doc), reading ``os.environ``.

        Attributes already on a given ``namespace`` rank with the defaults: the command line and
        the environment override them.
        """
        target = argparse.Namespace() if namespace is None else namespace
        result, _, extras = self._parse(args, target, os.environ)
        return result, extras

    def parse_with_sources(
        self, args: Iterable[str] | None = None, *, environ: Mapping[str, str] | None = None
    ) -> ParseOutcome:
        """Parse like ``parse_known_args`` and report where each value came from.

        ``environ`` defaults to ``os.environ``. Unrecognized arguments are returned in ``extras``.
        """
        env = os.environ if environ is None else environ
        namespace, sources, extras = self._parse(args, argparse.Namespace(), env)
        return ParseOutcome(namespace, sources, extras)

    def read_environment(
        self, environ: Mapping[str, str] | None = None, *, skip: Collection[str] = ()
    ) -> list[EnvValue]:
        """The set variables of every env-mapped argument (dests in ``skip`` left out), validated.

        Validation is the command line's (type, choices, nargs, booleans). A malformed value
        raises ``argparse.ArgumentError`` whose message names the argument, the variable and the
        value. Order: registration order.
        """
        env = os.environ if environ is None else environ
        return [
            self._env_value(mapping, env[mapping.env_name])
            for mapping in self._env.mapped.values()
            if mapping.dest not in skip and mapping.env_name in env
        ]

    # -- registration ---------------------------------------------------------------------------

    def _adopt(
        self,
        action: argparse.Action,
        *,
        env_name: str | None,
        enable_env: bool,
        bind_to: BindSpec | None,
        group: EnvMutuallyExclusiveGroup | None,
    ) -> None:
        """Check and record the environment and binding options of a freshly added action."""
        shown = "/".join(action.option_strings) or action.dest
        if action.type is bool:
            raise RtpRefError(
                f"argument {shown}: type=bool turns every non-empty value, 'False' included, into True; "
                "use type=rtp_ref.args.str2bool"
            )
        if _is_control(action):
            if env_name is not None or bind_to is not None:
                raise RtpRefError(
                    f"argument {shown}: it stores no value (a control action such as help or version), "
                    "so it takes neither env_name nor bind_to"
                )
            return
        option_string = long_option(action.option_strings, self.prefix_chars) or (
            action.option_strings[0] if action.option_strings else action.dest
        )
        mapping, cli_only = self._env_entry(action, shown, option_string, env_name, enable_env)
        targets = parse_bind_spec(bind_to, argument=option_string) if bind_to is not None else ()
        # Every check has passed: record.
        if mapping is not None:
            self._env.map(mapping)
            self._annotate_help(action, f"env {mapping.env_name}")
            if action.required:  # argparse would demand it on the command line; env may supply it
                action.required = False
                self._env_required.append(action)
            if group is not None and group.required:
                group.required = False
                group._env_required = True
        if cli_only is not None:
            self._env.forbid(cli_only)
            self._annotate_help(action, "command line only")
        if targets:
            self._bindings.append(
                Binding(action.dest, option_string, mapping.env_name if mapping else None, targets)
            )
        if group is not None:
            group._members.append(action)
        self._value_actions.append(action)
        if any(NEGATIVE_NUMBER.fullmatch(option) for option in action.option_strings):
            self._negative_number_options = True

    def _env_entry(
        self,
        action: argparse.Action,
        shown: str,
        option_string: str,
        env_name: str | None,
        enable_env: bool,
    ) -> tuple[EnvMapping | None, CliOnly | None]:
        """The env mapping or command-line-only entry an action gets (checked, not yet recorded)."""
        if not action.option_strings:
            if env_name is not None:
                raise RtpRefError(f"argument {shown}: positional arguments have no environment variable")
            return None, None
        if not enable_env:
            if env_name is not None:
                raise RtpRefError(
                    f"argument {shown}: env_name={env_name!r} contradicts enable_env=False; drop one of them"
                )
            entry = CliOnly(action.dest, option_string, self._conventional_env_names(action))
            self._env.check_forbid(entry)
            return None, entry
        missing = missing_env_form(action)
        if missing is not None:
            raise RtpRefError(f"argument {shown}: {missing}; register it with enable_env=False")
        name = derive_env_name(
            action.option_strings,
            action.dest,
            env_name=env_name,
            prefix=self._env_prefix,
            prefix_chars=self.prefix_chars,
        )
        mapping = EnvMapping(action.dest, name, option_string, action)
        self._env.check_map(mapping)
        return mapping, None

    def _conventional_env_names(self, action: argparse.Action) -> tuple[str, ...]:
        """Names an operator might try for a command-line-only argument (with and without prefix)."""
        names: list[str] = []
        for prefix in dict.fromkeys((self._env_prefix, "")):
            try:
                names.append(
                    derive_env_name(
                        action.option_strings, action.dest, prefix=prefix, prefix_chars=self.prefix_chars
                    )
                )
            except RtpRefError:  # no portable name: nobody can set it, nothing to warn about
                continue
        return tuple(names)

    @staticmethod
    def _annotate_help(action: argparse.Action, note: str) -> None:
        if action.help is not argparse.SUPPRESS:
            action.help = f"{action.help} [{note}]" if action.help else f"[{note}]"

    # -- parsing --------------------------------------------------------------------------------

    def _parse(
        self, args: Iterable[str] | None, target: _N, environ: Mapping[str, str]
    ) -> tuple[_N, dict[str, ArgSource], list[str]]:
        argv = sys.argv[1:] if args is None else list(args)
        placeholders = self._placeholders()
        scratch = argparse.Namespace(**placeholders)
        scratch, extras = super().parse_known_args(argv, scratch)
        sources = {dest: ArgSource.CLI for dest in self._given_on_command_line(scratch, placeholders)}
        self._warn_ignored_cli_only(environ)
        masked = self._masked_by_command_line(sources, environ)
        try:
            env_values = self.read_environment(environ, skip=sources.keys() | masked)
            self._check_env_exclusions(env_values)
        except argparse.ArgumentError as err:
            self._fail(err)
        for value in env_values:
            if value.form.arg_strings is not None:
                value.mapping.action(self, scratch, value.value, value.form.option_string)
                sources[value.mapping.dest] = ArgSource.ENV
        self._check_required(sources)
        self._fill_defaults(scratch, placeholders, sources)
        for dest, value in vars(scratch).items():
            if sources.get(dest) in (ArgSource.CLI, ArgSource.ENV) or not hasattr(target, dest):
                setattr(target, dest, value)
        if self._config_root is not None:
            try:
                apply_bindings(self._bindings, target, sources, self._config_root)
            except BindingConflictError as exc:
                self.error(str(exc))
        return target, sources, extras

    def _placeholders(self) -> dict[str, object]:
        """What each dest holds before argparse runs.

        Actions that add to the previous value (append, count...) need a real starting value: a
        copy of the default, which they replace with a new object when given.
        """
        accumulating = {a.dest for a in self._value_actions if accumulating_kind(a) is not None}
        placeholders: dict[str, object] = {}
        for action in self._value_actions:
            if action.dest in placeholders:
                continue
            if action.dest not in accumulating:
                placeholders[action.dest] = _NOT_GIVEN
            else:
                default = action.default
                placeholders[action.dest] = None if default is argparse.SUPPRESS else copy.copy(default)
        return placeholders

    def _given_on_command_line(
        self, scratch: argparse.Namespace, placeholders: Mapping[str, object]
    ) -> list[str]:
        # An absent optional positional ('?', '*') is set to its default by argparse itself.
        positional_defaults = {a.dest: a.default for a in self._value_actions if not a.option_strings}
        given = []
        for dest, placeholder in placeholders.items():
            value = getattr(scratch, dest, placeholder)
            if value is placeholder or (dest in positional_defaults and value is positional_defaults[dest]):
                continue
            given.append(dest)
        return given

    def _warn_ignored_cli_only(self, environ: Mapping[str, str]) -> None:
        for entry in self._env.cli_only.values():
            for name in entry.conventional_env_names:
                if name in environ:
                    logger.warning(
                        "environment variable %s is ignored: %s is command line only (registered with "
                        "enable_env=False); pass %s on the command line instead",
                        name,
                        entry.option_string,
                        entry.option_string,
                    )

    def _masked_by_command_line(
        self, sources: Mapping[str, ArgSource], environ: Mapping[str, str]
    ) -> set[str]:
        """Dests whose variable must be ignored because a mutually exclusive flag was given."""
        masked: set[str] = set()
        for group in self._env_groups:
            given = next((a for a in group._members if sources.get(a.dest) is ArgSource.CLI), None)
            if given is None:
                continue
            for member in group._members:
                mapping = self._env.mapped.get(member.dest)
                if member.dest in sources or mapping is None:
                    continue
                masked.add(member.dest)
                if mapping.env_name in environ:
                    logger.warning(
                        "environment variable %s is ignored: %s, given on the command line, excludes %s",
                        mapping.env_name,
                        "/".join(given.option_strings),
                        mapping.option_string,
                    )
        return masked

    def _check_env_exclusions(self, env_values: Iterable[EnvValue]) -> None:
        taken = {v.mapping.dest: v for v in env_values if v.form.arg_strings is not None}
        for group in self._env_groups:
            set_here = [taken[a.dest] for a in group._members if a.dest in taken]
            if len(set_here) > 1:
                first, second = set_here[:2]
                raise argparse.ArgumentError(
                    second.mapping.action,
                    f"environment variables {first.mapping.env_name} and {second.mapping.env_name} set "
                    f"mutually exclusive arguments {first.mapping.option_string} and "
                    f"{second.mapping.option_string}; unset one of them",
                )

    def _check_required(self, sources: Mapping[str, ArgSource]) -> None:
        missing = [a for a in self._env_required if a.dest not in sources]
        if missing:
            names = ", ".join(
                f"{self._env.mapped[a.dest].option_string} (or environment variable "
                f"{self._env.mapped[a.dest].env_name})"
                for a in missing
            )
            self.error(f"the following arguments are required: {names}")
        for group in self._env_groups:
            if group._env_required and not any(a.dest in sources for a in group._members):
                flags = " ".join("/".join(a.option_strings) or a.dest for a in group._members)
                envs = ", ".join(
                    self._env.mapped[a.dest].env_name for a in group._members if a.dest in self._env.mapped
                )
                self.error(
                    f"one of the arguments {flags} is required (or one of the environment variables {envs})"
                )

    def _fill_defaults(
        self, scratch: argparse.Namespace, placeholders: Mapping[str, object], sources: dict[str, ArgSource]
    ) -> None:
        for dest, placeholder in placeholders.items():
            if dest in sources:
                continue
            sources[dest] = ArgSource.DEFAULT
            if getattr(scratch, dest) is not placeholder:  # set by argparse (absent positional)
                continue
            action = next(
                (a for a in self._value_actions if a.dest == dest and a.default is not argparse.SUPPRESS),
                None,
            )
            if action is None:
                delattr(scratch, dest)
                del sources[dest]
                continue
            default = action.default
            if isinstance(default, str):  # argparse parses a string default like a command-line value
                try:
                    default = self._get_value(action, default)
                except argparse.ArgumentError as err:
                    self._fail(err)
            setattr(scratch, dest, default)

    def _converted(self, action: argparse.Action, arg_strings: list[str]) -> Any:
        """The value argparse makes of ``arg_strings`` for ``action`` (types, choices, nargs), except that a ``--``
        stays a value: argparse drops it as the command line's end-of-options marker, and an environment value is
        never a command line (CPython 3.11's ``_get_values`` turned ``X=--`` into ``[]``)."""
        if "--" not in arg_strings:
            return self._get_values(action, arg_strings)
        values = [self._get_value(action, text) for text in arg_strings]
        for value in values:
            self._check_value(action, value)
        return values[0] if action.nargs in (None, "?") else values

    def _env_value(self, mapping: EnvMapping, raw: str) -> EnvValue:
        try:
            form = command_line_form(mapping.action, mapping.option_string, raw, self._reads_as_option)
            value = None if form.arg_strings is None else self._converted(mapping.action, list(form.arg_strings))
        except argparse.ArgumentTypeError as exc:
            reason = str(exc)
        except argparse.ArgumentError as exc:
            reason = exc.message
        else:
            return EnvValue(mapping, raw, form, value)
        raise argparse.ArgumentError(
            mapping.action, f"invalid value in environment variable {mapping.env_name}={raw!r}: {reason}"
        )

    def _reads_as_option(self, token: str) -> bool:
        """Whether argparse would take ``token`` for an option (conservatively: any prefixed word)."""
        if len(token) < 2 or token[0] not in self.prefix_chars:
            return False
        return self._negative_number_options or not NEGATIVE_NUMBER.fullmatch(token)

    def _fail(self, err: argparse.ArgumentError) -> NoReturn:
        if self.exit_on_error:
            self.error(str(err))
        raise err


class EnvArgumentGroup(_EnvOptions, argparse._ArgumentGroup):
    """An argument group of an ``EnvArgumentParser``; ``add_argument`` takes the env options too."""

    def __init__(
        self,
        parser: EnvArgumentParser,
        title: str | None = None,
        description: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(parser, title, description, **kwargs)
        self._env_parser = parser


class EnvMutuallyExclusiveGroup(_EnvOptions, argparse._MutuallyExclusiveGroup):
    """A mutually exclusive group whose exclusion and ``required`` also count environment values.

    A flag given on the command line makes the variables of the other members ignored (logged);
    two members set through variables is an error naming both.
    """

    def __init__(
        self, container: argparse._ActionsContainer, parser: EnvArgumentParser, *, required: bool = False
    ) -> None:
        super().__init__(container, required=required)
        self._env_parser = parser
        self._exclusive_group = self
        self._members: list[argparse.Action] = []
        self._env_required = False
