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

from pytest_torch.determinism import cublas, flags
from pytest_torch.determinism.outputs import (
    CannotCompare,
    Difference,
    Leaves,
    differences,
    freeze,
    has_nan,
)
from pytest_torch.determinism.probes import (
    RandomSource,
    TensorState,
    first_divergence,
    input_state,
    module_of,
    module_outputs,
    pattern_name,
    random_sources,
    state_of,
    uninitialised_filled,
)

DETERMINISTIC = "Deterministic"
RANDOMNESS = "Randomness-driven"
KERNEL = "Kernel-level"
UNINITIALISED = "Uninitialised memory"
STATE = "State mutation"
INPUTS = "Changes its inputs"
OUTSIDE = "Outside torch"
INCONCLUSIVE = "Inconclusive"
#: the seed every generator gets before each run of the reseeded experiments
SEED = 0


@dataclass
class Trial:
    """One experiment: the setting, and what the runs did under it."""

    name: str
    runs: int
    #: "identical", "varies", or "raised" (an op or cuBLAS refused deterministic mode; in
    #: the uninitialised-memory probe, any error)
    outcome: str
    #: the largest difference of each later run from the first (0.0: bitwise identical)
    max_differences: list[float] = field(default_factory=list)
    first_difference: Difference | None = None
    error: str | None = None
    outputs: list[Leaves] = field(default_factory=list, repr=False)
    #: whether the runs had deterministic algorithms on
    deterministic_algorithms: bool = False
    #: whether the error was torch refusing cuBLAS (CUBLAS_WORKSPACE_CONFIG)
    cublas_refused: bool = False


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
        from pytest_torch.core.tables import format_table

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


class _Subject:
    """The thing under diagnosis and how to run it under each setting."""

    def __init__(self, target: Any, inputs: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.target, self.inputs, self.kwargs = target, inputs, kwargs
        self.module = module_of(target)
        self.state: TensorState | None = state_of(self.module)
        self.arguments = input_state(inputs, kwargs)
        #: what the calls changed: the model's parameters and buffers, then inputs
        self.changed: list[str] = []
        self.changed_inputs: list[str] = []

    def call(self) -> Any:
        __tracebackhide__ = True
        return self.target(*self.inputs, **self.kwargs)

    def reset(self, inputs_only: bool = False) -> None:
        if self.state is not None and not inputs_only:
            self.state.restore()
        self.arguments.restore()

    def note_changes(self) -> None:
        inputs = self.arguments.changed()
        names = [*self.state.changed(), *inputs] if self.state is not None else inputs
        self.changed += [name for name in names if name not in self.changed]
        self.changed_inputs += [name for name in inputs if name not in self.changed_inputs]

    @property
    def changed_model_state(self) -> list[str]:
        return [name for name in self.changed if name not in self.changed_inputs]

    def trial(
        self,
        name: str,
        runs: int,
        *,
        reset: bool,
        reseed: bool,
        inputs_only: bool = False,
        switches: flags.Flags | None = None,
        pattern: int | None = None,
        probe: bool = False,
    ) -> Trial:
        """``runs`` calls under one setting; ``pattern``: fill memory from torch.empty with
        that run pattern's byte; ``probe``: any error ends the trial as "raised" (the
        bytes of the probe may send a buggy model down a path that fails);
        ``inputs_only``: reset only the inputs, not the model's state."""
        __tracebackhide__ = True
        from pytest_torch.core import seeding

        outputs: list[Leaves] = []
        error = None
        refused_cublas = False
        deterministic = switches.deterministic if switches is not None else False
        with flags.using(switches):
            for run in range(1, runs + 1):
                if reset:
                    self.reset(inputs_only)
                if reseed:
                    seeding.seed_all(SEED)
                try:
                    with uninitialised_filled(pattern):
                        result = self.call()
                except Exception as exc:
                    op = flags.op_without_deterministic_implementation(exc)
                    if deterministic and op is not None:
                        error = f"{op} has no deterministic implementation"
                    elif deterministic and cublas.refused(exc):
                        error = f"cuBLAS refused deterministic mode ({cublas.VARIABLE})"
                        refused_cublas = True
                    elif probe:
                        error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0]}"
                    else:
                        _add_note(
                            exc,
                            f"diagnose_nondeterminism: raised in run {run} of the experiment"
                            f" {name!r} (the model's own error, passed on as it is)",
                        )
                        raise
                    break
                outputs.append(freeze(result))
                if not reset:
                    self.note_changes()
        self.reset()
        found = [differences(outputs[0], later) for later in outputs[1:]]
        trial = Trial(
            name,
            runs,
            "raised" if error else ("varies" if any(found) else "identical"),
            [max((d.max_abs for d in diffs), default=0.0) for diffs in found],
            next((diffs[0] for diffs in found if diffs), None),
            error,
            outputs,
            deterministic,
            refused_cublas,
        )
        return trial

    def record(
        self, switches: flags.Flags | None, pattern: int | None, fresh: bool
    ) -> list[tuple[str, Leaves]]:
        """Every submodule's output in one run (see :func:`probes.module_outputs`);
        ``fresh``: with state restored and the RNG reseeded first."""
        from pytest_torch.core import seeding

        assert self.module is not None
        if fresh:
            self.reset()
            seeding.seed_all(SEED)
        with flags.using(switches), uninitialised_filled(pattern):
            try:
                return module_outputs(self.call, self.module)
            except Exception:  # a setting the model refuses: no divergence then
                return []


