"""What the ``latency`` and ``perf_baseline`` fixtures give a test: measure a call (and
judge it against the test's latency budget, ``checks.latency_budget``), or hand it to
the session's engine to record or compare (``engines``); label each check, publish its
record in the test's ``user_properties`` and turn its outcome into a pass, a skip or a
failure of the test."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

from pytest_torch.core.chosen_device import chosen_device
from pytest_torch.core.ids import plain_nodeid
from pytest_torch.perf.calls import work_device
from pytest_torch.perf.checks.latency_budget import LATENCY_BUDGET, count_call
from pytest_torch.perf.engines import ENGINES
from pytest_torch.perf.engines.base import CallCheck, Engine, default_tolerances
from pytest_torch.perf.engines.flops.counting import harness_work
from pytest_torch.perf.engines.wall import fresh_process
from pytest_torch.perf.engines.wall.budget import Budget, check_budget
from pytest_torch.perf.engines.wall.latency import measure_latency, sampling
from pytest_torch.perf.options import MEASURE
from pytest_torch.perf.outcome import Outcome, apply_outcome
from pytest_torch.perf.records import PREFIX, PerfRecord
from pytest_torch.perf.rule import tolerance_problem
from pytest_torch.perf.state import PerfSession

if TYPE_CHECKING:
    import torch

    from pytest_torch.perf.engines.wall.timing import LatencyResult

#: the labels of a test's checks so far, with their kind (each perf_baseline call needs
#: its own)
labels_key = pytest.StashKey[dict[str, str]]()
#: a latency budget's row where a perf_baseline of the same test takes the test id
BUDGET_SUFFIX = "::latency-budget"
#: every engine's tolerance keywords, which perf_baseline accepts whatever the engine
TOLERANCES = tuple(dict.fromkeys(name for e in ENGINES.values() for name in e.tolerances))
#: what a tolerance means, per keyword, for the message that rejects one
_HINTS = {name: hint for engine in ENGINES.values() for name, hint in engine.hints.items()}


def new_label(item: pytest.Item, name: str | None, kind: str) -> str:
    """The check's name in the baseline file and the table: the test id (and ``name``);
    a repeated latency(...) gets ``#2``, a repeated perf_baseline name is an error. A
    perf_baseline keeps the test id (its baselines are recorded under it) where a latency
    budget of the same test had it: that row becomes ``<test id>::latency-budget``, as
    does a budget's row after a perf_baseline."""
    labels = item.stash.setdefault(labels_key, {})
    nodeid = plain_nodeid(item)
    text = nodeid if name is None else f"{nodeid}::{name}"
    if kind == "latency":
        if labels.get(text) == "baseline":
            text += BUDGET_SUFFIX
        base, count = text, 2
        while text in labels:
            text, count = f"{base}#{count}", count + 1
    elif labels.get(text) == "latency":
        _rename_rows(item, labels, text)
    elif text in labels:
        raise ValueError(
            f"perf_baseline was called twice for {text}; give each call in a test its own"
            f" name=, e.g. perf_baseline(model, x, name='batch32')"
        )
    labels[text] = kind
    return text


def _rename_rows(item: pytest.Item, labels: dict[str, str], label: str) -> None:
    """The latency budget rows this test published as ``label`` (and ``label#2``...)
    renamed ``label::latency-budget`` (...), so that a perf_baseline can take ``label``."""
    rows = [old for old, kind in labels.items() if kind == "latency"]
    renamed = {
        old: f"{label}{BUDGET_SUFFIX}{old[len(label) :]}"
        for old in rows
        if old == label or old.startswith(f"{label}#")
    }
    for old, new in renamed.items():
        del labels[old]
        labels[new] = "latency"
    prefixes = {f"{PREFIX}{old}.": f"{PREFIX}{new}." for old, new in renamed.items()}
    for index, (key, value) in enumerate(item.user_properties):
        for old, new in prefixes.items():
            if str(key).startswith(old):
                item.user_properties[index] = (new + str(key)[len(old) :], value)
                break


def publish(item: pytest.Item, record: PerfRecord) -> None:
    item.user_properties.extend(record.to_properties())


