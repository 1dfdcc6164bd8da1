"""An emulation of rtp-llm's ``EnvArgumentParser`` on its main branch, bugs included.

Written for this test suite from the measured behaviour in the behaviour spec
(``docs/sources.md#rtp-llm-server-arguments``: rtp-llm HEAD ``4b8d39cd5``,
``rtp_llm/server/server_args/server_args.py`` and ``util.py``); it is not rtp-llm's code. Line numbers in the
comments are rtp-llm's own. Main has no ``enable_env`` (PR #1266 adds it: legacy_rtp_llm.py, which builds on this
module) and no ``--external_model_packages``. Its one job: run the behaviour tests against it and check that the
tests covering listed bugs fail and the tests needing what main lacks end absent
(tests/args/test_legacy_emulation.py). Keep it faithful; do not fix it.

It is shaped like the engine's code, not like the suite's kit: the parser keeps its mappings at class level and the
boolean type is compared by identity; the env -> CLI generator (rtp_llm_generator.py) builds its parser inline.
rtp_ref/suites/args/rtp_llm_main_adapter.py adapts it to the kit as an engine team would adapt theirs.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any, ClassVar


def str2bool(value: Any) -> Any:
    """``util.py`` 6-15: None passes through; yes/true/t/1/on and no/false/f/0/off; else ArgumentTypeError."""
    if value is None or isinstance(value, bool):
        return value
    if value.lower() in ("yes", "true", "t", "1", "on"):
        return True
    if value.lower() in ("no", "false", "f", "0", "off"):
        return False
    raise argparse.ArgumentTypeError("Boolean value expected.")  # the bad value is not named


class ConfigBinding:
    """72-125: a tuple (object, attr), a dotted path from the root, or a list; resolution is cached."""

    def __init__(self, spec: Any) -> None:
        specs = spec if isinstance(spec, list) else [spec]
        for item in specs:
            if not isinstance(item, tuple | str):
                raise ValueError(f"Invalid bind_to specification: {spec!r}")  # 116
        self._specs = specs
        self._resolved: list[tuple[Any, str]] | None = None

    def apply(self, root: Any, value: Any) -> None:
        if self._resolved is None:  # 92-93
            self._resolved = [self._resolve(root, item) for item in self._specs]
        for owner, attr in self._resolved:
            setattr(owner, attr, value)

    @staticmethod
    def _resolve(root: Any, item: Any) -> tuple[Any, str]:
        if isinstance(item, tuple):
            return item[0], item[1]
        *path, attr = item.split(".")
        owner = root
        for part in path:
            owner = getattr(owner, part)
        return owner, attr


class EnvArgumentGroup(argparse._ArgumentGroup):
    """133-168: registers ``bind_to``, then the env mapping. Any other keyword goes to argparse, which refuses
    what it does not know (``enable_env``: ``TypeError``)."""

    def __init__(self, parser: EnvArgumentParser, *args: Any, **kwargs: Any) -> None:
        super().__init__(parser, *args, **kwargs)
        self._env_parser = parser

    def add_argument(self, *args: Any, env_name: str | None = None, bind_to: Any = None,
                     **kwargs: Any) -> argparse.Action:
        action = super().add_argument(*args, **kwargs)
        if bind_to is not None:
            # the spec is kept as given: a bad one fails only when the bindings are applied, and is logged
            self._env_parser._bindings.append((action.dest, bind_to))
        self._env_parser._register_env_mapping(action, env_name)
        return action


class EnvMutuallyExclusiveGroup(argparse._MutuallyExclusiveGroup):
    """Members register env mappings like group arguments do.

    The spec gives no code for this, but measured (✔) that the CLI-mode env fill bypasses mutually
    exclusive groups, which needs the members to have mappings; this is the simplest way they do.
    """

    def __init__(self, container: argparse._ActionsContainer, parser: EnvArgumentParser, **kwargs: Any) -> None:
        super().__init__(container, **kwargs)
        self._env_parser = parser

    def add_argument(self, *args: Any, env_name: str | None = None, **kwargs: Any) -> argparse.Action:
        action = super().add_argument(*args, **kwargs)
        self._env_parser._register_env_mapping(action, env_name)
        return action


class EnvArgumentParser(argparse.ArgumentParser):
    """The parser: class-level mappings (175), two parse modes (260), token scanning (300-337)."""

    _env_mappings: ClassVar[dict[str, str]] = {}
    #: the classes ``add_argument_group`` and ``add_mutually_exclusive_group`` make (PR #1266 adds keywords)
    group_class: ClassVar[type[EnvArgumentGroup]] = EnvArgumentGroup
    exclusive_group_class: ClassVar[type[EnvMutuallyExclusiveGroup]] = EnvMutuallyExclusiveGroup

    def __init__(self, *args: Any, env_prefix: str = "", **kwargs: Any) -> None:
        # 178/183: set before argparse's __init__, so -h/--help goes through add_argument (HELP).
        self.env_prefix = env_prefix.upper()
        self._bindings: list[tuple[str, Any]] = []
        self._config_root: Any = None
        self._cli_provided_args: set[str] = set()
        super().__init__(*args, **kwargs)

    def set_config_root(self, root: Any) -> None:
        self._config_root = root

    def add_argument_group(self, *args: Any, **kwargs: Any) -> EnvArgumentGroup:
        group = self.group_class(self, *args, **kwargs)
        self._action_groups.append(group)
        return group

    def add_mutually_exclusive_group(self, **kwargs: Any) -> EnvMutuallyExclusiveGroup:
        group = self.exclusive_group_class(self, self, **kwargs)
        self._mutually_exclusive_groups.append(group)
        return group

    def add_argument(self, *args: Any, env_name: str | None = None, **kwargs: Any) -> argparse.Action:
        # 214-223: delegated to the group, which registers with its own defaults (no env_name); then
        # registered again here.
        positional = bool(args) and len(args) == 1 and args[0][:1] not in self.prefix_chars
        group = self._positionals if positional else self._optionals
        action = group.add_argument(*args, **kwargs)
        self._register_env_mapping(action, env_name)
        return action

    def _register_env_mapping(self, action: argparse.Action, env_name: str | None) -> None:
        """225-249: explicit name, else first ``--`` flag, else dest; prefix always; last one wins."""
        if env_name:
            name = env_name.upper().replace("-", "_")
        else:
            long = next((o for o in action.option_strings if o.startswith("--")), None)
            name = long[2:].upper().replace("-", "_") if long else action.dest.upper()
        if self.env_prefix:
            name = f"{self.env_prefix}_{name}"
        EnvArgumentParser._env_mappings[action.dest] = name

    def get_env_mappings(self) -> dict[str, str]:
        return dict(EnvArgumentParser._env_mappings)

    def _find_action(self, dest: str) -> argparse.Action | None:
        return next((a for a in self._actions if a.dest == dest), None)

    def _scan_provided(self, argv: list[str]) -> set[str]:
        """300-337: exact ``--`` tokens only; skip one value when nargs is None, '?' or 1."""
        provided: set[str] = set()
        i = 0
        while i < len(argv):
            token = argv[i]
            if token.startswith("--"):
                for action in self._actions:
                    if token in action.option_strings:
                        provided.add(action.dest)
                        if action.nargs in (None, "?", 1):
                            i += 1
                        break
            i += 1
        return provided

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:
        has_cmd_args = args is not None or len(sys.argv) > 1  # 260
        if not has_cmd_args:
            # Env mode, 262-290: [first "--" option, raw value] per set variable, parsed by argparse.
            env_args: list[str] = []
            for dest, env_name in self._env_mappings.items():
                action = self._find_action(dest)
                if env_name not in os.environ or action is None:
                    continue
                long = next((o for o in action.option_strings if o.startswith("--")), None)
                if long is not None:
                    env_args += [long, os.environ[env_name]]
            result = super().parse_args(env_args, namespace)
        else:
            # CLI mode, 300-370.
            self._cli_provided_args = self._scan_provided(sys.argv[1:] if args is None else list(args))
            result = super().parse_args(args, namespace)
            for dest, env_name in self._env_mappings.items():
                action = self._find_action(dest)
                if dest in self._cli_provided_args or env_name not in os.environ or action is None:
                    continue
                raw = os.environ[env_name]
                value: Any = raw
                convert: Any = action.type  # argparse's stubs allow a str here; a parser's types are callables
                if convert is not None:
                    try:
                        value = convert(raw)
                    except argparse.ArgumentTypeError as exc:
                        self.error(f"{env_name} ({dest}): {exc}")
                    except (ValueError, TypeError):
                        continue
                setattr(result, dest, value)
        if self._config_root is not None:  # 373-374
            self._apply_config_bindings(result)
        return result

    def _apply_config_bindings(self, namespace: Any) -> None:
        """391-414: env/default-sourced dests, then CLI-provided ones; None skipped; errors logged."""
        cli = self._cli_provided_args
        ordered = [b for b in self._bindings if b[0] not in cli] + [b for b in self._bindings if b[0] in cli]
        for dest, spec in ordered:
            value = getattr(namespace, dest, None)
            if value is None:
                continue
            try:
                ConfigBinding(spec).apply(self._config_root, value)
            except Exception as exc:
                logging.warning("failed to apply config binding for %s: %s", dest, exc)


class PyEnvConfigs:
    """The config objects the server's options bind to (rtp-llm: a tree of them; here two values)."""

    def __init__(self) -> None:
        self.model_type = ""
        self.tp_size = 1


def init_all_group_args(parser: EnvArgumentParser, py_env_configs: PyEnvConfigs) -> None:
    """Register every server option on ``parser``, bound to ``py_env_configs``: rtp-llm's registers every group;
    the emulated server has two options. The generator (rtp_llm_generator.py) calls this by name."""
    parser.add_argument_group("model").add_argument("--model_type", default="", bind_to=(py_env_configs, "model_type"))
    parser.add_argument_group("parallelism").add_argument(
        "--tp_size", type=int, default=1, bind_to=(py_env_configs, "tp_size"))
