"""Running a shipped suite against an implementation, in a pytest process of its own, and reading its outcomes.

A suite is the behaviour and property modules of ``args`` or ``plugins`` (``SUITES``); the implementation is a
``module:callable`` returning a kit (``--impl``; none: the reference), given to the child through the suite's
environment variable. The child runs in a temporary directory with its own hypothesis storage and pytest's cache
off, so nothing is written into the directory the command runs in; its JUnit XML gives each test's outcome.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rtp_ref.args import resolve_object
from rtp_ref.errors import RtpRefError
from rtp_ref.suites.args.kit import KIT_ENV as ARGS_KIT_ENV
from rtp_ref.suites.features import FEATURES_BY_NAME, absent_feature_of
from rtp_ref.suites.plugins.kit import KIT_ENV as PLUGINS_KIT_ENV

SUITE_DIR = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Suite:
    """One shipped suite: its test modules (relative to rtp_ref/suites) and the variable naming its kit."""

    name: str
    modules: tuple[str, ...]
    impl_env: str


SUITES = {
    "args": Suite("args", ("args/test_args_behaviour.py", "args/test_args_properties.py"), ARGS_KIT_ENV),
    "plugins": Suite("plugins", ("plugins/test_plugins_behaviour.py", "plugins/test_plugins_properties.py"),
                     PLUGINS_KIT_ENV),
}


#: the outcome of a test that needs a feature the implementation lacks (rtp_ref/suites/features.py)
ABSENT = "absent"


@dataclass(frozen=True)
class Outcome:
    """One test's outcome: ``passed``, ``failure``, ``error``, ``skipped`` or ``absent`` (then ``feature`` is the
    feature the implementation lacks), and pytest's message."""

    test: str
    outcome: str
    message: str
    feature: str = ""


def check_impl(option: str, spec: str) -> None:
    """RtpRefError naming ``option`` unless ``spec`` names a callable that imports (the kit itself is made in the
    suite's own process)."""
    try:
        found = resolve_object(spec)
    except RtpRefError as exc:  # the adapter's own import error is what the user needs to see
        raise RtpRefError(f"{option} {exc}; valid: an importable MODULE:CALLABLE returning a kit, e.g. "
                          "my_adapters:rtp_llm_args_kit") from None
    if not callable(found):
        raise RtpRefError(f"{option} {spec!r} names a {type(found).__name__}; valid: a callable returning a kit")


def junit_outcomes(path: Path) -> list[Outcome]:
    """Each test's outcome (``module::name[params]``) from a JUnit XML report; a skip whose reason names a listed
    feature as absent (``absent: FEATURE: why``) is ``absent``, any other skip stays ``skipped``."""
    outcomes = []
    for case in ElementTree.parse(path).getroot().iter("testcase"):
        test = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            element = case.find(tag)
            if element is not None:
                outcome, message = tag, element.get("message") or ""
        feature = absent_feature_of(message) if outcome == "skipped" else None
        if feature in FEATURES_BY_NAME:
            outcomes.append(Outcome(test, ABSENT, message, feature or ""))
        else:
            outcomes.append(Outcome(test, outcome, message))
    return outcomes


def _node_ids(suite: Suite, tests: Sequence[str]) -> list[str]:
    """pytest's node ids for ``tests`` of ``suite`` (every module when none); ValueError for a test whose module
    is not the suite's."""
    if not tests:
        return [str(SUITE_DIR / m) for m in suite.modules]
    paths = {Path(m).stem: SUITE_DIR / m for m in suite.modules}
    ids = []
    for test in tests:
        module, _, name = test.partition("::")
        if module not in paths or not name:
            raise ValueError(f"{test!r} is not a test of the {suite.name} suite ({', '.join(paths)})")
        ids.append(f"{paths[module]}::{name}")
    return ids


def run_suite(suite: Suite, impl: str | None, junit: Path, timeout: float = 900,
              tests: Sequence[str] = (), examples: int | None = None) -> list[Outcome]:
    """Run ``suite`` against ``impl`` (None: the reference) in a child pytest; its JUnit XML goes to ``junit``.
    ``tests`` (``module::name`` or ``module::name[params]``) runs only those, else every test; ``examples``: the
    hypothesis examples of each property test (None: the profile's). RtpRefError when the child wrote no report
    (it could not start, or the kit broke collection)."""
    with tempfile.TemporaryDirectory(prefix="rtp-ref-suite-") as work:
        # the child takes its kit from --impl only, and none of an outer pytest's (an xdist worker's) variables
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("PYTEST_") and k not in (ARGS_KIT_ENV, PLUGINS_KIT_ENV)}
        env["HYPOTHESIS_STORAGE_DIRECTORY"] = str(Path(work) / "hypothesis")
        # the child imports the rtp_ref whose suite files it collects (a checkout's or an installed one's, whichever
        # this process runs), never the other: pytest refuses a conftest imported from one and collected from another
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SUITE_DIR.parents[1]), env.get("PYTHONPATH")]))
        if impl:
            env[suite.impl_env] = impl
        (Path(work) / "pytest.ini").write_text("[pytest]\n")
        command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-c", str(Path(work) / "pytest.ini"),
                   "--rootdir", str(SUITE_DIR), f"--junitxml={junit}",
                   *([] if examples is None else ["--rtp-examples", str(examples)]), *_node_ids(suite, tests)]
        try:
            run = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, timeout=timeout,
                                 check=False)
        except subprocess.TimeoutExpired:
            raise RtpRefError(f"the {suite.name} suite did not finish within {timeout:g} s") from None
    if not junit.exists():
        raise RtpRefError(f"the {suite.name} suite wrote no report (pytest exit {run.returncode}): "
                          f"{(run.stdout + run.stderr).strip().splitlines()[-1:]}")
    return junit_outcomes(junit)
