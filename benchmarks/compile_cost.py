"""What @pytest.mark.torch_compile_budget and assert_no_graph_breaks cost.

python benchmarks/compile_cost.py [--repeats 4]

1. The marker. Three generated suites, each run as `pytest test_plain.py` and as
   `pytest test_marked.py` (the same tests, with and without
   ``@pytest.mark.torch_compile_budget``), alternated --repeats times in fresh
   interpreters on one torch thread:
   - eager: 10 tests, each compiling its own small MLP with backend="eager" and calling
     it 3 times (its own class: instances of one class share a compiled graph, so
     without the marker only the first test would compile);
   - inductor: the same with the default backend, 4 tests;
   - module fixture: a module-scoped fixture compiles (inductor) and warms up one
     model; 5 tests call it 3 times. Without the marker they run the compiled graph;
     with it they compile it again, since the watch starts from an empty compile cache
     (the price of counts that do not depend on which tests ran before).
   A conftest times each test's call phase (the body and the watch around it) and the
   body alone. Per-test overhead: the median, over tests and rounds, of (call phase with
   the marker - call phase without) for the same test in the same round, leaving out
   each run's first test (it pays the process's first compile). The ratio of whole-run
   wall times (interpreter start and torch import included) is also given.
   Goal: <= 50 ms per test that compiles once with the eager backend.
2. assert_no_graph_breaks against a plain call, a first torch.compile(backend="eager")
   call and a first torch.compile (inductor) call, on the same model, in this process on
   one thread, alternated --repeats x 3 times (medians). "First call" is the first call
   after torch._dynamo.reset(), timed with the wrapping; inductor's on-disk caches are
   warm, as on any run after the first. Goal: assert_no_graph_breaks <= 1.5x the first
   torch.compile(backend="eager") call.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from _harness import figure, make_suite, median, run_pytest

MARKER = "@pytest.mark.torch_compile_budget(recompiles=0, graph_breaks=0)\n"

# Times each test's call phase (outermost: around the marker's watch) and its body.
CONFTEST = """
import time

import pytest
import torch

torch.set_num_threads(1)  # steadier figures on a small machine, as in this process
_CALLS = []
_BODIES = {}


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_call(item):
    start = time.perf_counter()
    try:
        return (yield)
    finally:
        _CALLS.append((item.name, time.perf_counter() - start))


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    start = time.perf_counter()
    try:
        return (yield)
    finally:
        _BODIES[pyfuncitem.name] = time.perf_counter() - start


def pytest_terminal_summary(terminalreporter):
    for name, seconds in _CALLS:
        terminalreporter.write_line(f"BENCH|{name}|{seconds!r}|{_BODIES.get(name, 0.0)!r}")
"""

HEADER = """
import pytest
import torch
import torch.nn.functional as F
from torch import nn
"""

# One class per test: a distinct forward, so every test compiles, marker or not.
OWN_MODEL_TEST = """

class Net{i}(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(16, 64), nn.Linear(64, 64), nn.Linear(64, 1)

    def forward(self, x):
        return self.fc3(F.gelu(self.fc2(F.gelu(self.fc1(x))))).squeeze(-1)


{marker}def test_compiles_{i}():
    torch.manual_seed({i})
    model = torch.compile(Net{i}(){backend})
    x = torch.randn(64, 16)
    for _ in range(3):
        y = model(x)
    assert y.shape == (64,)
"""

FIXTURE_MODULE = """

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(16, 64), nn.Linear(64, 1)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x))).squeeze(-1)


@pytest.fixture(scope="module")
def compiled():
    torch.manual_seed(0)
    model, x = torch.compile(Net()), torch.randn(64, 16)
    for _ in range(3):  # compiled and warmed up once for the module
        model(x)
    return model, x
"""

FIXTURE_TEST = """

{marker}def test_uses_fixture_{i}(compiled):
    model, x = compiled
    for _ in range(3):
        y = model(x)
    assert y.shape == (64,)
