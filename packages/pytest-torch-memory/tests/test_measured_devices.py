"""Which devices a test body is measured on: cpu always, and the device types core
selects for the test, narrowed to its own when it is parametrized by torch_device.

A second device type is faked (core's device layer reports cuda available); a cuda
the body never touches is measured as zero without being set up, so the peak table
shows which devices each test was measured on.
"""

from __future__ import annotations

import pytest

from pytest_torch.core import devices

SUITE = """
import pytest


def test_each_device(torch_device):
    pass


@pytest.mark.torch_devices("cpu")
def test_marked_cpu():
    pass


def test_plain():
    pass
"""


@pytest.fixture
def two_devices(pytester, monkeypatch):
    """A machine with cpu and cuda, as far as the plugins can tell."""
    monkeypatch.setattr(devices, "is_available", lambda t: t in ("cpu", "cuda"))
    pytester.makepyfile(test_suite=SUITE)
    return pytester


def _measured(result: pytest.RunResult) -> set[tuple[str, str]]:
    """(device, test) rows of the peak table."""
    rows = set()
    for line in result.stdout.lines:
        fields = line.split()
        if len(fields) > 2 and "::" in fields[1]:
            rows.add((fields[0], fields[1].split("::")[1]))
    return rows


def test_a_test_parametrized_for_cpu_measures_no_other_device(two_devices, run):
    result = run("--torch-memory-report", "-p", "no:randomly")
    result.assert_outcomes(passed=4)
    assert _measured(result) == {
        ("cpu", "test_each_device[cpu]"),
        ("cpu", "test_each_device[cuda]"),
        ("cuda:0", "test_each_device[cuda]"),
        ("cpu", "test_marked_cpu"),
        ("cpu", "test_plain"),
        ("cuda:0", "test_plain"),
    }


def test_torch_device_narrows_the_measured_devices_but_cpu_stays(two_devices, run):
    result = run("--torch-memory-report", "--torch-device=cpu", "-p", "no:randomly")
    result.assert_outcomes(passed=3)
    assert _measured(result) == {
        ("cpu", "test_each_device[cpu]"),
        ("cpu", "test_marked_cpu"),
        ("cpu", "test_plain"),
    }
    result = run("--torch-memory-report", "--torch-device=cuda", "-p", "no:randomly")
    result.assert_outcomes(passed=3)
    assert _measured(result) == {
        ("cpu", "test_each_device[cuda]"),
        ("cuda:0", "test_each_device[cuda]"),
        ("cpu", "test_marked_cpu"),  # cpu only: the marker leaves no selected type
        ("cpu", "test_plain"),
        ("cuda:0", "test_plain"),
    }


def test_a_budget_for_one_device_type_measures_only_that_type(two_devices, run):
    two_devices.makepyfile(
        test_budgets="""
        import pytest

        @pytest.mark.torch_max_memory(mb=64, device="cuda")
        def test_cuda_budget(torch_device):
            pass

        @pytest.mark.torch_max_memory(mb=64)
        def test_every_device(torch_device):
            pass
        """
    )
    result = run("test_budgets.py", "-p", "no:randomly")
    result.assert_outcomes(passed=4)
    assert _measured(result) == {
        ("cuda:0", "test_cuda_budget[cuda]"),
        ("cpu", "test_every_device[cpu]"),
        ("cpu", "test_every_device[cuda]"),
        ("cuda:0", "test_every_device[cuda]"),
    }


def test_a_conftest_that_overrides_torch_device_is_measured_on_the_device_it_gives(
    two_devices, monkeypatch, run
):
    # a machine with two GPUs; the conftest hands every test the second one
    monkeypatch.setattr(devices, "device_count", lambda t: 2 if t == "cuda" else 1)
    two_devices.makeconftest(
        """
        import pytest
        import torch

        @pytest.fixture
        def torch_device(request):
            return torch.device("cuda", 1) if request.param == "cuda" else torch.device("cpu")
        """
    )
    result = run("--torch-memory-report", "--torch-device=cuda", "-p", "no:randomly")
    result.assert_outcomes(passed=3)
    assert _measured(result) == {
        ("cpu", "test_each_device[cuda]"),
        ("cuda:1", "test_each_device[cuda]"),
        ("cpu", "test_marked_cpu"),
        ("cpu", "test_plain"),
        ("cuda:0", "test_plain"),  # no device of its own: the type resolved as usual
    }
