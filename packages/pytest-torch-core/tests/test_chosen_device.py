"""chosen_device: the concrete device a test was given, resolved as ``torch_device``
resolves it, once per device type and session."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from pytest_torch.core.chosen_device import chosen_device, resolve_device


class _Hook:
    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.calls: list[str] = []

    def pytest_torch_resolve_device(self, config: Any, device_type: str) -> Any:
        self.calls.append(device_type)
        return self.answers[device_type]


def _config(**answers: Any) -> Any:
    return SimpleNamespace(stash=pytest.Stash(), hook=_Hook(answers))


def _item(config: Any, params: dict[str, Any] | None = None, **funcargs: Any) -> Any:
    item = SimpleNamespace(config=config, funcargs=funcargs)
    if params is not None:
        item.callspec = SimpleNamespace(params=params)
    return item


def test_resolve_device_asks_the_hook_once_per_device_type():
    config = _config(cpu="cpu", cuda=torch.device("cuda", 1))
    assert resolve_device(config, "cpu") == torch.device("cpu")
    assert resolve_device(config, "cuda") == torch.device("cuda", 1)
    assert resolve_device(config, "cpu") == torch.device("cpu")
    assert resolve_device(config, "cuda") == torch.device("cuda", 1)
    assert config.hook.calls == ["cpu", "cuda"]
    # per session: another config asks again
    other = _config(cpu="meta")
    assert resolve_device(other, "cpu") == torch.device("meta")


def test_a_test_not_parametrized_by_torch_device_chose_none():
    config = _config()
    assert chosen_device(_item(config)) is None
    assert chosen_device(_item(config, params={"n": 1})) is None
    assert chosen_device(SimpleNamespace(config=config)) is None  # not a Function
    assert config.hook.calls == []


def test_the_parameter_is_resolved_before_setup():
    config = _config(cuda="cuda:1")
    item = _item(config, params={"torch_device": "cuda"})
    assert chosen_device(item) == torch.device("cuda", 1)
    assert chosen_device(item) == torch.device("cuda", 1)
    assert config.hook.calls == ["cuda"]
    # a parameter that is already a device (direct parametrization) is that device
    direct = _item(config, params={"torch_device": torch.device("cuda", 2)})
    assert chosen_device(direct) == torch.device("cuda", 2)


def test_after_setup_the_value_the_test_got_wins():
    config = _config(cuda="cuda:1")
    given = torch.device("cuda", 3)  # a conftest's own torch_device fixture, say
    item = _item(config, params={"torch_device": "cuda"}, torch_device=given)
    assert chosen_device(item) == given
    assert config.hook.calls == []


def test_in_a_run_it_is_the_device_torch_device_gives(pytester, run):
    pytester.makeconftest(
        """
        from pytest_torch.core.chosen_device import chosen_device

        CALLS = []
        BEFORE_SETUP = {}

        def pytest_torch_resolve_device(config, device_type):
            CALLS.append(device_type)
            return "cpu" if device_type == "cpu" else None

        def pytest_collection_modifyitems(items):
            for item in items:
                BEFORE_SETUP[item.nodeid] = chosen_device(item)

        def pytest_terminal_summary(terminalreporter):
            terminalreporter.write_line(f"resolve calls: {len(CALLS)}")
        """
    )
    pytester.makepyfile(
        """
        import pytest
        import torch

        from conftest import BEFORE_SETUP
        from pytest_torch.core.chosen_device import chosen_device

        def test_device(request, torch_device):
            assert torch_device == torch.device("cpu")
            assert chosen_device(request.node) == torch_device
            assert BEFORE_SETUP[request.node.nodeid] == torch_device

        @pytest.mark.parametrize("n", [1, 2])
        def test_with_another_parameter(request, torch_device, n):
            assert chosen_device(request.node) == torch_device

        def test_plain(request):
            assert chosen_device(request.node) is None
            assert BEFORE_SETUP[request.node.nodeid] is None
        """
    )
    result = run("--torch-device=cpu", "-v")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["*test_device[[]cpu[]] PASSED*"])
    # chosen_device's own resolution once, and the session-scoped fixture's once at most
    result.stdout.re_match_lines([r"resolve calls: [12]$"])


def test_an_overridden_hook_answer_is_what_it_returns(pytester, run):
    pytester.makeconftest(
        """
        def pytest_torch_resolve_device(config, device_type):
            return "meta" if device_type == "cpu" else None
        """
    )
    pytester.makepyfile(
        """
        from pytest_torch.core.chosen_device import chosen_device

        def test_x(request, torch_device):
            assert chosen_device(request.node) == torch_device
            assert chosen_device(request.node).type == "meta"
        """
    )
    run("--torch-device=cpu").assert_outcomes(passed=1)
