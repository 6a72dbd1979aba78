"""The family's own suite: every test must leave torch's global state as it found it.

An autouse guard snapshots the process-wide state the plugins touch (random-number
generators, deterministic-algorithm flags, cuDNN and matmul settings, thread counts,
sync-debug mode, grad and inference mode, default dtype and device, active torch modes,
the profiler, garbage-collector freezes, torch.compile's configuration and callbacks,
environment variables) before each test and
fails the test, also a failing one, when anything differs afterwards. Most tests run
the plugins in-process through pytester, so a plugin that forgets to undo a change is
caught by the test that exercised it.

The ``machine`` fixtures at the end let a test choose how an inner run's perf
measurements see the machine (quiet or busy), so no verdict depends on what else this
machine is doing while the suite runs.

The accelerator kit: tests marked ``accelerator`` test device-generic behaviour and run
on whatever accelerator torch reports (a GPU, or the emulated one that
``--emulated-accelerator`` builds from ``tests/emulator/`` and loads: that option runs
those tests only); tests marked ``cuda`` need CUDA itself. Both skip with the reason
where they cannot run; the ``accelerator`` fixture gives the device type.

The shared test kit of the packages' suites is here too: numpy and torch imported once
(in-process pytester runs drop the modules a run imported, and these cannot be imported
twice in one process) and ``run``, which runs pytest in-process on the pytester folder
with the package's own plugin enabled explicitly, so its tests behave the same with
plugin autoload on or off.

Each plugin package's sdist ships this file and pytest.ini at its root, beside its
tests/ (force-include in the package's pyproject.toml): its tests run from the unpacked
sdist (``pytest tests``, the package installed) with this kit and this guard, as they
do here. So this file imports nothing but torch, numpy and pytest at its top.
"""

from __future__ import annotations

import gc
import os
import random
import re
import sys
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import numpy
import pytest
import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

ENVIRONMENT = (
    "CUBLAS_WORKSPACE_CONFIG",
    "CUDA_VISIBLE_DEVICES",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "PYTORCH_CUDA_ALLOC_CONF",
    "TORCH_SHOW_CPP_STACKTRACES",
)
ENVIRONMENT_PREFIXES = ("PYTEST_TORCH_", "TORCH_CI_")


CUDA_INITIALISED = "torch.cuda.is_initialized()"
#: what a CUDA set up during a test must show: its state starts from these
CUDA_DEFAULTS = {"torch.cuda.get_sync_debug_mode()": 0, "torch.cuda.current_device()": 0}


def _cuda_state() -> dict[str, Any]:
    if not torch.cuda.is_available():
        return {}
    if not torch.cuda.is_initialized():  # reading the state below would initialise it
        return {CUDA_INITIALISED: False}
    return {
        CUDA_INITIALISED: True,
        "torch.cuda.get_rng_state_all()": [s.tolist() for s in torch.cuda.get_rng_state_all()],
        "torch.cuda.get_sync_debug_mode()": torch.cuda.get_sync_debug_mode(),
        "torch.cuda.current_device()": torch.cuda.current_device(),
    }


def _current_accelerator() -> str | None:
    """The type of the accelerator this torch build reports, present or not."""
    accel = getattr(torch, "accelerator", None)
    current = accel.current_accelerator() if accel is not None else None
    return None if current is None else str(current.type)


def _accelerator_state() -> dict[str, Any]:
    """The generators and current device of an accelerator other than CUDA that torch
    reports (the emulated one under --emulated-accelerator), once it is set up."""
    kind = _current_accelerator()
    if kind is None or kind in ("cuda", "mps"):
        return {}
    module = torch.get_device_module(kind)
    if not module.is_initialized():
        return {}
    name = f"torch.{kind}"
    return {
        f"{name}.get_rng_state_all()": [s.tolist() for s in module.get_rng_state_all()],
        f"{name}.current_device()": module.current_device(),
    }


