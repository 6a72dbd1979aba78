"""Per-test cost of torch_device + torch_seed + make_tensor vs a hand-written conftest.

The same 500 tests run twice: once with the family's fixtures, once with a conftest
that does the same work by hand (parametrize over the available devices, seed
random/NumPy/torch per test from the test id and restore the previous state, a
tensor factory). Fixed costs (interpreter, torch import) are removed by also timing a
1-test suite of each kind: per-test cost = (T(500) - T(1)) / 499. Goal: ratio <= 1.10.

    python benchmarks/fixture_cost.py [--tests 500] [--repeats 5]
"""

from __future__ import annotations

import argparse

from _harness import family_entry_points, figure, make_suite, median, run_pytest

FAMILY_TEST = """
def test_{i}(torch_device, torch_seed, make_tensor):
    x = make_tensor(8, 8)
    assert x.device.type == torch_device.type
"""

HANDWRITTEN_TEST = """
def test_{i}(device, seed, tensor):
    x = tensor(8, 8)
    assert x.device.type == device.type
"""

HANDWRITTEN_CONFTEST = """
import hashlib
import random

import numpy as np
import pytest
import torch


def _devices():
    found = ["cpu"]
    if torch.cuda.is_available():
        found.append("cuda")
    return found


def pytest_generate_tests(metafunc):
    if "device" in metafunc.fixturenames:
        metafunc.parametrize("device", _devices(), indirect=True, ids=_devices())


@pytest.fixture(scope="session")
def device(request):
    return torch.device(request.param)


@pytest.fixture
def seed(request):
    value = int.from_bytes(
        hashlib.blake2b(f"0\\0{request.node.nodeid}".encode(), digest_size=4).digest(), "big"
    )
    state = (random.getstate(), np.random.get_state(), torch.get_rng_state())
    cuda_state = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    random.seed(value)
    np.random.seed(value)
    torch.manual_seed(value)
    yield value
    random.setstate(state[0])
    np.random.set_state(state[1])
    torch.set_rng_state(state[2])
    if cuda_state is not None:
        torch.cuda.set_rng_state_all(cuda_state)


@pytest.fixture
def tensor(device, seed):
    def make(*shape, dtype=torch.float32):
        return torch.testing.make_tensor(shape, dtype=dtype, device=device)

    return make
"""


def suite(kind: str, tests: int):
    body = FAMILY_TEST if kind == "family" else HANDWRITTEN_TEST
    files = {"test_generated.py": "".join(body.format(i=i) for i in range(tests))}
    if kind == "handwritten":
        files["conftest.py"] = HANDWRITTEN_CONFTEST
    return make_suite(files)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tests", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=5)
    options = parser.parse_args()

    blocked = [arg for name in family_entry_points() for arg in ("-p", f"no:{name}")]
    runs = {
        (kind, size): (suite(kind, size), [] if kind == "family" else blocked)
        for kind in ("family", "handwritten")
        for size in (1, options.tests)
    }
    for root, extra in runs.values():  # warm the file-system and bytecode caches
        run_pytest(root, extra)
    times: dict[tuple[str, int], list[float]] = {key: [] for key in runs}
    for _ in range(options.repeats):  # all four in turn: drift hits them alike
        for key, (root, extra) in runs.items():
            times[key].append(run_pytest(root, extra)[0])
    medians = {key: median(values) for key, values in times.items()}
    print(f"fixture cost: {options.tests} tests, median of {options.repeats} runs each")
    print(f"{'variant':<12} {'1 test':>9} {f'{options.tests} tests':>11} {'per test':>10}")
    per_test = {}
    for kind in ("family", "handwritten"):
        per_test[kind] = (medians[kind, options.tests] - medians[kind, 1]) / (options.tests - 1)
        print(
            f"{kind:<12} {medians[kind, 1]:>8.3f}s {medians[kind, options.tests]:>10.3f}s"
            f" {per_test[kind] * 1e3:>8.3f}ms"
        )
    ratio = per_test["family"] / per_test["handwritten"]
    verdict = "meets" if ratio <= 1.10 else "MISSES"
    print(
        f"per-test overhead ratio family/handwritten: {ratio:.3f} (goal <= 1.10):"
        f" {verdict} the goal"
    )
    figure("fixture overhead per test: family / hand-written conftest", f"{ratio:.3f}x",
           "<= 1.10x", ratio <= 1.10)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