def _add_note(error: BaseException, note: str) -> None:
    add = getattr(error, "add_note", None)  # Python 3.11+
    if add is not None:
        add(note)


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
    subject = _Subject(model_or_callable, inputs, kwargs)
    # from the first run on: torch reads CUBLAS_WORKSPACE_CONFIG at the process's first
    # CUDA matrix product, which may be in the first run, not at the deterministic ones
    with flags.preserved(), cublas.deterministic_workspace():
        try:
            return _diagnose(subject, runs)
        except CannotCompare as error:
            raise CannotCompare(f"diagnose_nondeterminism: {error}") from None
        finally:
            subject.reset()


def _diagnose(subject: _Subject, runs: int) -> Diagnosis:
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
            return _finish(subject, trials, INPUTS, _inputs_verdict(subject.changed_inputs))
    if subject.changed_model_state:
        trials.append(
            subject.trial("state restored before each run", runs, reset=True, reseed=False)
        )
        if trials[-1].outcome == "identical":
            return _finish(subject, trials, STATE, _state_verdict(subject))
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
            return _finish(subject, trials, UNINITIALISED, _uninitialised_verdict(varies=True))
        return _finish(subject, trials, RANDOMNESS, _random_verdict(seen), [s.name for s in seen])
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
            return _finish(subject, trials, INCONCLUSIVE, _cublas_verdict())
        return _finish(subject, trials, KERNEL, _unsupported_verdict(fixed.error))
    if fixed.outcome == "varies":
        return _finish(subject, trials, OUTSIDE, _outside_verdict())
    if _reads_uninitialised(subject, trials, switches, first=fixed, reference=reseeded):
        return _finish(
            subject, trials, UNINITIALISED, _uninitialised_verdict(varies=True), probe=switches
        )
    return _finish(subject, trials, KERNEL, _fixed_verdict())


