"""torch.compile health: ``assert_no_graph_breaks`` and the budget of
``@pytest.mark.torch_compile_budget`` (the judging and its messages, and the record the
end-of-run table is built from).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from pytest_torch.core.properties import decode, encode, number
from pytest_torch.core.tables import format_table
from pytest_torch.perf.compilation.graph_breaks import GraphBreak
from pytest_torch.perf.compilation.recompiles import guard_key, recompile_fix
from pytest_torch.perf.compilation.watch import CompileReport, CompileWatch, Recompile


class GraphBreakError(AssertionError):
    """``assert_no_graph_breaks`` found graph breaks."""


# -- assert_no_graph_breaks --------------------------------------------------------------


def _unwrap(target: Any) -> Any:
    """The original function or module of an already compiled one (compiling it again
    would trace dynamo's wrapper)."""
    for attribute in ("_orig_mod", "_torchdynamo_orig_callable"):
        inner = getattr(target, attribute, None)
        if inner is not None:
            return inner
    return target


def _name(target: Any) -> str:
    import torch

    if isinstance(target, torch.nn.Module):
        return f"{type(target).__name__}.forward"
    return (
        getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or repr(target)
    )


def assert_no_graph_breaks(fn_or_module: Callable[..., Any], *inputs: Any, **kwargs: Any) -> Any:
    """Compile ``fn_or_module`` (a function or an ``nn.Module``, compiled or not), call it
    once with ``inputs`` and ``kwargs``, and fail if torch.compile could not make it one
    graph.

    Each graph break is listed with your file, line and source, torch's reason, and the
    fix where a known one exists (printing and logging, ``.item()`` and branches on
    tensor values, builtins and libraries dynamo cannot trace, ...). It traces with a
    backend that generates no code, so it costs little more than tracing, on any device.
    The call runs from an empty compile cache, which is emptied again afterwards (see
    ``compilation.watch``). Returns what the call returned.
    """
    __tracebackhide__ = True
    if not callable(fn_or_module):
        raise TypeError(
            f"assert_no_graph_breaks: expected a function or an nn.Module to compile,"
            f" got {type(fn_or_module).__name__}: assert_no_graph_breaks(model, x)"
        )
    import torch

    target = _unwrap(fn_or_module)

    graphs = []

    def collect(graph_module: Any, example_inputs: Any) -> Any:
        graphs.append(graph_module)
        return graph_module.forward  # run the traced graph as it is: nothing generated

    with CompileWatch() as watch:
        compiled: Any = torch.compile(target, backend=collect, fullgraph=False)
        result = compiled(*inputs, **kwargs)
    report = watch.report
    name = _name(target)
    if report.compiles == 0:
        raise GraphBreakError(
            f"assert_no_graph_breaks: torch.compile compiled nothing of {name}, so there is"
            f" no graph to check: {nothing_compiled_cause()}"
        )
    if report.graph_breaks:
        raise GraphBreakError(format_graph_breaks(name, report.graph_breaks, len(graphs)))
    if not graphs:
        raise GraphBreakError(
            f"assert_no_graph_breaks: torch.compile traced {name} but made no graph: it"
            f" found no tensor operation to compile, so there is nothing to check; pass"
            f" the function or module that does the tensor work"
        )
    return result


def switched_off() -> str | None:
    """How torch.compile is switched off in this process, if it is."""
    import torch._dynamo

    if torch._dynamo.config.get_config_copy().get("disable"):
        return "TORCHDYNAMO_DISABLE=1 or torch._dynamo.config.disable = True"
    stance = getattr(getattr(torch._dynamo.eval_frame, "_stance", None), "stance", "default")
    if stance in ("force_eager", "eager_on_recompile", "fail_on_recompile"):
        return f'torch.compiler.set_stance("{stance}")'
    return None


def nothing_compiled_cause() -> str:
    """Why nothing compiled: a switch that turns torch.compile off, or dynamo skipping."""
    switch = switched_off()
    if switch is not None:
        return f"torch.compile is switched off in this process ({switch}); switch it on"
    return (
        "dynamo skipped the code (a builtin, a C extension or a function torch does not"
        " trace); check the Python function or the nn.Module that does the tensor work"
    )


def format_graph_breaks(name: str, breaks: list[GraphBreak], graphs: int | None = None) -> str:
    """The failure of assert_no_graph_breaks; ``graphs``: how many graphs torch made."""
    count = sum(item.count for item in breaks)
    times = f"{count} time{'s' if count != 1 else ''}"
    if graphs == 1 and not any(item.skipped for item in breaks):
        head = (
            f"expected {name} to compile with no graph break; torch.compile broke it"
            f" {times} (it still made one graph: {'the break' if count == 1 else 'they'}"
            f" fell outside its tensor work, so nothing was split on this call), and"
            f" fullgraph=True and torch.export fail on {'it' if count == 1 else 'them'}:"
        )
    else:
        made = (
            ""
            if graphs is None
            else f" and made {graphs or 'no'} graph{'s' if graphs != 1 else ''}"
        )
        head = f"expected {name} to compile into one graph; torch.compile broke it {times}{made}:"
    lines = [head]
    lines += _numbered(item.describe() for item in breaks)
    if not head.startswith(f"expected {name} to compile with no graph break"):
        lines.append(
            "Each break runs the code around it in Python between graphs, and stops the"
            " compiler from optimising across it."
        )
    return "\n".join(lines)


def _numbered(blocks: Iterable[list[str]], indent: str = "  ") -> list[str]:
    lines = []
    for index, block in enumerate(blocks, 1):
        head = f"{indent}{index}. "
        lines.append(head + block[0])
        lines += [" " * len(head) + line for line in block[1:]]
    return lines


# -- the marker's budget -----------------------------------------------------------------


@dataclass(frozen=True)
class CompileBudget:
    recompiles: int = 0
    graph_breaks: int = 0
    seconds: float | None = None

    def describe(self) -> str:
        parts = [f"recompiles <= {self.recompiles}", f"graph breaks <= {self.graph_breaks}"]
        if self.seconds is not None:
            parts.append(f"compile time <= {_seconds(self.seconds)}")
        return ", ".join(parts)


def parse_budget(values: Mapping[str, Any], prefix: str, example: str) -> CompileBudget:
    """The budget from the marker's bound arguments; ValueError naming the test, the
    argument and what is expected."""
    counts = {}
    for name in ("recompiles", "graph_breaks"):
        value = values[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(
                f"{prefix}: {name}= must be a whole number >= 0 (how many are allowed),"
                f" got {value!r}. Example: {example}"
            )
        counts[name] = value
    seconds = values["seconds"]
    if seconds is not None:
        ok = isinstance(seconds, (int, float)) and not isinstance(seconds, bool)
        if not ok or not seconds > 0 or seconds == float("inf"):
            raise ValueError(
                f"{prefix}: seconds= must be a number of seconds > 0 (the longest time the"
                f" test may spend compiling), or None for no limit; got {seconds!r}."
                f" Example: {example}"
            )
        seconds = float(seconds)
    return CompileBudget(counts["recompiles"], counts["graph_breaks"], seconds)


def _seconds(value: float) -> str:
    """0.0421 -> "0.042 s", 3.25 -> "3.25 s", 61.2 -> "61.2 s"."""
    return f"{value:.3g} s" if value < 100 else f"{value:.0f} s"


def _recompile_block(item: Recompile, broken: bool, again: set[tuple[str, ...]]) -> list[str]:
    at = f" at {item.call_site.describe()}" if item.call_site is not None else ""
    what = f"{item.function} recompiled" if item.function else "recompiled"
    lines = [f"{what}{at}"]
    if item.reasons:
        # the newest compiled version first; older ones failed too, or it would have run
        lines.append(f"guard failed: {item.reasons[0]}")
        if len(item.reasons) > 1:
            older = len(item.reasons) - 1
            lines.append(
                f"(and {older} older compiled version{'s' if older > 1 else ''} did not fit either)"
            )
    else:
        lines.append("guard failed: (torch gave no reason)")
    fix = recompile_fix(item.reasons, item.after_break_parameters, broken, again)
    if fix:
        lines.append(f"fix: {fix}")
    return lines


def _recompile_blocks(recompiles: list[Recompile], broken: bool) -> list[list[str]]:
    """One block per recompile; a fix already given just above is not repeated."""
    # the same guard failing first in two recompiles of one function: torch made that
    # dimension or number dynamic after the first, and the code fixed it again
    frames = [(item.compile_id.partition("/")[0] or item.function, item) for item in recompiles]
    failed_first = Counter(
        (frame, guard_key(item.reasons[0])) for frame, item in frames if item.reasons
    )
    again: dict[str, set[tuple[str, ...]]] = {}
    for (frame, key), count in failed_first.items():
        if key is not None and count > 1:
            again.setdefault(frame, set()).add(key)
    blocks, last_fix = [], None
    for frame, item in frames:
        block = _recompile_block(item, broken, again.get(frame, set()))
        fix = next((line for line in block if line.startswith("fix: ")), None)
        if fix is not None and fix == last_fix:
            block = [line for line in block if line != fix] + ["fix: as above"]
        last_fix = fix
        blocks.append(block)
    return blocks


def judge(nodeid: str, report: CompileReport, budget: CompileBudget, marker: str) -> str | None:
    """The failure message when the test body went over its budget or compiled nothing;
    None when it kept to it."""
    if report.compiles == 0:
        cause = (
            f" {nothing_compiled_cause()}."
            if switched_off() is not None
            else " torch.compile is lazy: the model compiles at its first call, so call"
            " the compiled model inside the test (not only in a fixture), or remove the"
            " marker."
        )
        return (
            f"{nodeid}: @pytest.mark.{marker} watched the test body, but torch.compile"
            f" compiled nothing in it, so there was nothing to check.{cause}"
        )
    sections: list[str] = []
    recompiles = len(report.recompiles)
    if recompiles > budget.recompiles or report.limit_hits:
        sections.append(
            f"recompiles: {recompiles}, allowed {budget.recompiles}"
            + (" (the recompile limit was hit)" if report.limit_hits else "")
        )
        sections += _numbered(_recompile_blocks(report.recompiles, bool(report.graph_breaks)))
        sections += [
            f"  {hit}: from then on it ran uncompiled, and its recompiles were no longer counted"
            for hit in report.limit_hits
        ]
    breaks = report.graph_break_count
    if breaks > budget.graph_breaks:
        sections.append(f"graph breaks: {breaks}, allowed {budget.graph_breaks}")
        sections += _numbered(item.describe() for item in report.graph_breaks)
    if budget.seconds is not None and report.seconds > budget.seconds:
        sections.append(
            f"compile time: {_seconds(report.seconds)}, allowed {_seconds(budget.seconds)}"
            f" ({report.seconds / budget.seconds:.1f}x; {report.compiles} compile"
            f"{'s' if report.compiles != 1 else ''}). Fewer recompiles and graph breaks"
            f" compile less; a busy machine compiles slower, so leave room."
        )
    if not sections:
        return None
    head = f"{nodeid}: over its torch.compile budget ({budget.describe()})"
    return "\n".join([head, *sections])


# -- the record behind the end-of-run table ------------------------------------------------

PREFIX = "torch_compile."


@dataclass
class CompileRecord:
    test: str
    compiles: int
    recompiles: int
    graph_breaks: int
    compile_s: float
    budget: str
    verdict: str

    @classmethod
    def of(
        cls, test: str, report: CompileReport, budget: CompileBudget, verdict: str
    ) -> CompileRecord:
        return cls(
            test,
            report.compiles,
            len(report.recompiles),
            report.graph_break_count,
            report.seconds,
            budget.describe(),
            verdict,
        )

    def to_properties(self) -> list[tuple[str, object]]:
        values = {
            item.name: getattr(self, item.name) for item in fields(self) if item.name != "test"
        }
        return encode(PREFIX, self.test, values)

    @classmethod
    def from_properties(cls, properties: Iterable[tuple[str, object]]) -> list[CompileRecord]:
        records = []
        for test, values in decode(properties, PREFIX).items():
            figures = [number(values.get(name)) for name in _NUMBERS]
            if None in figures or not {"budget", "verdict"} <= values.keys():
                continue  # not one of ours
            compiles, recompiles, breaks, seconds = figures
            assert compiles is not None and recompiles is not None and breaks is not None
            assert seconds is not None
            records.append(
                cls(
                    test,
                    int(compiles),
                    int(recompiles),
                    int(breaks),
                    seconds,
                    str(values["budget"]),
                    str(values["verdict"]),
                )
            )
        return records


_NUMBERS = ("compiles", "recompiles", "graph_breaks", "compile_s")


def render_table(records: list[CompileRecord]) -> list[str]:
    """One aligned row per test with a compile budget."""
    rows = [("test", "compiles", "recompiles", "graph breaks", "compile time", "verdict")]
    for record in sorted(records, key=lambda r: r.test):  # xdist: in finishing order
        rows.append(
            (
                record.test,
                str(record.compiles),
                str(record.recompiles),
                str(record.graph_breaks),
                _seconds(record.compile_s),
                record.verdict,
            )
        )
    return format_table(rows, left=(0, 5), rule=True)
