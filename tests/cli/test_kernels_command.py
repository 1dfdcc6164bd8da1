"""``rtp-ref kernels``: what certify would find, listed in a real process with a real installed vendor package (the
scratch ``acme-kv`` distribution, one kernel of each op through an entry point) and a ``$RTP_REF_KERNELS`` item."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.certify.scratch_vendor import KERNELS, ORIGIN, install_scratch_vendor
from tests.processes import child_env

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def vendor_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``acme-kv`` distribution installed; its site directory."""
    return install_scratch_vendor(tmp_path_factory.mktemp("acme-kv"))


def _kernels(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rtp_ref.cli", "kernels", *args], env=env, capture_output=True,
                          text=True, timeout=300, check=False)


def test_every_kernel_is_listed_with_its_op_claims_devices_and_origin(vendor_site: Path) -> None:
    env = child_env(vendor_site, REPO, RTP_REF_KERNELS="tests.cli.unbindable_kernels:kernels")
    done = _kernels(env, "--json")
    assert done.returncode == 0, done.stderr
    listed = json.loads(done.stdout)
    rows = {row["name"]: row for row in listed["kernels"]}
    # the vendor's kernels, one per op, with the entry point, distribution and version they came from
    assert {name: (rows[name]["op"], rows[name]["origin"]) for name in KERNELS.values()} == \
        {name: (op, ORIGIN) for op, name in KERNELS.items()}
    assert rows["acme-mha"]["claims"] == ["auto"] and rows["acme-mha"]["devices"] == ["cpu"]
    assert rows["acme-mha"]["runs_here_on"] == "cpu"
    # a $RTP_REF_KERNELS item's kernels, named by the item; an MLA kernel without ``op``
    assert rows["unbindable-cpu-writer"]["origin"] == "RTP_REF_KERNELS item 'tests.cli.unbindable_kernels:kernels'"
    assert rows["unbindable-cpu-writer"]["op"] == "concat_and_cache_mla"
    assert rows["unbindable-cpu-writer"]["claims"] == ["auto", "fp8"]
    # the built-ins of every op are there too, and those that cannot run here say why
    assert rows["reference-indexer-gather"]["op"] == "cp_gather_indexer_k_quant_cache"
    assert all(isinstance(why, str) and why for why in listed["unavailable"].values())
    assert listed["problems"] == []


def test_one_op_and_the_text_form(vendor_site: Path) -> None:
    done = _kernels(child_env(vendor_site), "--op", "reshape_and_cache_flash")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert f"{ORIGIN}" in lines
    mha = next(line for line in lines if line.split()[:1] == ["acme-mha"])
    assert mha.split()[1] == "reshape_and_cache_flash" and mha.endswith("claims auto")
    assert not any(line.split()[:1] == ["acme-mla"] for line in lines)  # another op's kernel is left out


def test_a_source_that_fails_to_load_is_named_and_the_rest_still_listed(vendor_site: Path) -> None:
    done = _kernels(child_env(vendor_site, RTP_REF_KERNELS="no_such_vendor_module:kernels"), "--json")
    assert done.returncode == 1, done.stderr
    listed = json.loads(done.stdout)
    assert listed["problems"] == ["RTP_REF_KERNELS item 'no_such_vendor_module:kernels' failed to load: "
                                  "ModuleNotFoundError: No module named 'no_such_vendor_module'"]
    assert "acme-mha" in {row["name"] for row in listed["kernels"]}


def test_two_kernels_of_one_name_are_a_problem(vendor_site: Path, tmp_path: Path) -> None:
    (tmp_path / "clash.py").write_text("from rtp_ref.kernels.reference import ReferenceKernel\n"
                                       "class Clash(ReferenceKernel):\n    name = 'acme-mla'\n"
                                       "def kernels():\n    return [Clash()]\n")
    done = _kernels(child_env(vendor_site, tmp_path, RTP_REF_KERNELS="clash:kernels"))
    assert done.returncode == 1
    assert "problem: two kernels are named 'acme-mla': " + ORIGIN in done.stdout
