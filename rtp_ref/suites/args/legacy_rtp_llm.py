"""An emulation of rtp-llm's ``EnvArgumentParser`` with PR #1266 applied, bugs included.

Written for this test suite from the behaviour spec (``docs/sources.md#rtp-llm-server-arguments``: PR #1266 at
``6a6024414`` over rtp-llm HEAD ``4b8d39cd5``); it is not rtp-llm's code. Line numbers in the comments are the
PR's. The PR adds ``enable_env=True`` to the group's and the parser's ``add_argument`` (PR 137/169, 221/229):
that is all this module adds to the emulation of main (rtp_llm_main.py), whose parsing, bindings and
``str2bool`` the PR leaves as they are, and whose generator (rtp_llm_generator.py) it does not touch. Its one
job: run the behaviour tests against it and check that exactly the tests covering listed bugs fail
(tests/args/test_legacy_emulation.py). Keep it faithful; do not fix it.
rtp_ref/suites/args/legacy_adapter.py adapts it to the kit.
"""

from __future__ import annotations

import argparse
from typing import Any, ClassVar

from rtp_ref.suites.args.rtp_llm_main import EnvArgumentGroup, EnvArgumentParser, EnvMutuallyExclusiveGroup


class LegacyEnvArgumentGroup(EnvArgumentGroup):
    """PR 137/169: registers ``bind_to``, then the env mapping unless ``enable_env=False``; an explicit
    ``env_name`` with ``enable_env=False`` is dropped without a word."""

    def add_argument(self, *args: Any, env_name: str | None = None, bind_to: Any = None, enable_env: bool = True,
                     **kwargs: Any) -> argparse.Action:
        action = argparse._ArgumentGroup.add_argument(self, *args, **kwargs)
        if bind_to is not None:
            self._env_parser._bindings.append((action.dest, bind_to))
        if enable_env:
            self._env_parser._register_env_mapping(action, env_name)
        return action


class LegacyEnvMutuallyExclusiveGroup(EnvMutuallyExclusiveGroup):
    """Members take ``enable_env`` like group arguments do."""

    def add_argument(self, *args: Any, env_name: str | None = None, enable_env: bool = True,
                     **kwargs: Any) -> argparse.Action:
        action = argparse._MutuallyExclusiveGroup.add_argument(self, *args, **kwargs)
        if enable_env:
            self._env_parser._register_env_mapping(action, env_name)
        return action


class LegacyEnvArgumentParser(EnvArgumentParser):
    """The PR's parser: its groups take ``enable_env``, and so does its own ``add_argument``, to no effect."""

    group_class: ClassVar[type[EnvArgumentGroup]] = LegacyEnvArgumentGroup
    exclusive_group_class: ClassVar[type[EnvMutuallyExclusiveGroup]] = LegacyEnvMutuallyExclusiveGroup

    def add_argument(self, *args: Any, enable_env: bool = True, env_name: str | None = None,
                     **kwargs: Any) -> argparse.Action:
        # PR 214-229: delegated to the group, which registers with its own defaults (enable_env=True, no
        # env_name); then registered again here. enable_env=False cannot undo the group's entry.
        positional = bool(args) and len(args) == 1 and args[0][:1] not in self.prefix_chars
        group = self._positionals if positional else self._optionals
        action = group.add_argument(*args, **kwargs)
        if enable_env:
            self._register_env_mapping(action, env_name)
        return action