"""


def _suite(tests: int, template: str, head: str = "", backend: str = "") -> Path:
    def text(marker: str) -> str:
        return (
            HEADER
            + head
            + "".join(template.format(i=i, marker=marker, backend=backend) for i in range(tests))
        )

    return make_suite(
        {"conftest.py": CONFTEST, "test_plain.py": text(""), "test_marked.py": text(MARKER)}
    )


def _calls(output: str) -> dict[str, tuple[float, float]]:
    """Test name -> (call phase seconds, body seconds), from the conftest's lines."""
    found = {}
    for line in output.splitlines():
        if line.startswith("BENCH|"):
            _, name, call, body = line.split("|")
            found[name] = (float(call), float(body))
    return found


def _last_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip() and "TORCH_IMPORTED" not in line]
    return lines[-1].strip("= ") if lines else ""


def marker_cost(repeats: int) -> None:
    eager = ', backend="eager"'
    suites = {
        "eager, 10 tests compiling once": (_suite(10, OWN_MODEL_TEST, backend=eager), 10),
        "inductor, 4 tests compiling once": (_suite(4, OWN_MODEL_TEST), 4),
        "module fixture (inductor), 5 tests": (_suite(5, FIXTURE_TEST, FIXTURE_MODULE), 5),
    }
    variants = {  # in file order: the first test pays dynamo's first-compile costs in both
        "plain": ["-p", "no:randomly", "test_plain.py"],
        "marked": ["-p", "no:randomly", "test_marked.py"],
    }
    walls = {(s, v): [] for s in suites for v in variants}
    calls = {(s, v): [] for s in suites for v in variants}
    outputs: dict[str, str] = {}
    for suite, (root, _) in suites.items():  # warm the file-system, bytecode, inductor caches
        outputs[suite] = run_pytest(root, variants["marked"])[2]
    for round_ in range(repeats):
        for suite, (root, _) in suites.items():
            order = list(variants) if round_ % 2 == 0 else list(reversed(variants))
            for variant in order:  # alternated, and which goes first too
                seconds, _, output = run_pytest(root, variants[variant])
                walls[suite, variant].append(seconds)
                calls[suite, variant].append(_calls(output))

    print(f"torch_compile_budget: per-test call phase, {repeats} rounds (medians)")
    print(
        f"  {'suite':<36}  {'test alone':>10}  {'overhead':>9}  {'range':>17}"
        f"  {'whole run':>15}  {'ratio':>6}"
    )
    for suite, (_, tests) in suites.items():
        overheads, plain_calls = [], []
        inside: dict[str, list[float]] = {variant: [] for variant in variants}
        for plain, marked in zip(calls[suite, "plain"], calls[suite, "marked"], strict=True):
            assert len(plain) == len(marked) == tests, (plain, marked)
            first = next(iter(plain))  # pays the process's one-time costs: left out
            for name, (call, _) in plain.items():
                if name != first:
                    overheads.append(marked[name][0] - call)
                    plain_calls.append(call)
            for variant, found in (("plain", plain), ("marked", marked)):
                inside[variant] += [call - body for call, body in found.values()]
        wall_plain = median(walls[suite, "plain"])
        wall_marked = median(walls[suite, "marked"])
        overhead = median(overheads)
        low, high = _quartiles(overheads)
        print(
            f"  {suite:<36}  {median(plain_calls) * 1e3:>7.1f} ms  {overhead * 1e3:>+6.1f} ms"
            f"  {low * 1e3:>+6.1f}..{high * 1e3:>+6.1f} ms"
            f"  {wall_plain:>5.2f} -> {wall_marked:>5.2f} s  {wall_marked / wall_plain:>5.2f}x"
        )
        around = {variant: median(values) * 1e3 for variant, values in inside.items()}
        print(
            f"  {'':<36}  call phase - body: {around['marked']:.1f} ms with the marker,"
            f" {around['plain']:.1f} ms without"
        )
        if suite.startswith("eager"):
            goal = "<= 50 ms per test compiling once (eager)"
            figure(f"marker overhead per test: {suite}", f"{overhead * 1e3:.1f} ms", goal,
                   overhead <= 0.050)  # fmt: skip
            figure(f"call phase - body, with / without the marker: {suite}",
                   f"{around['marked']:.1f} / {around['plain']:.1f} ms", "-", None)  # fmt: skip
        else:
            figure(f"marker overhead per test: {suite}", f"{overhead * 1e3:.1f} ms", "-", None)
        figure(f"marker whole-run ratio: {suite}", f"{wall_marked / wall_plain:.2f}x", "-", None)
    print("  'test alone': the call phase without the marker; 'overhead': with - without, same")
    print("  test, same round, the first test of each run left out (it pays the process's")
    print("  one-time costs, which vary by more than is measured; the whole run has them);")
    print("  'range': its interquartile range; whole run: pytest's wall time, start-up")
    print("  included; call phase - body: the hooks around the body (the marker's watch)")
    print("  pytest's last line with the marker (warm-up run):")
    for suite in suites:
        print(f"    {suite:<36}  {_last_line(outputs[suite])}")
    print("  the marker's end-of-run table, module-fixture suite (warm-up run):")
    for line in _compile_table(outputs[next(reversed(suites))]):
        print(f"    {line}")


