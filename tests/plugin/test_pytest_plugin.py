"""The pytest plugin, exercised in real inner pytest runs (pytester runs them in-process)."""

from __future__ import annotations

import pytest

from rtp_ref.pytest_plugin import default_hypothesis_profile, parse_layout_flag

pytest_plugins = ["pytester"]

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

    pytester.makepyfile("""
        import pytest
        @pytest.mark.gpu
        def test_needs_gpu(): pass
        @pytest.mark.rocm
        def test_needs_rocm(): pass
        @pytest.mark.slow
        def test_slow(): pass
    """)
    result = pytester.runpytest("--strict-markers", "-rs")
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


def test_hypothesis_profile_in_inner_run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile("""
        from hypothesis import settings
        def test_profile():
            print("PROFILE", settings.get_current_profile_name(), settings().derandomize)
    """)
    monkeypatch.setenv("CI", "true")
    pytester.runpytest("-s").stdout.fnmatch_lines(["*PROFILE ci True*"])
    pytester.runpytest("-s", "--hypothesis-profile", "thorough").stdout.fnmatch_lines(["*PROFILE thorough False*"])


def test_parse_layout_flag() -> None:
    assert parse_layout_flag(" a = b=c ") == ("a", "b=c")
    with pytest.raises(ValueError, match="expected KEY=VALUE"):
        parse_layout_flag("=x")


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


def test_certify_refuses_more_workers_than_gpus_before_pytest_starts() -> None:
    from rtp_ref.commands.certify import check_worker_count
    from rtp_ref.errors import RtpRefError

    check_worker_count(2, ["0", "1"])
    check_worker_count(8, [])  # no GPU: CPU workers, no limit
    with pytest.raises(RtpRefError, match=r"-n 3: 2 GPU\(s\) visible \(0,1\).*valid: -n 1 to 2"):
        check_worker_count(3, ["0", "1"])