def _reads_uninitialised(
    subject: _Subject,
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


def _probe(subject: _Subject, switches: flags.Flags | None, pattern: int) -> Trial:
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


def _when_identical(subject: _Subject, trials: list[Trial]) -> Diagnosis:
    # identical garbage is still garbage: the bytes in memory from torch.empty must not matter
    if _reads_uninitialised(subject, trials, None):
        return _finish(subject, trials, UNINITIALISED, _uninitialised_verdict(varies=False))
    count = len(trials[0].outputs)
    verdict = f"{DETERMINISTIC}: {count} runs gave bitwise identical outputs."
    if subject.changed:
        verdict += (
            f" The call changes {', '.join(subject.changed)}; the outputs do not depend on it"
            f" in these runs."
        )
    return Diagnosis(DETERMINISTIC, verdict, None, trials, [], list(subject.changed))


def _finish(
    subject: _Subject,
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


def _inputs_verdict(changed: list[str]) -> str:
    return (
        f"{INPUTS}: the outputs change because the call writes into its own inputs in place"
        f" ({', '.join(changed)}), so no two calls get the same inputs; with the original"
        f" inputs restored before each run the outputs are identical. Compute out of place"
        f" (x = x + y instead of x += y, x.add(y) instead of x.add_(y)), or pass a copy"
        f" (x.clone()) when the caller needs its tensor unchanged."
    )


def _state_verdict(subject: _Subject) -> str:
    changed = subject.changed_model_state
    statistics = any("running_" in name or "num_batches_tracked" in name for name in changed)
    advice = (
        " Call model.eval() to use the running statistics (BatchNorm) without updating them,"
        " or reset the state before each call."
        if statistics
        else " Reset that state before each call, or keep it out of the forward pass."
    )
    inputs = (
        f" (The call also writes into its inputs, {', '.join(subject.changed_inputs)}; restoring"
        f" only those was not enough.)"
        if subject.changed_inputs
        else ""
    )
    return (
        f"{STATE}: the outputs change because the call changes the model's own state"
        f" ({', '.join(changed)}); with that state restored before each run they are"
        f" identical.{advice}{inputs}"
    )


def _random_verdict(seen: list[RandomSource]) -> str:
    ops = (
        f" Random ops seen: {', '.join(source.name for source in seen)}."
        if seen
        else " No random op of torch's ran: the randomness comes from Python's random or"
        " NumPy (reseeded too)."
    )
    advice: list[str] = []
    for source in seen:
        where = f" in {source.where}" if source.where else ""
        if source.dropout == "module":
            line = (
                " Seed before each call (the torch_seed fixture does), or call model.eval() to"
                " turn dropout off."
            )
        elif source.dropout == "functional":
            line = (
                f" {source.call}{where} drops elements at random although that module is in"
                f" eval mode: model.eval() does not affect a dropout function called with"
                f" training=True; pass training=self.training."
            )
        elif source.dropout == "functional-train":
            line = (
                f" {source.call}{where} drops elements at random: model.eval() turns it off"
                f" only if it is called with training=self.training (a literal training=True"
                f" is not affected by eval())."
            )
        elif source.dropout == "function":
            line = (
                f" {source.call} drops elements at random: pass training=False to turn it off,"
                f" or seed before each call (the torch_seed fixture does)."
            )
        else:
            continue
        if line not in advice:
            advice.append(line)
    others = [source for source in seen if source.dropout is None]
    if others:
        named = ", ".join(dict.fromkeys(source.name for source in others))
        advice.append(
            f" Seed before each call (the torch_seed fixture does), or draw from a seeded"
            f" torch.Generator (generator=..., where the op takes one): {named}."
        )
    elif not seen:
        advice.append(
            " Seed before each call: the torch_seed fixture seeds Python's, NumPy's and"
            " torch's generators."
        )
    return (
        f"{RANDOMNESS}: the variance disappears when the RNG is reseeded before each run."
        f"{ops}{''.join(advice)}"
    )


def _unsupported_verdict(error: str) -> str:
    return (
        f"{KERNEL}: the variance stays when the RNG is reseeded, and {error} (torch refused"
        f" it with torch.use_deterministic_algorithms(True)), so --torch-deterministic"
        f" cannot fix it. Replace that op with a deterministic equivalent, or compare the"
        f" outputs with a tolerance (atol/rtol)."
    )


def _fixed_verdict() -> str:
    return (
        f"{KERNEL}: the variance stays when the RNG is reseeded and disappears with"
        f" torch.use_deterministic_algorithms(True): run the test with --torch-deterministic"
        f" (it applies to tests using torch_seed), or switch deterministic algorithms on"
        f" yourself."
    )


def _uninitialised_verdict(varies: bool) -> str:
    seen = "vary with what that memory held" if varies else "are identical only by luck"
    return (
        f"{UNINITIALISED}: the outputs read memory that was never written (torch.empty,"
        f" new_empty, empty_like): they change when that memory holds other bytes (the"
        f" diagnosis wrote {pattern_name(0)} into it in one run, {pattern_name(1)} in"
        f" another) and otherwise {seen}. Deterministic mode would only hide this behind"
        f" NaN fills: initialise the tensor (torch.zeros) or write every element before"
        f" reading it."
    )


def _cublas_verdict() -> str:
    return (
        f"{INCONCLUSIVE}: the variance stays when the RNG is reseeded, and the experiment"
        f" with deterministic algorithms could not run: {cublas.refusal_explained()}, then"
        f" diagnose again to tell kernels from other causes."
    )


def _outside_verdict() -> str:
    return (
        f"{OUTSIDE}: the variance stays with the RNG reseeded and with deterministic"
        f" algorithms on, so it comes from outside torch's kernels: Python-side state (a"
        f" counter, a cache), an unseeded source such as os.urandom, the time, threads, or"
        f" the order of the data. The first divergence says where it enters."
    )
