"""Server arguments from the command line and the environment (reference for rtp-llm's parser).

``EnvArgumentParser`` fills options from environment variables, command line first, and copies
values into config objects (``bind_to``); ``env_to_cli`` writes the environment as flags. The
contract, and how it differs from rtp-llm's, is in docs/args-and-plugins.md.
"""

from rtp_ref.args.bindings import BindingConflictError, BindingError, BindSpec
from rtp_ref.args.bools import str2bool
from rtp_ref.args.env_names import derive_env_name
from rtp_ref.args.env_to_cli import env_to_cli, write_command_line
from rtp_ref.args.objects import resolve_object
from rtp_ref.args.parser import (
    EnvArgumentGroup,
    EnvArgumentParser,
    EnvMutuallyExclusiveGroup,
    EnvValue,
    ParseOutcome,
)
from rtp_ref.args.sources import ArgSource

__all__ = [
    "ArgSource",
    "BindSpec",
    "BindingConflictError",
    "BindingError",
    "EnvArgumentGroup",
    "EnvArgumentParser",
    "EnvMutuallyExclusiveGroup",
    "EnvValue",
    "ParseOutcome",
    "derive_env_name",
    "env_to_cli",
    "resolve_object",
    "str2bool",
    "write_command_line",
]
