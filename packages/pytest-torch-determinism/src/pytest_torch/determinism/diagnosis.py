"""Why a model is not deterministic: one experiment per suspect, and the verdict.

The model runs several times under each setting; a setting that makes the runs
identical names the cause:

1. as called — identical runs mean *Deterministic* (after one more check: outputs that
   change with the bytes in memory from ``torch.empty`` mean *Uninitialised memory*);
2. with the inputs restored before each run — *Changes its inputs* (the call writes into
   its own inputs, so no two calls get the same ones); with the model's state restored
   too — *State mutation*;
3. with every RNG reseeded before each run — *Randomness-driven*;
4. with deterministic algorithms on — *Kernel-level* (fixed by them, or an op that has
   no deterministic implementation), unless the outputs change with the bytes in
   memory from ``torch.empty`` — *Uninitialised memory*;
5. none of these helps — *Outside torch*.

The uninitialised-memory probe fills every tensor an ``empty``-family op returns with
one byte pattern in one run and another in the next (:func:`probes.uninitialised_filled`),
so the runs differ exactly where the outputs read memory nobody wrote, on every device.
When torch refuses deterministic mode for cuBLAS (``CUBLAS_WORKSPACE_CONFIG``), the
verdict is *Inconclusive* and says how to fix it.

Every global switch, random generator, parameter, buffer, input and environment
variable is put back afterwards, also when a run raises. Outputs are compared as
:mod:`outputs` says; one that cannot be compared stops the diagnosis with
:class:`~pytest_torch.determinism.outputs.CannotCompare` rather than a verdict.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pytest_torch.core.tables import format_table
from pytest_torch.determinism import cublas, flags
from pytest_torch.determinism.outputs import CannotCompare, differences, has_nan
from pytest_torch.determinism.probes import first_divergence, pattern_name, random_sources
from pytest_torch.determinism.trials import Subject, Trial
from pytest_torch.determinism.verdicts import (
    DETERMINISTIC,
    INCONCLUSIVE,
    INPUTS,
    KERNEL,
    OUTSIDE,
    RANDOMNESS,
    STATE,
    UNINITIALISED,
    cublas_verdict,
    fixed_verdict,
    inputs_verdict,
    outside_verdict,
    random_verdict,
    state_verdict,
    uninitialised_verdict,
    unsupported_verdict,
)


@dataclass
class Diagnosis:
    """The answer of :func:`diagnose_nondeterminism`; ``str()`` is a readable report."""

    category: str
    verdict: str
    #: the first submodule whose output differs between runs (modules only)
    first_divergence: str | None
    trials: list[Trial]
    #: random ops one run called, with the submodule they ran in
    random_ops: list[str] = field(default_factory=list)
    #: parameters, buffers and inputs a call changed
    changed_state: list[str] = field(default_factory=list)

    @property
    def deterministic(self) -> bool:
        return self.category == DETERMINISTIC

    def __str__(self) -> str:
        lines = [self.verdict]
        if self.first_divergence:
            lines.append(f"First divergence: {self.first_divergence}")
        if self.changed_state:
            lines.append(f"State the call changes: {', '.join(self.changed_state)}")
        if self.random_ops:
            lines.append(f"Random ops: {', '.join(self.random_ops)}")
        rows = [("setting", "runs", "outcome", "max difference per run")]
        for trial in self.trials:
            figures = ", ".join(_fmt(d) for d in trial.max_differences) or "-"
            outcome = trial.outcome if trial.error is None else f"raised: {trial.error}"
            rows.append((trial.name, str(trial.runs), outcome, figures))
        lines += ["Experiments:", *format_table(rows, left=(0, 2, 3), indent="  ")]
        return "\n".join(lines)


def _fmt(value: float) -> str:
    return "NaN/Inf" if math.isinf(value) else ("0" if value == 0 else f"{value:.3g}")


def diagnose_nondeterminism(
    model_or_callable: Callable[..., Any], *inputs: Any, runs: int = 5, **kwargs: Any
) -> Diagnosis:
    """Find out why ``model_or_callable(*inputs, **kwargs)`` gives different outputs
    from run to run, and say what to do; see :class:`Diagnosis`.

    Modules run as they are (train or eval). Random generators, determinism switches,
    the module's parameters and buffers and tensor inputs are restored afterwards.
    Outputs that cannot be compared (a generator, an object whose ``==`` raises) raise
    :class:`~pytest_torch.determinism.outputs.CannotCompare` (a ``TypeError``).
    """
    __tracebackhide__ = True
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 2:
        raise ValueError(f"diagnose_nondeterminism needs runs >= 2 to compare, got {runs!r}")
    if not callable(model_or_callable):
        raise TypeError(
            f"diagnose_nondeterminism expects a torch.nn.Module or a callable, got"
            f" {type(model_or_callable).__name__}"
        )
    subject = Subject(model_or_callable, inputs, kwargs)
    # from the first run on: torch reads CUBLAS_WORKSPACE_CONFIG at the process's first
    # CUDA matrix product, which may be in the first run, not at the deterministic ones
    with flags.preserved(), cublas.deterministic_workspace():
        try:
            return _diagnose(subject, runs)
        except CannotCompare as error:
            raise CannotCompare(f"diagnose_nondeterminism: {error}") from None
        finally:
            subject.reset()


def _diagnose(subject: Subject, runs: int) -> Diagnosis:
    __tracebackhide__ = True
    trials = [subject.trial("as called", runs, reset=False, reseed=False)]
    if trials[0].outcome == "identical":
        return _when_identical(subject, trials)
    if subject.changed_inputs:
        trials.append(
            subject.trial(
                "inputs restored before each run", runs, reset=True, reseed=False, inputs_only=True
            )
        )
        if trials[-1].outcome == "identical":
            return _finish(subject, trials, INPUTS, inputs_verdict(subject.changed_inputs))
    if subject.changed_model_state:
        trials.append(
            subject.trial("state restored before each run", runs, reset=True, reseed=False)
        )
        if trials[-1].outcome == "identical":
            return _finish(
                subject,
                trials,
                STATE,
                state_verdict(subject.changed_model_state, subject.changed_inputs),
            )
    reseeded = subject.trial("RNG reseeded before each run", runs, reset=True, reseed=True)
    trials.append(reseeded)
    if reseeded.outcome == "identical":

        def fresh_run() -> None:
            subject.reset()
            subject.call()

        seen = random_sources(fresh_run, subject.module)
        subject.reset()
        # no random op of torch's ran: reseeding may have helped by chance (garbage
        # that happened to match), unless Python's or NumPy's generators were used
        if not seen and _reads_uninitialised(subject, trials, None):
            return _finish(subject, trials, UNINITIALISED, uninitialised_verdict(varies=True))
        return _finish(subject, trials, RANDOMNESS, random_verdict(seen), [s.name for s in seen])
    # deterministic mode also fills memory from torch.empty with NaN, which would make
    # runs that read it agree: the same bytes of our own in every run instead, then one
    # run with other bytes tells the two causes apart
    switches = flags.deterministic()
    fixed = subject.trial(
        f"reseeded, deterministic algorithms, uninitialised memory filled with {pattern_name(0)}",
        runs,
        reset=True,
        reseed=True,
        switches=switches,
        pattern=0,
    )
    trials.append(fixed)
    if fixed.outcome == "raised":
        assert fixed.error is not None
        if fixed.cublas_refused:
            return _finish(subject, trials, INCONCLUSIVE, cublas_verdict())
        return _finish(subject, trials, KERNEL, unsupported_verdict(fixed.error))
    if fixed.outcome == "varies":
        return _finish(subject, trials, OUTSIDE, outside_verdict())
    if _reads_uninitialised(subject, trials, switches, first=fixed, reference=reseeded):
        return _finish(
            subject, trials, UNINITIALISED, uninitialised_verdict(varies=True), probe=switches
        )
    return _finish(subject, trials, KERNEL, fixed_verdict())


def _reads_uninitialised(
    subject: Subject,
    trials: list[Trial],
    switches: flags.Flags | None,
    first: Trial | None = None,
    reference: Trial | None = None,
) -> bool:
    """Whether the outputs change with the bytes in memory from torch.empty: one run
    with each pattern (``first``: a trial that already ran with the first one)."""
    if first is None:
        first = _probe(subject, switches, 0)
        trials.append(first)
    second = _probe(subject, switches, 1)
    trials.append(second)
    if first.outcome == "raised" or second.outcome == "raised":
        return False  # cannot tell; the errors are in the report
    # the second probe's row compares its run with the first pattern's run
    found = differences(first.outputs[0], second.outputs[0])
    second.outcome = "varies" if found else "identical"
    second.max_differences = [max((d.max_abs for d in found), default=0.0)]
    second.first_difference = found[0] if found else None
    if found:
        return True
    # NaN that only deterministic mode's fill can have put there (an op the probe does
    # not see, such as a resize_ inside a kernel)
    return (
        reference is not None
        and has_nan(first.outputs[0])
        and not any(has_nan(o) for o in reference.outputs)
    )


def _probe(subject: Subject, switches: flags.Flags | None, pattern: int) -> Trial:
    setting = "reseeded, deterministic algorithms," if switches is not None else "reseeded,"
    against = f" (vs {pattern_name(0)})" if pattern else ""
    return subject.trial(
        f"{setting} uninitialised memory filled with {pattern_name(pattern)}{against}",
        1,
        reset=True,
        reseed=True,
        switches=switches,
        pattern=pattern,
        probe=True,
    )


def _when_identical(subject: Subject, trials: list[Trial]) -> Diagnosis:
    # identical garbage is still garbage: the bytes in memory from torch.empty must not matter
    if _reads_uninitialised(subject, trials, None):
        return _finish(subject, trials, UNINITIALISED, uninitialised_verdict(varies=False))
    count = len(trials[0].outputs)
    verdict = f"{DETERMINISTIC}: {count} runs gave bitwise identical outputs."
    if subject.changed:
        verdict += (
            f" The call changes {', '.join(subject.changed)}; the outputs do not depend on it"
            f" in these runs."
        )
    return Diagnosis(DETERMINISTIC, verdict, None, trials, [], list(subject.changed))


def _finish(
    subject: Subject,
    trials: list[Trial],
    category: str,
    verdict: str,
    seen: list[str] | None = None,
    probe: flags.Flags | None = None,
) -> Diagnosis:
    """The diagnosis, with the first divergence between two recorded runs: for
    uninitialised memory, the probe's two runs (under the ``probe`` switches)."""
    divergence = None
    if subject.changed_inputs and category not in (DETERMINISTIC, INPUTS, STATE):
        verdict += (
            f" (The call also writes into its inputs, {', '.join(subject.changed_inputs)}: every"
            f" experiment after the first restored them before each run.)"
        )
    if subject.module is not None:
        if category == UNINITIALISED:
            recorded = [subject.record(probe, pattern, fresh=True) for pattern in (0, 1)]
        else:
            recorded = [subject.record(None, None, fresh=False) for _ in range(2)]
        subject.reset()
        divergence = first_divergence(recorded[0], recorded[1])
    return Diagnosis(category, verdict, divergence, trials, seen or [], list(subject.changed))
