"""pytest plugin (entry point ``pytest11: rtp_ref``): options, markers, hypothesis profiles, GPU pinning, fixtures.

PYTEST_DONT_REWRITE: certify imports this module before it starts pytest (its GPU rules), so pytest could not
rewrite it anyway and warned so in every report; it has no assertion of its own to rewrite.

The entry point loads this plugin into every pytest run of an environment that has rtp-ref installed, a
vendor's or an engine's own unrelated test suites included, so it is inert until asked. Inert, it only
adds its options (``--rtp-*``, and the short spellings nobody else took) and its fixtures (``rtp_platform``,
``layout_flag_overrides``); it loads no hypothesis profile, registers no marker, skips no test, prints no
header line, pins no xdist worker, leaves ``-n auto`` to xdist, and imports neither torch nor hypothesis.

It is **active** in a run when either

- ``activate(config)`` is called: rtp-ref's own suites do it from their conftest's ``pytest_configure``
  (``conformance/``, which ``rtp-ref certify`` runs, and ``tests/``); or
- an rtp-ref option is among the run's arguments (the command line, ``PYTEST_ADDOPTS`` or the ini file's
  ``addopts``), even at its default value (``--platform auto``). xdist workers are handed the controller's
  arguments, so they follow it.

Active, it registers the markers of ``MARKERS`` and skips marked tests whose device or package is missing;
registers the hypothesis profiles ``ci`` (derandomized, used when the ``CI`` environment variable is set),
``dev`` (default) and ``thorough`` and loads ``ci`` or ``dev`` unless hypothesis's own ``--hypothesis-profile
NAME`` picks one; gives each xdist worker a GPU of its own (more workers than GPUs is a UsageError); adds the
``rtp-ref:`` report header line; and with ``--rtp-report`` collects the conformance report. ``-n auto`` means
one worker per GPU only when an rtp-ref option asked for the plugin: xdist decides the worker count before
any conftest's ``pytest_configure`` runs.

Options. Every option has an ``--rtp-`` name: ``--rtp-platform NAME|auto|PATH.toml`` (default ``auto``, or
``$RTP_REF_PLATFORM``), ``--rtp-kernel``, ``--rtp-layout``, ``--rtp-layout-flag KEY=VALUE`` (repeatable),
``--rtp-report``, ``--rtp-crash-limit``, ``--rtp-require-input-checks``, ``--rtp-require-hardening``. The
generic short spellings ``--platform``, ``--kernel``, ``--layout`` and ``--layout-flag`` (what ``rtp-ref certify``,
tox and the docs use) are aliases added once the initial conftest files have added their own options, and only those no
other plugin or conftest defined: a project's own ``--platform`` keeps working, and rtp-ref's is
``--rtp-platform`` there.

Importing this module must stay cheap: torch and hypothesis are imported only by what needs them.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from rtp_ref.certify.tiers import TIER_CHOICES, TIERS

if TYPE_CHECKING:
    from rtp_ref.platform import Platform

MARKERS = {
    "gpu": "needs a CUDA or ROCm device (skipped without one)",
    "cuda": "needs an NVIDIA GPU with the CUDA torch build (skipped otherwise)",
    "rocm": "needs an AMD GPU with the ROCm torch build (skipped otherwise)",
    "triton": "needs the triton package (skipped without it)",
    "slow": "takes more than a few seconds; deselect with -m 'not slow'",
    "bench": "a benchmark: run by `tox -e bench` / `rtp-ref bench`, not by the unit tests",
    "large": "the large-address tier: caches past 4 GiB (`rtp-ref certify --tier large`, `--rtp-tier large`)",
}

#: short spelling -> the ``--rtp-`` option it is an alias of (added only where no one else defined it)
SHORT_SPELLINGS = {
    "--platform": "--rtp-platform",
    "--kernel": "--rtp-kernel",
    "--layout": "--rtp-layout",
    "--layout-flag": "--rtp-layout-flag",
    "--tier": "--rtp-tier",
}

#: set by ``activate``: the plugin is active in this run
_ACTIVE = pytest.StashKey[bool]()
#: set once the initial conftest files are loaded: the run's arguments name an rtp-ref option
_REQUESTED = pytest.StashKey[bool]()


def _option_specs() -> dict[str, dict[str, Any]]:
    """Every rtp-ref option by its ``--rtp-`` name, as argparse attributes (its short spelling shares them)."""
    return {
        "--rtp-platform": {
            "dest": "rtp_platform",
            "default": os.environ.get("RTP_REF_PLATFORM", "auto"),
            "metavar": "NAME",
            "help": "platform table to test against: a name from `rtp-ref platforms`, a .toml path, or "
            "'auto' to detect the running device (default: $RTP_REF_PLATFORM or auto)",
        },
        "--rtp-kernel": {
            "dest": "rtp_kernel",
            "action": "append",
            "default": [],
            "metavar": "NAME",
            "help": "certify only this kernel (repeatable; default: every discovered kernel)",
        },
        "--rtp-layout": {
            "dest": "rtp_layout",
            "action": "append",
            "default": [],
            "metavar": "LAYOUT",
            "help": "certify only this MLA layout (repeatable; default: every layout a kernel claims)",
        },
        "--rtp-layout-flag": {
            "dest": "rtp_layout_flag",
            "action": "append",
            "default": [],
            "metavar": "KEY=VALUE",
            "help": "override a layout flag of the platform table (repeatable)",
        },
        "--rtp-tier": {
            "dest": "rtp_tier",
            "choices": TIER_CHOICES,
            "default": TIERS[0],
            "help": "which cases to run: regular (every case of every claimed layout), large (one case per op "
            "and layout whose cache passes 4 GiB: 32-bit offsets; it needs about 6.5 GiB free), graph (each op and "
            "layout captured in a CUDA graph and replayed with new inputs; CUDA only), stream (each write op and "
            "layout called on a non-default stream after a producer that writes its inputs late; CUDA only) or all",
        },
        "--rtp-report": {
            "dest": "rtp_report",
            "default": None,
            "metavar": "DIR",
            "help": "write report.json and report.md of the conformance run into DIR",
        },
        # default None, resolved when the report collector starts: the constant's module imports torch
        "--rtp-crash-limit": {
            "dest": "rtp_crash_limit",
            "type": int,
            "default": None,
            "metavar": "N",
            "help": "with --rtp-report under xdist: after N worker deaths (crashes or hangs) on one kernel/layout "
            "pair, its remaining cases fail at once as not run (default 2)",
        },
        "--rtp-require-input-checks": {
            "dest": "rtp_require_input_checks",
            "action": "store_true",
            "help": "a kernel must refuse an out-of-range slot (input checks 'validated' or 'flagged') to be "
            "certified, whatever the platform table says",
        },
        "--rtp-require-hardening": {
            "dest": "rtp_require_hardening",
            "action": "store_true",
            "help": "a kernel's empty call (no tokens) must be clean (hardening 'clean') for it to be certified, "
            "whatever the platform table says",
        },
    }


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("rtp-ref", "rtp-ref conformance")
    for name, attrs in _option_specs().items():
        group.addoption(name, **attrs)


def _option_names(parser: pytest.Parser) -> set[str]:
    """Every option string some plugin or conftest has added to ``parser``.

    pytest has no public query for this; every pytest from 7.4 on keeps the options in these groups
    (``_anonymous`` holds those added by ``parser.addoption``; pytest 9 also lists it in ``_groups``).
    """
    groups = [parser._anonymous, *parser._groups]
    return {name for group in groups for option in group.options for name in option.names()}


@pytest.hookimpl(wrapper=True)
def pytest_load_initial_conftests(
    early_config: pytest.Config, parser: pytest.Parser, args: list[str]
) -> Generator[None, None, None]:
    """Once the initial conftest files have added their options: add the short spellings no one took, and
    note whether the run's arguments (``addopts`` and ``PYTEST_ADDOPTS`` already in ``args``) name one of
    rtp-ref's options. Registered in ``pytest_addoption`` (plugins add their options before any conftest), a
    short spelling would make a project's own ``--platform`` fail: pytest refuses a name or dest added twice."""
    yield
    taken = _option_names(parser)
    specs = _option_specs()
    group = parser.getgroup("rtp-ref")
    ours = list(specs)
    for short, name in SHORT_SPELLINGS.items():
        if short not in taken:
            group.addoption(short, **{**specs[name], "help": f"same as {name}"})
            ours.append(short)
    # pytest's parser allows no abbreviations: an option is given exactly as NAME VALUE or NAME=VALUE
    early_config.stash[_REQUESTED] = any(arg == name or arg.startswith(f"{name}=") for arg in args for name in ours)


