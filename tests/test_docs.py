"""Every code snippet in docs/ runs, and shown output is the real output.

- ```python blocks starting with ``# file: NAME`` are files of a small test suite, one
  per page, which must run without failures or errors;
- other ```python blocks are executed in order; when the paragraph after one is just
  "prints", the ```text block that follows must equal what it printed.

The release check (``tox -e release``) runs each page's snippets with only the package
the page is about installed, from its wheel: the stronger check, and once is enough.
Here: the snippets of every page the release check does not run, and that the pages it
names exist.
"""

from __future__ import annotations

import importlib.util
import runpy
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

RELEASE_CHECKED = {
    page
    for *_, pages in runpy.run_path(str(REPO / "scripts" / "release_check.py"))["SCENARIOS"]
    for page in pages
}
HERE = [page for page in PAGES if page.name not in RELEASE_CHECKED]


def _runnable(page: Path) -> bool:
    return any(language == "python" for language, *_ in snippets.blocks(page))


def test_there_are_pages():
    assert {p.name for p in PAGES} >= {"index.md", "core.md"}


def test_the_release_check_runs_the_snippets_of_existing_pages():
    assert {p.name for p in PAGES} >= RELEASE_CHECKED, "a scenario names a page that is gone"
    assert {p.name for p in PAGES if _runnable(p)} & RELEASE_CHECKED, "no page checked there"


@pytest.mark.parametrize("page", HERE, ids=lambda p: p.name)
def test_snippets_run_and_show_their_real_output(page):
    snippets.run_code_blocks(page)


@pytest.mark.parametrize("page", HERE, ids=lambda p: p.name)
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
