"""Running the checks a test asks for: ``latency(...)`` under a latency budget, and
``perf_baseline(...)`` against (or recording) this machine's baseline.

``checks`` judges figures handed in; this module measures them with the session's
settings, labels each check, publishes its record in the test's ``user_properties``
and turns the outcome into a pass, a skip or a failure of the test.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_torch.core.markers import definition_of
from pytest_torch.perf.markers import LATENCY

if TYPE_CHECKING:
    import torch

    from pytest_torch.perf.check_records import PerfRecord
    from pytest_torch.perf.checks import Budget, Outcome
    from pytest_torch.perf.fresh_process import FreshProcesses
    from pytest_torch.perf.measure.settling import Measured
    from pytest_torch.perf.measure.timing import LatencyResult
    from pytest_torch.perf.settings import PerfSettings

MARKER = LATENCY.name
RERECORD = "pytest --torch-update-perf"

#: how many times a test called latency(...) (a marked test must call it)
calls_key = pytest.StashKey[int]()
#: the labels of a test's checks so far (each perf_baseline call needs its own)
labels_key = pytest.StashKey[set[str]]()


def budget(node: pytest.Item | pytest.Metafunc) -> Budget | None:
    """The ``torch_max_latency`` budget of a test; ValueError for a malformed marker."""
    from pytest_torch.perf.checks import parse_budget

    marker = LATENCY.mark_on(node)
    if marker is None:
        return None
    return parse_budget(marker.args, marker.kwargs, definition_of(node).nodeid)


def check_marked(metafunc: pytest.Metafunc) -> None:
    """At collection: a test with a latency budget has a well-formed marker and uses the
    ``latency`` fixture; a collection error naming the test otherwise."""
    try:
        budget(metafunc)
    except ValueError as exc:
        raise pytest.Collector.CollectError(str(exc)) from None
    if "latency" not in metafunc.fixturenames:
        raise pytest.Collector.CollectError(
            f"{metafunc.definition.nodeid}: @pytest.mark.{MARKER} needs the latency"
            f" fixture: add a `latency` argument and time the code with"
            f" latency(model, *inputs)"
        )


def budget_unused(item: pytest.Item) -> str | None:
    """The failure when a test marked with a budget never called ``latency(...)``."""
    # a marked test always uses the latency fixture (checked at collection): test that first
    if (
        "latency" in getattr(item, "fixturenames", ())
        and item.stash.get(calls_key, 0) == 0
        and LATENCY.mark_on(item) is not None
    ):
        return (
            f"{item.nodeid} is marked @pytest.mark.{MARKER} but never called"
            f" latency(...), so nothing was checked against the budget. Time the code"
            f" under budget with latency(model, *inputs), or remove the marker."
        )
    return None


def new_label(item: pytest.Item, name: str | None, kind: str) -> str:
    """The check's name in the baseline file and the table: the test id (and ``name``);
    a repeated latency(...) gets ``#2``, a repeated perf_baseline name is an error."""
    labels = item.stash.setdefault(labels_key, set())
    text = item.nodeid if name is None else f"{item.nodeid}::{name}"
    if kind == "latency":
        base, count = text, 2
        while text in labels:
            text, count = f"{base}#{count}", count + 1
    elif text in labels:
        raise ValueError(
            f"perf_baseline was called twice for {text}; give each call in a test its own"
            f" name=, e.g. perf_baseline(model, x, name='batch32')"
        )
    labels.add(text)
    return text


def publish(item: pytest.Item, record: PerfRecord) -> None:
    item.user_properties.extend(record.to_properties())


def apply_outcome(outcome: Outcome) -> None:
    """Skip or fail the test as the outcome says; return for a pass."""
    __tracebackhide__ = True
    if outcome.status == "skip":
        pytest.skip(outcome.message)
    if outcome.status == "fail":
        raise outcome.error()


def call_device(
    item: pytest.Item, target: Any, inputs: tuple[Any, ...], kwargs: dict[str, Any]
) -> torch.device:
    """The device a check times and measures ``target(*inputs, **kwargs)`` on: the
    test's own device (core's ``chosen_device``: its ``torch_device``, resolved once per
    session), or the inputs' where the test chose none or the inputs all sit on another
    device (the rule: ``measure.calls.work_device``)."""
    from pytest_torch.core.chosen_device import chosen_device
    from pytest_torch.perf.measure.calls import work_device

    return work_device(chosen_device(item), target, inputs, kwargs)


