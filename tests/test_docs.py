"""Every code snippet in docs/ runs, and shown output is the real output.

- ```python blocks starting with ``# file: NAME`` are files of a small test suite, one
  per page, which must run without failures or errors;
- other ```python blocks are executed in order; when the paragraph after one is just
  "prints", the ```text block that follows must equal what it printed.
"""

from __future__ import annotations

import contextlib
import io
import re
from importlib import metadata
from pathlib import Path

import pytest

# these tests draw from the global random generators; torch_seed restores them
pytestmark = pytest.mark.usefixtures("torch_seed")

DOCS = Path(__file__).resolve().parents[1] / "docs"
PAGES = sorted(DOCS.glob("*.md"))
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.M | re.S)


def _blocks(page: Path) -> list[tuple[str, str, str]]:
    """(language, code, prose before the block) for each fenced block."""
    text = page.read_text()
    blocks, position = [], 0
    for match in FENCE.finditer(text):
        blocks.append((match.group(1), match.group(2), text[position : match.start()].strip()))
        position = match.end()
    return blocks


def test_there_are_pages():
    assert {p.name for p in PAGES} >= {"index.md", "core.md"}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_snippets_run_and_show_their_real_output(page):
    blocks = _blocks(page)
    for index, (language, code, _) in enumerate(blocks):
        if language != "python" or code.startswith("# file:"):
            continue
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, f"{page.name} block {index}", "exec"), {"__name__": "docs"})
        if index + 1 < len(blocks) and blocks[index + 1][2] == "prints":
            assert blocks[index + 1][0] == "text"
            assert out.getvalue() == blocks[index + 1][1], f"{page.name} block {index} output"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_example_test_files_pass(page, pytester):
    files = {}
    for language, code, _ in _blocks(page):
        if language == "python" and code.startswith("# file:"):
            name = code.splitlines()[0].removeprefix("# file:").strip()
            files[name] = code
    if not files:
        pytest.skip(f"{page.name} has no example test files")
    for name, code in files.items():
        pytester.path.joinpath(name).write_text(code)
    plugins = sorted(
        ep.name
        for ep in metadata.entry_points(group="pytest11")
        if ep.dist is not None and ep.dist.name.startswith("pytest-torch")
    )
    args = [arg for name in plugins for arg in ("-p", name)]
    result = pytester.runpytest(*args, "-v", "--torch-perf-max-time=0.05")
    outcomes = result.parseoutcomes()
    assert result.ret == 0, result.stdout.str()
    assert outcomes.get("passed", 0) >= 1
