"""The torch_device fixture, the torch_devices marker and --torch-device, in real runs."""

from __future__ import annotations

import pytest
import torch

# these tests draw from the global random generators; torch_seed restores them
pytestmark = pytest.mark.usefixtures("torch_seed")

HAS_CUDA = torch.cuda.is_available()


def test_parametrized_by_device_type_with_stable_ids(pytester, run):
    pytester.makepyfile(
        """
        import torch

        def test_on_device(torch_device):
            assert isinstance(torch_device, torch.device)
            assert torch.ones(1, device=torch_device).device.type == torch_device.type

        def test_plain():
            pass
        """
    )
    result = run("-v")
    result.assert_outcomes(passed=2 if not HAS_CUDA else 3)
    result.stdout.fnmatch_lines(["*::test_on_device[[]cpu[]] PASSED*", "*::test_plain PASSED*"])
    result.stdout.no_fnmatch_line("*test_plain[[]*")


def test_header_names_devices_and_seed(pytester, run):
    pytester.makepyfile("def test_x(): pass")
    run().stdout.fnmatch_lines(
        ["torch: devices all available (--torch-device), base seed 0 (--torch-seed)"]
    )


def test_device_option_and_ini_twin_command_line_wins(pytester, run):
    pytester.makepyfile("def test_on_device(torch_device): pass")
    pytester.makeini("[pytest]\ntorch_device = tpu\n")
    # the ini value is invalid, but the command line wins and is the one used
    result = run("-v", "--torch-device=cpu")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*test_on_device[[]cpu[]] PASSED*"])
    result = run()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: torch_device (in tox.ini): unknown device type 'tpu'*"])


def test_device_ini_alone_is_used(pytester, run):
    pytester.makepyfile("def test_on_device(torch_device): pass")
    pytester.makeini("[pytest]\ntorch_device = cpu\n")
    result = run("-v")
    result.stdout.fnmatch_lines(["torch: devices cpu *", "*test_on_device[[]cpu[]] PASSED*"])


def test_unknown_device_is_a_usage_error(pytester, run):
    pytester.makepyfile("def test_x(): pass")
    result = run("--torch-device=tpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "ERROR: --torch-device: unknown device type 'tpu'; expected a comma-separated"
            " list of cpu, cuda, xpu, mps, or 'all'."
        ]
    )
    assert "Traceback" not in result.stderr.str() + result.stdout.str()


@pytest.mark.skipif(HAS_CUDA, reason="checks a machine without CUDA")
def test_unavailable_device_asked_for_explicitly_is_a_usage_error(pytester, run):
    pytester.makepyfile("def test_x(torch_device): pass")
    result = run("--torch-device=cpu,cuda")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "ERROR: --torch-device: cuda asked for but not available on this machine"
            " (available: cpu)*"
        ]
    )


def test_marker_restricts_and_skips_absent_devices_with_a_reason(pytester, run):
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.torch_devices("cuda")
        def test_gpu_only(torch_device):
            assert torch_device.type == "cuda"

        @pytest.mark.torch_devices("cpu", "cuda")
        def test_both(torch_device):
            pass

        @pytest.mark.torch_devices("cuda")
        def test_gpu_without_fixture():
            import torch
            assert torch.cuda.is_available()

        @pytest.mark.torch_devices("cpu")
        class TestCpu:
            def test_in_class(self, torch_device):
                assert torch_device.type == "cpu"
        """
    )
    result = run("-v", "-rs", "--strict-markers")
    if HAS_CUDA:
        result.assert_outcomes(passed=5)
        return
    result.assert_outcomes(passed=2, skipped=2)
    for line in (
        "*::test_gpu_only[[]cuda[]] SKIPPED*",
        "*::test_both[[]cpu[]] PASSED*",
        "*::test_gpu_without_fixture SKIPPED*",
        "*::TestCpu::test_in_class[[]cpu[]] PASSED*",
        "SKIPPED [[]1[]] *.py:3: needs cuda; not available on this machine (available: cpu)",
        "SKIPPED [[]1[]] *.py:11: needs cuda; not available on this machine (available: cpu)",
    ):
        result.stdout.fnmatch_lines([line])
    result.stdout.no_fnmatch_line("*test_both[[]cuda[]]*")


def test_marker_on_a_device_not_selected_says_so(pytester, run):
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.torch_devices("cpu")
        def test_cpu_only(torch_device):
            pass
        """
    )
    pytester.makeini("[pytest]\n")
    if not HAS_CUDA:
        # the only other choice is cpu itself; use the marker/selection logic via "all"
        result = run("-v", "--torch-device=all")
        result.assert_outcomes(passed=1)
        return
    result = run("-rs", "--torch-device=cuda")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*needs cpu; cpu not selected by --torch-device*"])


