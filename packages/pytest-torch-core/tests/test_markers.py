"""MarkerSpec: one declaration gives the --markers help and the argument binding."""

from __future__ import annotations

import pytest

from pytest_torch.core.markers import MarkerSpec

LATENCY = MarkerSpec(
    "demo_latency",
    "fail if slower.",
    positional=("ms", "stat"),
    defaults={"stat": "median"},
    example="@pytest.mark.demo_latency(ms=50)",
)
BUDGET = MarkerSpec("demo_budget", "fail if bigger.", positional=("mb",), defaults={"device": None})
DEVICES = MarkerSpec("demo_devices", "only these.", variadic="types")
FLAG = MarkerSpec("demo_flag", "a flag.")
PREFIX = "t.py::x: @pytest.mark.demo"


def test_help_lines_show_the_signature():
    assert LATENCY.help_line() == "demo_latency(ms, stat='median'): fail if slower."
    assert BUDGET.help_line() == "demo_budget(mb, device=None): fail if bigger."
    assert DEVICES.help_line() == "demo_devices(*types): only these."
    assert FLAG.help_line() == "demo_flag: a flag."


def test_binding_by_position_and_keyword_with_defaults():
    assert LATENCY.bind((5,), {}, PREFIX) == {"ms": 5, "stat": "median"}
    assert LATENCY.bind((), {"ms": 5, "stat": "p90"}, PREFIX) == {"ms": 5, "stat": "p90"}
    assert LATENCY.bind((), {}, PREFIX) == {"ms": None, "stat": "median"}
    assert BUDGET.bind((1,), {"device": "cuda"}, PREFIX) == {"mb": 1, "device": "cuda"}
    assert BUDGET.bind((), {}, PREFIX, defaults={"device": "cpu"})["device"] == "cpu"
    assert DEVICES.bind(("cpu", "cuda"), {}, PREFIX) == {"types": ("cpu", "cuda")}
    assert FLAG.bind((), {}, PREFIX) == {}


@pytest.mark.parametrize(
    ("spec", "args", "kwargs", "message"),
    [
        (LATENCY, (), {"millis": 5}, "got unknown keyword(s) millis; it takes ms= and stat=."
         " Example: @pytest.mark.demo_latency(ms=50)"),
        (LATENCY, (5,), {"ms": 5}, "takes ms and stat once. Example: @pytest.mark.demo_latency"),
        (LATENCY, (5, "p90", 1), {}, "takes ms and stat once."),
        (BUDGET, (1, "cuda"), {}, "takes mb once."),
        (DEVICES, (), {"kind": "cpu"}, "takes types as positional arguments, got keyword(s) kind"),
        (FLAG, (1,), {}, "takes no arguments, got (1,)."),
        (FLAG, (), {"x": 1}, "takes no arguments, got keyword(s) x."),
    ],
)  # fmt: skip
def test_wrong_arguments_are_errors_that_start_with_the_prefix(spec, args, kwargs, message):
    with pytest.raises(ValueError) as raised:
        spec.bind(args, kwargs, PREFIX)
    assert str(raised.value).startswith(f"{PREFIX} ")
    assert message in str(raised.value)


def test_registering_puts_the_help_line_in_pytest_markers(pytester):
    pytester.makeconftest(
        "from pytest_torch.core.markers import MarkerSpec\n"
        "def pytest_configure(config):\n"
        "    MarkerSpec('demo_budget', 'fail if bigger.', positional=('mb',)).register(config)\n"
    )
    result = pytester.runpytest("--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.demo_budget(mb): fail if bigger."])


def test_the_marker_on_a_test_is_found_at_collection_and_at_run_time(pytester):
    pytester.makeconftest(
        "import pytest\n"
        "from pytest_torch.core.markers import MarkerSpec\n"
        "BUDGET = MarkerSpec('demo_budget', 'fail if bigger.', positional=('mb',))\n"
        "def pytest_configure(config):\n"
        "    BUDGET.register(config)\n"
        "def pytest_generate_tests(metafunc):\n"
        "    mark = BUDGET.mark_on(metafunc)\n"
        "    print('collected', metafunc.definition.name, mark and mark.args)\n"
        "def pytest_runtest_setup(item):\n"
        "    mark = BUDGET.mark_on(item)\n"
        "    print('ran', item.name, mark and mark.args)\n"
    )
    pytester.makepyfile(
        "import pytest\n"
        "pytestmark = pytest.mark.demo_budget(1)\n"
        "@pytest.mark.demo_budget(2)\n"
        "def test_own(): pass\n"
        "def test_module_s(): pass\n"
    )
    result = pytester.runpytest("-s", "-p", "no:randomly")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "collected test_own (2,)",
            "collected test_module_s (1,)",
            "*ran test_own (2,)",
            "*ran test_module_s (1,)",
        ]
    )


def test_no_marker_on_a_test_is_none(pytester):
    pytester.makeconftest(
        "from pytest_torch.core.markers import MarkerSpec\n"
        "def pytest_runtest_setup(item):\n"
        "    assert MarkerSpec('demo_flag', 'a flag.').mark_on(item) is None\n"
    )
    pytester.makepyfile("def test_plain(): pass\n")
    pytester.runpytest().assert_outcomes(passed=1)
