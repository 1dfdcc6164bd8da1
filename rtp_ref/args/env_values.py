"""An environment value written as command-line tokens: the one form both the parser and the
env -> CLI generator use, so that parsing the generated tokens gives what parsing the env gives.

* flags that take no value (``store_true``, ``BooleanOptionalAction``...): the value is a boolean
  (``str2bool`` words); true means the flag is given, false means it is not (``--no-x`` for a
  ``BooleanOptionalAction``);
* one value (``nargs`` None, ``'?'`` or 1): ``--flag=VALUE``, which argparse reads verbatim even
  when VALUE starts with ``-``;
* several values (``nargs`` N, ``'*'``, ``'+'``): the value is split like a shell would
  (``shlex.split``), then ``--flag V1 V2``; a value that argparse would read as an option is
  rejected, as it could not be written on the command line either.
"""

from __future__ import annotations

import argparse
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass

from rtp_ref.args.bools import str2bool

#: argparse's own pattern for a negative number (``_negative_number_matcher``, CPython 3.10-3.13).
NEGATIVE_NUMBER = re.compile(r"-\d+|-\d*\.\d+")

_ACCUMULATING: tuple[tuple[type[argparse.Action], str], ...] = (
    (argparse._ExtendAction, "extend"),
    (argparse._AppendAction, "append"),
    (argparse._AppendConstAction, "append_const"),
    (argparse._CountAction, "count"),
)
_REST_OF_LINE = (argparse.REMAINDER, argparse.PARSER, argparse.SUPPRESS)


def accumulating_kind(action: argparse.Action) -> str | None:
    """``'append'``, ``'extend'``, ``'append_const'`` or ``'count'`` for actions that read the
    previous value and add to it; None for actions that just store a value."""
    for cls, kind in _ACCUMULATING:
        if isinstance(action, cls):
            return kind
    return None


def missing_env_form(action: argparse.Action) -> str | None:
    """Why one environment value cannot stand for this option, or None when it can."""
    kind = accumulating_kind(action)
    if kind is not None:
        return f"action={kind!r} adds up repeated flags, which one environment value cannot express"
    if action.nargs in _REST_OF_LINE:
        return f"nargs={action.nargs!r} consumes the rest of the command line"
    return None


@dataclass(frozen=True)
class CommandLineForm:
    """How one environment value is written on the command line.

    ``arg_strings`` are the strings argparse hands to the action; None means the action is not
    taken at all (a boolean flag set to false).
    """

    option_string: str
    arg_strings: tuple[str, ...] | None
    attached: bool

    @property
    def tokens(self) -> tuple[str, ...]:
        """Command-line tokens: ``()``, ``('--flag',)``, ``('--flag=v',)`` or ``('--flag', 'v1', 'v2')``."""
        if self.arg_strings is None:
            return ()
        if self.attached:
            return (f"{self.option_string}={self.arg_strings[0]}",)
        return (self.option_string, *self.arg_strings)


def _flag_form(action: argparse.Action, option_string: str, raw: str) -> CommandLineForm:
    given = str2bool(raw)
    if isinstance(action, argparse.BooleanOptionalAction):
        negative = next((o for o in action.option_strings if o.startswith("--no-")), None)
        if not given and negative is not None:
            return CommandLineForm(negative, (), attached=False)
    return CommandLineForm(option_string, () if given else None, attached=False)


def _count_problem(nargs: object, count: int) -> str | None:
    if isinstance(nargs, int) and count != nargs:
        return f"expected {nargs} values, got {count}"
    if nargs == argparse.ONE_OR_MORE and count == 0:
        return "expected at least one value"
    return None


def command_line_form(
    action: argparse.Action, option_string: str, raw: str, reads_as_option: Callable[[str], bool]
) -> CommandLineForm:
    """The command-line form of ``raw`` for ``action`` (rules in the module doc).

    Raises ``argparse.ArgumentTypeError`` with the reason when ``raw`` has no such form: not a
    boolean, unbalanced quotes, the wrong number of values, or a value that reads as an option.
    Type and ``choices`` are not checked here; the parser checks them exactly as for the CLI.
    """
    if action.nargs == 0:
        return _flag_form(action, option_string, raw)
    if action.nargs in (None, argparse.OPTIONAL, 1):
        return CommandLineForm(option_string, (raw,), attached=True)
    try:
        items = shlex.split(raw)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"cannot split it into values the way a shell would: {exc}"
        ) from None
    problem = _count_problem(action.nargs, len(items))
    if problem is not None:
        raise argparse.ArgumentTypeError(
            f"{problem} (values are separated by blanks; quote a value with blanks)"
        )
    for item in items:
        if reads_as_option(item):
            raise argparse.ArgumentTypeError(
                f"value {item!r} would be read as an option on the command line, so it cannot be one of "
                "several values"
            )
    return CommandLineForm(option_string, tuple(items), attached=False)
