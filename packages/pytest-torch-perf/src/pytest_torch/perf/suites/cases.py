"""Benchmark suites: one model over batch sizes x dtypes x modes x devices.

A suite is a test function that builds the model and its inputs for one batch size::

    @benchmark_suite(batch_sizes=(1, 8, 32), dtypes=("float32", "bfloat16"),
                     modes=("eager", "compile"))
    def test_tiny_cnn(batch_size):
        return TinyCNN(), torch.randn(batch_size, 1, 28, 28)

Each combination becomes one test, ``test_tiny_cnn[cpu-float32-eager-b8]``. This module
holds the cases and running one; ``report`` turns results into tables, JSON and plots;
``runner`` runs a case in a pytest run, and ``plugin`` wires it into pytest.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

from pytest_torch.core.devices import Stopwatch
from pytest_torch.perf.rule import DEFAULT_LATENCY_TOLERANCE, tolerance_problem

if TYPE_CHECKING:
    import torch

    from pytest_torch.perf.engines.wall.timing import LatencyResult

CASE_FIXTURE = "torch_benchmark_case"
PROPERTY = "torch_benchmark"
MODES = ("eager", "compile")
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class SuiteSpec:
    """What a ``@benchmark_suite`` declares."""

    batch_sizes: tuple[int, ...]
    dtypes: tuple[str, ...] = ("float32",)
    modes: tuple[str, ...] = ("eager",)
    compile_options: Mapping[str, Any] = field(default_factory=dict)
    latency_tolerance: float = DEFAULT_LATENCY_TOLERANCE


def _names(value: Any, what: str, where: str) -> tuple[str, ...]:
    items = (value,) if isinstance(value, str) else tuple(value)
    if not items or not all(isinstance(item, str) and item for item in items):
        raise ValueError(f"{where}: {what} must be one or more names, got {value!r}")
    if len(set(items)) != len(items):
        raise ValueError(f"{where}: {what} lists a name twice: {value!r}")
    return items


def parse_spec(kwargs: Mapping[str, Any], where: str) -> SuiteSpec:
    """A SuiteSpec from the marker's keywords; ValueError naming ``where`` otherwise."""
    import torch

    where = f"{where}: @benchmark_suite"
    known = {"batch_sizes", "dtypes", "modes", "compile_options", "latency_tolerance"}
    unknown = set(kwargs) - known
    if unknown:
        raise ValueError(
            f"{where} got unknown argument(s) {', '.join(sorted(unknown))}; it takes"
            f" {', '.join(sorted(known))}"
        )
    if "batch_sizes" not in kwargs:
        raise ValueError(f"{where} needs batch_sizes=, e.g. batch_sizes=(1, 8, 32)")
    raw = kwargs["batch_sizes"]
    sizes = (raw,) if isinstance(raw, int) else tuple(raw)
    if not sizes or not all(
        isinstance(size, int) and not isinstance(size, bool) and size > 0 for size in sizes
    ):
        raise ValueError(f"{where}: batch_sizes must be positive integers, got {raw!r}")
    dtypes = _names(kwargs.get("dtypes", ("float32",)), "dtypes", where)
    for name in dtypes:
        if not isinstance(getattr(torch, name, None), torch.dtype):
            raise ValueError(
                f"{where}: unknown dtype {name!r}; use torch's names such as 'float32',"
                f" 'bfloat16', 'float16'"
            )
    modes = _names(kwargs.get("modes", ("eager",)), "modes", where)
    bad_modes = [mode for mode in modes if mode not in MODES]
    if bad_modes:
        raise ValueError(f"{where}: modes must be 'eager' and/or 'compile', got {bad_modes!r}")
    options = kwargs.get("compile_options") or {}
    if not isinstance(options, Mapping):
        raise ValueError(
            f"{where}: compile_options must be a dict of torch.compile arguments, got {options!r}"
        )
    tolerance = kwargs.get("latency_tolerance", DEFAULT_LATENCY_TOLERANCE)
    problem = tolerance_problem("latency_tolerance", tolerance)
    if problem is not None:
        raise ValueError(f"{where}: {problem}")
    return SuiteSpec(tuple(sizes), dtypes, modes, dict(options), float(tolerance))


def benchmark_suite(
    *,
    batch_sizes: Sequence[int] | int,
    dtypes: Sequence[str] | str = ("float32",),
    modes: Sequence[str] | str = ("eager",),
    compile_options: Mapping[str, Any] | None = None,
    latency_tolerance: float = DEFAULT_LATENCY_TOLERANCE,
) -> Callable[[F], F]:
    """Turn a ``(batch_size) -> (model, inputs)`` function into a benchmark suite.

    ``inputs`` is a tensor, a tuple of positional inputs, or a dict of keyword inputs.
    The function may ask for fixtures besides ``batch_size``. Cases run only with
    ``--torch-benchmark``; devices are the ``torch_device`` selection.
    """
    marker = pytest.mark.torch_benchmark(
        batch_sizes=batch_sizes,
        dtypes=dtypes,
        modes=modes,
        compile_options=dict(compile_options or {}),
        latency_tolerance=latency_tolerance,
    )

    def decorate(function: F) -> F:
        return marker(pytest.mark.usefixtures(CASE_FIXTURE)(function))  # type: ignore[no-any-return]

    return decorate