def _cuda_started(before: dict[str, Any], after: dict[str, Any]) -> None:
    """A test that was first to use CUDA initialised it, which cannot be undone: compare
    what it left with CUDA's defaults instead (the RNG starts from seeds queued before
    initialisation, so it has no fixed default to compare with)."""
    if before.get(CUDA_INITIALISED) is False and after.get(CUDA_INITIALISED) is True:
        after.pop("torch.cuda.get_rng_state_all()", None)
        before.update(CUDA_DEFAULTS, **{CUDA_INITIALISED: True})


def snapshot(*, python_rng: bool) -> dict[str, Any]:
    """What a test must not change, by the expression that reads it."""

    state: dict[str, Any] = {
        "torch.get_rng_state()": torch.get_rng_state().tolist(),
        "torch.are_deterministic_algorithms_enabled()": (
            torch.are_deterministic_algorithms_enabled()
        ),
        "torch.is_deterministic_algorithms_warn_only_enabled()": (
            torch.is_deterministic_algorithms_warn_only_enabled()
        ),
        "torch.utils.deterministic.fill_uninitialized_memory": (
            torch.utils.deterministic.fill_uninitialized_memory  # type: ignore[attr-defined]
        ),
        "torch.backends.cudnn.deterministic": torch.backends.cudnn.deterministic,
        "torch.backends.cudnn.benchmark": torch.backends.cudnn.benchmark,
        "torch.backends.cudnn.enabled": torch.backends.cudnn.enabled,
        "torch.backends.cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
        "torch.backends.cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "torch.get_float32_matmul_precision()": torch.get_float32_matmul_precision(),
        "torch.get_num_threads()": torch.get_num_threads(),
        "torch.get_num_interop_threads()": torch.get_num_interop_threads(),
        "torch.is_grad_enabled()": torch.is_grad_enabled(),
        "torch.is_inference_mode_enabled()": torch.is_inference_mode_enabled(),
        "torch.is_anomaly_enabled()": torch.is_anomaly_enabled(),
        "torch.get_default_dtype()": torch.get_default_dtype(),
        "torch.get_default_device()": torch.get_default_device(),
        "torch function modes": len(torch.overrides._get_current_function_mode_stack()),
        "torch dispatch modes": len(_get_current_dispatch_mode_stack()),
        "torch profiler enabled": torch.autograd.profiler._is_profiler_enabled,
        "gc.isenabled()": gc.isenabled(),
        "gc.get_freeze_count()": gc.get_freeze_count(),
        **_cuda_state(),
        **_accelerator_state(),
    }
    state.update(_compiler_state())
    if python_rng:
        state["random.getstate()"] = random.getstate()
        state["numpy.random.get_state()"] = repr(numpy.random.get_state())
    for name, value in sorted(os.environ.items()):
        if name in ENVIRONMENT or name.startswith(ENVIRONMENT_PREFIXES):
            state[f"os.environ[{name!r}]"] = value
    for name in ENVIRONMENT:
        state.setdefault(f"os.environ[{name!r}]", None)
    return state


COMPILER_STATE = ("torch._dynamo.config.", "torch._inductor.config.", "torch.compile callbacks")


def _stable_repr(value: Any) -> str:
    """repr, with a set's elements in a fixed order: torch may put back an equal set
    built in another order, which is no change."""
    if isinstance(value, (set, frozenset)):
        return f"{type(value).__name__}({sorted(repr(item) for item in value)})"
    return repr(value)


def _compiler_state() -> dict[str, Any]:
    """torch.compile's configuration and its registered compile callbacks, once loaded."""
    state: dict[str, Any] = {}
    for name in ("torch._dynamo.config", "torch._inductor.config"):
        module = sys.modules.get(name)
        if module is not None:
            for key, value in module.get_config_copy().items():
                state[f"{name}.{key}"] = _stable_repr(value)
    callback = sys.modules.get("torch._dynamo.callback")
    if callback is not None:
        handler = callback.callback_handler
        state["torch.compile callbacks"] = (
            len(handler.start_callbacks),
            len(handler.end_callbacks),
        )
    return state


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


