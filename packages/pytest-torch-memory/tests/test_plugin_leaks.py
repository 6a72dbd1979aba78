"""torch_memory_leak and --torch-leak-check in real runs."""

from __future__ import annotations

import pytest

# these tests draw from the global random generators; torch_seed restores them
pytestmark = pytest.mark.usefixtures("torch_seed")

TRAINING = """
import pytest
import torch
import torch.nn.functional as F

history = []
activations = []


@pytest.fixture
def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))


@pytest.fixture
def batch():
    return torch.randn(32, 8), torch.randn(32, 1)


@pytest.fixture
def adam(model):
    return torch.optim.Adam(model.parameters(), lr=0.01)


def train_step(model, optimizer, batch):
    optimizer.zero_grad(set_to_none=True)
    loss = F.mse_loss(model(batch[0]), batch[1])
    loss.backward()
    optimizer.step()
    return loss


@pytest.mark.torch_memory_leak(iterations=5)
def test_keeps_every_loss(model, adam, batch):
    history.append(train_step(model, adam, batch))


@pytest.mark.torch_memory_leak(iterations=3)
def test_hook_keeps_activations(model, batch):
    model[1].register_forward_hook(lambda module, args, out: activations.append(out))
    with torch.no_grad():
        model(batch[0])


@pytest.mark.torch_memory_leak(iterations=5)
def test_adam_training(model, adam, batch):
    history.append(train_step(model, adam, batch).item())


@pytest.mark.torch_memory_leak(5)
def test_adam_with_scheduler(model, adam, batch):
    scheduler = getattr(adam, "_test_scheduler", None)
    if scheduler is None:
        scheduler = adam._test_scheduler = torch.optim.lr_scheduler.StepLR(adam, 2, gamma=0.5)
    train_step(model, adam, batch)
    scheduler.step()


@pytest.mark.torch_memory_leak(iterations=3)
def test_compiled_forward(model, batch):
    compiled = torch.compile(model, backend="eager")
    with torch.no_grad():
        compiled(batch[0])
"""


def test_leaks_are_found_and_named_and_clean_loops_pass(pytester, run):
    pytester.makepyfile(test_training=TRAINING)
    result = run()
    result.assert_outcomes(passed=3, failed=2)
    result.stdout.fnmatch_lines(
        [
            "*_ test_keeps_every_loss _*",
            "memory leak: each of the 5 runs after the warm-up left more behind.",
            "  live tensors after each run: * (+1 per run; tolerance 0), * after one more, traced run",
            "What accumulates:",
            "  7 tensors, 1 per run: shape ??, float32, cpu, grad_fn=MseLossBackward0 (+* per run)",
            "    created at test_training.py:* in train_step(): `loss = F.mse_loss(*`",
            "    held by list `history` in module `test_training`",
            "    they hold an autograd graph (MseLossBackward0), which keeps every step's"
            " activations alive: store loss.item() (a Python float) instead of loss",
            "How it was checked: 1 warm-up run, then 5 runs of the test body with the same"
            " fixtures*",
        ]
    )
    # every run registers one more hook, but they all keep the same output tensor
    result.stdout.fnmatch_lines(
        [
            "*_ test_hook_keeps_activations _*",
            "memory leak: each of the 3 runs after the warm-up left more behind.",
            "  5 tensors, 1 per run: shape ?32, 16?, float32, cpu (+2.0 KiB per run)",
            "    created at test_training.py:* in test_hook_keeps_activations(): `model(batch?0?)`",
            "    held by list `activations` in module `test_training`",
        ]
    )
    result.stdout.no_fnmatch_line("*Traceback*")


def test_tolerance_from_the_marker_and_from_the_ini(pytester, run):
    pytester.makepyfile(
        """
        import pytest
        import torch

        kept = []

        @pytest.mark.torch_memory_leak(iterations=3, tolerance_tensors=1, tolerance_bytes="1KiB")
        def test_allowed():
            kept.append(torch.ones(16))

        @pytest.mark.torch_memory_leak(iterations=3)
        def test_from_ini():
            kept.append(torch.ones(16))
        """
    )
    result = run()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*(+1 per run; tolerance 0)*"])
    pytester.makeini(
        "[pytest]\ntorch_leak_tolerance_tensors = 1\ntorch_leak_tolerance_bytes = 64KiB\n"
    )
    run().assert_outcomes(passed=2)


