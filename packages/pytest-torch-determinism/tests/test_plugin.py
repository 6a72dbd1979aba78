"""--torch-deterministic in real runs: applied through torch_seed, restored after."""

from __future__ import annotations

import os

import pytest
import torch

from pytest_torch.determinism import cublas

SUITE = """
import os
import torch


def test_seeded(torch_seed):
    assert torch.are_deterministic_algorithms_enabled() is {expected}
    assert torch.is_deterministic_algorithms_warn_only_enabled() is {warn_only}
    assert torch.backends.cudnn.deterministic is {expected}
    assert torch.backends.cudnn.benchmark is False
    assert (os.environ.get("CUBLAS_WORKSPACE_CONFIG") == ":4096:8") is {cublas}


def test_unseeded_tests_are_left_alone():
    assert not torch.are_deterministic_algorithms_enabled()


def test_after_a_seeded_test_everything_is_back(torch_seed):
    pass


def test_z_restored():
    assert not torch.are_deterministic_algorithms_enabled()
    assert not torch.backends.cudnn.deterministic
"""


#: whether this machine's torch is a CUDA build, as a fresh process sees it
CUDA_BUILD = cublas.cuda_build()


@pytest.fixture(autouse=True)
def _no_cublas_setting(monkeypatch):
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    # CUDA as a fresh process sees it, whatever ran before in this one; a CUDA build of
    # torch in in-process runs, so the variable's handling is tested on CPU-only builds
    monkeypatch.setattr(cublas, "cuda_initialised", lambda: False)
    monkeypatch.setattr(cublas, "cuda_build", lambda: True)


# records the variable when pytest imports it, before any test
CONFTEST = """
import os

SEEN = os.environ.get("CUBLAS_WORKSPACE_CONFIG")


def pytest_report_header():
    return f"conftest import saw CUBLAS_WORKSPACE_CONFIG={SEEN}"
"""


def _suite(pytester, expected: bool, warn_only: bool = False, cublas: bool | None = None) -> None:
    """``cublas``: whether the seeded test sees CUBLAS_WORKSPACE_CONFIG set (default:
    ``expected``)."""
    cublas = expected if cublas is None else cublas
    pytester.makepyfile(
        test_suite=SUITE.format(expected=expected, warn_only=warn_only, cublas=cublas)
    )


def test_off_by_default(pytester, run):
    _suite(pytester, expected=False)
    run().assert_outcomes(passed=4)


def test_flag_turns_deterministic_mode_on_for_seeded_tests(pytester, run):
    _suite(pytester, expected=True)
    result = run("--torch-deterministic")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(
        [
            "torch: deterministic algorithms for tests using torch_seed",
            "torch: CUBLAS_WORKSPACE_CONFIG=:4096:8 (set for this session)",
        ]
    )
    assert "PytestConfigWarning" not in result.stdout.str()
    assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ  # the session put it back
    assert not torch.are_deterministic_algorithms_enabled()
    result.stdout.fnmatch_lines(
        [
            "*- torch: what the checks reached -*",
            "torch: --torch-deterministic applied to 2 of 4 tests (those using torch_seed)",
        ]
    )


def test_a_cpu_only_build_of_torch_gets_no_cublas_setting(pytester, run, monkeypatch):
    monkeypatch.setattr(cublas, "cuda_build", lambda: False)
    _suite(pytester, expected=True, cublas=False)
    result = run("--torch-deterministic")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["torch: deterministic algorithms for tests using torch_seed"])
    result.stdout.no_fnmatch_line("*CUBLAS_WORKSPACE_CONFIG*")


def test_the_applied_line_has_a_heading_of_its_own_under_minus_r_a(pytester, run):
    # -rA prints a PASSES section; the line must not read as part of it
    _suite(pytester, expected=True)
    result = run("--torch-deterministic", "-rA")
    lines = result.stdout.lines
    at = next(i for i, line in enumerate(lines) if "applied to 2 of 4 tests" in line)
    heading = next(line for line in reversed(lines[:at]) if line.startswith(("=", "-")))
    assert "torch: what the checks reached" in heading, heading


def test_a_run_it_applied_to_no_test_says_so_and_what_to_do(pytester, run):
    pytester.makepyfile(
        """
        import torch

        def test_plain():
            assert not torch.are_deterministic_algorithms_enabled()
        """
    )
    result = run("--torch-deterministic")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "torch: --torch-deterministic applied to none of the 1 tests: it acts on tests that"
            " use the torch_seed fixture, and none of these did, so this run was not made"
            " deterministic. Request torch_seed in the tests*",
        ]
    )
    assert "applied to" not in run().stdout.str()  # without the flag: nothing to say


def test_the_count_comes_from_the_workers_under_xdist(pytester):
    pytest.importorskip("xdist")
    _suite(pytester, expected=True, cublas=CUDA_BUILD)  # a fresh process: the real build
    result = pytester.runpytest_subprocess(
        "-p", "xdist", "-p", "torch_determinism", "-n", "2", "--torch-deterministic"
    )
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["torch: --torch-deterministic applied to 2 of 4 tests*"])


