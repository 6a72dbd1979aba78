"""``assert_deterministic``: the same call, several times, bitwise the same outputs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pytest_torch.determinism import flags
from pytest_torch.determinism.outputs import differences, freeze
from pytest_torch.determinism.probes import module_of, state_of


class NondeterminismError(AssertionError):
    """Two runs of the same call with the same inputs gave different outputs."""


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

    Outputs may be tensors or nested tuples, lists, dicts, named tuples and dataclasses
    of tensors and plain values: a training-step callable can return its loss, gradients
    and parameters. Modules run as they are (train or eval). The RNG is not reseeded
    between runs; random generators, determinism switches and the module's parameters
    and buffers are as before when this returns.
    """
    __tracebackhide__ = True
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 2:
        raise ValueError(f"assert_deterministic needs runs >= 2 to compare, got {runs!r}")
    for name, value in (("atol", atol), ("rtol", rtol)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ValueError(f"assert_deterministic: {name} must be a number >= 0, got {value!r}")
    state = state_of(module_of(model_or_callable))
    with flags.preserved():
        try:
            first_output = model_or_callable(*inputs, **kwargs)
            first = freeze(first_output)
            for run in range(2, runs + 1):
                found = differences(first, freeze(model_or_callable(*inputs, **kwargs)), atol, rtol)
                if found:
                    raise NondeterminismError(_message(found, run, runs, atol, rtol))
        finally:
            if state is not None:
                state.restore()
    return first_output


def _message(found: list[Any], run: int, runs: int, atol: float, rtol: float) -> str:
    compared = "bitwise" if atol == 0 and rtol == 0 else f"with atol={atol:g}, rtol={rtol:g}"
    lines = [
        f"not deterministic: run {run} of {runs} differs from run 1 (same inputs, compared"
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