def test_run_wide_switch_checks_every_test_with_the_same_fixtures(pytester, run):
    pytester.makepyfile(
        """
        import pytest
        import torch

        made = []
        kept = []

        @pytest.fixture
        def tensor():
            made.append(1)
            return torch.ones(4)

        def test_clean(tensor):
            (tensor * 2).sum()

        def test_leaky(tensor):
            kept.append(tensor * 2)

        def test_fixture_made_once():
            assert len(made) == 2  # one per test above, not one per run
        """
    )
    run().assert_outcomes(passed=3)
    result = run("--torch-leak-check", "--torch-leak-iterations=3")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        ["*_ test_leaky _*", "memory leak: each of the 3 runs after the warm-up left more behind."]
    )


def test_perf_tests_are_never_repeated(pytester):
    pytest.importorskip("pytest_torch.perf", reason="needs pytest-torch-perf installed")
    pytester.makepyfile(
        test_timed="""
        import torch

        calls = []

        def test_timed(latency):
            calls.append(1)
            latency(torch.nn.Linear(2, 2), torch.ones(1, 2))

        def test_timed_once():
            assert calls == [1]
        """,
        test_marked="""
        import pytest

        @pytest.mark.torch_memory_leak
        def test_marked(latency):
            pass
        """,
    )
    args = ("-p", "torch_memory", "-p", "torch_perf", "--torch-perf-max-time=0.01")
    result = pytester.runpytest(*args, "--torch-leak-check", "test_timed.py")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(  # not repeated, and the end of the run says so
        [
            "torch: --torch-leak-check checked 1 of the 2 test bodies that ran; not checked:",
            "  1 test: the body must run once (it uses latency, which measures performance):"
            " repeating it would distort what it measures;*(test_timed.py::test_timed)",
        ]
    )
    result = pytester.runpytest(*args, "test_marked.py")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "*::test_marked: @pytest.mark.torch_memory_leak repeats the test body, but this"
            " test must run once: it uses latency, which measures performance.*"
        ]
    )


def test_a_strict_xfail_leak_shows_as_expected_failure(pytester, run):
    pytester.makepyfile(
        """
        import pytest
        import torch

        kept = []

        @pytest.mark.xfail(strict=True, reason="keeps every output")
        @pytest.mark.torch_memory_leak
        def test_known_leak():
            kept.append(torch.ones(1))
        """
    )
    result = run("-rx")
    result.assert_outcomes(xfailed=1)
    # an expected failure hides its message: the leak report still reaches the summary
    result.stdout.fnmatch_lines(
        [
            "*- torch memory: known leaks (tests marked xfail) -*",
            "test_a_strict_xfail_leak_shows_as_expected_failure.py::test_known_leak:",
            "  memory leak: each of the 5 runs after the warm-up left more behind.",
            "*held by list `kept` in module*",
        ]
    )


def test_state_is_restored_after_a_leak_check_even_when_the_body_fails(pytester, run):
    pytester.makepyfile(
        """
        import gc
        import pytest
        import torch

        runs = []

        @pytest.mark.torch_memory_leak(iterations=3)
        def test_fails_in_third_run():
            runs.append(torch.zeros(1))  # it grows, so the check runs it again
            assert len(runs) < 3, "third run"

        def test_after():
            assert gc.get_freeze_count() == 0
            assert not torch._C._autograd._profiler_enabled()
        """
    )
    result = run()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*AssertionError: third run*",
            "*- torch-leak-check -*",
            "@pytest.mark.torch_memory_leak runs this test's body up to 4 times to watch its"
            " memory (once to warm up, then until a run leaves no more behind than the one"
            " before, at most 3), and one more, traced, when it leaks. Run 3 raised the"
            " error above; the first 2 runs passed. A run without the check runs it once.",
            "Every run gets the same fixture values (the same tmp_path folder, with what"
            " earlier runs wrote) and starts from the same random state*",
        ]
    )
    assert "Run it as before with" not in result.stdout.str()  # the marker asked for it
    # the body draws no random numbers: randomness is not what differs between the runs
    assert "random numbers" not in result.stdout.str()


# an earlier test leaves the global generator seeded; the next draws unseeded inputs
# that pass for the first draw after that seed (0.496) and fail for the next (0.768),
# like a gradcheck of random inputs that fails for one seed in five
UNSEEDED = """
import torch

def test_earlier():
    torch.manual_seed(0)

def test_draws_unseeded_inputs():
    x = torch.rand(())
    assert x < 0.5, f"an unlucky draw: {x.item():.3f}"
"""


def test_every_run_of_the_leak_check_draws_what_a_plain_run_draws(pytester, run):
    pytester.makepyfile(test_unseeded=UNSEEDED)
    run().assert_outcomes(passed=2)
    run("--torch-leak-check").assert_outcomes(passed=2)


