"""Benchmark suites in a pytest run: one test per case at collection, and running one
case (build, first call, measurement, baseline) in place of the suite function's body.

``cases`` holds the cases and the steps of running one; ``report`` the tables, JSON
and plots; this module puts them together for ``plugin``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import pytest

if TYPE_CHECKING:
    import torch

    from pytest_torch.perf.measure.timing import LatencyResult
    from pytest_torch.perf.settings import PerfSettings
    from pytest_torch.perf.suites.cases import Case, CaseResult


def parametrize_suite(metafunc: pytest.Metafunc) -> None:
    """One test per case of a ``@benchmark_suite``; a collection error naming the test
    for a malformed declaration."""
    from pytest_torch.core.selection import device_types_for
    from pytest_torch.perf.markers import BENCHMARK
    from pytest_torch.perf.suites.cases import CASE_FIXTURE, cases, parse_spec

    node_id = metafunc.definition.nodeid
    marker = BENCHMARK.mark_on(metafunc)
    assert marker is not None
    if CASE_FIXTURE not in metafunc.fixturenames:
        raise pytest.Collector.CollectError(
            f"{node_id}: declare benchmark suites with the @benchmark_suite(...) decorator"
            f" (from pytest_torch import benchmark_suite), not with the raw marker"
        )
    if "batch_size" not in metafunc.definition._fixtureinfo.argnames:
        raise pytest.Collector.CollectError(
            f"{node_id}: a @benchmark_suite function takes batch_size and returns (model,"
            f" inputs) for that batch size, e.g. def {metafunc.function.__name__}(batch_size):"
        )
    try:
        spec = parse_spec(marker.kwargs, node_id)
    except ValueError as exc:
        raise pytest.Collector.CollectError(str(exc)) from None
    try:
        chosen = cases(spec, device_types_for(metafunc.config, metafunc))
    except ValueError as exc:  # a malformed torch_devices marker
        raise pytest.Collector.CollectError(str(exc)) from None
    metafunc.parametrize(
        [CASE_FIXTURE, "batch_size"],
        [(case, case.batch_size) for case in chosen],
        ids=[case.id for case in chosen],
        indirect=[CASE_FIXTURE],
    )


def run_case(item: pytest.Function, settings: PerfSettings) -> None:
    """Run one benchmark case: its figures go to ``user_properties`` whatever happens;
    a dtype or compile the device cannot run is a skip, a regression a failure."""
    __tracebackhide__ = True
    from pytest_torch.core.chosen_device import resolve_device
    from pytest_torch.perf.check_runner import baseline_check, measure_call
    from pytest_torch.perf.measure.calls import torch_threads
    from pytest_torch.perf.rule import DEFAULT_MEMORY_TOLERANCE
    from pytest_torch.perf.suites import cases

    case = cast("Case", item.funcargs[cases.CASE_FIXTURE])
    spec = case.spec
    assert spec is not None  # cases are made by parametrize_suite
    # the case's device type resolved as torch_device resolves it, once per session; the
    # model and inputs are moved there, so that is the device timed and measured
    device = resolve_device(item.config, case.device_type)
    result = cases.CaseResult(
        suite=item.nodeid.split("[")[0],
        test_id=item.nodeid,
        device=str(device),
        dtype=case.dtype,
        mode=case.mode,
        batch_size=case.batch_size,
        order=[
            spec.dtypes.index(case.dtype),
            spec.modes.index(case.mode),
            spec.batch_sizes.index(case.batch_size),
        ],
    )
    built = item.obj(**{arg: item.funcargs[arg] for arg in item._fixtureinfo.argnames})
    try:
        model, args, kwargs = cases.prepare(built, case, device, spec)
        with torch_threads(settings.threads):
            result.first_call_ms = cases.first_call(model, args, kwargs, case, device)
    except cases.CaseSkipped as skipped:
        result.status, result.reason = "skipped", str(skipped)
        item.user_properties.append((cases.PROPERTY, result.to_json()))
        pytest.skip(str(skipped))

    if settings.measure == "instructions":
        _count_case(item, settings, result, (model, args, kwargs), device)
        return
    taken: list[tuple[LatencyResult, dict[str, int]]] = []

    def measure() -> tuple[LatencyResult, dict[str, int]]:
        taken.append(measure_call(settings, model, args, kwargs, device))
        return taken[-1]

    outcome = baseline_check(
        settings,
        item.nodeid,
        item.nodeid,
        measure,
        spec.latency_tolerance,
        DEFAULT_MEMORY_TOLERANCE,
    )
    if not taken:  # no comparable baseline: the figures are still the point
        measure()
    # the figures of the measurement that decided (the one recorded, or the last judged)
    latency, memory = next(((r, m) for r, m in taken if r is outcome.measured), taken[-1])
    result.add_measurement(latency)
    result.peak_memory = memory
    result.baseline_ms = outcome.record.reference_ms
    result.change_pct = outcome.record.change_pct
    result.stat = outcome.record.stat
    result.verdict = outcome.record.verdict
    item.user_properties.append((cases.PROPERTY, result.to_json()))
    if outcome.status == "fail":
        raise outcome.error()
    if outcome.status == "skip" and outcome.record.verdict != "no baseline":
        pytest.skip(outcome.message)  # not comparable or not judged: say so


def _count_case(
    item: pytest.Function,
    settings: PerfSettings,
    result: CaseResult,
    call: tuple[Any, tuple[Any, ...], dict[str, Any]],
    device: torch.device,
) -> None:
    """A case in a run that counts instructions: counted, recorded or compared like a
    ``perf_baseline`` call; its row of the perf table and its figures go to the report."""
    __tracebackhide__ = True
    from pytest_torch.perf.check_runner import apply_outcome, count_check, publish
    from pytest_torch.perf.suites import cases

    model, args, kwargs = call
    try:
        outcome = count_check(
            settings, item.nodeid, item.nodeid, model, args, kwargs, device,
            settings.instruction_tolerance,
        )  # fmt: skip
    except AssertionError:
        result.status, result.verdict = "ok", "not counted"
        item.user_properties.append((cases.PROPERTY, result.to_json()))
        raise
    row = outcome.record
    result.instructions = None if row.instructions is None else int(row.instructions)
    ref = row.reference_instructions
    result.baseline_instructions = None if ref is None else int(ref)
    result.change_pct, result.stat, result.verdict = row.change_pct, row.stat, row.verdict
    item.user_properties.append((cases.PROPERTY, result.to_json()))
    publish(item, row)
    if outcome.status == "skip" and row.verdict == "no baseline":
        return  # the figures are still the point, as in a wall-clock run
    apply_outcome(outcome)
