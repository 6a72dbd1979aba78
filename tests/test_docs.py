"""Every code snippet in docs/ runs, and shown output is the real output.

- ```python blocks starting with ``# file: NAME`` are files of a small test suite, one
  per page, which must run without failures or errors;
- other ```python blocks are executed in order; when the paragraph after one is just
  "prints", the ```text block that follows must equal what it printed.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

# these tests draw from the global random generators; torch_seed restores them
pytestmark = pytest.mark.usefixtures("torch_seed")

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
PAGES = sorted(DOCS.glob("*.md"))

_spec = importlib.util.spec_from_file_location("doc_snippets", REPO / "scripts" / "doc_snippets.py")
assert _spec is not None and _spec.loader is not None
snippets = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(snippets)


def test_there_are_pages():
    assert {p.name for p in PAGES} >= {"index.md", "core.md"}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_snippets_run_and_show_their_real_output(page):
    snippets.run_code_blocks(page)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_example_test_files_pass(page, pytester):
    files = snippets.example_files(page)
    if not files:
        pytest.skip(f"{page.name} has no example test files")
    for name, code in files.items():
        pytester.path.joinpath(name).write_text(code)
    result = pytester.runpytest(*snippets.pytest_args(), "-v")
    outcomes = result.parseoutcomes()
    assert result.ret == 0, result.stdout.str()
    assert outcomes.get("passed", 0) >= 1