@dataclass(frozen=True)
class Case:
    """One combination of a suite."""

    device_type: str
    dtype: str
    mode: str
    batch_size: int
    #: the declaration it came from, parsed once at collection
    spec: SuiteSpec | None = field(default=None, compare=False, repr=False)

    @property
    def id(self) -> str:
        return f"{self.device_type}-{self.dtype}-{self.mode}-b{self.batch_size}"


def cases(spec: SuiteSpec, device_types: Sequence[str]) -> list[Case]:
    return [
        Case(device, dtype, mode, batch, spec)
        for device in device_types
        for dtype in spec.dtypes
        for mode in spec.modes
        for batch in spec.batch_sizes
    ]


@dataclass
class CaseResult:
    """The figures of one case, as they travel to the report, the JSON and the plots."""

    suite: str
    test_id: str
    device: str
    dtype: str
    mode: str
    batch_size: int
    status: str = "ok"  # "ok" or "skipped"
    reason: str = ""
    median_ms: float | None = None
    p90_ms: float | None = None
    min_ms: float | None = None
    spread: float | None = None
    runs: int | None = None
    throughput: float | None = None  # samples per second: batch / median
    first_call_ms: float | None = None  # the compile time in compile mode
    peak_memory: dict[str, int] = field(default_factory=dict)
    baseline_ms: float | None = None
    change_pct: float | None = None
    #: a counting engine's figure per call and the baseline's, in ``unit``
    #: (--torch-perf-measure=instructions or flops; the wall clock's are the *_ms above)
    count: int | None = None
    baseline_count: int | None = None
    unit: str = "ms"
    #: the statistic compared with the baseline (min; an older baseline's own)
    stat: str = ""
    verdict: str = ""
    #: positions of dtype, mode and batch size in the suite's declaration, for ordering
    order: list[int] = field(default_factory=list)
    #: the hardware fingerprint key of the machine that measured it (an xdist worker's:
    #: the controller reports it without importing torch)
    machine: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> CaseResult:
        return cls(**json.loads(text))

    def add_measurement(self, result: LatencyResult) -> None:
        self.median_ms = result.median
        self.p90_ms = result.p90
        self.min_ms = result.min
        self.spread = result.spread
        self.runs = result.runs
        self.throughput = self.batch_size / (result.median / 1e3) if result.median > 0 else None


class CaseSkipped(Exception):
    """The case cannot run here (dtype unsupported, compile failed); the reason says why."""


def first_line(error: BaseException, limit: int = 160) -> str:
    """``Type: first line of the message``, shortened to ``limit`` characters."""
    text = str(error).strip().splitlines()
    line = f"{type(error).__name__}: {text[0] if text else ''}".rstrip(": ")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def split_inputs(inputs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    import torch

    if isinstance(inputs, torch.Tensor):
        return (inputs,), {}
    if isinstance(inputs, dict):
        return (), dict(inputs)
    if isinstance(inputs, (tuple, list)):
        return tuple(inputs), {}
    raise TypeError(
        "a benchmark suite function must return (model, inputs) where inputs is a tensor,"
        f" a tuple of positional inputs or a dict of keyword inputs; got {type(inputs).__name__}"
    )


def _cast(value: Any, device: torch.device, dtype: torch.dtype) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        if value.is_floating_point():
            return value.to(device=device, dtype=dtype)
        return value.to(device=device)
    if isinstance(value, (list, tuple)):
        return type(value)(_cast(item, device, dtype) for item in value)
    if isinstance(value, dict):
        return {key: _cast(item, device, dtype) for key, item in value.items()}
    return value


def prepare(
    built: Any, case: Case, device: torch.device, spec: SuiteSpec
) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    """Model on the device and dtype, in eval mode, compiled if asked; inputs cast."""
    import torch

    if not (isinstance(built, (tuple, list)) and len(built) == 2):
        raise TypeError(
            f"a benchmark suite function must return (model, inputs); got {type(built).__name__}"
        )
    model, inputs = built
    if not isinstance(model, torch.nn.Module):
        raise TypeError(
            f"a benchmark suite function must return a torch.nn.Module first, got"
            f" {type(model).__name__}"
        )
    dtype = getattr(torch, case.dtype)
    args, kwargs = split_inputs(inputs)
    model = model.to(device=device, dtype=dtype).eval()
    args = _cast(args, device, dtype)
    kwargs = _cast(kwargs, device, dtype)
    if case.mode == "compile":
        try:
            model = torch.compile(model, **spec.compile_options)
        except Exception as error:  # unsupported backend or platform
            raise CaseSkipped(f"torch.compile is unavailable: {first_line(error)}") from error
    return model, args, kwargs


def first_call(
    model: Any, args: tuple[Any, ...], kwargs: dict[str, Any], case: Case, device: torch.device
) -> float:
    """Run and time the first call (the compile, in compile mode), in milliseconds.

    A dtype the device cannot run, or a compile that fails, becomes a skip. Eager float32
    is the reference: if it fails the model is broken, and the error propagates.
    """
    import torch

    watch = Stopwatch(device)
    try:
        with torch.inference_mode():
            watch.start()
            model(*args, **kwargs)
            return watch.stop() * 1e3
    except Exception as error:
        if case.mode == "compile":
            raise CaseSkipped(f"torch.compile failed: {first_line(error)}") from error
        if case.dtype != "float32":
            raise CaseSkipped(
                f"{case.dtype} does not run on {case.device_type}: {first_line(error)}"
            ) from error
        raise
