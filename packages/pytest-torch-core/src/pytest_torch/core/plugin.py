"""pytest wiring of the core plugin (entry point ``torch_core``).

Options, the ``torch_devices`` marker, the ``torch_device``/``torch_seed``/``make_tensor``
fixtures and the report hooks. The work lives in the plain modules beside this one.
Nothing here imports torch at load time.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

import pytest

from pytest_torch.core import devices, reach, seeding, session
from pytest_torch.core.markers import DEVICES
from pytest_torch.core.options import add_option_with_ini, option_or_ini, option_source
from pytest_torch.core.selection import restriction, skip_reason
from pytest_torch.core.settings import CoreSettings, get_settings, settings_key
from pytest_torch.core.testkinds import is_unittest

if TYPE_CHECKING:
    import torch

seed_key = pytest.StashKey[int]()
#: a malformed marker of a test that pytest_generate_tests never saw (a unittest method)
marker_problem_key = pytest.StashKey[str]()
#: the end-of-run section of the lines on which tests each check acted on
REACH_TITLE = "torch: what the checks reached"


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from pytest_torch.core import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("torch", "torch: devices, seeds and tensors (pytest-torch)")
    add_option_with_ini(
        parser,
        group,
        "--torch-device",
        ini="torch_device",
        default="all",
        metavar="TYPES",
        help="Device types that tests using the torch_device fixture run on: a comma"
        " list of cpu, cuda, xpu, mps, or 'all' available ones.",
    )
    add_option_with_ini(
        parser,
        group,
        "--torch-seed",
        ini="torch_seed",
        default="0",
        metavar="N",
        help="Base seed of the torch_seed fixture; each test derives its own seed from"
        " it and its test id.",
    )


def pytest_configure(config: pytest.Config) -> None:
    DEVICES.register(config)
    device_source = option_source(config, "torch_device", "--torch-device")
    seed_source = option_source(config, "torch_seed", "--torch-seed")
    try:
        device_types = devices.parse_device_types(
            str(option_or_ini(config, "torch_device")), source=device_source
        )
        base_seed = seeding.parse_base_seed(option_or_ini(config, "torch_seed"), source=seed_source)
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    settings = CoreSettings(device_types, device_source, base_seed)
    config.stash[settings_key] = settings
    config.pluginmanager.register(_ReachCollector(settings.reach), "torch_core_reach")
    session.push(config)


class _ReachCollector:
    """Adds up which tests each check acted on, from this process's reports and, on
    the xdist controller, its workers'."""

    def __init__(self, tally: reach.Reach) -> None:
        self.tally = tally

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "teardown":
            self.tally.add(report)


def pytest_unconfigure(config: pytest.Config) -> None:
    session.pop(config)


def pytest_report_header(config: pytest.Config) -> str:
    settings = get_settings(config)
    chosen = "all available" if settings.device_types is None else ",".join(settings.device_types)
    return (
        f"torch: devices {chosen} (--torch-device), base seed {settings.base_seed} (--torch-seed)"
    )


@pytest.hookimpl(tryfirst=True)
def pytest_collection(session: pytest.Session) -> None:
    settings = get_settings(session.config)
    asked = settings.device_types or []
    if any(t != "cpu" for t in asked):
        missing = [t for t in asked if t not in settings.available()]
        if missing:
            raise pytest.UsageError(
                f"{settings.device_source}: {', '.join(missing)} asked for but not available"
                f" on this machine (available: {', '.join(settings.available())}). Drop it"
                f" from the list, or leave the option out to use every available device."
            )


