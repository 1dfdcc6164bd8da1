"""docs/vendor-guide.md, followed as a vendor would: every ``<!-- file: PATH -->`` snippet is written into a scratch
project, each worked example is built and installed by pip for real (into a private target directory: no network, no
build isolation, no effect on this environment), and ``rtp-ref certify --platform cpu --kernel NAME`` runs in a real
process (forked from the zygote, tests/zygote.py) with that directory on its path and must say ``certified``.

The same runs fail when a snippet is wrong: each mutation below changes one line of a worked example the way a
vendor's kernel goes wrong (a scale multiplied where the contract divides, a ue8m0 scale rounded down instead of
up) and the run of that variant must say ``NOT CERTIFIED``. The parser of the snippets is checked on broken pages.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import pytest

from tests.processes import child_env
from tests.zygote import CliRun, shared_zygote

REPO = Path(__file__).resolve().parents[2]
GUIDE = REPO / "docs" / "vendor-guide.md"
#: each worked example of the guide: its project directory and the kernel it registers
WORKED = {"acme_mha": "acme-mha", "acme_indexer": "acme-indexer"}
#: the line that names a snippet's file; the fenced block after it (blank lines between allowed) is the file
MARKER = re.compile(r"<!-- file: (?P<path>\S+) -->")


class GuideError(ValueError):
    """A page whose snippets cannot be written out as files."""


def guide_files(text: str) -> dict[str, str]:
    """Every ``<!-- file: PATH -->`` snippet of ``text``: PATH -> the content of the fenced block that follows its
    marker line. A marker with no fenced block after it, a block never closed, a PATH that is absolute or leaves
    the project (``..``), or a PATH named twice raise GuideError naming the line."""
    lines = text.splitlines()
    files: dict[str, str] = {}
    for number, line in enumerate(lines, start=1):
        marker = MARKER.fullmatch(line.strip())
        if marker is None:
            continue
        path = marker["path"]
        parts = PurePosixPath(path).parts
        if PurePosixPath(path).is_absolute() or ".." in parts:
            raise GuideError(f"line {number}: {path} leaves the project")
        if path in files:
            raise GuideError(f"line {number}: {path} is named twice")
        start = number
        while start < len(lines) and not lines[start].strip():
            start += 1
        if start == len(lines) or not lines[start].startswith("```"):
            raise GuideError(f"line {number}: the marker of {path} is not followed by a fenced block")
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("```")), None)
        if end is None:
            raise GuideError(f"line {number}: the fenced block of {path} is never closed")
        files[path] = "\n".join(lines[start + 1: end]) + "\n"
    return files


@pytest.mark.parametrize(("page", "says"), [
    ("<!-- file: a/x.py -->\ntext, not a block\n```python\npass\n```\n", "is not followed by a fenced block"),
    ("<!-- file: a/x.py -->\n```python\npass\n", "is never closed"),
    ("<!-- file: ../x.py -->\n```python\npass\n```\n", "leaves the project"),
    ("<!-- file: /x.py -->\n```python\npass\n```\n", "leaves the project"),
    ("<!-- file: a/x.py -->\n```\n1\n```\n<!-- file: a/x.py -->\n```\n2\n```\n", "is named twice"),
])
def test_a_page_whose_snippets_cannot_be_files_is_refused(page: str, says: str) -> None:
    with pytest.raises(GuideError, match=says):
        guide_files(page)


def test_a_snippet_is_the_block_after_its_marker() -> None:
    page = "intro\n<!-- file: a/x.toml -->\n\n```toml\nk = 1\n```\n```python\nnot a file\n```\n"
    assert guide_files(page) == {"a/x.toml": "k = 1\n"}


def _guide() -> str:
    return GUIDE.read_text(encoding="utf-8")


def test_the_guide_has_each_worked_example_and_says_how_to_install_it() -> None:
    files = guide_files(_guide())
    assert {PurePosixPath(path).parts[0] for path in files} == set(WORKED)
    for project in WORKED:
        assert f"{project}/pyproject.toml" in files
        assert f"python -m tox exec -e py -- python -m pip install ./{project}" in _guide()


def _headings(text: str) -> set[str]:
    """GitHub's anchors of a page's headings (outside fenced blocks)."""
    prose = re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"^#{1,6} (.+)$", prose, re.MULTILINE)}


def test_every_link_of_the_guide_to_a_heading_finds_it() -> None:
    links = re.findall(r"\]\(([\w./-]*)#([\w-]+)\)", _guide())
    assert links
    for page, anchor in links:
        target = GUIDE if not page else GUIDE.parent / page
        assert anchor in _headings(target.read_text(encoding="utf-8")), f"({page}#{anchor})"


def _pip_install(source: Path, target: Path) -> None:
    """Build and install the project at ``source`` into ``target`` with pip (no network, no build isolation)."""
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index", "--quiet",
         "--target", str(target), str(source)],
        capture_output=True, text=True, check=False, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _write(files: dict[str, str], root: Path) -> None:
    for path, content in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(content, encoding="utf-8")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The guide's snippets written out and every worked example installed; the site directory."""
    root = tmp_path_factory.mktemp("guide")
    _write(guide_files(_guide()), root)
    target = tmp_path_factory.mktemp("guide-site")
    for project in WORKED:
        _pip_install(root / project, target)
    return target