def test_warn_only_and_the_ini_twins(pytester, run):
    _suite(pytester, expected=True, warn_only=True)
    pytester.makeini("[pytest]\ntorch_deterministic = true\ntorch_deterministic_warn_only = true\n")
    result = run()
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["torch: deterministic algorithms (warn only) for tests*"])


def test_an_existing_cublas_setting_is_kept(pytester, run, monkeypatch):
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")
    pytester.makepyfile(
        """
        import os

        def test_kept(torch_seed):
            assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"
        """
    )
    run("--torch-deterministic").assert_outcomes(passed=1)
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"


@pytest.mark.parametrize("how", ["flag", "ini"])
def test_set_before_the_conftests_are_imported(pytester, run, how):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile("def test_nothing(): pass")
    if how == "ini":
        pytester.makeini("[pytest]\ntorch_deterministic = true\n")
    result = run("--torch-deterministic") if how == "flag" else run()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["conftest import saw CUBLAS_WORKSPACE_CONFIG=:4096:8"])
    assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ


def test_not_set_without_the_flag(pytester, run):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile("def test_nothing(): pass")
    result = run()
    result.stdout.fnmatch_lines(["conftest import saw CUBLAS_WORKSPACE_CONFIG=None"])
    result.stdout.no_fnmatch_line("torch: CUBLAS_WORKSPACE_CONFIG*")


def test_a_plugin_registered_by_a_conftest_sets_it_at_configure(pytester, monkeypatch):
    # too late for the conftest that names it, in time for every test
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makeconftest(CONFTEST + '\npytest_plugins = ["torch_determinism"]\n')
    pytester.makepyfile(
        """
        import os

        def test_set(torch_seed):
            assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
        """
    )
    result = pytester.runpytest("--torch-deterministic")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "conftest import saw CUBLAS_WORKSPACE_CONFIG=None",
            "torch: CUBLAS_WORKSPACE_CONFIG=:4096:8 (set for this session)",
        ]
    )
    assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ


@pytest.mark.parametrize("exported", [":0:0", ""])
def test_a_non_deterministic_export_warns_and_is_kept(pytester, run, monkeypatch, exported):
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", exported)
    pytester.makepyfile("def test_nothing(): pass")
    result = run("--torch-deterministic")
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines(
        [
            f"torch: CUBLAS_WORKSPACE_CONFIG={exported!r} is exported, which is not deterministic:"
            " export CUBLAS_WORKSPACE_CONFIG=:4096:8 instead (see the warning)",
            "*warnings summary*",
            f"*PytestConfigWarning: --torch-deterministic: CUBLAS_WORKSPACE_CONFIG={exported!r} is"
            " exported, but torch accepts only :4096:8 or :16:8 under deterministic algorithms:"
            " every CUDA matrix product in a test using torch_seed will raise. Export"
            " CUBLAS_WORKSPACE_CONFIG=:4096:8 instead (or :16:8: less memory, maybe slower), or"
            " unset it and the plugin sets :4096:8 for the session.",
        ]
    )
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == exported


def test_a_warning_when_cuda_was_initialised_first(pytester, run, monkeypatch):
    monkeypatch.setattr(cublas, "cuda_initialised", lambda: True)
    pytester.makepyfile("def test_nothing(): pass")
    result = run("--torch-deterministic")
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines(
        [
            "torch: CUBLAS_WORKSPACE_CONFIG=:4096:8 (set for this session), after CUDA was"
            " initialised (see the warning)",
            "*PytestConfigWarning: --torch-deterministic set CUBLAS_WORKSPACE_CONFIG=:4096:8, but"
            " CUDA was already initialised (by a plugin or conftest imported before)*Export it"
            " before starting pytest: CUBLAS_WORKSPACE_CONFIG=:4096:8 pytest ...",
        ]
    )
    assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ


def test_restored_when_start_up_fails(pytester, run):
    pytester.makeconftest("raise RuntimeError('a broken conftest')")
    pytester.makepyfile("def test_nothing(): pass")
    result = run("--torch-deterministic")
    assert result.ret != 0
    assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ


def test_an_op_without_a_deterministic_implementation_fails_the_test(pytester, run):
    pytester.makepyfile(
        """
        import torch

        def test_scatter(torch_seed):
            values = torch.ones(6)
            torch.ops.pytest_torch_tests.fast_scatter(values, torch.arange(6) % 2, 2)
        """
    )
    result = run("--torch-deterministic")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*fast_scatter_cpu does not have a deterministic implementation*"])
    run("--torch-deterministic", "--torch-deterministic-warn-only")  # (the op raises itself)


def test_options_are_listed(pytester, run):
    result = run("--help")
    result.stdout.fnmatch_lines(
        [
            "torch-determinism: deterministic mode:",
            "  --torch-deterministic",
            "*--torch-deterministic-warn-only*",
        ]
    )