@pytest.hookimpl(tryfirst=True)  # before hypothesis's pytest_configure loads --hypothesis-profile: ours must exist
def pytest_configure(config: pytest.Config) -> None:
    if config.stash.get(_REQUESTED, False):
        activate(config)


def activate(config: pytest.Config) -> None:
    """Make the plugin active for this run (see the module doc); calling it again does nothing.

    rtp-ref's own conftest files call it from ``pytest_configure``, which pytest runs before hypothesis's own
    (so ``--hypothesis-profile thorough`` finds the profile registered). Raises ``pytest.UsageError`` on a bad
    ``--layout-flag``, a ``--platform`` that does not load, or more xdist workers than GPUs.
    """
    if _active(config):
        return
    config.stash[_ACTIVE] = True
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    try:
        config.rtp_ref_layout_flags = dict(  # type: ignore[attr-defined]
            parse_layout_flag(t) for t in config.getoption("rtp_layout_flag")
        )
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    _check_named_platform(config)
    _load_hypothesis_profile(config)
    _pin_gpus(config)
    report_dir = config.getoption("rtp_report")
    if report_dir and not os.environ.get("PYTEST_XDIST_WORKER"):
        from pathlib import Path

        from rtp_ref.certify.collector import ReportCollector
        from rtp_ref.certify.quarantine import DEFAULT_CRASH_LIMIT

        limit = config.getoption("rtp_crash_limit")
        collector = ReportCollector(config, Path(report_dir), DEFAULT_CRASH_LIMIT if limit is None else limit)
        config.pluginmanager.register(collector, "rtp_ref_report_collector")