def _certify(site_dir: Path, kernel: str, report: Path, *argv: str) -> CliRun:
    return shared_zygote().run(["certify", "--platform", "cpu", "--kernel", kernel, "--report", str(report), "-n", "0",
                                *argv], child_env(site_dir), report.parent, timeout=600)


def _verdicts(report: Path, kernel: str) -> dict[str, str]:
    """The kernel's verdict on each layout it claims; every variant it does not claim (the indexer's ``mxfp4``, which
    the worked fp8 example leaves out) must raise as required."""
    rows = json.loads((report / "report.json").read_text())["summary"]["by_kernel_layout"]
    verdicts = {row["layout"]: row["verdict"] for row in rows if row["kernel"] == kernel}
    unclaimed = {layout: v for layout, v in verdicts.items() if layout.endswith(" (unclaimed)")}
    assert set(unclaimed.values()) <= {"raises as required"}, unclaimed
    return {layout: v for layout, v in verdicts.items() if layout not in unclaimed}


@pytest.mark.parametrize("project", list(WORKED))
def test_each_worked_example_is_certified(project: str, site: Path, tmp_path: Path) -> None:
    kernel = WORKED[project]
    done = _certify(site, kernel, tmp_path / "report")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "rtp-ref: all claimed layouts certified" in done.stdout
    verdicts = _verdicts(tmp_path / "report", kernel)
    assert verdicts and set(verdicts.values()) == {"certified"}, verdicts


@dataclass(frozen=True)
class Mutation:
    """One line of a worked example changed: in ``path``, ``old`` (found exactly once) becomes ``new``; the run
    certifies ``layout`` only."""

    path: str
    old: str
    new: str
    layout: str


MUTATIONS = {
    "mha-multiplies-by-the-scale": Mutation("acme_mha/src/acme_mha/__init__.py", "(x.to(torch.float32) / per_head)",
                                            "(x.to(torch.float32) * per_head)", "fp8"),
    "indexer-rounds-the-ue8m0-scale-down": Mutation("acme_indexer/src/acme_indexer/__init__.py",
                                                    "torch.ldexp(torch.ones_like(scale), exponent)",
                                                    "torch.ldexp(torch.ones_like(scale), exponent - 1)", "ue8m0"),
}


@pytest.mark.parametrize("mutation", list(MUTATIONS.values()), ids=list(MUTATIONS))
def test_a_one_line_mutation_of_a_worked_example_is_not_certified(mutation: Mutation, tmp_path: Path) -> None:
    files = guide_files(_guide())
    original = files[mutation.path]
    assert original.count(mutation.old) == 1, f"{mutation.old!r} is not in {mutation.path} exactly once"
    files[mutation.path] = original.replace(mutation.old, mutation.new)
    changed = [(a, b) for a, b in zip(original.splitlines(), files[mutation.path].splitlines(), strict=True) if a != b]
    assert len(changed) == 1, changed
    project = PurePosixPath(mutation.path).parts[0]
    _write({p: c for p, c in files.items() if p.startswith(f"{project}/")}, tmp_path / "src")
    _pip_install(tmp_path / "src" / project, tmp_path / "site")
    kernel = WORKED[project]
    done = _certify(tmp_path / "site", kernel, tmp_path / "report", "--layout", mutation.layout)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    assert f"rtp-ref: NOT CERTIFIED: 1 kernel/layout pair(s) failed: {kernel}/{mutation.layout}" in done.stdout
    assert _verdicts(tmp_path / "report", kernel) == {mutation.layout: "failed"}
