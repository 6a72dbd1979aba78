"""Hooks the core plugin owns; sibling plugins (and conftest files) implement them.

They are added from ``pytest_addhooks``, so they exist exactly when the core plugin is
loaded. Implement one in a plugin that may run without core with
``@pytest.hookimpl(optionalhook=True)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Sequence

    import torch

    from pytest_torch.core.compare import TensorMismatchError
    from pytest_torch.core.tables import ReportTable


@pytest.hookspec(firstresult=True)
def pytest_torch_resolve_device(
    config: pytest.Config, device_type: str
) -> torch.device | str | None:
    """Say which concrete device ``device_type`` (e.g. ``"cuda"``) means in this process.

    Called once per device type and session, through
    ``core.chosen_device.resolve_device``, by whichever asks first: the ``torch_device``
    fixture, perf's checks and benchmark cases, memory's measurement. Return a
    ``torch.device`` or a string such as ``"cuda:1"``, or None to let a later
    implementation (finally core's default: the backend's current device) answer. The
    first non-None result wins. The xdist plugin answers this to give each worker its
    own GPU while test ids stay ``test_x[cuda]``. pytest-torch-memory measures the CPU
    and the accelerator types selected for the test (``core.selection.device_types_for``,
    narrowed to the test's own ``torch_device``), never every available device.
    """


@pytest.hookspec
def pytest_torch_seeded(item: pytest.Item, seed: int) -> None:
    """A test was seeded by the ``torch_seed`` fixture.

    Called after Python's ``random``, NumPy (if installed) and torch (CPU and every
    accelerator) were seeded with ``seed``, before the test body runs. Anything an
    implementation changes must be undone at the test's teardown.
    """


@pytest.hookspec
def pytest_torch_tensor_mismatch(
    config: pytest.Config, item: pytest.Item | None, error: TensorMismatchError
) -> None:
    """A tensor mismatch is about to be raised by ``assert_close``.

    ``error.mismatches`` holds every mismatching pair with its tensors, path and
    figures; ``item`` is the running test (None outside a test). The error may still
    be caught by the test (``pytest.raises``), so an implementation that writes files
    keeps the mismatch aside and acts only once the test's report says it failed.
    ``error.add_detail(text)`` adds a line to the message the user sees.
    """


@pytest.hookspec
def pytest_torch_report_tables(config: pytest.Config) -> list[ReportTable] | None:
    """Offer this plugin's end-of-run tables to the reports other plugins write.

    Called at the end of the run (on the xdist controller, which has every worker's
    results) by a plugin that writes a report of its own: pytest-torch-ci's job summary
    and its pytest-html section. Return ``ReportTable(title, render)`` objects, where
    ``render()`` returns the table's lines and is called only when a report is written
    (the caller turns an exception there into a note, never into a failure), or None
    when there is nothing to show. pytest-torch-perf offers its perf and benchmark
    tables, pytest-torch-memory its peak table.
    """


@pytest.hookspec(firstresult=True)
def pytest_torch_runs_once(
    config: pytest.Config, nodeid: str, fixturenames: Sequence[str]
) -> str | None:
    """Say why a test's body must run exactly once, or None.

    Asked at collection (and before running) by a plugin that would repeat a test's
    body, such as pytest-torch-memory's leak check. pytest-torch-perf answers for tests
    that measure performance, e.g. "it uses latency, which measures performance". The
    first non-None answer wins.
    """


@pytest.hookspec
def pytest_torch_reach_lines(config: pytest.Config) -> list[str] | None:
    """Offer end-of-run lines on which tests one of this plugin's checks acted on.

    Called once at the end of the run (on the xdist controller under xdist). Core prints
    every plugin's lines in one section of the terminal summary, after its own lines
    from :mod:`pytest_torch.core.reach` (which a check that notes each test there gets
    without implementing this hook). pytest-torch-determinism answers with how many
    tests ``--torch-deterministic`` was applied to. Each line starts with ``torch: ``.
    """
