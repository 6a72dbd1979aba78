"""pytest wiring of the distributed plugin (entry point ``torch_distributed``).

Three roles, decided at start-up:

- the **controller** (a plain pytest run, or an xdist worker): plans each
  ``torch_distributed`` test at collection (:mod:`.plan`), runs it on a rank pool
  (:mod:`.controller`, :mod:`.pool`) and logs one merged result (:mod:`.reports`);
- a **pool rank** (a session started by :mod:`.rank_session`): runs the tests it is
  handed, with its process group and device;
- a **torchrun rank** (pytest itself started by torchrun): joins that world
  (:mod:`.torchrun`).

The fixtures ``rank`` and ``world_size`` serve the last two. No torch import here.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_torch.core.loading import require_core
from pytest_torch.core.markers import definition_of
from pytest_torch.distributed.markers import DISTRIBUTED
from pytest_torch.distributed.options import RESTORE_ENV_OPTION, TIMEOUT_OPTION, add_options
from pytest_torch.distributed.world import (
    RankInfo,
    SharedContext,
    launched_by_torchrun,
    rank_key,
    shared_key,
)

if TYPE_CHECKING:
    from pytest_torch.distributed.controller import Controller, Tally
    from pytest_torch.distributed.plan import Plan

pytest_plugins = ["torch_core"]

plan_key: pytest.StashKey[Plan] = pytest.StashKey()
_controller_key: pytest.StashKey[Controller] = pytest.StashKey()
_tally_key: pytest.StashKey[Tally] = pytest.StashKey()
TORCHRUN = "torch_distributed_torchrun"


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    require_core(pluginmanager, "torch_distributed")


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


_role_key = pytest.StashKey[str]()


def _role(config: pytest.Config) -> str:
    role = config.stash.get(_role_key, None)
    if role is None:
        if rank_key in config.stash:
            role = "pool-rank"
        elif launched_by_torchrun():
            role = "torchrun"
        else:
            role = "controller"
        config.stash[_role_key] = role
    return role


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    DISTRIBUTED.register(config)
    timeout = TIMEOUT_OPTION.read(config)  # a bad value is a usage error at start-up
    RESTORE_ENV_OPTION.read(config)
    role = _role(config)
    if role == "torchrun":
        from pytest_torch.distributed.torchrun import TorchrunWorld

        config.pluginmanager.register(TorchrunWorld(config, timeout), TORCHRUN)
    elif role == "controller":
        from pytest_torch.distributed.controller import Tally

        tally = config.stash[_tally_key] = Tally()
        config.pluginmanager.register(tally, "torch_distributed_tally")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    mark = DISTRIBUTED.mark_on(metafunc)
    if mark is None:
        return
    from pytest_torch.distributed.plan import check_machine, read_arguments

    try:
        arguments = read_arguments(mark.args, mark.kwargs, metafunc.definition.nodeid)
        check_machine(arguments, metafunc.definition.nodeid)
    except ValueError as exc:
        raise pytest.Collector.CollectError(str(exc)) from None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _role(config) != "controller":
        return
    marked = [item for item in items if DISTRIBUTED.mark_on(item) is not None]
    if not marked:
        return
    from pytest_torch.distributed.controller import Controller
    from pytest_torch.distributed.plan import make_plan, read_arguments

    controller = config.stash.get(_controller_key, None)
    if controller is None:
        controller = config.stash[_controller_key] = Controller(config)
    timeout = TIMEOUT_OPTION.read(config)
    for item in marked:
        mark = DISTRIBUTED.mark_on(item)
        assert mark is not None
        try:
            arguments = read_arguments(mark.args, mark.kwargs, definition_of(item).nodeid)
        except ValueError as exc:  # unittest methods: never seen by pytest_generate_tests
            raise pytest.UsageError(str(exc)) from None
        callspec = getattr(item, "callspec", None)
        device = callspec.params.get("torch_device") if callspec is not None else None
        plan = make_plan(
            arguments, device if isinstance(device, str) else None, timeout, item.nodeid
        )
        if plan.skip is None and os.name != "posix":
            plan = dataclasses.replace(
                plan, skip="rank pools need POSIX pipes: not supported on Windows yet"
            )
        item.stash[plan_key] = plan
        if plan.skip is not None:
            item.add_marker(pytest.mark.skip(reason=plan.skip))
        controller.planned(item, plan)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
    plan = item.stash.get(plan_key, None)
    controller = item.config.stash.get(_controller_key, None)
    if plan is None or controller is None or getattr(plan, "skip", None) is not None:
        return None
    ihook = item.ihook
    ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    for report in controller.run(item, plan):
        ihook.pytest_runtest_logreport(report=report)
    ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


def pytest_sessionfinish(session: pytest.Session) -> None:
    controller = session.config.stash.get(_controller_key, None)
    if controller is not None:
        controller.close()


def pytest_unconfigure(config: pytest.Config) -> None:
    from pytest_torch.distributed.controller import close_quietly

    close_quietly(config.stash.get(_controller_key, None))


@pytest.hookimpl(optionalhook=True)
def pytest_torch_reach_lines(config: pytest.Config) -> list[str] | None:
    tally = config.stash.get(_tally_key, None)
    return tally.lines() if tally is not None else None


def _info(request: pytest.FixtureRequest, name: str) -> RankInfo:
    info = request.config.stash.get(rank_key, None)
    if info is None:
        raise pytest.fail.Exception(
            f"the {name} fixture is for tests that run on ranks: mark the test with"
            f" {DISTRIBUTED.example}",
            pytrace=False,
        )
    return info


@pytest.fixture
def rank(request: pytest.FixtureRequest) -> int:
    """This rank's number, 0 to world_size - 1 (a ``torch_distributed`` test)."""
    return _info(request, "rank").rank


@pytest.fixture
def world_size(request: pytest.FixtureRequest) -> int:
    """How many ranks run this test (a ``torch_distributed`` test)."""
    return _info(request, "world_size").world_size


def _shared(request: pytest.FixtureRequest, name: str) -> SharedContext:
    _info(request, name)
    shared = request.config.stash.get(shared_key, None)
    if shared is None:  # a rank between tests: cannot happen in a test's fixtures
        raise pytest.fail.Exception(f"the {name} fixture has no test to serve", pytrace=False)
    return shared


@pytest.fixture
def shared_tmp_path(request: pytest.FixtureRequest) -> Path:
    """One folder for every rank of a ``torch_distributed`` test, the same path on each
    and fresh for each test: rank 0 saves a checkpoint there, every rank loads it."""
    shared = _shared(request, "shared_tmp_path")
    if shared.shared_dir is None:  # the folder is made for tests that name the fixture
        raise pytest.fail.Exception(
            "shared_tmp_path: name it among the test's arguments (or a fixture's) rather"
            " than asking for it with request.getfixturevalue: the ranks agree on the"
            " folder before the test starts",
            pytrace=False,
        )
    if not shared.shared_dir.is_dir():
        raise pytest.fail.Exception(
            f"shared_tmp_path: this rank cannot see the folder rank 0 made"
            f" ({shared.shared_dir}): the ranks run on machines without a shared file"
            " system. Give pytest --basetemp on one that every machine mounts.",
            pytrace=False,
        )
    return shared.shared_dir


@pytest.fixture
def shared_store(request: pytest.FixtureRequest) -> Any:
    """A ``torch.distributed`` store every rank of a ``torch_distributed`` test shares
    (``set``, ``get``, ``add``, ``wait``, ``compare_set``), holding this test's keys only."""
    return _shared(request, "shared_store").store
