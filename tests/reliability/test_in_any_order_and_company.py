"""The examples and a generated suite give the same outcomes in any test order and
alongside the plugins users commonly have installed, without warnings from ours.

The examples' written-order outcomes are those of the demo's run of them: the test run
runs the demo here (``scripts/demo.py --without-instruction-counts``, on a copy of the
examples), so the README's demo command is proven by the test command, once."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
OTHERS = {
    "randomly": "pytest_randomly",
    "cov": "pytest_cov",
    "timeout": "pytest_timeout",
    "rerunfailures": "pytest_rerunfailures",
    "benchmark": "pytest_benchmark",
}
MISSING = [name for name, module in OTHERS.items() if importlib.util.find_spec(module) is None]
WITHOUT_OTHERS = [arg for name in OTHERS for arg in ("-p", f"no:{name}")]

GENERATED = """
import pytest
import torch

from pytest_torch import assert_close, assert_deterministic, assert_same_across_ranks


@pytest.mark.parametrize("size", range(8))
def test_close(make_tensor, size):
    x = make_tensor(size + 1, 4)
    assert_close(x * 2, x + x)


@pytest.mark.parametrize("size", range(4))
def test_seeded_draws_repeat(torch_seed, size):
    torch.manual_seed(torch_seed)
    first = torch.randn(size + 1)
    torch.manual_seed(torch_seed)
    assert torch.equal(first, torch.randn(size + 1))


@pytest.mark.torch_max_latency(ms=500)
def test_latency(latency):
    model = torch.nn.Linear(16, 16)
    latency(model, torch.randn(4, 16))


def test_missing_baseline_is_a_skip(perf_baseline):
    perf_baseline(torch.nn.Linear(4, 4), torch.randn(2, 4))


@pytest.mark.torch_max_memory(mb=64)
def test_memory_budget():
    torch.ones(1024, 1024).sum()


@pytest.mark.torch_memory_leak(iterations=2)
def test_no_leak():
    torch.ones(16).sum()


@pytest.mark.torch_threads(1)
def test_threads():
    assert torch.get_num_threads() == 1


def test_deterministic(make_tensor):
    model = torch.nn.Linear(4, 4)
    x = make_tensor(3, 4)
    assert_deterministic(lambda: model(x))


@pytest.mark.torch_distributed(world_size=2)
def test_on_two_ranks(rank, world_size):
    import torch.distributed as dist

    total = torch.tensor([float(rank)])
    dist.all_reduce(total)
    assert_same_across_ranks(total)
    assert total.item() == world_size * (world_size - 1) / 2


def test_a_real_mismatch_fails(make_tensor):
    x = make_tensor(4, 4)
    assert_close(x, x + 1)


@pytest.mark.xfail(reason="known", strict=True)
def test_known_failure():
    assert_close(torch.zeros(2), torch.ones(2))
"""


def _outcomes(junit: Path) -> dict[str, str]:
    """Test id -> passed, failure, error or skipped. A perf check the machine could not
    judge ("not judged: machine busy", "not judged: slower host") counts as passed: it
    found nothing wrong, and whether it could judge depends on this machine's load that
    minute (other workers of this suite's own run included), not on the order."""
    outcomes = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        found = [child for child in case if child.tag in ("failure", "error", "skipped")]
        kind = found[-1].tag if found else "passed"
        if kind == "skipped" and "not judged: " in (found[-1].get("message") or ""):
            kind = "passed"
        outcomes[f"{case.get('classname')}::{case.get('name')}"] = kind
    return outcomes


def _environment() -> dict[str, str]:
    """This process's environment without the outer run's pytest and CI settings."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "GITHUB_"))}


def _run(folder: Path, *args: str) -> tuple[dict[str, str], str]:
    junit = folder / f"junit-{len(list(folder.glob('junit-*')))}.xml"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", f"--junitxml={junit}", *args],
        cwd=folder, env=_environment(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode in (0, 1), output
    return _outcomes(junit), output


def _demo(examples: Path) -> tuple[dict[str, str], str]:
    """The demo, as the test run shows it, on a copy of the examples made at
    ``examples``: every step passes (the failure gallery's tests fail as it expects); the
    outcomes of its whole-suite step, run in written order with no other plugin."""
    junit = examples.parent / "junit-demo.xml"
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "demo.py"), "--copy-to", str(examples),
         "--without-instruction-counts", *WITHOUT_OTHERS, f"--junitxml={junit}"],
        env=_environment(), capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert output.count("\n== demo ") == 5, output
    return _outcomes(junit), output


def _our_warnings(output: str) -> list[str]:
    summary = re.search(r"=+ warnings summary =+\n(.*?)\n(?:-- Docs|=+)", output, re.DOTALL)
    if summary is None:
        return []
    return [
        line for line in summary.group(1).splitlines() if "pytest_torch" in line or "torch_" in line
    ]


def _written_order(suite: str, tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """The suite in a folder of its own, with its outcomes in written order and no other
    plugin loaded. Each test makes only its own suite's run (the examples' is the demo's, a
    minute and a half), so no test waits for another's and none is made twice, however
    the tests are spread over workers."""
    if suite == "examples":
        examples = tmp_path / "examples"
        outcomes, output = _demo(examples)
        assert outcomes and "failure" not in outcomes.values(), output
        return examples, outcomes
    generated = tmp_path / "generated"
    generated.mkdir()
    (generated / "test_generated.py").write_text(GENERATED)
    (generated / "pytest.ini").write_text("[pytest]\n")
    outcomes, output = _run(generated, *WITHOUT_OTHERS)
    assert outcomes.get("test_generated::test_a_real_mismatch_fails") == "failure", output
    assert outcomes["test_generated::test_missing_baseline_is_a_skip"] == "skipped"
    assert outcomes["test_generated::test_on_two_ranks"] == "passed"
    return generated, outcomes


@pytest.mark.skipif(
    bool(MISSING),
    reason=f"needs {', '.join(f'pytest-{m}' for m in MISSING)} (tox -e suite has them)",
)
@pytest.mark.parametrize("suite", ["examples", "generated"])
def test_same_outcomes_in_random_order_alongside_common_plugins(tmp_path, suite):
    """A shuffled order (pytest-randomly, seed 4) with coverage, timeouts, reruns and
    pytest-benchmark loaded: the outcomes of the written order, no warning of ours.
    (Every package's own suite also runs in a fresh random order on each test run.)"""
    folder, expected = _written_order(suite, tmp_path)
    outcomes, output = _run(
        folder, "-p", "randomly", "--randomly-seed=4", "--cov", "--cov-report=", "--timeout=300",
        "--reruns=1", "-W", "default",
    )  # fmt: skip
    for plugin in ("randomly", "cov", "timeout", "rerunfailures", "benchmark"):
        assert re.search(rf"plugins:.*\b{plugin}", output), f"{plugin} not loaded:\n{output}"
    assert "--randomly-seed=4" in output
    assert outcomes == expected
    assert _our_warnings(output) == [], output