@pytest.fixture(autouse=True)
def _global_state_guard(request: pytest.FixtureRequest) -> Generator[None, None, None]:
    # pytest-randomly reseeds Python's and NumPy's generators itself around each test
    python_rng = not request.config.pluginmanager.has_plugin("randomly")
    before = snapshot(python_rng=python_rng)
    yield
    after = snapshot(python_rng=python_rng)
    _cuda_started(before, after)
    for key in after.keys() - before.keys():
        if key.startswith(COMPILER_STATE):  # loaded by this test: its defaults, not a change
            del after[key]
    changed = [
        f"  {key}: {_short(before.get(key))} -> {_short(after.get(key))}"
        for key in sorted(before.keys() | after.keys())
        if before.get(key) != after.get(key)
    ]
    if changed:
        pytest.fail(
            "the test left global state changed (the plugins must undo every global change;"
            " a test that changes state on purpose must restore it):\n" + "\n".join(changed),
            pytrace=False,
        )


@pytest.fixture(autouse=True)
def _drop_compiled_code() -> Generator[None, None, None]:
    """torch.compile's code cache keeps the tensors of every compiled model alive (their
    guards refer to them): a later test's live-tensor and peak-memory figures would then
    depend on which tests ran before it. Each test starts with an empty cache."""

    def compiled_frames() -> int:
        dynamo = sys.modules.get("torch._dynamo")
        return 0 if dynamo is None else int(dynamo.utils.counters["frames"]["total"])

    before = compiled_frames()
    yield
    if compiled_frames() != before:  # a test that compiled nothing costs nothing here
        torch._dynamo.reset()
        gc.collect()  # the cache's entries are held in reference cycles


# Modules an in-process run may import but must not drop afterwards: torch (and what it
# loads lazily: torch.compile's machinery, distributed ops) registers operators with its
# C++ side, which refuses a second registration when the module is imported again; and
# a second copy of the family's modules would make two classes of each exception (an
# `except NondeterminismError` in one test missing the error another copy raised). The
# plugins keep their state in config.stash, so one copy serves every inner run.
KEPT_MODULES = (
    "torch", "numpy", "matplotlib", "PIL", "sympy", "triton", "pytest_torch", "zope", "readline",
)  # fmt: skip


def _keep_heavy_modules(pytester: pytest.Pytester) -> None:
    from _pytest.pytester import SysModulesSnapshot

    def snapshot() -> SysModulesSnapshot:
        return SysModulesSnapshot(preserve=lambda name: name.split(".")[0] in KEPT_MODULES)

    # pytester's own hook for this is private; without it, inner runs still work as long
    # as the conftests import these modules first
    if hasattr(pytester, "_Pytester__take_sys_modules_snapshot") and hasattr(
        pytester, "_sys_modules_snapshot"
    ):
        pytester._Pytester__take_sys_modules_snapshot = snapshot  # type: ignore[attr-defined]
        pytester._sys_modules_snapshot = snapshot()  # the one restored after the test


@pytest.fixture
def pytester(pytester: pytest.Pytester) -> pytest.Pytester:
    """Inner runs keep their written order: the outer suite runs in random order
    (pytest-randomly), but the expectations of an inner run are about one order."""
    _keep_heavy_modules(pytester)
    inline_run = pytester.inline_run
    runpytest_subprocess = pytester.runpytest_subprocess

    def ordered_inline_run(*args: Any, **kwargs: Any) -> Any:
        return inline_run("-p", "no:randomly", *args, **kwargs)

    def ordered_subprocess(*args: Any, **kwargs: Any) -> pytest.RunResult:
        return runpytest_subprocess("-p", "no:randomly", *args, **kwargs)

    pytester.inline_run = ordered_inline_run  # type: ignore[method-assign]
    pytester.runpytest_subprocess = ordered_subprocess  # type: ignore[method-assign]
    return pytester


