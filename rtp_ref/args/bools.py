"""Boolean values on the command line and in environment variables: one spelling table for both."""

from __future__ import annotations

import argparse

TRUE_WORDS = frozenset({"yes", "true", "t", "1", "on"})
FALSE_WORDS = frozenset({"no", "false", "f", "0", "off"})


def str2bool(text: str) -> bool:
    """Parse ``yes/true/t/1/on`` as True and ``no/false/f/0/off`` as False (any case, outer blanks ignored).

    Anything else raises ``argparse.ArgumentTypeError`` naming the value and the accepted words, so
    argparse reports it as a usage error (exit 2) whether it came from a flag or an environment
    variable. Use this instead of ``type=bool``, which turns every non-empty string, "False" too,
    into True.
    """
    word = text.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise argparse.ArgumentTypeError(
        f"expected a boolean, got {text!r}; use one of {', '.join(sorted(TRUE_WORDS))} "
        f"or {', '.join(sorted(FALSE_WORDS))}"
    )
