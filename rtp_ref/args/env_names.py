"""How an argument's environment variable is named (rtp-llm's convention, with a validity check).

* an explicit ``env_name`` is upper-cased and ``-`` becomes ``_``;
* otherwise the first long option (``--max-seq-len``) without its prefix, upper-cased, ``-`` -> ``_``;
* otherwise (short-only options) ``dest`` upper-cased;
* a non-empty prefix gives ``PREFIX_NAME``, explicit names included.

The result must be a portable variable name (``[A-Z_][A-Z0-9_]*``), one a shell can export.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from rtp_ref.errors import RtpRefError

_PORTABLE = re.compile(r"[A-Z_][A-Z0-9_]*")


def normalize_env_prefix(prefix: str) -> str:
    """The prefix upper-cased; empty stays empty. Raises RtpRefError if it could not start a name."""
    upper = prefix.upper().replace("-", "_")
    if upper and not _PORTABLE.fullmatch(upper):
        raise RtpRefError(
            f"env_prefix {prefix!r} is not a portable environment variable prefix; "
            "use letters, digits and '_', not starting with a digit (e.g. 'RTP_LLM')"
        )
    return upper


def long_option(option_strings: Sequence[str], prefix_chars: str = "-") -> str | None:
    """The first option string written with two prefix characters (``--flag``), if any."""
    for option in option_strings:
        if len(option) > 2 and option[0] in prefix_chars and option[1] in prefix_chars:
            return option
    return None


def derive_env_name(
    option_strings: Sequence[str],
    dest: str,
    *,
    env_name: str | None = None,
    prefix: str = "",
    prefix_chars: str = "-",
) -> str:
    """The environment variable an argument reads, by the rules in the module doc.

    ``prefix`` is expected already normalized (``normalize_env_prefix``). Raises RtpRefError when
    the result is not a portable name, naming the argument and suggesting ``env_name=``.
    """
    if env_name is not None:
        base = env_name.upper().replace("-", "_")
    else:
        flag = long_option(option_strings, prefix_chars)
        base = (flag.lstrip(prefix_chars) if flag else dest).upper().replace("-", "_")
    name = f"{prefix}_{base}" if prefix else base
    if not _PORTABLE.fullmatch(name):
        shown = "/".join(option_strings) or dest
        raise RtpRefError(
            f"argument {shown}: environment variable name {name!r} is not portable "
            "(letters, digits and '_', not starting with a digit); pass env_name='...' or enable_env=False"
        )
    return name
