"""Typed options with ini twins: errors name where the bad value came from."""

from __future__ import annotations

import pytest

PLUGIN = """
import pytest
from pytest_torch.core.options import add_option_with_ini, float_option, int_option


def pytest_addoption(parser):
    group = parser.getgroup("demo")
    add_option_with_ini(parser, group, "--demo-count", ini="demo_count", help="h", default="3")
    add_option_with_ini(parser, group, "--demo-ms", ini="demo_ms", help="h", default="0.5")


def pytest_configure(config):
    count = int_option(config, "demo_count", "--demo-count", minimum=1, maximum=8)
    ms = float_option(config, "demo_ms", "--demo-ms", zero=True)
    config.demo = (count, ms)


def pytest_report_header(config):
    return f"demo: {config.demo}"
"""


@pytest.fixture
def run(pytester):
    pytester.makeconftest(PLUGIN)
    pytester.makepyfile("def test_x(): pass")
    return pytester.runpytest


def test_values_from_the_command_line_the_ini_file_and_the_defaults(run, pytester):
    run().stdout.fnmatch_lines(["demo: (3, 0.5)"])
    run("--demo-count=+8", "--demo-ms=0").stdout.fnmatch_lines(["demo: (8, 0.0)"])
    pytester.makeini("[pytest]\ndemo_count = 2\n")
    run().stdout.fnmatch_lines(["demo: (2, 0.5)"])
    run("--demo-count=4").stdout.fnmatch_lines(["demo: (4, 0.5)"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--demo-count=0",), "--demo-count: expected a whole number from 1 to 8, got '0'."),
        (("--demo-count=2.5",), "--demo-count: expected a whole number from 1 to 8, got '2.5'."),
        (("--demo-count=٣",), "--demo-count: expected a whole number from 1 to 8, got '٣'."),
        (("--demo-ms=-1",), "--demo-ms: expected a finite number >= 0, got '-1'."),
        (("--demo-ms=nan",), "--demo-ms: expected a finite number >= 0, got 'nan'."),
    ],
)
def test_bad_values_are_usage_errors_naming_the_flag(run, args, message):
    result = run(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{message}*Example: *"])


def test_a_bad_ini_value_names_the_ini_file(run, pytester):
    pytester.makeini("[pytest]\ndemo_ms = fast\n")
    result = run()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*demo_ms (in tox.ini): expected a finite number >= 0, got 'fast'. Example: --demo-ms=1.0"]
    )


def test_register_once_registers_one_instance(pytester):
    from pytest_torch.core.ondemand import register_once

    config = pytester.parseconfig()
    made = []

    class Hooks:
        def __init__(self):
            made.append(self)

    register_once(config, "demo_hooks", Hooks)
    register_once(config, "demo_hooks", Hooks)
    assert len(made) == 1 and config.pluginmanager.get_plugin("demo_hooks") is made[0]