def test_a_later_run_that_raises_says_so_and_how_to_run_as_before(pytester, run):
    pytester.makepyfile(
        """
        calls = []

        def test_counts_its_calls():
            calls.append(1)
            assert len(calls) == 1, "called again"
        """
    )
    result = run("--torch-leak-check")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*AssertionError: called again*",
            "--torch-leak-check runs every test's body up to 6 times*Run 2 raised the error above;"
            " the first run passed.*",
            "*a global or module attribute, a class attribute, a cache, a counter*",
            "Run it as before with: pytest *test_a_later_run_that_raises_says_so_and_how_to_run_as_before.py::test_counts_its_calls (without --torch-leak-check)",
        ]
    )
    assert "random numbers" not in result.stdout.str()
    run().assert_outcomes(passed=1)


def test_a_later_run_that_raises_names_randomness_only_where_the_body_draws(pytester, run):
    pytester.makepyfile(
        """
        import torch

        calls = []

        def test_draws_then_counts():
            x = torch.rand(3)
            calls.append(1)
            assert len(calls) == 1, "called again"

        def test_seeded_draws_then_counts(torch_seed):
            x = torch.rand(3)
            calls.append(1)
            assert len(calls) == 2, "called again"
        """
    )
    result = run("--torch-leak-check", "-p", "no:randomly")
    result.assert_outcomes(failed=2)
    text = result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "This test draws random numbers (torch's CPU generator) without torch_seed: its"
            " draws come from whatever state earlier tests left*Request torch_seed*",
        ]
    )
    assert text.count("This test draws random numbers") == 1  # not the seeded one


def test_a_file_left_by_an_earlier_run_is_named_as_such(pytester, run):
    pytester.makepyfile(
        """
        def test_writes(tmp_path):
            with open(tmp_path / "out.txt", "x") as file:
                file.write("x")
        """
    )
    result = run("--torch-leak-check")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*FileExistsError*",
            "The error is a file that already exists: an earlier run wrote it*",
        ]
    )
    assert "random numbers" not in result.stdout.str()


def test_leaks_are_checked_in_xdist_workers(pytester):
    pytester.makepyfile(
        """
        import pytest
        import torch

        kept = []

        @pytest.mark.parametrize("n", [1, 2])
        @pytest.mark.torch_memory_leak(iterations=3)
        def test_keeps(n):
            kept.append(torch.ones(n))

        @pytest.mark.parametrize("n", [1, 2])
        @pytest.mark.torch_memory_leak(iterations=3)
        def test_clean(n):
            torch.ones(n).sum()
        """
    )
    result = pytester.runpytest_subprocess("-p", "torch_memory", "-p", "xdist", "-n", "2")
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines(["*held by list `kept` in module `test_leaks_are_checked*`"])


@pytest.mark.accelerator
def test_accelerator_leak_in_bytes_and_accelerator_peak(pytester, run, accelerator):
    pytester.makepyfile(
        f"""
        import pytest
        import torch

        DEVICE = "{accelerator}"

        class Cache:
            def __init__(self):
                self.blocks = []

        cache = Cache()

        @pytest.mark.torch_memory_leak(iterations=3)
        def test_device_leak():
            cache.blocks.append(torch.empty(2**20, dtype=torch.uint8, device=DEVICE))

        @pytest.mark.torch_memory_leak(iterations=3)
        def test_device_clean():
            torch.ones(2**20, device=DEVICE).sum().item()

        @pytest.mark.torch_max_memory(mb=16, device=DEVICE)
        def test_device_over():
            torch.empty(32 * 2**20, dtype=torch.uint8, device=DEVICE)
        """
    )
    result = run()
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(
        [
            f"*bytes allocated on {accelerator}:* after each run: * (+1.0 MiB per run; tolerance 0 B)",
            "*held by list in attribute `blocks` of a `Cache` object*",
            # the leak test's blocks are still alive: they count as allocated at the start
            f"peak memory on {accelerator}:* was * MiB, over the torch_max_memory budget of 16 MiB*",
            "  added by the test body at its peak:            32.0 MiB",
        ]
    )


def test_a_tensor_cached_by_a_methods_lru_cache_is_held_by_that_method(pytester, run):
    pytester.makepyfile(
        test_cached="""
        import functools
        import itertools

        import pytest
        import torch

        lengths = itertools.count(8)


        class Positions:
            @functools.lru_cache
            def table(self, length):
                return torch.arange(length, dtype=torch.float32)


        positions = Positions()


        @pytest.mark.torch_memory_leak(iterations=3)
        def test_a_new_length_every_step():
            positions.table(next(lengths))
        """
    )
    result = run()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*held by the cache of `Positions.table` (functools.lru_cache) (attribute `table`"
            " of class `Positions` in module `test_cached`)*",
            "*a functools.lru_cache keeps every result it returned*",
        ]
    )