def _active(config: pytest.Config) -> bool:
    return config.stash.get(_ACTIVE, False)


def default_hypothesis_profile(environ: dict[str, str] | os._Environ[str] = os.environ) -> str:
    """``ci`` when a CI environment variable is set to a true value, else ``dev``."""
    return "ci" if environ.get("CI", "").lower() not in ("", "0", "false", "no") else "dev"


def hypothesis_home(environ: dict[str, str] | os._Environ[str] = os.environ) -> Path:
    """Where hypothesis keeps its example database and caches during rtp-ref's suites: ``$RTP_REF_CACHE_DIR``,
    else ``$XDG_CACHE_HOME`` or ``~/.cache``, under ``rtp-ref/hypothesis`` — never the directory under test
    (hypothesis's own default is ``./.hypothesis``)."""
    root = environ.get("RTP_REF_CACHE_DIR") or str(Path(environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
                                                    / "rtp-ref")
    return Path(root) / "hypothesis"


def _load_hypothesis_profile(config: pytest.Config) -> None:
    """Register ``ci``, ``dev`` and ``thorough``; load ``ci`` or ``dev`` unless ``--hypothesis-profile`` is given;
    keep hypothesis's files in ``hypothesis_home`` unless ``HYPOTHESIS_STORAGE_DIRECTORY`` says where.

    Only when active: registering ``ci`` replaces hypothesis's built-in profile of that name, which
    hypothesis itself loads on CI.
    """
    from hypothesis import HealthCheck, settings
    from hypothesis.configuration import set_hypothesis_home_dir

    if not os.environ.get("HYPOTHESIS_STORAGE_DIRECTORY"):
        set_hypothesis_home_dir(hypothesis_home())

    slow_checks = [HealthCheck.too_slow, HealthCheck.data_too_large]
    settings.register_profile(
        "ci", derandomize=True, max_examples=60, deadline=None, print_blob=True, suppress_health_check=slow_checks
    )
    # dev and thorough explore: derandomize=False explicitly, since hypothesis itself derandomizes its
    # defaults when it detects CI.
    settings.register_profile("dev", max_examples=60, deadline=None, derandomize=False,
                              suppress_health_check=slow_checks)
    settings.register_profile("thorough", max_examples=2000, deadline=None, derandomize=False, print_blob=True,
                              suppress_health_check=slow_checks)
    if config.getoption("hypothesis_profile", None) is None:
        settings.load_profile(default_hypothesis_profile())


def parse_layout_flag(text: str) -> tuple[str, str]:
    """Split one ``KEY=VALUE`` option by ``rtp_ref.kv.flags.parse_overrides``, the CLI's rule (key and value
    stripped); the KV room types and validates the value later. Bad syntax raises RtpRefError, a ValueError.

    (Imported here, not at the top: ``rtp_ref.kv.flags`` is torch-free, but a run without ``--layout-flag``
    need not import it at all.)
    """
    from rtp_ref.kv.flags import parse_overrides

    ((key, value),) = parse_overrides([text]).items()
    return key, value


#: ``workerinput`` key carrying the GPU an xdist worker is pinned to (set by ``GpuSlots`` on the controller)
GPU_WORKERINPUT_KEY = "rtp_ref_gpu"


class GpuSlots:
    """The controller's side of one-GPU-per-worker: each live xdist worker holds one slot (a GPU).

    A worker that dies frees its slot and xdist's replacement takes a free one, so pinning follows
    the slot, never the ever-growing worker number (gw0 replaced by gw1 on a one-GPU host must get
    GPU 0 again). The GPU reaches the worker in ``workerinput``, before its interpreter starts.
    """

    def __init__(self, gpus: list[str]) -> None:
        self.gpus = gpus
        self.held: dict[str, int] = {}

    def take(self, worker_id: str) -> str:
        """Give ``worker_id`` the first free GPU; more live workers than GPUs is a UsageError."""
        free = [i for i in range(len(self.gpus)) if i not in self.held.values()]
        if not free:
            raise pytest.UsageError(
                f"xdist worker {worker_id} has no GPU of its own: {len(self.gpus)} GPU(s) visible "
                f"({','.join(self.gpus)}) are held by {', '.join(sorted(self.held))}; "
                f"run with -n {len(self.gpus)} or fewer"
            )
        self.held[worker_id] = free[0]
        return self.gpus[free[0]]

    def release(self, worker_id: str) -> None:
        """``worker_id`` is down: its GPU is free for the next worker."""
        self.held.pop(worker_id, None)

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput[GPU_WORKERINPUT_KEY] = self.take(node.gateway.id)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object) -> None:
        self.release(node.gateway.id)


