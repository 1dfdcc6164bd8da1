"""Platform tables: every bundled file validates; malformed files fail with file, key and valid values."""

from __future__ import annotations

import subprocess
import zipfile
from pathlib import Path

import pytest

from rtp_ref.errors import RtpRefError
from rtp_ref.platform import (
    all_platforms,
    detect_platform,
    load_platform,
    platform_for_device,
    platform_names,
)
from tests.wheel import build_wheel

REPO = Path(__file__).resolve().parents[2]
REPO_PLATFORMS = REPO / "platforms"

# Facts from docs/sources.md#fp8-formats, written here by hand.
EXPECTED_ELEMENT_FORMAT = {
    "cpu": "e4m3fn",
    "cuda-sm90": "e4m3fn",
    "cuda-sm100": "e4m3fn",
    "cuda-sm120": "e4m3fn",
    "rocm-gfx942": "e4m3fnuz",
    "rocm-gfx950": "e4m3fn",
}


def test_the_six_targets_are_bundled_and_valid() -> None:
    assert platform_names() == sorted(EXPECTED_ELEMENT_FORMAT)
    for p in all_platforms():
        assert p.element_format.name == EXPECTED_ELEMENT_FORMAT[p.name]
        assert p.conversion_mode.value == "satfinite"
        assert len(p.sha256) == 64
        # what each target's attention reader does with the cache (rtp-ref read-check): stated, and for the fp8
        # format the platform's own (the reader of a target decodes the format its writers store)
        assert p.reader is not None and p.reader.element_format == p.element_format
    readers = {p.name: p.reader.tile_scale for p in all_platforms() if p.reader is not None}
    assert readers == {"cpu": "fp32", "cuda-sm90": "bf16", "cuda-sm100": "e8m0_toward_zero", "cuda-sm120": "fp32",
                       "rocm-gfx942": "fp32", "rocm-gfx950": "fp32"}


def test_the_wheel_carries_exactly_the_repository_tables(tmp_path: Path) -> None:
    """A wheel built from this source must carry, byte for byte, the files engine developers read in
    platforms/ (in a source checkout the loader reads those files themselves, so only a real build shows
    what users get)."""
    wheel = build_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as z:
        bundled = {Path(n).name: z.read(n) for n in z.namelist()
                   if n.startswith("rtp_ref/platform_tables/") and n.endswith(".toml")}
    assert bundled == {f.name: f.read_bytes() for f in REPO_PLATFORMS.glob("*.toml")}
    assert sorted(Path(n).stem for n in bundled) == platform_names()


def _write_variant(tmp_path: Path, old: str, new: str, name: str = "cpu") -> Path:
    text = (REPO_PLATFORMS / "cpu.toml").read_text()
    assert old in text, old
    path = tmp_path / f"{name}.toml"
    path.write_text(text.replace(old, new, 1))
    return path


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            'backend = "cpu"',
            'backend = "cpu"\nbakend = "x"',
            r"unknown key 'bakend'; valid keys: schema_version",
        ),
        (
            'element_format = "e4m3fn"',
            'element_format = "e4m3"',
            r"\[fp8\]: key 'element_format' has 'e4m3'; valid values: e4m3fn, e4m3fnuz, e5m2, e5m2fnuz",
        ),
        ('element_format = "e4m3fn"', "element_format = 3", r"key 'element_format' has 3; expected a string"),
        ('conversion_mode = "satfinite"\n', "", r"\[fp8\]: missing required key 'conversion_mode'"),
        (
            "numerics_max_ulp = 1.0",
            "numerics_max_ulp = -1.0",
            r"key 'numerics_max_ulp' has -1.0; must be > 0",
        ),
        ('"fp8_rocm_compact", "nvfp4', '"fp8_compact", "nvfp4', r"unknown \['fp8_compact'\]; valid values: auto, fp8"),
        ("schema_version = 1", "schema_version = 2", r"key 'schema_version' has 2; valid values: 1"),
        ("[tolerances]", "[tolerance]", r"unknown key 'tolerance'"),
        (
            'required_grade = "bit_exact"',
            'required_grade = "exact"',
            r"valid values: layout, numerics, bit_exact",
        ),
        ("[layouts]", "[layouts", r"not a valid TOML file"),
        ('tile_scale = "fp32"', 'tile_scale = "e8m0"',
         r"\[reader\]: key 'tile_scale' has 'e8m0'; valid values: fp32, bf16, e8m0_toward_zero"),
        ('name = "rtp-ref reference gather"\n', "", r"\[reader\]: missing required key 'name'"),
    ],
)
def test_malformed_file_names_file_key_and_valid_values(
    tmp_path: Path, old: str, new: str, message: str
) -> None:
    path = _write_variant(tmp_path, old, new)
    with pytest.raises(RtpRefError, match=message) as info:
        load_platform(str(path))
    assert str(path) in str(info.value)


