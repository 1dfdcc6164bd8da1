"""Where a parsed value came from, in increasing order of precedence."""

from __future__ import annotations

from enum import Enum


class ArgSource(str, Enum):
    """The source of one parsed value: command line beats environment beats default."""

    DEFAULT = "default"
    ENV = "env"
    CLI = "cli"


#: Lowest precedence first: applying values in this order lets the higher source win.
PRECEDENCE = (ArgSource.DEFAULT, ArgSource.ENV, ArgSource.CLI)