# What the machine looks like to the plugin's measurements in an inner run: real timings,
# but interference faked, so that a verdict never depends on what else this machine is
# doing while the tests run. Quiet: no waiting, the core never slow. Busy: every sample
# waits for a CPU 90 % of its own time (the run queue and the thread's CPU clock agree),
# so the code can have run 10x faster than measured: a result 11 to 110 times its limit
# is not judged, one more than 110 times over fails even so. The fake's figures follow
# each sample's own time, not the wall clock around it, so a real preemption of this
# process (a busy CI machine) never changes them.
MACHINE = """
import pytest

from pytest_torch.perf.engines.wall import contention, machine_probes

BUSY = {busy}
#: the share of each sample's time it waited, on the busy machine
WAITED = 0.9


class Waiting:
    method = "run-queue wait"

    def __init__(self):
        self.total = 0.0

    def waited(self):
        return self.total, 0.0

    def close(self):
        pass


class FakeMonitor(contention.Monitor):
    def __init__(self, probe, **kwargs):
        if probe is not None:
            probe.close()
        super().__init__(
            Waiting() if BUSY else None,
            device_type="cpu",
            loop=lambda: 2e-5,
            core=lambda: 1e-5,
            machine=lambda: None,
            cores=2,
            reference=machine_probes.LoopReference(),
            core_reference=machine_probes.LoopReference(),
        )

    def timed(self, block):
        seconds = block()
        waited = WAITED * seconds if BUSY else 0.0
        if self.probe is not None:
            self.probe.total += waited
        self._blocks.append(contention._Block(seconds, waited))
        self.readings.append(self.reading())
        return seconds


@pytest.fixture(autouse=True)
def _{name}_machine(monkeypatch):
    monkeypatch.setattr(contention, "Monitor", FakeMonitor)
"""


@pytest.fixture
def machine(pytester: pytest.Pytester) -> Callable[[str], None]:
    """``machine("quiet")`` or ``machine("busy")``: how later inner runs see the machine."""

    def choose(state: str) -> None:
        busy = {"quiet": "False", "busy": "True"}[state]
        pytester.makeconftest(MACHINE.replace("{busy}", busy).replace("{name}", state))

    return choose


@pytest.fixture
def quiet_machine(machine: Callable[[str], None]) -> None:
    """Inner runs measure as on a machine with nothing else running."""
    machine("quiet")


@pytest.fixture
def busy_machine(machine: Callable[[str], None]) -> None:
    """Inner runs measure as on a machine whose other processes take 90 % of the CPU."""
    machine("busy")


def _own_plugin(test: Path) -> str | None:
    """``torch_perf`` for a test of pytest-torch-perf: the project named by the nearest
    pyproject.toml (the package's folder here, the root of its unpacked sdist)."""
    for folder in test.parents:
        if (folder / "pyproject.toml").is_file():
            text = (folder / "pyproject.toml").read_text()
            named = re.search(r'^name = "pytest-torch-([a-z]+)"$', text, re.MULTILINE)
            return f"torch_{named.group(1)}" if named else None
    return None


@pytest.fixture
def run(request: pytest.FixtureRequest, pytester: pytest.Pytester) -> Callable[..., Any]:
    """``run(*args)``: pytest in-process on the pytester folder with this package's
    plugin enabled explicitly (``-p torch_perf`` for pytest-torch-perf's tests, which
    brings core)."""
    plugin = _own_plugin(request.path)
    if plugin is None:
        raise pytest.UsageError(f"{request.path}: `run` serves the packages' own tests")

    def _run(*args: str) -> pytest.RunResult:
        return pytester.runpytest("-p", plugin, *args)

    return _run