def test_deviation_entries_are_validated(tmp_path: Path) -> None:
    bad = '\n[[deviations]]\nkernel = "k"\nlayouts = ["fp8"]\ncheck = "numerics"\nreason = ""\nsource = "s"\n'
    path = tmp_path / "cpu.toml"
    text = (REPO_PLATFORMS / "cpu.toml").read_text()
    path.write_text(text + bad)
    number = text.count("[[deviations]]") + 1  # the appended entry, counted from 1
    with pytest.raises(RtpRefError, match=rf"\[\[deviations\]\] #{number}: key 'reason'"):
        load_platform(str(path))


def test_name_must_match_file_name(tmp_path: Path) -> None:
    path = _write_variant(tmp_path, 'name = "cpu"', 'name = "cuda-sm90"', name="cpu")
    with pytest.raises(RtpRefError, match="file is named 'cpu'"):
        load_platform(str(path))


def test_gpu_backend_needs_detection_keys(tmp_path: Path) -> None:
    path = _write_variant(tmp_path, 'backend = "cpu"', 'backend = "cuda"')
    with pytest.raises(RtpRefError, match="needs key 'cuda_capabilities'"):
        load_platform(str(path))


def test_unknown_platform_name_lists_known() -> None:
    with pytest.raises(
        RtpRefError, match="known platforms: cpu, cuda-sm100, cuda-sm120, cuda-sm90, rocm-gfx942, rocm-gfx950"
    ):
        load_platform("sm90")


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(RtpRefError, match="cannot be read"):
        load_platform(str(tmp_path / "missing.toml"))


@pytest.mark.parametrize(
    ("backend", "arch", "name"),
    [
        ("cuda", "9.0", "cuda-sm90"),
        ("cuda", "10.0", "cuda-sm100"),
        ("cuda", "10.3", "cuda-sm100"),
        ("cuda", "12.0", "cuda-sm120"),
        ("cuda", "12.1", "cuda-sm120"),
        ("rocm", "gfx942:sramecc+:xnack-", "rocm-gfx942"),
        ("rocm", "gfx950", "rocm-gfx950"),
        ("cpu", "", "cpu"),
    ],
)
def test_device_to_platform(backend: str, arch: str, name: str) -> None:
    assert platform_for_device(backend, arch).name == name


@pytest.mark.parametrize(
    ("backend", "arch"), [("cuda", "8.0"), ("cuda", "11.0"), ("rocm", "gfx90a"), ("rocm", "gfx1100")]
)
def test_unknown_gpu_is_an_error_listing_known_platforms(backend: str, arch: str) -> None:
    with pytest.raises(
        RtpRefError, match=r"no platform table matches .* known platforms: cpu \(cpu\), cuda-sm100"
    ):
        platform_for_device(backend, arch)


def test_two_tables_claiming_one_device_is_an_error() -> None:
    tables = all_platforms()
    sm90 = next(p for p in tables if p.name == "cuda-sm90")
    with pytest.raises(RtpRefError, match="several platform tables match"):
        platform_for_device("cuda", "9.0", [*tables, sm90])


def test_detect_on_this_machine_matches_torch() -> None:
    import torch

    detected = detect_platform()
    if not torch.cuda.is_available():
        assert detected.name == "cpu"
    else:
        assert detected.backend == ("rocm" if torch.version.hip else "cuda")


# Written split so that this file does not match itself.
_PRIVATE_FOLDER_MARKERS = ("shared" + "/reference", "../" + "shared")


def test_no_tracked_file_cites_the_private_reference_folder() -> None:
    """The repository stands alone: users have no folder of gathered facts beside the checkout, so every
    citation must be a public source or docs/sources.md."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=False
    )
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    offenders = []
    for name in listed.stdout.decode().split("\0"):
        path = REPO / name
        if not name or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary files (images) cannot carry a citation
        offenders += [f"{name}:{n}: {line.strip()}" for n, line in enumerate(text.splitlines(), 1)
                      if any(m in line for m in _PRIVATE_FOLDER_MARKERS)]
    assert not offenders, "cite a public source or docs/sources.md#anchor instead:\n" + "\n".join(offenders)
