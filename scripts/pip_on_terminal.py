"""``pip install`` with its output on the person's terminal: tox's ``install_command`` for the quick start.

tox 4 shows an install's output only at ``-vv``, with its own debug log around it, so the quick start printed
nothing while pip fetched and unpacked torch (a minute and more). This runs pip with its standard output and error
on the controlling terminal when the process has one (someone is watching: pip draws its progress bars there), and
leaves them as tox gives them otherwise (CI's captured logs are unchanged). Arguments are pip install's.
"""

from __future__ import annotations

import os
import sys


def terminal() -> int | None:
    """A descriptor of the controlling terminal opened for writing, or None where the process has none."""
    try:
        return os.open("/dev/tty", os.O_WRONLY | os.O_NOCTTY)
    except OSError:
        return None


def main() -> None:
    """Replace this process with ``python -I -m pip install ARGS``, its output on the terminal if there is one."""
    tty = terminal()
    if tty is not None:
        os.dup2(tty, 1)
        os.dup2(tty, 2)
    os.execv(sys.executable, [sys.executable, "-I", "-m", "pip", "install", *sys.argv[1:]])


if __name__ == "__main__":
    main()