@pytest.mark.cuda(reason="CUDA's atomic kernels vary from run to run; the emulator's are the CPU's")
def test_real_cuda_nondeterminism_is_kernel_level(cuda, torch_seed):
    from pytest_torch.determinism import diagnose_nondeterminism

    # torch_seed seeds these draws and puts every generator back afterwards
    index = torch.randint(0, 8, (1 << 20,), device=cuda)
    values = torch.randn(1 << 20, device=cuda)

    def index_add(v):  # atomic float additions in another order on every run
        return torch.zeros(8, device=cuda).index_add_(0, index, v)

    def scatter_add(v):
        return torch.zeros(8, device=cuda).scatter_add_(0, index, v)

    result = diagnose_nondeterminism(index_add, values, runs=10)
    assert result.category == "Kernel-level", str(result)
    # CUDA's index_add_ has a deterministic implementation (a sorted index_put_)
    assert "disappears with torch.use_deterministic_algorithms(True)" in result.verdict
    assert [t.outcome for t in result.trials] == ["varies", "varies", "identical", "identical"]
    # fixed, or an op without a deterministic implementation, by torch version
    result = diagnose_nondeterminism(scatter_add, values, runs=10)
    assert result.category == "Kernel-level", str(result)
    assert not torch.are_deterministic_algorithms_enabled()


REFUSING = """
import torch


def test_scatter(torch_seed):
    torch.zeros(4).put_(torch.tensor([0, 0]), torch.tensor([1.0, 2.0]))


def test_scatter_unseeded():
    torch.use_deterministic_algorithms(True)
    try:
        torch.zeros(4).put_(torch.tensor([0, 0]), torch.tensor([1.0, 2.0]))
    finally:
        torch.use_deterministic_algorithms(False)


def test_own_failure(torch_seed):
    assert 1 == 2, "the user's own failure"
"""


def test_a_refusal_says_the_flag_did_it_and_how_to_run_without(pytester, run):
    pytester.makepyfile(test_refusing=REFUSING)
    result = run("--torch-deterministic", "--show-capture=no")
    result.assert_outcomes(failed=3)
    out = result.stdout.str()
    # torch's own message stays, the explanation follows it, once, for the seeded test
    result.stdout.fnmatch_lines(
        [
            "*RuntimeError: put_ does not have a deterministic implementation, but you set*",
            "*- torch-deterministic -*",
            "--torch-deterministic turned deterministic algorithms on for this test (it uses"
            " torch_seed), and put_ has no deterministic implementation, so torch raised the"
            " error above: the 'you set torch.use_deterministic_algorithms(True)' in it is the"
            " plugin's doing, not your code's.",
            "Run this test as before with: pytest *test_refusing.py::test_scatter (without"
            " --torch-deterministic)",
            "Or keep the flag and let such ops warn instead of raising:"
            " --torch-deterministic-warn-only (ini: torch_deterministic_warn_only = true); or"
            " replace put_ with an op that has a deterministic implementation.",
        ]
    )
    assert out.count("- torch-deterministic -") == 1  # not for the user's own switch
    assert "AssertionError: the user's own failure" in out


def test_a_refusal_under_the_ini_names_the_ini(pytester, run):
    pytester.makepyfile(test_refusing=REFUSING)
    pytester.makeini("[pytest]\ntorch_deterministic = true\n")
    result = run("-k", "test_scatter and not unseeded")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "torch_deterministic = true (ini) turned deterministic algorithms on*",
            "Run this test as before with: pytest *test_refusing.py::test_scatter"
            " -o torch_deterministic=false",
        ]
    )


def test_warn_only_lets_the_test_pass_and_a_warning_turned_error_is_explained(pytester, run):
    pytester.makepyfile(test_refusing=REFUSING)
    run(
        "--torch-deterministic",
        "--torch-deterministic-warn-only",
        "-k",
        "test_scatter and not unseeded",
    ).assert_outcomes(passed=1, warnings=1)
    result = run(
        "--torch-deterministic",
        "--torch-deterministic-warn-only",
        "-W",
        "error::UserWarning",
        "-k",
        "test_scatter and not unseeded",
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*with --torch-deterministic-warn-only turned deterministic algorithms on*-W error*"]
    )


def test_nan_where_deterministic_mode_filled_uninitialised_memory_is_explained(pytester, run):
    # a test that reads memory before writing it passes by luck in a plain run;
    # deterministic mode fills torch.empty with NaN, so it fails under the flag
    pytester.makepyfile(
        test_empty="""
        import torch

        def test_reads_before_writing(torch_seed):
            x = torch.empty(4)
            x[:2] = 1.0
            assert not torch.isnan(x).any()

        def test_other_failure(torch_seed):
            assert 1 == 2
        """
    )
    result = run("--torch-deterministic")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [
            "*- torch-deterministic -*",
            "This failure mentions NaN, and --torch-deterministic turned deterministic"
            " algorithms on for this test (it uses torch_seed), which also fills the memory"
            " torch leaves uninitialised (torch.empty*",
            "If it passes without the flag, that is the cause: pytest *test_empty.py"
            "::test_reads_before_writing (without --torch-deterministic); then write the"
            " memory before reading it*",
        ]
    )
    assert result.stdout.str().count("- torch-deterministic -") == 1  # not the other failure
