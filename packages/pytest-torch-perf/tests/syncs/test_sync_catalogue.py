"""The host-sync catalogue: the check agrees with every label; on CUDA the labels hold.

Each pattern runs once before it is judged, as a test would call a step that already
ran (first-step effects such as creating optimizer state are not what is judged).
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

from pytest_torch.perf import find_host_syncs

# these tests draw from the global random generators; torch_seed restores them
pytestmark = pytest.mark.usefixtures("torch_seed")

DOCS = Path(__file__).resolve().parents[4] / "docs" / "performance.md"


def _catalogue() -> ModuleType:
    path = Path(__file__).with_name("sync_catalogue") / "__init__.py"
    spec = importlib.util.spec_from_file_location(
        "pytest_torch_sync_catalogue", path, submodule_search_locations=[str(path.parent)]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # dataclasses look their module up; the catalogue's modules import each other
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


PATTERNS = _catalogue().PATTERNS


def markdown_table() -> str:
    """The catalogue as the table in docs/performance.md."""
    rows = ["| pattern | area | on a GPU | why |", "|---|---|---|---|"]
    for pattern in PATTERNS:
        verdict = (
            "syncs: " + ", ".join(f"`{o}`" for o in pattern.operations)
            if pattern.syncs
            else "no sync"
        )
        if pattern.hidden_on_cpu:
            verdict += " (seen on GPU runs only)"
        reason = pattern.reason.replace("|", "\\|")
        rows.append(f"| {pattern.name} | {pattern.area} | {verdict} | {reason} |")
    return "\n".join(rows)


def test_the_catalogue_covers_real_code_both_ways():
    names = [p.name for p in PATTERNS]
    assert len(names) == len(set(names)) >= 40
    syncing = sum(p.syncs for p in PATTERNS)
    assert syncing >= 15 and len(PATTERNS) - syncing >= 15
    assert all(bool(p.operations) == p.syncs for p in PATTERNS)
    assert all(p.reason for p in PATTERNS)


@pytest.mark.parametrize(
    "pattern",
    [
        pytest.param(p, marks=pytest.mark.xfail(reason=p.hidden_on_cpu, strict=True))
        if p.hidden_on_cpu
        else p
        for p in PATTERNS
    ],
    ids=lambda p: p.name,
)
def test_the_check_agrees_with_the_label(pattern):
    code = pattern.build(torch.device("cpu"))
    code()
    _, events = find_host_syncs(code)
    found = [e.describe() for e in events]
    if pattern.syncs:
        assert events, f"{pattern.name} syncs on a GPU ({pattern.reason}); nothing was found"
        operations = {e.operation for e in events}
        assert pattern.operations[0] in operations, found
    else:
        assert not events, f"{pattern.name} does not sync on a GPU ({pattern.reason}):\n{found}"


@pytest.mark.cuda(reason="the catalogue's labels are checked against CUDA's sync debug mode")
@pytest.mark.parametrize("pattern", PATTERNS, ids=lambda p: p.name)
def test_the_label_holds_on_cuda(pattern):
    code = pattern.build(torch.device("cuda"))
    code()
    torch.cuda.synchronize()
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        code()
        synced = False
    except RuntimeError as error:
        if "synchroniz" not in str(error).lower():
            raise
        synced = True
    finally:
        torch.cuda.set_sync_debug_mode(previous)
    assert synced == pattern.syncs, f"{pattern.name}: labelled syncs={pattern.syncs}"
    _, events = find_host_syncs(code)
    assert bool(events) == pattern.syncs, [e.describe() for e in events]


def test_the_docs_show_the_catalogue():
    if not DOCS.parent.parent.joinpath("packages").is_dir():
        pytest.skip("the docs are the repository's: a package's sdist ships its tests alone")
    text = DOCS.read_text()
    shown = re.search(r"<!-- sync-catalogue -->\n(.*?)\n<!-- /sync-catalogue -->", text, re.S)
    assert shown is not None, "docs/performance.md lost its catalogue markers"
    assert shown.group(1) == markdown_table(), (
        "the catalogue changed: paste the output of `cd packages/pytest-torch-perf/tests/syncs &&"
        " python -c 'import test_sync_catalogue as t; print(t.markdown_table())'`"
    )