def _already_parametrized(metafunc: pytest.Metafunc) -> bool:
    for marker in metafunc.definition.iter_markers("parametrize"):
        names = marker.args[0] if marker.args else marker.kwargs.get("argnames", "")
        if isinstance(names, str):
            names = [n.strip() for n in names.split(",")]
        if "torch_device" in names:
            return True
    return False


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    try:
        wanted = restriction(metafunc)
    except ValueError as exc:
        raise pytest.Collector.CollectError(str(exc)) from None
    if wanted is not None:
        get_settings(metafunc.config).restrictions_seen = True
    if "torch_device" not in metafunc.fixturenames or _already_parametrized(metafunc):
        return
    settings = get_settings(metafunc.config)
    selected = settings.selected()
    if wanted is not None:
        runnable = [t for t in selected if t in wanted]
        if not runnable:
            reason = skip_reason(wanted, settings)
            params = [pytest.param(t, id=t, marks=pytest.mark.skip(reason=reason)) for t in wanted]
            metafunc.parametrize("torch_device", params, indirect=True)
            return
        selected = runnable
    metafunc.parametrize("torch_device", selected, ids=selected, indirect=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # A restricted test that does not use torch_device still must not run on a
    # machine without any of its device types (torch_device tests were handled when
    # they were parametrized).
    settings = get_settings(config)
    # unittest.TestCase methods never reach pytest_generate_tests: look at every test
    # when one is among them
    if not settings.restrictions_seen and not any(map(is_unittest, items)):
        return
    for item in items:
        if "torch_device" in getattr(item, "fixturenames", ()):
            continue
        try:
            wanted = restriction(item)
        except ValueError as exc:  # a unittest method's marker: fails when it runs
            item.stash[marker_problem_key] = str(exc)
            continue
        if wanted is not None and not any(t in settings.available() for t in wanted):
            item.add_marker(pytest.mark.skip(reason=skip_reason(wanted, settings)))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    problem = item.stash.get(marker_problem_key, None)
    if problem is not None:
        pytest.fail(problem, pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    item.config.stash[session.current_item_key] = item
    try:
        return (yield)
    finally:
        item.config.stash[session.current_item_key] = None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    reach.attach(item, report)
    seed = item.stash.get(seed_key, None)
    if report.failed and seed is not None:
        from pytest_torch.core.rerun import rerun_command

        settings = get_settings(item.config)
        command = rerun_command(item.config, item.nodeid, [f"--torch-seed={settings.base_seed}"])
        report.sections.append(
            (
                "torch_seed",
                f"This test ran with seed {seed}, derived from base seed"
                f" {settings.base_seed} and the test id. Reproduce with:\n  {command}",
            )
        )
    return report


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    lines = get_settings(config).reach.lines()
    for offered in config.hook.pytest_torch_reach_lines(config=config):
        lines += offered or []
    if lines:
        terminalreporter.write_sep("-", REACH_TITLE)
        for line in lines:
            terminalreporter.write_line(line)


@pytest.hookimpl(trylast=True)
def pytest_torch_resolve_device(config: pytest.Config, device_type: str) -> torch.device:
    return devices.default_device(device_type)


@pytest.fixture(scope="session")
def torch_device(request: pytest.FixtureRequest) -> torch.device:
    """The device this test runs on; tests using it are parametrized per device type.

    Ids are the device type (``test_x[cpu]``, ``test_x[cuda]``); the concrete device
    (``cuda:1`` on an xdist worker, say) comes from the ``pytest_torch_resolve_device``
    hook.
    """
    device_type = getattr(request, "param", None)
    if device_type is None:
        device_type = get_settings(request.config).selected()[0]
    from pytest_torch.core.chosen_device import resolve_device

    return resolve_device(request.config, device_type)


@pytest.fixture
def torch_seed(request: pytest.FixtureRequest) -> Generator[int, None, None]:
    """Seed Python, NumPy and torch for this test and return the seed.

    The seed derives from ``--torch-seed`` and the test id; the previous random state
    is restored after the test, pass or fail.
    """
    settings = get_settings(request.config)
    seed = seeding.derive_seed(settings.base_seed, request.node.nodeid)
    snapshot = seeding.capture()
    request.node.stash[seed_key] = seed
    try:
        seeding.seed_all(seed)
        request.config.hook.pytest_torch_seeded(item=request.node, seed=seed)
        yield seed
    finally:
        seeding.restore(snapshot)


@pytest.fixture
def make_tensor(request: pytest.FixtureRequest, torch_seed: int) -> Callable[..., torch.Tensor]:
    """A factory of seeded test tensors on the test's device (CPU without torch_device).

    ``make_tensor(*shape, dtype=torch.float32, device=None, low=None, high=None,
    requires_grad=False, **kwargs)``; the shape may also be one tuple. Other keywords
    go to ``torch.testing.make_tensor`` (``noncontiguous``, ``exclude_zero``, ...).
    """
    from pytest_torch.core.tensors import tensor_factory

    device: torch.device | str = "cpu"
    if "torch_device" in request.fixturenames:
        device = request.getfixturevalue("torch_device")
    return tensor_factory(device)
