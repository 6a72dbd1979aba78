"""Starting a session that counts instructions (``--torch-perf-measure=instructions``):
refuse, before any test runs, where it cannot work; otherwise run the session again
under Valgrind (``engines.instructions.valgrind``) and hand back its exit status.
"""

from __future__ import annotations

import pytest

from pytest_torch.core.devices import ACCELERATOR_TYPES
from pytest_torch.core.options import option_or_ini, option_source
from pytest_torch.perf.engines.instructions import client_requests, valgrind
from pytest_torch.perf.options import MEASURE, measures_nothing


def launch(config: pytest.Config) -> int | None:
    """The exit status of the session run under Valgrind, or None where this process
    runs the tests itself (it is that session, or an xdist worker of it, or nothing is
    measured)."""
    if measures_nothing(config):
        return None
    _refuse_gpu_devices(config)
    _refuse_missing_paths(config)
    problem = valgrind.unavailable()
    if problem is not None:
        raise pytest.UsageError(f"{MEASURE}=instructions: {problem}")
    if client_requests.running_on_valgrind():
        if valgrind.session() is None:
            raise pytest.UsageError(
                f"{MEASURE}=instructions: this pytest already runs under"
                " valgrind, started by hand. Run pytest itself: the plugin starts Valgrind"
                " with the options the counts need (Callgrind, instrumentation off until a"
                " check counts)"
            )
        config.add_cleanup(valgrind.threaded_from_now_on())
        config.pluginmanager.register(_UnderValgrind(), "torch_perf_under_valgrind")
        return None
    if getattr(config, "workerinput", None) is not None:
        raise pytest.UsageError(
            f"{MEASURE}=instructions: this xdist worker does not run under"
            " Valgrind (workers on other machines, --tx, are not supported in this mode)"
        )
    params = config.invocation_params
    return valgrind.run_session(list(params.args), params.dir)


class _UnderValgrind:
    """The session under Valgrind, once pytest's cache is set up."""

    @pytest.hookimpl(trylast=True)
    def pytest_configure(self, config: pytest.Config) -> None:
        valgrind.use_inductor_cache(config)


def _refuse_missing_paths(config: pytest.Config) -> None:
    """pytest's own error for a test path that does not exist, before Valgrind starts
    (the session under it would say the same, a minute later)."""
    if config.args_source != pytest.Config.ArgsSource.ARGS or config.option.pyargs:
        return
    for arg in config.args:
        path = arg.split("::", 1)[0]
        if path and not (config.invocation_params.dir / path).exists():
            raise pytest.UsageError(f"file or directory not found: {arg}")


def _refuse_gpu_devices(config: pytest.Config) -> None:
    """Counts see no GPU work: a run that asks for a GPU device type is a usage error."""
    chosen = str(option_or_ini(config, "torch_device"))
    asked = [part.strip() for part in chosen.split(",") if part.strip() in ACCELERATOR_TYPES]
    if asked:
        source = option_source(config, "torch_device", "--torch-device")
        raise pytest.UsageError(
            f"{MEASURE}=instructions with {source}={chosen}: instruction counts"
            f" see only the CPU's work, so a check on {asked[0]} would count its GPU"
            f" kernels as nothing. Count on the CPU (--torch-device=cpu) and time GPU code"
            f" with {MEASURE}=wall"
        )
