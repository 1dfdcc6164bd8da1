"""How the suites' data (findings.py, features.py) names a test: ``module::name[params]``, as the suite run's
JUnit report gives it (rtp_ref.suites.run.junit_outcomes)."""

from __future__ import annotations

#: the suites' test modules, as test ids start
A, AP, P, PP = (
    "test_args_behaviour",
    "test_args_properties",
    "test_plugins_behaviour",
    "test_plugins_properties",
)
#: the two entry points of the args tests' ``parse`` fixture (``sys.argv`` and ``parse_args(list)``)
BOTH = ("argv", "list")


def ids(module: str, name: str, *params: str) -> tuple[str, ...]:
    """The ids of test ``name`` of ``module``: one per parameter id in ``params``, or the bare name."""
    return tuple(f"{module}::{name}[{p}]" for p in params) if params else (f"{module}::{name}",)
