"""``assert_deterministic``: the same call, several times, bitwise the same outputs."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

from pytest_torch.determinism import flags
from pytest_torch.determinism.outputs import CannotCompare, differences, freeze
from pytest_torch.determinism.probes import input_state, module_of, state_of


class NondeterminismError(AssertionError):
    """Two runs of the same call with the same inputs gave different outputs."""


class InputsChangedWarning(UserWarning):
    """The checked call writes into its own inputs (each run got the original values)."""


def assert_deterministic(
    model_or_callable: Callable[..., Any],
    *inputs: Any,
    runs: int = 5,
    atol: float = 0.0,
    rtol: float = 0.0,
    **kwargs: Any,
) -> Any:
    """Call ``model_or_callable(*inputs, **kwargs)`` ``runs`` times and check that every
    output is the same as the first run's: bitwise by default, within ``atol``/``rtol``
    when given. Returns the first run's output.

    Outputs may be tensors or nested tuples, lists, dicts, named tuples, dataclasses,
    ``torch.distributions`` objects (by their parameters) and objects holding tensors,
    with plain values (compared with ``==``) among them: a training-step callable can
    return its loss, gradients and parameters. An output that cannot be compared (a
    generator, an object whose ``==`` raises) raises
    :class:`~pytest_torch.determinism.outputs.CannotCompare` (a ``TypeError``).

    A call that writes into its tensor inputs gets them back with their original values
    before each later run, so every run sees the same inputs, and an
    :class:`InputsChangedWarning` names them; afterwards they hold what one call left.
    Modules run as they are (train or eval). The RNG is not reseeded between runs;
    random generators, determinism switches and the module's parameters and buffers
    are as before when this returns.
    """
    __tracebackhide__ = True
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 2:
        raise ValueError(f"assert_deterministic needs runs >= 2 to compare, got {runs!r}")
    for name, value in (("atol", atol), ("rtol", rtol)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ValueError(f"assert_deterministic: {name} must be a number >= 0, got {value!r}")
    state = state_of(module_of(model_or_callable))
    arguments = input_state(inputs, kwargs)
    changed: list[str] = []
    with flags.preserved():
        try:
            first_output = _run(model_or_callable, inputs, kwargs, 1, runs)
            first = freeze(first_output)
            for run in range(2, runs + 1):
                now_changed = arguments.changed()
                changed += [name for name in now_changed if name not in changed]
                if now_changed:  # the same inputs in every run
                    arguments.restore()
                output = freeze(_run(model_or_callable, inputs, kwargs, run, runs))
                found = differences(first, output, atol, rtol)
                if found:
                    raise NondeterminismError(_message(found, run, runs, atol, rtol, changed))
            changed += [name for name in arguments.changed() if name not in changed]
        except CannotCompare as error:
            raise CannotCompare(f"assert_deterministic: {error}") from None
        finally:
            if state is not None:
                state.restore()
    if changed:
        warnings.warn(
            InputsChangedWarning(
                f"assert_deterministic: the call writes into its own inputs"
                f" ({', '.join(changed)}): each run got the original values back, and the"
                f" outputs agree; a caller that calls it twice on the same tensors gets"
                f" other outputs. Compute out of place (x = x + y instead of x += y), or"
                f" pass a copy (x.clone())."
            ),
            stacklevel=2,
        )
    return first_output


def _run(
    target: Callable[..., Any], inputs: tuple[Any, ...], kwargs: dict[str, Any], run: int, runs: int
) -> Any:
    """One run; the model's own error passes on as it is, with a note of the run."""
    __tracebackhide__ = True
    try:
        return target(*inputs, **kwargs)
    except Exception as error:
        add_note = getattr(error, "add_note", None)  # Python 3.11+
        if add_note is not None:
            add_note(f"assert_deterministic: raised in run {run} of {runs}")
        raise


def _message(
    found: list[Any], run: int, runs: int, atol: float, rtol: float, changed: list[str]
) -> str:
    compared = "bitwise" if atol == 0 and rtol == 0 else f"with atol={atol:g}, rtol={rtol:g}"
    inputs = (
        f"the same inputs: the call writes into {', '.join(changed)}, so each run got the"
        f" original values back"
        if changed
        else "same inputs"
    )
    lines = [
        f"not deterministic: run {run} of {runs} differs from run 1 ({inputs}, compared"
        f" {compared}):"
    ]
    lines += [f"  {difference.describe()}" for difference in found[:5]]
    if len(found) > 5:
        lines.append(f"  ... and {len(found) - 5} more outputs")
    lines.append(
        "Find out why with diagnose_nondeterminism(model, *inputs) (from pytest_torch import"
        " diagnose_nondeterminism): it tells randomness, kernels, uninitialised memory and"
        " state changes apart."
    )
    return "\n".join(lines)
