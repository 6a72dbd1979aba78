"""Bad marker arguments and machines that cannot hold the ranks: errors naming the test
and the marker, before any rank starts; a device the machine lacks: a skip that says
why."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ("world_size=0", "*world_size must be a whole number of ranks, 1 or more; got 0*"),
        ("world_size='2'", "*world_size must be a whole number of ranks, 1 or more; got '2'*"),
        ("", "*needs world_size, the number of ranks*"),
        ("2, ranks=3", "*got unknown keyword(s) ranks; it takes world_size=*"),
        ("2, backend='nccl'", "*backend 'nccl' is not available in this torch build*"),
        ("2, timeout=-1", "*timeout must be a positive number of seconds; got -1*"),
        ("2, device='tpu'", "*unknown device type 'tpu'*"),
        ("100000", "*world_size=100000 needs about * GiB for the ranks' processes alone*"),
    ],
)
def test_bad_marker_is_a_collection_error_naming_the_test(run, pytester, arguments, expected):
    pytester.makepyfile(
        test_x=f"""
        import pytest

        @pytest.mark.torch_distributed({arguments})
        def test_ranks():
            pass
        """
    )
    result = run()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [f"*test_x.py::test_ranks: @pytest.mark.torch_distributed{expected}"]
    )
    assert "rank pools started" not in result.stdout.str()


def test_a_device_the_machine_lacks_is_a_skip_with_the_reason(run, pytester) -> None:
    pytester.makepyfile(
        test_x="""
        import pytest

        @pytest.mark.torch_distributed(world_size=2, device="mps")
        def test_on_mps():
            pass
        """
    )
    result = run("-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(
        ["SKIPPED * torch_distributed(world_size=2) cannot run here: no mps device here"]
    )


def test_a_bad_timeout_option_is_a_usage_error(run, pytester) -> None:
    pytester.makepyfile(test_x="def test_x(): pass")
    result = run("--torch-distributed-timeout=soon")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--torch-distributed-timeout*soon*"])


def test_the_ini_twin_sets_the_timeout(run, pytester) -> None:
    pytester.makeini("[pytest]\ntorch_distributed_timeout = 2\n")
    pytester.makepyfile(
        test_x="""
        import time
        import pytest

        @pytest.mark.torch_distributed(world_size=1)
        def test_slow():
            time.sleep(60)
        """
    )
    result = run()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["timed out after 2 s: rank 0 of 1 did not finish call*"])
