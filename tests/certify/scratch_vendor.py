"""A scratch vendor distribution, ``acme-kv``, with one kernel of each op rtp-ref certifies, registered through an
entry point and installed for real by pip (into a private target directory: no network, no effect on this
environment), for the tests that follow a kernel's origin into the report.

Only its ``reshape_and_cache_flash`` kernel, ``acme-mha``, writes anything (``auto``: a bit copy, which the cpu
table certifies): the others declare themselves and raise when called, enough for discovery.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

DISTRIBUTION = "acme-kv"
VERSION = "2.3.4"
#: the entry point's name and value (``rtp_ref.kernels`` group)
ENTRY_POINT = "acme-kv"
ENTRY_VALUE = "acme_kv:kernels"
#: the origin discovery gives each of its kernels
ORIGIN = f"entry point {ENTRY_POINT} = {ENTRY_VALUE} ({DISTRIBUTION} {VERSION})"
#: op -> the name of the package's kernel of that op
KERNELS = {
    "concat_and_cache_mla": "acme-mla",
    "reshape_and_cache_flash": "acme-mha",
    "indexer_k_quant_and_cache": "acme-indexer",
    "gather_and_maybe_dequant_cache": "acme-gather",
    "cp_gather_indexer_k_quant_cache": "acme-indexer-gather",
}

PYPROJECT = f"""
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "{DISTRIBUTION}"
version = "{VERSION}"
requires-python = ">=3.10"

[project.entry-points."rtp_ref.kernels"]
{ENTRY_POINT} = "{ENTRY_VALUE}"

[tool.setuptools.packages.find]
where = ["src"]
"""

MODULE = '''
"""ACME's KV-cache kernels, one per op."""


class AcmeMha:
    """reshape_and_cache_flash for ``auto``: each token's key and value rows copied into its slot."""

    name = "acme-mha"
    op = "reshape_and_cache_flash"
    kv_cache_dtypes = ("auto",)
    devices = ("cpu",)

    def __call__(self, key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype, k_scale, v_scale):
        if kv_cache_dtype not in self.kv_cache_dtypes:
            raise NotImplementedError(f"acme-mha does not write kv_cache_dtype={kv_cache_dtype!r}")
        block_size = key_cache.shape[1]
        tokens = slot_mapping.numel()
        if tokens and int(slot_mapping.max()) >= key_cache.shape[0] * block_size:
            raise ValueError(f"slot {int(slot_mapping.max())} is past the cache")
        keep = slot_mapping >= 0
        slots = slot_mapping[keep]
        key_cache[slots // block_size, slots % block_size] = key[:tokens][keep]
        value_cache[slots // block_size, slots % block_size] = value[:tokens][keep]


class Declared:
    """A kernel that only declares itself."""

    devices = ("cpu",)

    def __init__(self, name, op, claims, variants):
        self.name, self.op = name, op
        setattr(self, claims, variants)

    def __call__(self, *args):
        raise NotImplementedError(f"{self.name} is declared only")


def kernels():
    return [
        AcmeMha(),
        Declared("acme-mla", "concat_and_cache_mla", "kv_cache_dtypes", ("auto",)),
        Declared("acme-indexer", "indexer_k_quant_and_cache", "scale_fmts", ("none",)),
        Declared("acme-gather", "gather_and_maybe_dequant_cache", "kv_cache_dtypes", ("auto",)),
        Declared("acme-indexer-gather", "cp_gather_indexer_k_quant_cache", "scale_fmts", ("none",)),
    ]
'''


def install_scratch_vendor(workdir: Path) -> Path:
    """Write the ``acme-kv`` sources under ``workdir`` and pip-install them (no network, no build isolation)
    into ``workdir/site``; that directory, for ``sys.path`` or ``PYTHONPATH``."""
    source = workdir / "acme-kv"
    (source / "src" / "acme_kv").mkdir(parents=True)
    (source / "pyproject.toml").write_text(PYPROJECT)
    (source / "src" / "acme_kv" / "__init__.py").write_text(MODULE)
    target = workdir / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index", "--quiet",
         "--target", str(target), str(source)],
        capture_output=True, text=True, check=False, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return target
