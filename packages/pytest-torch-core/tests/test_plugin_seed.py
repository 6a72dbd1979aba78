"""torch_seed, make_tensor and the core hooks, in real runs."""

from __future__ import annotations

import re

import pytest

# these tests draw from the global random generators; torch_seed restores them
pytestmark = pytest.mark.usefixtures("torch_seed")

SEED_FILE = """
    import random

    import numpy as np
    import torch

    def draw():
        return f"{random.random()!r} {np.random.rand()!r} {torch.rand(1).item()!r}"

    def test_a(torch_seed):
        print(f"SEED a={torch_seed} {draw()}")

    def test_b(torch_seed):
        print(f"SEED b={torch_seed} {draw()}")
"""


def _seed_lines(result: pytest.RunResult) -> dict[str, str]:
    found = re.findall(r"SEED (\w)=(.*)", result.stdout.str())
    return dict(found)


def test_seeds_are_per_test_reproducible_and_follow_the_base_seed(pytester, run):
    pytester.makepyfile(SEED_FILE)
    first = _seed_lines(run("-s"))
    second = _seed_lines(run("-s"))
    assert first == second
    assert first["a"] != first["b"]
    other_base = _seed_lines(run("-s", "--torch-seed=1"))
    assert other_base["a"] != first["a"]
    only_b = _seed_lines(run("-s", "-k", "test_b"))
    assert only_b["b"] == first["b"]  # a test's numbers do not depend on which tests ran


def test_seed_ini_twin_and_command_line_wins(pytester, run):
    pytester.makepyfile(SEED_FILE)
    pytester.makeini("[pytest]\ntorch_seed = 5\n")
    from_ini = _seed_lines(run("-s"))
    from_cli = _seed_lines(run("-s", "--torch-seed=5"))
    assert from_ini == from_cli
    result = run("-s", "--torch-seed=6")
    result.stdout.fnmatch_lines(["torch: devices all available (--torch-device), base seed 6 *"])
    assert _seed_lines(result) != from_ini


@pytest.mark.parametrize("flag", ["--torch-seed=abc", "--torch-seed=-1"])
def test_bad_seed_is_a_usage_error(pytester, run, flag):
    pytester.makepyfile("def test_x(): pass")
    result = run(flag)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --torch-seed: *"])
    assert "Traceback" not in result.stderr.str()


def test_bad_seed_in_ini_names_the_ini_setting(pytester, run):
    pytester.makepyfile("def test_x(): pass")
    pytester.makeini("[pytest]\ntorch_seed = abc\n")
    result = run()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: torch_seed (in tox.ini): expected a non-negative integer seed, got 'abc'.*"]
    )


def test_failure_report_shows_the_seed_and_the_command_that_reproduces_it(pytester, run):
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.parametrize("n", [1])
        def test_fails(torch_seed, n):
            assert False

        def test_fails_unseeded():
            assert False
        """
    )
    result = run("--torch-seed=42")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [
            "*- torch_seed -*",
            "This test ran with seed *, derived from base seed 42 and the test id. Reproduce with:",
            # the -p plugins of this run, where autoload is off, are part of the command
            "  pytest *'test_failure_report_shows_the_seed_and_the_command_that_reproduces_it.py"
            "::test_fails[[]1[]]' --torch-seed=42",
        ]
    )
    assert result.stdout.str().count("This test ran with seed") == 1


def test_the_reproduce_command_works_where_pytest_was_started(pytester, run, monkeypatch):
    # the ini file at the repository root, pytest started in tests/: pytest reads the
    # paths on its command line from there, so the command names the file from there
    pytester.makeini("[pytest]\n")
    tests = pytester.mkdir("tests")
    (tests / "test_aug.py").write_text(
        "import pytest\n\n@pytest.mark.parametrize('p', ['a b'])\n"
        "def test_flip(torch_seed, p):\n    assert False\n"
    )
    monkeypatch.chdir(tests)
    result = run("--torch-seed=1234")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["  pytest *'test_aug.py::test_flip[[]a b[]]' --torch-seed=1234"])
    assert "tests/test_aug.py::test_flip" not in result.stdout.str().split("Reproduce with")[1]
    monkeypatch.chdir(pytester.path)
    result = run("--torch-seed=1234", "tests")
    result.stdout.fnmatch_lines(
        ["  pytest *'tests/test_aug.py::test_flip[[]a b[]]' --torch-seed=1234"]
    )


def test_random_state_is_restored_after_a_seeded_test_even_when_it_fails(pytester, run):
    pytester.makepyfile(
        """
        import random

        import numpy as np
        import torch

        random.seed(123)
        np.random.seed(123)
        torch.manual_seed(123)
        BEFORE = (random.getstate(), np.random.get_state()[1].copy(), torch.get_rng_state())

        def test_seeded_and_failing(torch_seed, make_tensor):
            random.random(); np.random.rand(); torch.rand(10); make_tensor(3)
            raise RuntimeError("boom")

        def test_state_is_back():
            assert random.getstate() == BEFORE[0]
            assert (np.random.get_state()[1] == BEFORE[1]).all()
            assert torch.equal(torch.get_rng_state(), BEFORE[2])
        """
    )
    result = run("-p", "no:randomly")
    result.assert_outcomes(passed=1, failed=1)


def test_make_tensor_is_seeded_and_lives_on_the_test_device(pytester, run):
    pytester.makepyfile(
        """
        import torch

        def test_device(torch_device, make_tensor):
            x = make_tensor(4, 3)
            assert x.device.type == torch_device.type
            print(f"VALUES {x.sum().item()!r}")

        def test_default_cpu(make_tensor):
            x = make_tensor((2, 2), dtype="float64", low=0, high=1)
            assert x.device.type == "cpu" and x.dtype == torch.float64
            assert 0 <= x.min() and x.max() <= 1
        """
    )
    first = run("-s", "--torch-device=cpu")
    first.assert_outcomes(passed=2)
    second = run("-s", "--torch-device=cpu")
    values = re.findall(r"VALUES (.*)", first.stdout.str())
    assert values and values == re.findall(r"VALUES (.*)", second.stdout.str())


def test_seeded_hook_is_called_with_the_seed(pytester, run):
    pytester.makeconftest(
        """
        SEEN = []

        def pytest_torch_seeded(item, seed):
            SEEN.append((item.name, seed))
        """
    )
    pytester.makepyfile(
        """
        from conftest import SEEN

        def test_x(torch_seed):
            assert SEEN == [("test_x", torch_seed)]
        """
    )
    run().assert_outcomes(passed=1)


def test_mismatch_hook_sees_the_error_and_the_test(pytester, run):
    pytester.makeconftest(
        """
        def pytest_torch_tensor_mismatch(config, item, error):
            error.add_detail(f"seen by hook in {item.name}: {len(error.mismatches)} mismatch")
        """
    )
    pytester.makepyfile(
        """
        import torch
        from pytest_torch.core import assert_close

        def test_x():
            assert_close(torch.zeros(3), torch.tensor([0.0, 1.0, 0.0]))
        """
    )
    result = run()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "E * Tensors are not close at output",
            "E   *mismatched elements: 1 of 3 (33.3%)",
            "E * seen by hook in test_x: 1 mismatch",
        ]
    )
    assert "compare.py" not in result.stdout.str()  # our frames are hidden
