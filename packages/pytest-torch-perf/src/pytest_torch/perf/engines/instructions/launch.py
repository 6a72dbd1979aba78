"""Starting a session that counts instructions (``--torch-perf-measure=instructions``):
refuse, before any test runs, where it cannot work; otherwise run the session again
under Valgrind (``engines.instructions.valgrind``) and hand back its exit status.
"""

from __future__ import annotations

import pytest

from pytest_torch.core.devices import ACCELERATOR_TYPES
from pytest_torch.core.options import option_or_ini, option_source
from pytest_torch.perf.engines.instructions import client_requests, valgrind
from pytest_torch.perf.options import MEASURE

#: runs that measure nothing, which need no Valgrind
_NOTHING_MEASURED = ("help", "version", "collectonly", "showfixtures", "show_fixtures_per_test",
                     "markers")  # fmt: skip


def launch(config: pytest.Config) -> int | None:
    """The exit status of the session run under Valgrind, or None where this process
    runs the tests itself (it is that session, or an xdist worker of it, or nothing is
    measured)."""
    if any(config.getoption(name, default=None) for name in _NOTHING_MEASURED):
        return None
    _refuse_gpu_devices(config)
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
        return None
    if getattr(config, "workerinput", None) is not None:
        raise pytest.UsageError(
            f"{MEASURE}=instructions: this xdist worker does not run under"
            " Valgrind (workers on other machines, --tx, are not supported in this mode)"
        )
    params = config.invocation_params
    return valgrind.run_session(list(params.args), params.dir)


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
