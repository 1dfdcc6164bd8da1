"""The pytest plugin where it is active, exercised in real inner pytest runs (pytester runs them in-process,
or in a subprocess where xdist or hypothesis's global settings are involved). An inner project activates the
plugin as rtp-ref's own suites do (``ACTIVATING_CONFTEST``) or by giving an rtp-ref option;
test_plugin_is_inert.py shows it changes nothing in any other project."""

from __future__ import annotations

import pytest

from rtp_ref.pytest_plugin import default_hypothesis_profile, parse_layout_flag

pytest_plugins = ["pytester"]

#: what rtp-ref's own conftest files (tests/, conformance/) do
ACTIVATING_CONFTEST = """
import rtp_ref.pytest_plugin
def pytest_configure(config):
    rtp_ref.pytest_plugin.activate(config)
"""

INNER_TEST = """
def test_platform(rtp_platform, layout_flag_overrides):
    print("PLATFORM", rtp_platform.name, rtp_platform.element_format.name)
    print("FLAGS", sorted(layout_flag_overrides.items()))
"""


def test_platform_option_and_layout_flags(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(INNER_TEST)
    result = pytester.runpytest(
        "-s",
        "--platform",
        "rocm-gfx942",
        "--layout-flag",
        "lora_alignment=round_up",
        "--layout-flag",
        "fp8_max_divisor = 240",
    )
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    assert "PLATFORM rocm-gfx942 e4m3fnuz" in out
    assert "FLAGS [('fp8_max_divisor', '240'), ('lora_alignment', 'round_up')]" in out
    assert "rtp-ref: platform=rocm-gfx942, layout flags: lora_alignment=round_up, fp8_max_divisor=240" in out


def test_auto_platform_is_detected(pytester: pytest.Pytester) -> None:
    import torch

    pytester.makepyfile(INNER_TEST)
    result = pytester.runpytest("-s")
    result.assert_outcomes(passed=1)
    if not torch.cuda.is_available():
        result.stdout.fnmatch_lines(["*PLATFORM cpu e4m3fn*"])


def test_bad_platform_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(INNER_TEST)
    result = pytester.runpytest("--platform", "sm91")
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*--platform: unknown platform 'sm91'; known platforms: cpu*"])


def test_bad_layout_flag_syntax_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(INNER_TEST)
    result = pytester.runpytest("--layout-flag", "round_up")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--layout-flag 'round_up': expected KEY=VALUE*"])


def test_markers_are_registered_and_gpu_tests_skip_with_reason(pytester: pytest.Pytester) -> None:
    import torch

    pytester.makeconftest(ACTIVATING_CONFTEST)
    pytester.makepyfile("""
        import pytest
        @pytest.mark.gpu
        def test_needs_gpu(): pass
        @pytest.mark.rocm
        def test_needs_rocm(): pass
        @pytest.mark.slow
        def test_slow(): pass
    """)
    # a subprocess: in-process, pytest's marker cache still holds the markers this outer run registered
    result = pytester.runpytest_subprocess("--strict-markers", "-rs", "-p", "no:cacheprovider")
    if not torch.cuda.is_available():
        result.assert_outcomes(passed=1, skipped=2)
        result.stdout.fnmatch_lines(["*needs a gpu device; torch sees none here*"])
    elif torch.version.hip is None:  # an NVIDIA GPU: the gpu test runs, the rocm one is skipped
        result.assert_outcomes(passed=2, skipped=1)
        result.stdout.fnmatch_lines(["*needs a rocm device; torch sees none here*"])
    else:
        result.assert_outcomes(passed=3)


@pytest.mark.parametrize(
    ("env", "profile"),
    [({"CI": "true"}, "ci"), ({"CI": "1"}, "ci"), ({}, "dev"), ({"CI": "false"}, "dev"), ({"CI": ""}, "dev")],
)
def test_hypothesis_profile_follows_ci_env(env: dict[str, str], profile: str) -> None:
    assert default_hypothesis_profile(env) == profile


PRINT_PROFILE = """
from hypothesis import settings
def test_profile():
    print("PROFILE", settings.get_current_profile_name(), settings().derandomize, settings().max_examples)
"""


def test_hypothesis_profile_in_inner_run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """In rtp-ref's suites: ``ci`` on CI, and ``--hypothesis-profile`` finds ``thorough`` registered (the
    activating conftest runs before hypothesis's own ``pytest_configure``)."""
    pytester.makeconftest(ACTIVATING_CONFTEST)
    pytester.makepyfile(PRINT_PROFILE)
    monkeypatch.setenv("CI", "true")
    pytester.runpytest_subprocess("-s").stdout.fnmatch_lines(["*PROFILE ci True 60*"])
    thorough = pytester.runpytest_subprocess("-s", "--hypothesis-profile", "thorough")
    thorough.stdout.fnmatch_lines(["*PROFILE thorough False 2000*"])


@pytest.mark.parametrize("option", ["--platform=auto", "--rtp-platform=auto", "--rtp-require-input-checks"])
def test_an_rtp_ref_option_activates_the_plugin(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                                option: str) -> None:
    """Any rtp-ref option activates the plugin in any project, even at its default value."""
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("RTP_REF_PLATFORM", raising=False)
    pytester.makepyfile(PRINT_PROFILE)
    result = pytester.runpytest_subprocess("-s", "-p", "no:cacheprovider", option)
    result.stdout.fnmatch_lines(["rtp-ref: platform=auto, *", "*PROFILE dev False 60*"])


def test_parse_layout_flag() -> None:
    assert parse_layout_flag(" a = b=c ") == ("a", "b=c")
    with pytest.raises(ValueError, match="expected KEY=VALUE"):
        parse_layout_flag("=x")


def test_parse_layout_flag_is_the_rule_of_rtp_ref_kv_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plugin's ``--layout-flag`` syntax is ``parse_overrides``'s (what the CLI uses), not a copy of it."""
    import rtp_ref.kv.flags

    seen: list[list[str]] = []

    def recording(assignments: list[str]) -> dict[str, str]:
        seen.append(list(assignments))
        return {"key": "value"}

    monkeypatch.setattr(rtp_ref.kv.flags, "parse_overrides", recording)
    assert parse_layout_flag("as typed") == ("key", "value")
    assert seen == [["as typed"]]


def test_gpu_slots_follow_the_slot_not_the_worker_number() -> None:
    from rtp_ref.pytest_plugin import GpuSlots

    slots = GpuSlots(["2", "3"])
    assert [slots.take("gw0"), slots.take("gw1")] == ["2", "3"]
    with pytest.raises(pytest.UsageError, match=r"gw2 has no GPU of its own: 2 GPU\(s\) visible \(2,3\)"):
        slots.take("gw2")
    slots.release("gw0")  # gw0 crashed: its replacement gw2 takes GPU 2, gw1 keeps 3
    assert slots.take("gw2") == "2"
    slots.release("gw1")
    assert slots.take("gw3") == "3"


#: an inner project whose "host" has one GPU (id 7): torch's count is replaced by a fake device list, since
#: this machine may have none; everything else (xdist, worker replacement, the plugin's hooks) is real.
ONE_GPU_CONFTEST = """
import rtp_ref.pytest_plugin
rtp_ref.pytest_plugin.visible_gpus = lambda: ["7"]
"""
CRASH_THEN_RECORD = """
import os
from pathlib import Path
def _record(name):
    with open(Path(__file__).parent / "pins.txt", "a") as f:
        env = os.environ
        f.write(f"{name} {env['PYTEST_XDIST_WORKER']} {env['CUDA_VISIBLE_DEVICES']} {env['HIP_VISIBLE_DEVICES']};")
def test_a_crashes():
    _record("a")
    os._exit(1)
def test_b_runs_in_the_replacement():
    _record("b")
"""


def test_a_replacement_worker_gets_the_gpu_of_the_one_that_died(pytester: pytest.Pytester) -> None:
    """One GPU, -n 1: gw0 dies in its first test; the replacement gw1 must be pinned to the same GPU and run
    the rest (the old rule, GPU = worker number, refused gw1 and xdist respawned workers until killed)."""
    pytester.makeconftest(ONE_GPU_CONFTEST)
    pytester.makepyfile(CRASH_THEN_RECORD)
    result = pytester.runpytest_subprocess("-n", "1", "--platform", "cuda-sm90", "--max-worker-restart", "3",
                                           "-p", "no:cacheprovider", timeout=300)
    result.assert_outcomes(passed=1, failed=1)
    assert (pytester.path / "pins.txt").read_text() == "a gw0 7 7;b gw1 7 7;"


RECORD_PIN = """
import os
def test_pin():
    with open("pins.txt", "a") as f:
        f.write(f"{os.environ['PYTEST_XDIST_WORKER']} {os.environ.get('CUDA_VISIBLE_DEVICES')};")
"""


def test_rtp_refs_own_suites_give_each_worker_a_gpu_of_its_own(pytester: pytest.Pytester) -> None:
    """Activated by a conftest as rtp-ref's suites are, with no rtp-ref option: -n 1 pins the worker to the
    one GPU, -n 2 is refused before any worker starts."""
    pytester.makeconftest(ONE_GPU_CONFTEST + ACTIVATING_CONFTEST)
    pytester.makepyfile(RECORD_PIN)
    pytester.runpytest_subprocess("-n", "1", "-p", "no:cacheprovider").assert_outcomes(passed=1)
    assert (pytester.path / "pins.txt").read_text() == "gw0 7;"
    refused = pytester.runpytest_subprocess("-n", "2", "-p", "no:cacheprovider")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(["*-n 2: 1 GPU(s) visible (7) and each xdist worker needs one of its own*"])


def test_n_auto_is_one_worker_per_gpu_only_when_an_option_asks(pytester: pytest.Pytester,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import rtp_ref.pytest_plugin as plugin

    monkeypatch.setattr(plugin, "visible_gpus", lambda: ["7"])
    assert plugin.pytest_xdist_auto_num_workers(pytester.parseconfigure()) is None  # xdist's own choice
    assert plugin.pytest_xdist_auto_num_workers(pytester.parseconfigure("--platform", "cuda-sm90")) == 1
    # unpinned workers (tox -e cuda's unit tests) share the GPU: one per core, not one in all
    assert plugin.pytest_xdist_auto_num_workers(pytester.parseconfigure("--platform", "cpu")) is None


def test_more_workers_than_gpus_is_refused_by_one_rule() -> None:
    """The rule the plugin raises as a UsageError and certify as its own one-line error, before pytest starts."""
    from rtp_ref.pytest_plugin import gpu_count_problem

    assert gpu_count_problem(2, ["0", "1"]) is None
    assert gpu_count_problem(8, []) is None  # no GPU: CPU workers, no limit
    assert gpu_count_problem(3, ["0", "1"]) == ("-n 3: 2 GPU(s) visible (0,1) and each xdist worker needs one of its "
                                                "own; valid: -n 1 to 2")
