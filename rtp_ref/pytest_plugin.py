"""pytest plugin (entry point ``pytest11: rtp_ref``): options, markers, hypothesis profiles, fixtures.

Options: ``--platform NAME|auto|PATH.toml`` (default ``auto``, or ``$RTP_REF_PLATFORM``) and
``--layout-flag KEY=VALUE`` (repeatable). Hypothesis profiles ``ci`` (derandomized, used when the
``CI`` environment variable is set), ``dev`` (default) and ``thorough``; hypothesis's own
``--hypothesis-profile NAME`` picks one explicitly.

Importing this module must stay cheap (it loads in every pytest run of an environment that has
rtp-ref installed): torch is imported only by the fixtures that need it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, settings

from rtp_ref.certify.quarantine import DEFAULT_CRASH_LIMIT

if TYPE_CHECKING:
    from rtp_ref.platform import Platform

MARKERS = {
    "gpu": "needs a CUDA or ROCm device (skipped without one)",
    "cuda": "needs an NVIDIA GPU with the CUDA torch build (skipped otherwise)",
    "rocm": "needs an AMD GPU with the ROCm torch build (skipped otherwise)",
    "triton": "needs the triton package (skipped without it)",
    "slow": "takes more than a few seconds; deselect with -m 'not slow'",
    "bench": "a benchmark: run by `tox -e bench` / `rtp-ref bench`, not by the unit tests",
}

_SLOW_CHECKS = [HealthCheck.too_slow, HealthCheck.data_too_large]
settings.register_profile(
    "ci",
    derandomize=True,
    max_examples=60,
    deadline=None,
    print_blob=True,
    suppress_health_check=_SLOW_CHECKS,
)
# dev and thorough explore: derandomize=False explicitly, since hypothesis itself derandomizes its
# defaults when it detects CI.
settings.register_profile("dev", max_examples=60, deadline=None, derandomize=False,
                          suppress_health_check=_SLOW_CHECKS)
settings.register_profile("thorough", max_examples=2000, deadline=None, derandomize=False, print_blob=True,
                          suppress_health_check=_SLOW_CHECKS)


def default_hypothesis_profile(environ: dict[str, str] | os._Environ[str] = os.environ) -> str:
    """``ci`` when a CI environment variable is set to a true value, else ``dev``."""
    return "ci" if environ.get("CI", "").lower() not in ("", "0", "false", "no") else "dev"


def parse_layout_flag(text: str) -> tuple[str, str]:
    """Split one ``KEY=VALUE`` option; the KV room types and validates the value later."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"--layout-flag {text!r}: expected KEY=VALUE, e.g. lora_alignment=round_up")
    return key.strip(), value.strip()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("rtp-ref", "rtp-ref conformance")
    group.addoption(
        "--platform",
        default=os.environ.get("RTP_REF_PLATFORM", "auto"),
        help="platform table to test against: a name from `rtp-ref platforms`, a .toml path, or "
        "'auto' to detect the running device (default: $RTP_REF_PLATFORM or auto)",
    )
    group.addoption(
        "--kernel",
        dest="rtp_kernel",
        action="append",
        default=[],
        metavar="NAME",
        help="certify only this kernel (repeatable; default: every discovered kernel)",
    )
    group.addoption(
        "--layout",
        dest="rtp_layout",
        action="append",
        default=[],
        metavar="LAYOUT",
        help="certify only this MLA layout (repeatable; default: every layout a kernel claims)",
    )
    group.addoption(
        "--rtp-report",
        default=None,
        metavar="DIR",
        help="write report.json and report.md of the conformance run into DIR",
    )
    group.addoption(
        "--rtp-crash-limit",
        type=int,
        default=DEFAULT_CRASH_LIMIT,
        metavar="N",
        help="with --rtp-report under xdist: after N worker deaths (crashes or hangs) on one kernel/layout pair, "
        "its remaining cases fail at once as not run (default 2)",
    )
    group.addoption(
        "--rtp-require-input-checks",
        action="store_true",
        help="a kernel must refuse an out-of-range slot (input checks 'validated') to be certified, whatever "
        "the platform table says",
    )
    group.addoption(
        "--layout-flag",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a layout flag of the platform table (repeatable)",
    )


def pytest_configure(config: pytest.Config) -> None:
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    try:
        config.rtp_ref_layout_flags = dict(  # type: ignore[attr-defined]
            parse_layout_flag(t) for t in config.getoption("layout_flag")
        )
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    _check_named_platform(config)
    if config.getoption("hypothesis_profile", None) is None:
        settings.load_profile(default_hypothesis_profile())
    _pin_gpus(config)
    report_dir = config.getoption("rtp_report")
    if report_dir and not os.environ.get("PYTEST_XDIST_WORKER"):
        from pathlib import Path

        from rtp_ref.certify.collector import ReportCollector

        collector = ReportCollector(config, Path(report_dir), config.getoption("rtp_crash_limit"))
        config.pluginmanager.register(collector, "rtp_ref_report_collector")


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


def check_gpu_count(workers: int, visible: list[str]) -> None:
    """More xdist workers than GPUs is a UsageError that says so (two workers sharing one GPU would
    make a device fault in one case take the other's cases with it)."""
    if workers > len(visible):
        raise pytest.UsageError(
            f"-n {workers}: {len(visible)} GPU(s) visible ({','.join(visible)}) and each xdist worker needs one "
            f"of its own; run with -n {len(visible)} or fewer"
        )


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
    if not isinstance(workers, int) or workers <= 0 or config.getoption("platform") == "cpu":
        return
    gpus = visible_gpus()
    if gpus:
        check_gpu_count(workers, gpus)
        config.pluginmanager.register(GpuSlots(gpus), "rtp_ref_gpu_slots")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto`` on a GPU host means one worker per GPU; on CPU, xdist's own choice."""
    gpus = visible_gpus()
    return len(gpus) or None


def _check_named_platform(config: pytest.Config) -> None:
    """Fail at start-up, before collection, on a platform name or file that does not load.

    ``auto`` is resolved later, by the fixture, so that runs which never use it never import torch.
    """
    name = config.getoption("platform")
    if name == "auto":
        return
    from rtp_ref.errors import RtpRefError
    from rtp_ref.platform import load_platform

    try:
        load_platform(name)
    except RtpRefError as exc:
        raise pytest.UsageError(f"--platform: {exc}") from None


def pytest_report_header(config: pytest.Config) -> str:
    flags = config.rtp_ref_layout_flags  # type: ignore[attr-defined]
    shown = ", ".join(f"{k}={v}" for k, v in flags.items()) or "platform defaults"
    return (
        f"rtp-ref: platform={config.getoption('platform')}, layout flags: {shown}, "
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
        return resolve_platform(pytestconfig.getoption("platform"))
    except RtpRefError as exc:  # `auto` on an unknown GPU: stop the run, never fall back silently
        pytest.exit(f"--platform: {exc}", returncode=pytest.ExitCode.USAGE_ERROR)


@pytest.fixture(scope="session")
def layout_flag_overrides(pytestconfig: pytest.Config) -> dict[str, str]:
    """``--layout-flag`` overrides as raw strings, in the order given (later wins)."""
    return dict(pytestconfig.rtp_ref_layout_flags)  # type: ignore[attr-defined]
