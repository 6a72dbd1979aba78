"""require_core: a sibling plugin gets core loaded, on any supported pytest."""

from __future__ import annotations

import pytest

SIBLING = """
import pytest

def pytest_addhooks(pluginmanager):
    from pytest_torch.core.loading import require_core

    require_core(pluginmanager, "fake_sibling")

def pytest_torch_seeded(item, seed):
    item.user_properties.append(("seen_seed", seed))
"""


@pytest.fixture
def sibling(pytester, monkeypatch):
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makepyfile(fake_sibling=SIBLING)
    pytester.syspathinsert()
    pytester.makepyfile(
        test_uses_core="""
        def test_x(torch_seed, request):
            assert request.node.user_properties == [("seen_seed", torch_seed)]
        """
    )
    return pytester


def test_a_sibling_alone_brings_core_with_it(sibling):
    result = sibling.runpytest("-p", "fake_sibling")
    result.assert_outcomes(passed=1)


def test_a_sibling_with_core_named_too(sibling):
    sibling.runpytest("-p", "torch_core", "-p", "fake_sibling").assert_outcomes(passed=1)
    sibling.runpytest("-p", "fake_sibling", "-p", "torch_core").assert_outcomes(passed=1)


def test_core_loaded_by_module_path_counts(sibling):
    result = sibling.runpytest("-p", "pytest_torch.core.plugin", "-p", "fake_sibling")
    result.assert_outcomes(passed=1)


def test_blocking_core_under_a_sibling_is_a_usage_error(sibling):
    result = sibling.runpytest("-p", "no:torch_core", "-p", "fake_sibling")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "ERROR: the fake_sibling plugin needs torch_core, which is blocked with"
            " -p no:torch_core. Remove -p no:torch_core, or block fake_sibling as well"
            " with -p no:fake_sibling."
        ]
    )
