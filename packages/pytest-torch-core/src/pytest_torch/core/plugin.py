"""pytest wiring of the core plugin (entry point ``torch_core``).

Options, the ``torch_devices`` marker, the ``torch_device``/``torch_seed``/``make_tensor``
fixtures and the report hooks. The work lives in the plain modules beside this one.
Nothing here imports torch at load time.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

import pytest

from pytest_torch.core import devices, hookspecs, reach, seeding, session, torch_logs
from pytest_torch.core.chosen_device import resolve_device
from pytest_torch.core.ids import plain_nodeid
from pytest_torch.core.markers import DEVICES
from pytest_torch.core.options import DEVICE, SEED, add_options, read_settings
from pytest_torch.core.rerun import rerun_command
from pytest_torch.core.selection import (
    device_parameters,
    parametrized_by_test,
    restriction,
    skip_reason,
    unavailable,
)
from pytest_torch.core.settings import get_settings, settings_key
from pytest_torch.core.state import CoreSession, get_session, session_key
from pytest_torch.core.tensors import tensor_factory
from pytest_torch.core.testkinds import is_unittest

if TYPE_CHECKING:
    import torch

seed_key = pytest.StashKey[int]()
#: a malformed marker of a test that pytest_generate_tests never saw (a unittest method)
marker_problem_key = pytest.StashKey[str]()
#: the end-of-run section of the lines on which tests each check acted on
REACH_TITLE = "torch: what the checks reached"


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    DEVICES.register(config)
    settings = read_settings(config)
    config.stash[settings_key] = settings
    state = config.stash[session_key] = CoreSession(settings)
    config.pluginmanager.register(_ReachCollector(state.reach), "torch_core_reach")
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
    return f"torch: devices {chosen} ({DEVICE}), base seed {settings.base_seed} ({SEED})"


@pytest.hookimpl(tryfirst=True)
def pytest_collection(session: pytest.Session) -> None:
    problem = unavailable(get_session(session.config))
    if problem is not None:
        raise pytest.UsageError(problem)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    try:
        wanted = restriction(metafunc)
    except ValueError as exc:
        raise pytest.Collector.CollectError(str(exc)) from None
    state = get_session(metafunc.config)
    if wanted is not None:
        state.restrictions_seen = True
    if "torch_device" in metafunc.fixturenames and not parametrized_by_test(metafunc):
        metafunc.parametrize("torch_device", device_parameters(state, wanted), indirect=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # A restricted test that does not use torch_device still must not run on a
    # machine without any of its device types (torch_device tests were handled when
    # they were parametrized).
    state = get_session(config)
    # unittest.TestCase methods never reach pytest_generate_tests: look at every test
    # when one is among them
    if not state.restrictions_seen and not any(map(is_unittest, items)):
        return
    for item in items:
        if "torch_device" in getattr(item, "fixturenames", ()):
            continue
        try:
            wanted = restriction(item)
        except ValueError as exc:  # a unittest method's marker: fails when it runs
            item.stash[marker_problem_key] = str(exc)
            continue
        if wanted is not None and not any(t in state.available() for t in wanted):
            item.add_marker(pytest.mark.skip(reason=skip_reason(wanted, state)))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    torch_logs.detach_capture_handlers()  # pytest's handlers are attached by now
    problem = item.stash.get(marker_problem_key, None)
    if problem is not None:
        pytest.fail(problem, pytrace=False)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    torch_logs.detach_capture_handlers()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    torch_logs.detach_capture_handlers()


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
        settings = get_settings(item.config)
        command = rerun_command(item.config, plain_nodeid(item), [f"{SEED}={settings.base_seed}"])
        report.sections.append(
            (
                "torch_seed",
                f"This test ran with seed {seed}, derived from base seed"
                f" {settings.base_seed} and the test id. Reproduce with:\n  {command}",
            )
        )
    return report


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    lines = get_session(config).reach.lines()
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
        device_type = get_session(request.config).selected()[0]
    return resolve_device(request.config, device_type)


@pytest.fixture
def torch_seed(request: pytest.FixtureRequest) -> Generator[int, None, None]:
    """Seed Python, NumPy and torch for this test and return the seed.

    The seed derives from ``--torch-seed`` and the test id; the previous random state
    is restored after the test, pass or fail.
    """
    settings = get_settings(request.config)
    seed = seeding.derive_seed(settings.base_seed, plain_nodeid(request.node))
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
    device: torch.device | str = "cpu"
    if "torch_device" in request.fixturenames:
        device = request.getfixturevalue("torch_device")
    return tensor_factory(device)