def call_device(
    item: pytest.Item, target: Any, inputs: tuple[Any, ...], kwargs: dict[str, Any]
) -> torch.device:
    """The device a check measures ``target(*inputs, **kwargs)`` on: the test's own
    device (core's ``chosen_device``: its ``torch_device``, resolved once per session),
    or the inputs' where the test chose none or the inputs all sit on another device
    (the rule: ``calls.work_device``)."""
    return work_device(chosen_device(item), target, inputs, kwargs)


def latency_measurer(item: pytest.Item, session: PerfSession) -> Callable[..., LatencyResult]:
    """What the ``latency`` fixture gives: measure, and check the test's budget if any."""
    test_budget = LATENCY_BUDGET.budget(item)
    settings = session.settings

    def measure(target: Any, *inputs: Any, **kwargs: Any) -> LatencyResult:
        __tracebackhide__ = True
        count_call(item)
        # an explicit device= (measure_latency's keyword) still wins, as it always did
        device = kwargs.pop("device", None)
        if device is None:
            device = call_device(item, target, inputs, kwargs)

        def once() -> LatencyResult:
            return measure_latency(
                target,
                *inputs,
                settings=sampling(settings),
                device=device,
                threads=settings.threads,
                **kwargs,
            )

        if test_budget is None or fresh_process.measuring_into() is not None:
            # a FLOP budget around the body counts one call, not the harness's repeats
            with harness_work(target, inputs, kwargs):
                return once()  # a fresh process only measures (see fresh_process)
        if session.engine.latency_budgets is not None:
            budget_not_judged(item, test_budget, session.engine)
        label = new_label(item, None, "latency")
        with harness_work(target, inputs, kwargs):
            outcome = check_budget(label, once, test_budget, settings.strict)
        publish(item, outcome.record)
        apply_outcome(outcome)
        measured: LatencyResult = outcome.measured  # a budget's outcome carries its measurement
        return measured

    return measure


def baseline_checker(item: pytest.Item, session: PerfSession) -> Callable[..., Outcome]:
    """What the ``perf_baseline`` fixture gives: record or compare one call's figures
    with the session's engine."""
    engine = session.engine

    def check(
        target: Any, *inputs: Any, name: str | None = None, **tolerances: float | None
    ) -> Outcome:
        __tracebackhide__ = True
        unknown = sorted(set(tolerances) - set(TOLERANCES))
        if unknown:
            raise TypeError(
                f"perf_baseline got unexpected keyword(s) {', '.join(unknown)}; it takes"
                f" name= and the tolerances {', '.join(f'{t}=' for t in TOLERANCES)}. It"
                f" passes no keywords to the model: give them in a lambda, e.g."
                f" perf_baseline(lambda x: model(x, {unknown[0]}=...), x)"
            )
        for what, value in tolerances.items():
            problem = None if value is None else tolerance_problem(what, value)
            if problem is not None:
                raise ValueError(f"perf_baseline: {problem} {_HINTS[what]}")
        call = CallCheck(
            item=item,
            label=new_label(item, name, "baseline"),
            name=name or "",
            target=target,
            inputs=inputs,
            kwargs={},
            device=call_device(item, target, inputs, {}),
            tolerances=default_tolerances(engine, tolerances, dict(session.settings.tolerances)),
        )
        with harness_work(target, inputs, {}):  # a FLOP budget counts one call, no repeats
            outcome = engine.check_call(call, session)
        publish(item, outcome.record)
        apply_outcome(outcome)
        return outcome

    return check


def budget_not_judged(item: pytest.Item, test_budget: Budget, engine: Engine) -> None:
    """A latency budget in a run whose engine cannot judge one: skipped, saying why (at
    the test's line, not here)."""
    __tracebackhide__ = True
    label = new_label(item, None, "latency")
    verdict = f"not judged: {MEASURE}={engine.name}"
    publish(item, PerfRecord(label, "budget", test_budget.stat, None, verdict, test_budget.ms))
    pytest.skip(f"{label}: latency budget not judged: {engine.latency_budgets}")
