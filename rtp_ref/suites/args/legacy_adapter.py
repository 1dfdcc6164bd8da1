"""The args kit over the emulation of rtp-llm: the worked example of an adapter to an engine's own code.

rtp_ref/suites/args/legacy_rtp_llm.py is written like the engine, not like the kit, so this module shows each step
of the recipe in docs/args-and-plugins.md ("Writing an adapter") on code that does not know the suite:

1. ``new_parser`` builds the engine's parser class and gives it the config root the engine's way;
2. ``str2bool`` is the engine's function object itself (its generator compares ``type is str2bool``);
3. ``reset`` clears the engine's class-level mappings in place (no ``importlib.reload``: a reload makes new class
   and function objects, and the identity checks of step 2 would then fail silently);
4. the generator is the engine's own command: running this module (``python -m
   rtp_ref.suites.args.legacy_adapter``) points the engine's parser-building hook at the parser the test
   described and calls the engine's ``main``, which reads ``os.environ`` and prints as it does in production.
"""

from __future__ import annotations

import sys

from rtp_ref.suites.args import legacy_rtp_llm as engine
from rtp_ref.suites.args.generator import parser_from_environment
from rtp_ref.suites.args.kit import CommandGenerator, Generator


class LegacyArgsKit:
    """The behaviour tests' kit (rtp_ref/suites/args/kit.py) over the emulation of rtp-llm."""

    name = "legacy rtp-llm emulation"

    def new_parser(
        self, *, env_prefix: str = "", config_root: object | None = None, version: str | None = None
    ) -> engine.LegacyEnvArgumentParser:
        """Step 1: the engine's class; its config root is set by a method, not the constructor."""
        parser = engine.LegacyEnvArgumentParser(prog="prog", env_prefix=env_prefix)
        if config_root is not None:
            parser.set_config_root(config_root)
        if version is not None:
            parser.add_argument("--version", action="version", version=version)
        return parser

    #: step 2: the engine's own object, never a wrapper
    str2bool = staticmethod(engine.str2bool)

    #: step 4: this module, run as a command
    generator: Generator = CommandGenerator((sys.executable, "-m", "rtp_ref.suites.args.legacy_adapter"))

    def reset(self) -> None:
        """Step 3: rtp-llm's tests reload the module before each test to empty the class-level mappings; clearing
        the dictionary in place does the same and keeps every object the suite holds valid."""
        engine.LegacyEnvArgumentParser._env_mappings.clear()


def legacy_args_kit() -> LegacyArgsKit:
    """Factory for ``--impl rtp_ref.suites.args.legacy_adapter:legacy_args_kit``."""
    return LegacyArgsKit()


def run_generator_command() -> int:
    """Step 4, in the command's own process: the engine's generator, its parser the one the test described."""
    kit = legacy_args_kit()
    engine.setup_server_parser = lambda: parser_from_environment(kit)  # the engine calls this hook by name
    return engine.main()


if __name__ == "__main__":
    sys.exit(run_generator_command())
