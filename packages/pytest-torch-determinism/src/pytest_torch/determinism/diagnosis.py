"""Why a model is not deterministic: one experiment per suspect, and the verdict.

The model runs several times under each setting; a setting that makes the runs
identical names the cause:

1. as called — identical runs mean *Deterministic* (after one more check: outputs that
   change when torch fills uninitialised memory mean *Uninitialised memory*);
2. with the model's state (and the inputs) restored before each run — *State mutation*;
3. with every RNG reseeded before each run — *Randomness-driven*;
4. with deterministic algorithms on — *Kernel-level* (fixed by them, or an op that has
   no deterministic implementation), unless the outputs only became identical because
   torch filled uninitialised memory — *Uninitialised memory*;
5. none of these helps — *Outside torch*.

Every global switch, random generator, parameter, buffer and input is put back
afterwards, also when a run raises.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pytest_torch.determinism import flags
from pytest_torch.determinism.outputs import Difference, Leaves, differences, freeze, has_nan
from pytest_torch.determinism.probes import (
    TensorState,
    first_divergence,
    input_state,
    module_of,
    module_outputs,
    poison,
    random_ops,
    state_of,
    uninitialised_blocks,
)

DETERMINISTIC = "Deterministic"
RANDOMNESS = "Randomness-driven"
KERNEL = "Kernel-level"
UNINITIALISED = "Uninitialised memory"
STATE = "State mutation"
OUTSIDE = "Outside torch"
#: the seed every generator gets before each run of the reseeded experiments
SEED = 0


@dataclass
class Trial:
    """One experiment: the setting, and what the runs did under it."""

    name: str
    runs: int
    #: "identical", "varies", or "raised" (an op refused deterministic mode)
    outcome: str
    #: the largest difference of each later run from the first (0.0: bitwise identical)
    max_differences: list[float] = field(default_factory=list)
    first_difference: Difference | None = None
    error: str | None = None
    outputs: list[Leaves] = field(default_factory=list, repr=False)


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
        self.changed: list[str] = []

    def call(self) -> Any:
        return self.target(*self.inputs, **self.kwargs)

    def poisoner(self) -> Callable[[], None]:
        """Something to run before a run without the fill (see :func:`probes.poison`)."""
        from pytest_torch.core import seeding

        rng = seeding.capture()
        try:
            self.reset()
            blocks = uninitialised_blocks(self.call)
        except RuntimeError:  # an op that refuses to be traced: no poisoning then
            blocks = []
        finally:
            self.reset()
            seeding.restore(rng)
        return lambda: poison(blocks)

    def reset(self) -> None:
        if self.state is not None:
            self.state.restore()
        self.arguments.restore()

    def note_changes(self) -> None:
        names = self.arguments.changed()
        if self.state is not None:
            names = [*self.state.changed(), *names]
        self.changed += [name for name in names if name not in self.changed]

    def trial(
        self,
        name: str,
        runs: int,
        *,
        reset: bool,
        reseed: bool,
        switches: flags.Flags | None = None,
        before_run: Callable[[], object] | None = None,
    ) -> Trial:
        from pytest_torch.core import seeding

        outputs: list[Leaves] = []
        error = None
        with flags.using(switches):
            for _ in range(runs):
                if reset:
                    self.reset()
                if reseed:
                    seeding.seed_all(SEED)
                if before_run is not None:
                    before_run()
                try:
                    result = self.call()
                except RuntimeError as exc:
                    op = flags.op_without_deterministic_implementation(exc)
                    if switches is None or op is None:
                        raise
                    error = f"{op} has no deterministic implementation"
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
        )
        return trial


def diagnose_nondeterminism(
    model_or_callable: Callable[..., Any], *inputs: Any, runs: int = 5, **kwargs: Any
) -> Diagnosis:
    """Find out why ``model_or_callable(*inputs, **kwargs)`` gives different outputs
    from run to run, and say what to do; see :class:`Diagnosis`.

    Modules run as they are (train or eval). Random generators, determinism switches,
    the module's parameters and buffers and tensor inputs are restored afterwards.
    """
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 2:
        raise ValueError(f"diagnose_nondeterminism needs runs >= 2 to compare, got {runs!r}")
    if not callable(model_or_callable):
        raise TypeError(
            f"diagnose_nondeterminism expects a torch.nn.Module or a callable, got"
            f" {type(model_or_callable).__name__}"
        )
    subject = _Subject(model_or_callable, inputs, kwargs)
    with flags.preserved():
        try:
            return _diagnose(subject, runs)
        finally:
            subject.reset()


def _diagnose(subject: _Subject, runs: int) -> Diagnosis:
    trials = [subject.trial("as called", runs, reset=False, reseed=False)]
    if trials[0].outcome == "identical":
        return _when_identical(subject, trials)
    if subject.changed:
        trials.append(
            subject.trial("state restored before each run", runs, reset=True, reseed=False)
        )
        if trials[-1].outcome == "identical":
            return _finish(subject, trials, STATE, _state_verdict(subject.changed))
    reseeded = subject.trial("RNG reseeded before each run", runs, reset=True, reseed=True)
    trials.append(reseeded)
    if reseeded.outcome == "identical":

        def fresh_run() -> None:
            subject.reset()
            subject.call()

        seen = random_ops(fresh_run, subject.module)
        subject.reset()
        # no random op of torch's ran: reseeding may have helped by chance (garbage
        # that happened to match), unless Python's or NumPy's generators were used
        if not seen and _reads_uninitialised(subject, trials, reseeded):
            return _finish(subject, trials, UNINITIALISED, _uninitialised_verdict(varies=True))
        return _finish(subject, trials, RANDOMNESS, _random_verdict(seen), seen)
    # without the fill first, and over poisoned blocks: memory an earlier fill wrote NaN
    # into would otherwise come back as "garbage" equal to the fill
    without_fill = subject.trial(
        "reseeded, deterministic algorithms, uninitialised memory not filled",
        runs,
        reset=True,
        reseed=True,
        switches=flags.deterministic(fill_uninitialized_memory=False),
        before_run=subject.poisoner(),
    )
    trials.append(without_fill)
    if without_fill.outcome == "raised":
        assert without_fill.error is not None
        return _finish(subject, trials, KERNEL, _unsupported_verdict(without_fill.error))
    with_fill = subject.trial(
        "reseeded, deterministic algorithms",
        runs,
        reset=True,
        reseed=True,
        switches=flags.deterministic(),
    )
    trials.append(with_fill)
    if with_fill.outcome == "varies":
        return _finish(subject, trials, OUTSIDE, _outside_verdict())
    # NaN under the fill means the fill reached the outputs: never advise that mode then
    if _fill_matters(without_fill, with_fill, reference=reseeded) or has_nan(with_fill.outputs[0]):
        varies = without_fill.outcome == "varies"
        return _finish(subject, trials, UNINITIALISED, _uninitialised_verdict(varies=varies))
    return _finish(subject, trials, KERNEL, _fixed_verdict())


def _fill_matters(without_fill: Trial, with_fill: Trial, reference: Trial) -> bool:
    """Whether filling uninitialised memory changed the outputs: then they read it."""
    if not with_fill.outputs or not without_fill.outputs:
        return False
    if without_fill.outcome != "identical":
        return True  # and the fill made them identical
    if differences(without_fill.outputs[0], with_fill.outputs[0]):
        return True
    # the fill's NaN where runs without deterministic mode had none
    return has_nan(with_fill.outputs[0]) and not any(has_nan(o) for o in reference.outputs)


def _reads_uninitialised(subject: _Subject, trials: list[Trial], reference: Trial) -> bool:
    """One run without and one with the fill of uninitialised memory: do they differ?"""
    poisoner = subject.poisoner()
    probes = [
        subject.trial(
            f"deterministic algorithms, uninitialised memory {'filled' if fill else 'not filled'}",
            1,
            reset=True,
            reseed=True,
            switches=flags.deterministic(fill_uninitialized_memory=fill),
            before_run=None if fill else poisoner,
        )
        for fill in (False, True)  # without the fill first (see _diagnose)
    ]
    trials += probes  # facts either way
    if any(p.outcome == "raised" for p in probes):
        return False
    return _fill_matters(probes[0], probes[1], reference)


def _when_identical(subject: _Subject, trials: list[Trial]) -> Diagnosis:
    # identical garbage is still garbage: filling uninitialised memory must not matter
    if _reads_uninitialised(subject, trials, trials[0]):
        return _finish(subject, trials, UNINITIALISED, _uninitialised_verdict(varies=False))
    count = len(trials[0].outputs)
    verdict = f"{DETERMINISTIC}: {count} runs gave bitwise identical outputs."
    if has_nan(trials[0].outputs[0]):
        verdict += (
            " They contain NaN, which is also what a read of uninitialised memory gives"
            " when the block last held torch's NaN fill: check for torch.empty."
        )
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
) -> Diagnosis:
    divergence = None
    if subject.module is not None:
        module = subject.module
        switches: list[flags.Flags | None] = [None, None]
        if category == UNINITIALISED:
            switches = [flags.deterministic(fill_uninitialized_memory=False), flags.deterministic()]
        recorded = []
        for setting in switches:
            with flags.using(setting):
                try:
                    recorded.append(module_outputs(subject.call, module))
                except RuntimeError:  # an op that refuses the setting: no divergence then
                    recorded.append([])
        subject.reset()
        divergence = first_divergence(recorded[0], recorded[1])
    return Diagnosis(category, verdict, divergence, trials, seen or [], list(subject.changed))


def _state_verdict(changed: list[str]) -> str:
    return (
        f"{STATE}: the outputs change because the call changes the model's own state"
        f" ({', '.join(changed)}); with that state restored before each run they are"
        f" identical. Put the model in eval() mode (running statistics), or reset the state"
        f" before each call."
    )


def _random_verdict(seen: list[str]) -> str:
    ops = (
        f" Random ops seen: {', '.join(seen)}."
        if seen
        else " No random op of torch's ran: the randomness comes from Python's random or"
        " NumPy (reseeded too)."
    )
    dropout = any("Dropout" in op or "bernoulli" in op for op in seen)
    advice = (
        " Seed before each call (the torch_seed fixture does), or call model.eval() to turn"
        " dropout off."
        if dropout
        else " Seed before each call (the torch_seed fixture does) or pass a torch.Generator."
    )
    return (
        f"{RANDOMNESS}: the variance disappears when the RNG is reseeded before each run."
        f"{ops}{advice}"
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
        f" new_empty, empty_like): they change when torch fills uninitialised memory and"
        f" otherwise {seen}. Deterministic mode would only hide this behind NaN fills:"
        f" initialise the tensor (torch.zeros) or write every element before reading it."
    )


def _outside_verdict() -> str:
    return (
        f"{OUTSIDE}: the variance stays with the RNG reseeded and with deterministic"
        f" algorithms on, so it comes from outside torch's kernels: Python-side state (a"
        f" counter, a cache), an unseeded source such as os.urandom, the time, threads, or"
        f" the order of the data. The first divergence says where it enters."
    )
