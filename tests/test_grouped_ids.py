"""Tests grouped for pytest-xdist's ``--dist loadgroup`` keep their ids.

On pytest before 9.2, each xdist worker appends ``@<group>`` to the id of every test
marked ``xdist_group`` (``test_x.py::test_y@gpu``). The family keys and selects tests by
their ids as the user writes them: the same seed and baseline as in a serial run, a
command to run the test again that pytest can find, ranks that find their test. The
inner runs here make that rewrite themselves (``GROUPED``, on any pytest), so they need
neither xdist nor an older pytest."""

from __future__ import annotations

import re

#: the rewrite pytest-xdist's loadgroup scheduling makes on its workers (xdist's
#: ``WorkerInteractor.pytest_collection_modifyitems``), as a subclass's ``nodeid``
GROUPED = """
import os


def pytest_configure(config):
    config.addinivalue_line("markers", "xdist_group(name): the group of --dist loadgroup")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items):
    if "RANK" in os.environ:  # a rank's own session is no xdist worker
        return
    for item in items:
        names = sorted({str(mark.args[0]) for mark in item.iter_markers("xdist_group")})
        if names:
            grouped = property(lambda _, nodeid=f"{item.nodeid}@{'_'.join(names)}": nodeid)
            item.__class__ = type(type(item).__name__, (type(item),), {"nodeid": grouped})
"""

SUITE = """
import pytest
import torch

pytestmark = pytest.mark.xdist_group("models")


def test_speed(perf_baseline):
    perf_baseline(torch.nn.Linear(8, 8), torch.randn(2, 8), latency_tolerance=1000)


def test_seeded(torch_seed, request):
    print(f"{request.node.nodeid} drew with seed {torch_seed}")
    assert torch.rand(1).item() > 2


@pytest.mark.torch_distributed(world_size=2)
def test_on_two_ranks(rank):
    import torch.distributed as dist

    total = torch.ones(1)
    dist.all_reduce(total)
    assert total.item() == 2
"""


def test_grouped_tests_keep_their_seed_baseline_rerun_command_and_ranks(
    pytester, quiet_machine, torch_seed
):
    """(``torch_seed`` restores the random state the inner tests draw from.)"""
    pytester.makepyfile(test_grouped=SUITE)
    plugins = ("-p", "torch_perf", "-p", "torch_distributed", "--torch-seed=7")
    serial = pytester.runpytest(*plugins, "--torch-update-perf", "--torch-perf-max-time=0.05")
    serial.assert_outcomes(passed=2, failed=1)
    seed = re.search(r"test_seeded drew with seed (\d+)", serial.stdout.str()).group(1)

    conftest = pytester.path / "conftest.py"
    conftest.write_text(conftest.read_text() + GROUPED)
    grouped = pytester.runpytest(*plugins, "-rA", "--torch-perf-max-time=0.05")
    grouped.assert_outcomes(passed=2, failed=1)
    out = grouped.stdout.str()
    assert f"test_grouped.py::test_seeded@models drew with seed {seed}" in out
    grouped.stdout.fnmatch_lines(
        [
            "  pytest*test_grouped.py::test_seeded --torch-seed=7",
            "test_grouped.py::test_speed * baseline * ok*",
        ]
    )
    assert "no baseline" not in out and "@models --torch-seed" not in out