def gpu_count_problem(workers: int, visible: list[str]) -> str | None:
    """Why ``workers`` xdist workers cannot each have a GPU of their own among ``visible`` (None: they can, or
    there is no GPU and the workers run on the CPU). Two workers sharing one GPU would make a device fault in
    one case take the other's cases with it. The one rule for the plugin and for ``rtp-ref certify``."""
    if not visible or workers <= len(visible):
        return None
    return (f"-n {workers}: {len(visible)} GPU(s) visible ({','.join(visible)}) and each xdist worker needs one of "
            f"its own; valid: -n 1 to {len(visible)}")


def visible_gpus() -> list[str]:
    """The GPU ids this process may use (CUDA/HIP_VISIBLE_DEVICES order), [] without a GPU."""
    import torch

    count = torch.cuda.device_count()
    listed = os.environ.get("HIP_VISIBLE_DEVICES" if torch.version.hip else "CUDA_VISIBLE_DEVICES")
    if listed:
        return [d.strip() for d in listed.split(",") if d.strip()][:count]
    return [str(i) for i in range(count)]


def _pin_gpus(config: pytest.Config) -> None:
    """One GPU per xdist worker: the controller hands out GPU slots, each worker keeps its own.

    The controller checks ``-n`` against the GPU count before any worker starts; workers set
    CUDA_VISIBLE_DEVICES and HIP_VISIBLE_DEVICES before torch initialises the device.
    """
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        gpu = workerinput.get(GPU_WORKERINPUT_KEY)
        if gpu is not None:
            os.environ["CUDA_VISIBLE_DEVICES"] = gpu
            os.environ["HIP_VISIBLE_DEVICES"] = gpu
        return
    workers = getattr(config.option, "numprocesses", None)
    if not isinstance(workers, int) or workers <= 0 or not _pins_workers(config):
        return
    gpus = visible_gpus()
    if gpus:
        problem = gpu_count_problem(workers, gpus)
        if problem:
            raise pytest.UsageError(problem)
        config.pluginmanager.register(GpuSlots(gpus), "rtp_ref_gpu_slots")