@pytest.mark.parametrize(
    ("marker", "expected"),
    [
        ('torch_devices("tpu")', "unknown device type 'tpu'; expected a comma-separated list of"),
        ("torch_devices()", "needs one or more device type names"),
        ("torch_devices(1)", "needs one or more device type names"),
        ('torch_devices(device="cuda")', "takes device types as positional arguments"),
    ],
)
def test_bad_marker_is_a_collection_error_naming_the_test(pytester, run, marker, expected):
    pytester.makepyfile(
        f"""
        import pytest

        @pytest.mark.{marker}
        def test_bad(torch_device):
            pass

        @pytest.mark.{marker}
        def test_bad_without_fixture():
            pass
        """
    )
    result = run()
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines([f"*.py::test_bad: @pytest.mark.torch_devices*{expected}*"])
    assert "Traceback" not in result.stdout.str()
    assert "plugin.py" not in result.stdout.str()


def test_marker_is_registered(pytester, run):
    run("--markers").stdout.fnmatch_lines(
        ["@pytest.mark.torch_devices(*types): run this test only*"]
    )


def test_help_lists_options_in_the_torch_group_with_ini_twins(pytester, run):
    result = run("--help")
    result.stdout.fnmatch_lines(
        [
            "torch: devices, seeds and tensors (pytest-torch):",
            "*--torch-device=TYPES*",
            "*--torch-seed=N*",
        ]
    )
    result.stdout.fnmatch_lines(["*torch_device (string):*", "*torch_seed (string):*"])


def test_user_parametrization_of_torch_device_is_respected(pytester, run):
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.parametrize("torch_device", ["cpu"], indirect=True)
        def test_x(torch_device):
            assert torch_device.type == "cpu"
        """
    )
    result = run("-v")
    result.assert_outcomes(passed=1)


def test_higher_scoped_fixtures_can_use_the_device(pytester, run):
    pytester.makepyfile(
        """
        import pytest, torch

        CALLS = []

        @pytest.fixture(scope="module")
        def model(torch_device):
            CALLS.append(torch_device)
            return torch.nn.Linear(2, 2).to(torch_device)

        def test_a(model, torch_device):
            assert next(model.parameters()).device.type == torch_device.type

        def test_b(model):
            assert len(CALLS) == 1
        """
    )
    result = run("--torch-device=cpu")
    result.assert_outcomes(passed=2)


def test_resolve_device_hook_decides_the_concrete_device(pytester, run):
    pytester.makeconftest(
        """
        import torch

        def pytest_torch_resolve_device(config, device_type):
            if device_type == "cpu":
                return "meta"
        """
    )
    pytester.makepyfile(
        """
        def test_x(torch_device, make_tensor):
            assert torch_device.type == "meta"
            assert make_tensor(2).device.type == "meta"
        """
    )
    result = run("-v", "--torch-device=cpu")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*test_x[[]cpu[]] PASSED*"])


def test_the_devices_marker_restricts_unittest_methods_too(pytester, run):
    # unittest.TestCase methods never reach pytest_generate_tests: a suite of them alone
    # must still skip a test that needs a device this machine lacks
    pytester.makepyfile(
        """
        import unittest

        import pytest

        class TestKernels(unittest.TestCase):
            @pytest.mark.torch_devices("cpu")
            def test_on_cpu(self):
                pass

            @pytest.mark.torch_devices("mps", "xpu")
            def test_elsewhere(self):
                raise AssertionError("ran without its device")

            @pytest.mark.torch_devices(device="cuda")
            def test_bad_marker(self):
                raise AssertionError("ran despite a malformed marker")
        """
    )
    result = run("-rs")
    result.assert_outcomes(passed=1, skipped=1, errors=1)  # the bad marker: at its set-up
    result.stdout.fnmatch_lines(
        [
            "*::TestKernels::test_bad_marker: @pytest.mark.torch_devices takes device types as"
            " positional arguments, got keyword(s) device.*",
            "SKIPPED [[]1[]] *needs * or *; not available on this machine*",
        ]
    )
    assert "ran despite" not in result.stdout.str()


@pytest.mark.accelerator
def test_torch_device_and_torch_seed_on_the_accelerator(pytester, run, accelerator):
    """The accelerator torch reports gets its own variant, and torch_seed seeds its
    generators and puts them back."""
    pytester.makepyfile(
        f"""
        import torch

        def test_draw(torch_device, torch_seed):
            first = torch.randn(3, device=torch_device)
            torch.manual_seed(torch_seed)
            assert torch.equal(torch.randn(3, device=torch_device), first)
            assert first.device.type == torch_device.type
            if torch_device.type != "cpu":
                assert torch_device == torch.device("{accelerator}", 0)
        """
    )
    module = torch.get_device_module(accelerator)
    torch.ones(1, device=accelerator)  # initialised: its generators have a state to keep
    before = module.get_rng_state_all()
    result = run("-v", "-p", "no:randomly")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        ["*test_draw[[]cpu[]] PASSED*", f"*test_draw[[]{accelerator}[]] PASSED*"]
    )
    after = module.get_rng_state_all()
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))
