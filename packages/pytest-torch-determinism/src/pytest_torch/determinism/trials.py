"""One experiment of a diagnosis: the model run several times under one setting (state
and inputs restored or not, every generator reseeded or not, determinism switches, the
bytes in memory from ``torch.empty``), and what the runs did under it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pytest_torch.core import seeding
from pytest_torch.determinism import cublas, flags
from pytest_torch.determinism.outputs import Difference, Leaves, differences, freeze
from pytest_torch.determinism.probes import (
    TensorState,
    input_state,
    module_of,
    module_outputs,
    state_of,
    uninitialised_filled,
)

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


class Subject:
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
