"""Options declared once (``core.options.Option``): help, ini twin, typed values, and
usage errors that name where a bad value came from."""

from __future__ import annotations

import pytest

PLUGIN = """
import pytest
from pytest_torch.core.options import Option, checked, number, switch, text, whole


def _mode(value, source):
    if value not in ("fast", "slow"):
        raise ValueError(f"{source}: expected fast or slow, got {value!r}")
    return value


COUNT = Option("--demo-count", "demo_count", "How many.", parse=whole(minimum=1), default="3",
               metavar="N")
RATE = Option("--demo-rate", "demo_rate", "How fast.", parse=number(), default="0.5",
              metavar="X")
LOUD = Option("--demo-loud", "demo_loud", "Shout.", parse=switch, kind="switch")
MODE = Option("--demo-mode", "demo_mode", "Mode.", parse=checked(_mode), default="slow",
              metavar="M", const="fast")
PATH = Option("--demo-path", "demo_path", "Where.", parse=text, metavar="DIR")


def pytest_addoption(parser):
    group = parser.getgroup("demo")
    for option in (COUNT, RATE, LOUD, MODE, PATH):
        option.add(parser, group)


def pytest_configure(config):
    config.demo = tuple(o.read(config) for o in (COUNT, RATE, LOUD, MODE, PATH))
    config.demo_given = COUNT.given(config)


def pytest_report_header(config):
    return f"demo: {config.demo} given={config.demo_given}"
"""


@pytest.fixture
def run(pytester):
    pytester.makeconftest(PLUGIN)
    pytester.makepyfile("def test_x(): pass")
    return pytester.runpytest


def test_typed_values_from_defaults_command_line_and_ini(run, pytester):
    run().stdout.fnmatch_lines(["demo: (3, 0.5, False, 'slow', None) given=False"])
    run("--demo-count=4", "--demo-loud", "--demo-mode", "--demo-path=out").stdout.fnmatch_lines(
        ["demo: (4, 0.5, True, 'fast', 'out') given=True"]
    )
    pytester.makeini("[pytest]\ndemo_count = 2\ndemo_loud = true\ndemo_mode = fast\n")
    run().stdout.fnmatch_lines(["demo: (2, 0.5, True, 'fast', None) given=False"])


def test_help_shows_each_option_with_its_default_and_ini_twin(run):
    result = run("--help")
    result.stdout.fnmatch_lines(
        [
            "*--demo-count=N*How many. Default: 3. (ini: demo_count)*",
            "*--demo-loud*Shout. (ini: demo_loud)*",
            "*demo_count (string):*How many. (command line: --demo-count)*",
        ]
    )


@pytest.mark.parametrize(
    ("args", "ini", "message"),
    [
        (("--demo-count=0",), "", "--demo-count: expected a whole number >= 1, got '0'."),
        (("--demo-rate=-1",), "", "--demo-rate: expected a positive, finite number, got '-1'."),
        (("--demo-mode=odd",), "", "--demo-mode: expected fast or slow, got 'odd'"),
        ((), "demo_mode = odd", "demo_mode (in tox.ini): expected fast or slow, got 'odd'"),
    ],
)
def test_bad_values_are_usage_errors_naming_their_source(run, pytester, args, ini, message):
    if ini:
        pytester.makeini(f"[pytest]\n{ini}\n")
    result = run(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{message}*"])