def _compile_table(output: str) -> list[str]:
    lines, inside = [], False
    for line in output.splitlines():
        if inside and (" passed" in line or line.startswith(("=", "TORCH_IMPORTED"))):
            break
        if inside:
            lines.append(line.rstrip())
        inside = inside or (line.startswith("-") and " torch compile " in line)
    return lines


def _quartiles(values: list[float]) -> tuple[float, float]:
    if len(values) < 4:
        return min(values), max(values)
    q = statistics.quantiles(values, n=4)
    return q[0], q[2]


def graph_break_check_cost(repeats: int) -> None:
    import torch
    import torch._dynamo

    from pytest_torch import assert_no_graph_breaks

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    from models import MLPRegressor, TransformerBlock

    torch.manual_seed(0)
    torch.set_num_threads(1)
    cases = {
        "MLPRegressor, batch 64": (MLPRegressor().eval(), torch.randn(64, 16)),
        "TransformerBlock, 8 x 32": (TransformerBlock().eval(), torch.randn(8, 32, 64)),
    }
    print(f"assert_no_graph_breaks: in-process, 1 thread, medians of {repeats} (ms)")
    print(
        f"  {'model':<26}  {'plain call':>10}  {'no breaks':>10}  {'eager 1st':>10}"
        f"  {'inductor 1st':>12}  {'vs eager':>8}"
    )
    for name, (model, x) in cases.items():

        def first_call(backend: str, m: torch.nn.Module = model, t: torch.Tensor = x) -> object:
            return torch.compile(m, backend=backend)(t)

        ways: dict[str, Callable[[], object]] = {
            "plain": lambda m=model, t=x: m(t),
            "check": lambda m=model, t=x: assert_no_graph_breaks(m, t),
            "eager": lambda: first_call("eager"),
            "inductor": lambda: first_call("inductor"),
        }
        times: dict[str, list[float]] = {way: [] for way in ways}
        for round_ in range(repeats + 1):  # the first round warms up, uncounted
            order = list(ways) if round_ % 2 == 0 else list(reversed(ways))
            for way in order:  # which goes first alternates too
                call = ways[way]
                torch._dynamo.reset()  # a first call is one after an empty cache
                start = time.perf_counter()
                call()
                if round_:
                    times[way].append(time.perf_counter() - start)
        ms = {way: median(values) * 1e3 for way, values in times.items()}
        ratio = ms["check"] / ms["eager"]
        print(
            f"  {name:<26}  {ms['plain']:>10.2f}  {ms['check']:>10.1f}  {ms['eager']:>10.1f}"
            f"  {ms['inductor']:>12.1f}  {ratio:>7.2f}x"
        )
        figure(f"assert_no_graph_breaks / first compile(backend=eager): {name}",
               f"{ratio:.2f}x ({ms['check']:.0f} vs {ms['eager']:.0f} ms)", "<= 1.5x",
               ratio <= 1.5)  # fmt: skip
        figure(f"assert_no_graph_breaks / first compile(inductor): {name}",
               f"{ms['check'] / ms['inductor']:.2f}x", "-", None)  # fmt: skip
    torch._dynamo.reset()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=4)
    repeats = parser.parse_args().repeats
    started = time.perf_counter()
    marker_cost(repeats)
    graph_break_check_cost(repeats * 3)
    print(f"({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