def latency_measurer(item: pytest.Item, settings: PerfSettings) -> Callable[..., LatencyResult]:
    """What the ``latency`` fixture gives: measure, and check the test's budget if any."""
    test_budget = budget(item)

    def measure(target: Any, *inputs: Any, **kwargs: Any) -> LatencyResult:
        __tracebackhide__ = True
        from pytest_torch.perf import fresh_process
        from pytest_torch.perf.checks import check_budget
        from pytest_torch.perf.measure.calls import measure_latency

        item.stash[calls_key] = item.stash.get(calls_key, 0) + 1

        # an explicit device= (measure_latency's keyword) still wins, as it always did
        device = kwargs.pop("device", None)
        if device is None:
            device = call_device(item, target, inputs, kwargs)

        def once() -> LatencyResult:
            return measure_latency(
                target,
                *inputs,
                settings=settings.sampling(),
                device=device,
                threads=settings.threads,
                **kwargs,
            )

        if test_budget is None or fresh_process.measuring_into() is not None:
            return once()  # a fresh process only measures (see fresh_process)
        if settings.measure == "instructions":
            budget_not_judged(item, test_budget)
        outcome = check_budget(new_label(item, None, "latency"), once, test_budget, settings.strict)
        publish(item, outcome.record)
        apply_outcome(outcome)
        assert outcome.measured is not None
        return outcome.measured

    return measure


def baseline_checker(item: pytest.Item, settings: PerfSettings) -> Callable[..., Outcome]:
    """What the ``perf_baseline`` fixture gives: record or compare one call's figures."""
    from pytest_torch.perf import fresh_process
    from pytest_torch.perf.rule import (
        DEFAULT_LATENCY_TOLERANCE,
        DEFAULT_MEMORY_TOLERANCE,
        TOLERANCE_HINT,
        tolerance_problem,
    )

    def check(
        target: Any,
        *inputs: Any,
        latency_tolerance: float = DEFAULT_LATENCY_TOLERANCE,
        memory_tolerance: float = DEFAULT_MEMORY_TOLERANCE,
        name: str | None = None,
        instruction_tolerance: float | None = None,
    ) -> Outcome:
        __tracebackhide__ = True
        for what, value in (
            ("latency_tolerance", latency_tolerance),
            ("memory_tolerance", memory_tolerance),
            ("instruction_tolerance", instruction_tolerance),
        ):
            problem = None if value is None else tolerance_problem(what, value)
            if problem is not None:
                hint = TOLERANCE_HINT
                if what == "instruction_tolerance":
                    hint = "(0.01 allows 1 % more instructions than the baseline)"
                raise ValueError(f"perf_baseline: {problem} {hint}")
        check_label = new_label(item, name, "baseline")
        device = call_device(item, target, inputs, {})
        if settings.measure == "instructions":
            if instruction_tolerance is None:
                instruction_tolerance = settings.instruction_tolerance
            outcome = count_check(
                settings, item.nodeid, check_label, target, inputs, {}, device,
                float(instruction_tolerance),
            )  # fmt: skip
            publish(item, outcome.record)
            apply_outcome(outcome)
            return outcome

        def measure() -> tuple[LatencyResult, dict[str, int]]:
            return measure_call(settings, target, inputs, {}, device)

        into = fresh_process.measuring_into()
        if into is not None:  # a fresh process started by a run: measure, judge nothing
            return fresh_process_outcome(into, check_label, name, measure)

        outcome = baseline_check(
            settings,
            item.nodeid,
            check_label,
            measure,
            float(latency_tolerance),
            float(memory_tolerance),
            elsewhere=lambda: fresh_processes(item, settings).measure(item, name or ""),
        )
        publish(item, outcome.record)
        apply_outcome(outcome)
        return outcome

    return check


#: the session's fresh processes (see ``fresh_process``)
fresh_key = pytest.StashKey["FreshProcesses"]()


def fresh_processes(item: pytest.Item, settings: PerfSettings) -> FreshProcesses:
    """The session's fresh processes, started on first use."""
    from pytest_torch.perf.fresh_process import FreshProcesses

    if fresh_key not in item.config.stash:
        item.config.stash[fresh_key] = FreshProcesses(item.config, settings.fresh_processes)
    return item.config.stash[fresh_key]


def fresh_process_outcome(
    into: Path,
    label: str,
    name: str | None,
    measure: Callable[[], tuple[LatencyResult, dict[str, int]]],
) -> Outcome:
    """In a fresh process: measure (again while other processes disturb it, at most
    ``measure.settling.MAX_MEASUREMENTS`` times) and keep the measurement for the run
    that asked for it; judge nothing."""
    from pytest_torch.perf.check_records import PerfRecord
    from pytest_torch.perf.checks import REGRESSION_STAT, Outcome
    from pytest_torch.perf.fresh_process import write_measured
    from pytest_torch.perf.measure.settling import MAX_MEASUREMENTS

    taken = [measure()]
    while taken[-1][0].busy and len(taken) < MAX_MEASUREMENTS:
        taken.append(measure())
    measured = min(taken, key=lambda m: (m[0].busy, m[0].stat(REGRESSION_STAT)))
    write_measured(into, name or "", measured)
    figure = measured[0].stat(REGRESSION_STAT)
    row = PerfRecord(label, "baseline", REGRESSION_STAT, figure, "measured for another run")
    return Outcome("pass", f"{label}: measured for the run that started this one", row)