def _pins_workers(config: pytest.Config) -> bool:
    """Whether this run's xdist workers each get a GPU of their own: on every platform but ``cpu``, whose workers
    share the GPUs (``tox -e cuda``'s unit tests run so, their kernel tests on the GPU)."""
    return bool(config.getoption("rtp_platform") != "cpu")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto`` on a GPU host means one worker per GPU when an rtp-ref option asked for the plugin and the
    workers are pinned (``_pins_workers``); else xdist's own choice, one per core (xdist asks before any
    conftest's ``pytest_configure`` could call ``activate``)."""
    if not config.stash.get(_REQUESTED, False) or not _pins_workers(config):
        return None
    return len(visible_gpus()) or None


def _check_named_platform(config: pytest.Config) -> None:
    """Fail at start-up, before collection, on a platform name or file that does not load.

    ``auto`` is resolved later, by the fixture, so that runs which never use it never import torch.
    """
    name = config.getoption("rtp_platform")
    if name == "auto":
        return
    from rtp_ref.errors import RtpRefError
    from rtp_ref.platform import load_platform

    try:
        load_platform(name)
    except RtpRefError as exc:
        raise pytest.UsageError(f"--platform: {exc}") from None


def pytest_report_header(config: pytest.Config) -> str | None:
    if not _active(config):
        return None
    from hypothesis import settings

    flags = config.rtp_ref_layout_flags  # type: ignore[attr-defined]
    shown = ", ".join(f"{k}={v}" for k, v in flags.items()) or "platform defaults"
    return (
        f"rtp-ref: platform={config.getoption('rtp_platform')}, layout flags: {shown}, "
        f"hypothesis profile={settings.get_current_profile_name()}"
    )


def _device_available(marker: str) -> bool:
    import torch

    if not torch.cuda.is_available():
        return False
    if marker == "cuda":
        return torch.version.hip is None
    if marker == "rocm":
        return torch.version.hip is not None
    return True


def _triton_available() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not _active(config):  # a project's own `gpu` or `slow` marker means what the project says
        return
    cache: dict[str, bool] = {}
    for item in items:
        for marker in ("gpu", "cuda", "rocm"):
            if item.get_closest_marker(marker) is None:
                continue
            if marker not in cache:
                cache[marker] = _device_available(marker)
            if not cache[marker]:
                item.add_marker(pytest.mark.skip(reason=f"needs a {marker} device; torch sees none here"))
        if item.get_closest_marker("triton") is not None:
            if "triton" not in cache:
                cache["triton"] = _triton_available()
            if not cache["triton"]:
                item.add_marker(
                    pytest.mark.skip(reason="needs the triton package (pip install rtp-ref[triton])")
                )


@pytest.fixture(scope="session")
def rtp_platform(pytestconfig: pytest.Config) -> Platform:
    """The platform table selected by ``--platform`` (``auto`` detects the running device)."""
    from rtp_ref.errors import RtpRefError
    from rtp_ref.platform import resolve_platform

    try:
        return resolve_platform(pytestconfig.getoption("rtp_platform"))
    except RtpRefError as exc:  # `auto` on an unknown GPU: stop the run, never fall back silently
        pytest.exit(f"--platform: {exc}", returncode=pytest.ExitCode.USAGE_ERROR)


@pytest.fixture(scope="session")
def layout_flag_overrides(pytestconfig: pytest.Config) -> dict[str, str]:
    """``--layout-flag`` overrides as raw strings, in the order given (later wins)."""
    # an inactive run was given no --layout-flag (one would have activated the plugin): no overrides
    return dict(getattr(pytestconfig, "rtp_ref_layout_flags", {}))
