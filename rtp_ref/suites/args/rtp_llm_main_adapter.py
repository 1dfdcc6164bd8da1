"""The args kit over the emulation of rtp-llm's main branch: the worked example of an adapter to an engine's own
code, its generator a command that builds its parser inline.

rtp_ref/suites/args/rtp_llm_main.py and rtp_llm_generator.py are written like the engine, not like the kit, so this
module shows the args steps of the recipe in docs/args-and-plugins.md ("Writing an adapter", numbered as there) on
code that does not know the suite:

1. ``new_parser`` builds the engine's parser class and gives it the config root the engine's way;
2. ``str2bool`` is the engine's function object itself (its generator compares ``arg_type == str2bool``, which
   for a function is identity);
3. ``reset`` clears the engine's class-level mappings in place (no ``importlib.reload``: a reload makes new class
   and function objects, and the identity checks of step 2 would then fail silently);
4. the generator is the engine's own command, run with the engine's own flags (``--only-env-vars --quiet``: what
   a deployment runs, and a command line alone on stdout). Running this module (``python -m
   rtp_ref.suites.args.rtp_llm_main_adapter``) replaces the function the engine's generator calls on the parser it
   builds inline (``init_all_group_args``) with one that registers the options the test described, then calls the
   engine's ``main``, which reads ``os.environ`` and prints as it does in production;
7. what the engine lacks stays missing: the suite's ``enable_env`` keyword is passed on, and the engine's own
   ``TypeError`` for it makes the tests that need it absent (nothing is declared, nothing papered over).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import ClassVar

from rtp_ref.suites.args import rtp_llm_generator as generator
from rtp_ref.suites.args import rtp_llm_main as engine
from rtp_ref.suites.args.generator import add_recipe_options, recipe_from_environment
from rtp_ref.suites.args.kit import CommandGenerator, Generator

#: step 4: the engine generator's own flags, as a deployment passes them
GENERATOR_FLAGS = ("--only-env-vars", "--quiet")


class RtpLlmMainArgsKit:
    """The behaviour tests' kit (rtp_ref/suites/args/kit.py) over the emulation of rtp-llm's main branch."""

    name = "rtp-llm main emulation"
    parser_class: ClassVar[type[engine.EnvArgumentParser]] = engine.EnvArgumentParser

    def new_parser(
        self, *, env_prefix: str = "", config_root: object | None = None, version: str | None = None
    ) -> engine.EnvArgumentParser:
        """Step 1: the engine's class; its config root is set by a method, not the constructor."""
        parser = self.parser_class(prog="prog", env_prefix=env_prefix)
        if config_root is not None:
            parser.set_config_root(config_root)
        if version is not None:
            parser.add_argument("--version", action="version", version=version)
        return parser

    #: step 2: the engine's own object, never a wrapper
    str2bool = staticmethod(engine.str2bool)

    #: step 4: this module, run as a command with the engine generator's flags
    generator: Generator = CommandGenerator((sys.executable, "-m", "rtp_ref.suites.args.rtp_llm_main_adapter",
                                             *GENERATOR_FLAGS))

    def reset(self) -> None:
        """Step 3: rtp-llm's tests reload the module before each test to empty the class-level mappings; clearing
        the dictionary in place does the same and keeps every object the suite holds valid."""
        engine.EnvArgumentParser._env_mappings.clear()


def rtp_llm_main_args_kit() -> RtpLlmMainArgsKit:
    """Factory for ``--impl rtp_ref.suites.args.rtp_llm_main_adapter:rtp_llm_main_args_kit``."""
    return RtpLlmMainArgsKit()


def register_recipe_options(parser: engine.EnvArgumentParser, py_env_configs: engine.PyEnvConfigs) -> None:
    """Step 4, in the engine's ``init_all_group_args`` place: the options the test described, on the parser the
    engine's generator built, under the recipe's variable prefix (set as the engine keeps it: an attribute its
    registration reads). Nothing is bound: the generator sets no config root."""
    recipe = recipe_from_environment()
    parser.env_prefix = recipe.env_prefix.upper()
    add_recipe_options(parser, recipe, engine.str2bool)


def run_generator_command(argv: Sequence[str]) -> int:
    """Step 4, in the command's own process: the engine's generator with its own flags ``argv``, its options the
    ones the test described."""
    engine.init_all_group_args = register_recipe_options  # the engine's generator looks this up when it runs
    return generator.main(argv)


if __name__ == "__main__":
    sys.exit(run_generator_command(sys.argv[1:]))