def measure_call(
    settings: PerfSettings,
    target: Any,
    inputs: tuple[Any, ...],
    kwargs: dict[str, Any],
    device: torch.device,
) -> tuple[LatencyResult, dict[str, int]]:
    """One measurement of ``target(*inputs, **kwargs)`` on ``device`` with the session's
    settings: its latency, and what one call adds to memory at its peak."""
    from pytest_torch.perf.measure.calls import measure_latency, peak_memory

    result = measure_latency(
        target,
        *inputs,
        settings=settings.sampling(),
        device=device,
        threads=settings.threads,
        **kwargs,
    )
    return result, peak_memory(target, inputs, kwargs, settings.threads, device)


def baseline_check(
    settings: PerfSettings,
    node_id: str,
    label: str,
    measure: Callable[[], tuple[LatencyResult, dict[str, int]]],
    latency_tolerance: float,
    memory_tolerance: float,
    elsewhere: Callable[[], Measured | str] | None = None,
) -> Outcome:
    """Record (``--torch-update-perf``) or compare one measured thing; never raises for
    a regression: the outcome says "pass", "fail" or "skip" (``elsewhere``: measures it
    in a fresh process, or says why not; see ``comparison.compare``)."""
    __tracebackhide__ = True
    import torch

    from pytest_torch.perf import checks, comparison
    from pytest_torch.perf.baselines import BaselineFileError

    torch_version = str(torch.__version__).split("+")[0]
    if settings.update:
        outcome = checks.record(label, measure, torch_version, settings.strict)
        if outcome.baseline is not None:
            settings.pending.setdefault(settings.machine(), {})[label] = outcome.baseline
        return outcome
    try:
        baseline = settings.file().lookup(settings.machine(), label)
    except BaselineFileError as exc:
        raise checks.PerfRegressionError(str(exc)) from None
    if baseline is None:
        return checks.missing_outcome(label, settings.machine(), settings.strict)
    return comparison.compare(
        label,
        baseline,
        measure,
        threads=settings.threads,
        torch_version=torch_version,
        tolerance=latency_tolerance,
        memory_tolerance=memory_tolerance,
        slack_ms=settings.slack_ms,
        strict=settings.strict,
        machine=settings.machine(),
        rerecord=f"{RERECORD} {shlex.quote(node_id)}",
        elsewhere=elsewhere,
    )


def budget_not_judged(item: pytest.Item, test_budget: Budget) -> None:
    """A latency budget in a run that counts instructions: skipped, saying why (its
    milliseconds mean nothing under Valgrind, which runs code 10 to 100x slower)."""
    from pytest_torch.perf.check_records import PerfRecord

    label = new_label(item, None, "latency")
    verdict = "not judged: counting instructions"
    publish(item, PerfRecord(label, "budget", test_budget.stat, None, verdict, test_budget.ms))
    pytest.skip(
        f"{label}: latency budget not judged: this run counts instructions under Valgrind"
        f" (--torch-perf-measure=instructions), where code runs 10 to 100x slower than"
        f" natively. Budgets are milliseconds: judge them in a wall-clock run"
        f" (--torch-perf-measure=wall, the default)"
    )


def count_check(
    settings: PerfSettings,
    node_id: str,
    label: str,
    target: Any,
    inputs: tuple[Any, ...],
    kwargs: dict[str, Any],
    device: torch.device,
    tolerance: float,
) -> Outcome:
    """Record (``--torch-update-perf``) or compare the instructions of one call."""
    __tracebackhide__ = True
    from pytest_torch.perf import checks, instruction_checks
    from pytest_torch.perf.baselines import BaselineFileError
    from pytest_torch.perf.measure.instructions import count_instructions, count_key
    from pytest_torch.perf.measure.valgrind import session

    if device.type != "cpu":
        raise checks.PerfNotJudgedError(
            f"{label}: instruction counts see only the CPU's work, and this call runs on"
            f" {device}: its GPU kernels would count as nothing. Count it on the CPU"
            f" (--torch-device=cpu, or inputs on the CPU), or time it on the GPU with"
            f" --torch-perf-measure=wall"
        )
    found = session()
    key = count_key(found[0] if found is not None else "unknown")
    rerecord = f"{RERECORD} --torch-perf-measure=instructions {shlex.quote(node_id)}"

    def count() -> Any:
        return count_instructions(target, *inputs, **kwargs)

    if settings.update:
        outcome, baseline = instruction_checks.record(label, count(), key)
        settings.instruction_pending.setdefault(key, {})[label] = baseline
        return outcome
    try:
        recorded = settings.file().counts_of(label)
    except BaselineFileError as exc:
        raise checks.PerfRegressionError(str(exc)) from None
    if key not in recorded:
        return instruction_checks.missing(label, key, recorded, settings.strict, rerecord)
    return instruction_checks.compare(
        label,
        recorded[key],
        count,
        key=key,
        tolerance=tolerance,
        slack=settings.slack_instructions,
        rerecord=rerecord,
    )