#: the test-only emulated accelerator of this repository (absent from unpacked sdists)
EMULATOR = Path(__file__).resolve().parent / "tests" / "emulator"
EMULATOR_OPTION = "--emulated-accelerator"
#: why the emulator could not be loaded, when it was asked for and could not be
_emulator_problem: list[str] = []
#: PYTHONPATH before the emulator's folder was put on it (None: unset), put back at the end
_pythonpath_before: list[str | None] = []


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        EMULATOR_OPTION,
        action="store_true",
        help="run the tests marked `accelerator` (only those) on the emulated accelerator"
        " of tests/emulator/, built once per machine and torch version on first use; it"
        " becomes the accelerator of this process and of every process it starts",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    if not config.getoption(EMULATOR_OPTION, False):
        return
    if not (EMULATOR / "build.py").is_file():
        raise pytest.UsageError(f"{EMULATOR_OPTION}: {EMULATOR} is not in this checkout")
    problem = _load_emulator()
    if problem is not None:
        _emulator_problem.append(problem)


def _load_emulator() -> str | None:
    """Build (or reuse) the emulator and load it here; children load it when they import
    torch (its folder goes first on PYTHONPATH, where torch finds its entry point).
    Returns why it could not be loaded, or None."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_emulator_build", EMULATOR / "build.py")
    assert spec is not None and spec.loader is not None
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    try:
        site = build.site_folder()
    except build.EmulatorUnavailable as exc:  # no compiler here: the tests skip, saying so
        return str(exc)
    except build.EmulatorBuildError as exc:  # our C++ does not build: the run stops
        raise pytest.UsageError(f"{EMULATOR_OPTION}: {exc}") from None
    if str(site) not in sys.path:
        sys.path.insert(0, str(site))
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if str(site) not in paths:
        _pythonpath_before.append(os.environ.get("PYTHONPATH"))
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in [str(site), *paths] if p)
    import pytest_torch_emulator  # type: ignore[import-not-found]

    pytest_torch_emulator.load()
    return None


def pytest_unconfigure(config: pytest.Config) -> None:
    # the emulator stays loaded in this process (a backend cannot be unloaded); the
    # processes started after this one no longer get it
    while _pythonpath_before:
        before = _pythonpath_before.pop()
        if before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = before


def _accelerator_type() -> str | None:
    """The accelerator torch reports and the tests can use (not MPS: its memory and
    timing differ too much for the device-generic tests), or None."""
    kind = _current_accelerator()
    if kind is None or kind == "mps" or not torch.accelerator.is_available():
        return None
    return kind


def _no_accelerator_reason() -> str:
    if _emulator_problem:
        return f"needs an accelerator; the emulated one could not be built: {_emulator_problem[0]}"
    hint = f" (run with {EMULATOR_OPTION} for the emulated one)" if EMULATOR.is_dir() else ""
    if _current_accelerator() == "mps":
        return f"needs an accelerator other than Apple MPS, whose memory and timing differ{hint}"
    return f"needs an accelerator: torch reports none here{hint}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption(EMULATOR_OPTION, False):
        kept = [item for item in items if item.get_closest_marker("accelerator")]
        dropped = [item for item in items if not item.get_closest_marker("accelerator")]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = kept
    accelerator = _accelerator_type()
    cuda = accelerator == "cuda"
    for item in items:
        marker = item.get_closest_marker("cuda")
        if marker is not None and not cuda:
            why = marker.kwargs.get("reason", "")
            item.add_marker(pytest.mark.skip(reason=f"needs a CUDA GPU{': ' + why if why else ''}"))
        elif item.get_closest_marker("accelerator") and accelerator is None:
            item.add_marker(pytest.mark.skip(reason=_no_accelerator_reason()))


@pytest.fixture
def accelerator() -> str:
    """The accelerator's device type (``cuda``, ``xpu``, the emulator's ``emu``...)."""
    found = _accelerator_type()
    if found is None:
        pytest.skip(_no_accelerator_reason())
    return found
