"""Benchmark suites in a pytest run: one test per case at collection, and running one
case (build, first call, measurement, baseline) in place of the suite function's body.

``cases`` holds the cases and the steps of running one; ``report`` the tables, JSON
and plots; the session's engine (``engines``) records or compares each case's call, as
it does a ``perf_baseline`` call; ``checks.benchmark`` runs this for ``plugin``.
"""

from __future__ import annotations

from typing import cast

import pytest

from pytest_torch.core.chosen_device import resolve_device
from pytest_torch.core.ids import plain_nodeid
from pytest_torch.core.selection import device_types_for
from pytest_torch.perf.calls import torch_threads
from pytest_torch.perf.engines.base import CallCheck, default_tolerances
from pytest_torch.perf.outcome import PerfNotJudgedError, apply_outcome
from pytest_torch.perf.state import PerfSession
from pytest_torch.perf.suites import cases
from pytest_torch.perf.suites.cases import CASE_FIXTURE, Case, parse_spec


def parametrize_suite(metafunc: pytest.Metafunc, marker: pytest.Mark | None) -> None:
    """One test per case of a ``@benchmark_suite``; a collection error naming the test
    for a malformed declaration."""
    node_id = metafunc.definition.nodeid
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
        chosen = cases.cases(spec, device_types_for(metafunc.config, metafunc))
    except ValueError as exc:  # a malformed torch_devices marker
        raise pytest.Collector.CollectError(str(exc)) from None
    metafunc.parametrize(
        [CASE_FIXTURE, "batch_size"],
        [(case, case.batch_size) for case in chosen],
        ids=[case.id for case in chosen],
        indirect=[CASE_FIXTURE],
    )


def run_case(item: pytest.Function, session: PerfSession) -> None:
    """Run one benchmark case: its figures go to ``user_properties`` whatever happens;
    a dtype or compile the device cannot run is a skip, a regression a failure."""
    __tracebackhide__ = True
    case = cast("Case", item.funcargs[CASE_FIXTURE])
    spec = case.spec
    assert spec is not None  # cases are made by parametrize_suite
    # the case's device type resolved as torch_device resolves it, once per session; the
    # model and inputs are moved there, so that is the device timed and measured
    device = resolve_device(item.config, case.device_type)
    nodeid = plain_nodeid(item)
    result = cases.CaseResult(
        suite=nodeid.split("[")[0],
        test_id=nodeid,
        device=str(device),
        dtype=case.dtype,
        mode=case.mode,
        batch_size=case.batch_size,
        order=[
            spec.dtypes.index(case.dtype),
            spec.modes.index(case.mode),
            spec.batch_sizes.index(case.batch_size),
        ],
        machine=session.machine(),
    )
    built = item.obj(**{arg: item.funcargs[arg] for arg in item._fixtureinfo.argnames})
    try:
        model, args, kwargs = cases.prepare(built, case, device, spec)
        with torch_threads(session.settings.threads):
            result.first_call_ms = cases.first_call(model, args, kwargs, case, device)
    except cases.CaseSkipped as skipped:
        result.status, result.reason = "skipped", str(skipped)
        item.user_properties.append((cases.PROPERTY, result.to_json()))
        pytest.skip(str(skipped))

    engine = session.engine
    call = CallCheck(
        item=item,
        label=nodeid,
        name="",
        target=model,
        inputs=args,
        kwargs=kwargs,
        device=device,
        tolerances=default_tolerances(
            engine, {"latency_tolerance": spec.latency_tolerance}, dict(session.settings.tolerances)
        ),
        fresh=False,
    )
    try:
        outcome = engine.check_call(call, session)
    except PerfNotJudgedError:  # the engine cannot check this call (a GPU call's instructions)
        result.status, result.verdict = "ok", "not measured"
        item.user_properties.append((cases.PROPERTY, result.to_json()))
        raise
    engine.fill_case(result, call, outcome, session)
    row = outcome.record
    result.change_pct, result.stat, result.verdict = row.change_pct, row.stat, row.verdict
    item.user_properties.append((cases.PROPERTY, result.to_json()))
    if outcome.status == "skip" and row.verdict == "no baseline":
        return  # the figures are still the point
    apply_outcome(outcome)
