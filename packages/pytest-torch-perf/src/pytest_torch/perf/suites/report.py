"""What benchmark suites produce at the end of a run: tables, a JSON file, plots."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pytest_torch.core.files import write_atomically
from pytest_torch.core.tables import format_table
from pytest_torch.perf.engines import by_unit
from pytest_torch.perf.engines.wall.timing import fmt_ms
from pytest_torch.perf.options import BENCHMARK, UPDATE
from pytest_torch.perf.suites.cases import CaseResult

JSON_FORMAT = 1


def fmt_rate(samples_per_second: float | None) -> str:
    if samples_per_second is None:
        return "-"
    for limit, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if samples_per_second >= limit:
            return f"{samples_per_second / limit:.3g}{unit}/s"
    return f"{samples_per_second:.3g}/s"


def groups(results: Iterable[CaseResult]) -> dict[tuple[str, str], list[CaseResult]]:
    """Results per (suite, device), in a stable order."""
    grouped: dict[tuple[str, str], list[CaseResult]] = {}
    for result in sorted(results, key=lambda r: (r.suite, r.device, r.order, r.test_id)):
        grouped.setdefault((result.suite, result.device), []).append(result)
    return grouped


def _columns(results: list[CaseResult]) -> list[tuple[str, str]]:
    """(dtype, mode) pairs in declaration order (results come sorted by it)."""
    return list(dict.fromkeys((result.dtype, result.mode) for result in results))


def _cells(result: CaseResult | None) -> tuple[str, str]:
    """A case's cells: its figure (latency and throughput, or instructions) and its
    change and verdict; "-" for no case, "skipped" for one that did not run."""
    if result is None:
        return "-", "-"
    if result.status != "ok" or (result.median_ms is None and result.count is None):
        return "skipped", "skipped"
    engine = by_unit(result.unit)
    if result.count is not None:
        figure = engine.fmt(result.count)
    else:
        figure = f"{fmt_ms(result.median_ms or 0.0)}  {fmt_rate(result.throughput)}"
    digits = engine.change_digits
    change = "" if result.change_pct is None else f"{result.change_pct:+.{digits}f} % "
    verdict = "improved" if result.verdict.startswith("improved") else result.verdict
    return figure, f"{change}{verdict}".strip() or "-"


def render(results: list[CaseResult], machine: str) -> list[str]:
    """One block per suite and device: latency and throughput, speed-ups, baselines."""
    lines: list[str] = []
    for (suite, device), cases in groups(results).items():
        columns = _columns(cases)
        by_key = {(r.dtype, r.mode, r.batch_size): r for r in cases}
        batches = sorted({r.batch_size for r in cases})
        speedups = [
            dtype
            for dtype in dict.fromkeys(d for d, _ in columns)
            if (dtype, "eager") in columns and (dtype, "compile") in columns
        ]
        lines.append(f"{suite} on {device} ({machine})")
        header = ["batch", *[f"{dtype} {mode}" for dtype, mode in columns]]
        header += [f"{dtype} compile speed-up" for dtype in speedups]
        rows = [header]
        verdicts = [["batch", *[f"{dtype} {mode}" for dtype, mode in columns]]]
        skipped: dict[str, str] = {}
        for batch in batches:
            row, verdict_row = [str(batch)], [str(batch)]
            for dtype, mode in columns:
                result = by_key.get((dtype, mode, batch))
                figure, verdict = _cells(result)
                row.append(figure)
                verdict_row.append(verdict)
                if result is not None and figure == "skipped":
                    skipped[f"{dtype} {mode}"] = result.reason
            for dtype in speedups:
                eager, compiled = (
                    by_key.get((dtype, "eager", batch)),
                    by_key.get((dtype, "compile", batch)),
                )
                if eager and compiled and eager.median_ms and compiled.median_ms:
                    row.append(f"{eager.median_ms / compiled.median_ms:.2f}x")
                else:
                    row.append("-")
            rows.append(row)
            verdicts.append(verdict_row)
        engine = by_unit(cases[0].unit)
        lines.append(f"  {engine.caption}")
        lines += format_table(rows, left=(0,), rule=True, indent="  ")
        judged = [r for r in cases if r.status == "ok" and r.verdict != "no baseline"]
        if judged:
            stats = ", ".join(sorted({r.stat for r in judged if r.stat})) or "-"
            lines += [f"  change vs baseline (statistic: {stats}) and verdict"]
            lines += format_table(verdicts, left=(0,), rule=True, indent="  ")
        elif any(r.status == "ok" for r in cases):
            lines.append(
                f"  no {engine.missing} yet: record them with"
                f" pytest {BENCHMARK} {UPDATE}{engine.option}"
            )
        compile_runs = [
            r for r in cases if r.mode == "compile" and r.status == "ok" and r.first_call_ms
        ]
        if compile_runs:
            times = ", ".join(
                f"{r.dtype} b{r.batch_size} {fmt_ms(r.first_call_ms or 0.0)}" for r in compile_runs
            )
            lines.append(f"  compile time (first call, not in the latency above): {times}")
        for column, reason in skipped.items():
            lines.append(f"  skipped {column}: {reason}")
        lines.append("")
    return lines


def write_json(path: Path, results: list[CaseResult], fingerprint: dict[str, Any]) -> None:
    document = {
        "format": JSON_FORMAT,
        "fingerprint": fingerprint,
        "cases": [json.loads(r.to_json()) for r in sorted(results, key=lambda r: r.test_id)],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps(document, indent=2, sort_keys=True) + "\n")


def plot_name(suite: str, device: str) -> str:
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{suite}-{device}").strip("_")
    return f"{stem}.png"


def write_plots(directory: Path, results: list[CaseResult], machine: str) -> list[Path]:
    """One PNG per suite and device: latency and throughput against batch size."""
    # A Figure without pyplot draws with Agg and leaves matplotlib's global backend alone.
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    plain = FuncFormatter(lambda value, _: f"{value:g}")
    # between decades, label only 2 and 5 so the axis stays readable
    sparse = FuncFormatter(
        lambda value, _: f"{value:g}" if f"{value:g}".lstrip("0.")[:1] in ("2", "5") else ""
    )

    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for (suite, device), cases in groups(results).items():
        measured = [r for r in cases if r.status == "ok" and r.median_ms]
        if not measured:
            continue
        figure = Figure(figsize=(12, 5), layout="constrained")
        left, right = figure.subplots(1, 2)
        colours = {d: f"C{i}" for i, d in enumerate(dict.fromkeys(r.dtype for r in measured))}
        for dtype, mode in _columns(measured):
            points = sorted(
                (r.batch_size, r.median_ms, r.throughput)
                for r in measured
                if (r.dtype, r.mode) == (dtype, mode)
            )
            batches = [p[0] for p in points]
            style = "--" if mode == "compile" else "-"
            label = f"{dtype}, {mode}"
            colour = colours[dtype]
            left.plot(batches, [p[1] for p in points], style, color=colour, marker="o", label=label)
            right.plot(
                batches, [p[2] for p in points], style, color=colour, marker="o", label=label
            )
        for axis, ylabel, title in (
            (left, "median latency per call (ms)", "Latency (lower is better)"),
            (right, "throughput (samples / s)", "Throughput (higher is better)"),
        ):
            axis.set_xscale("log", base=2)
            axis.set_yscale("log")
            axis.set_xlabel("batch size")
            axis.set_ylabel(ylabel)
            axis.set_title(title)
            batches_all = sorted({r.batch_size for r in measured})
            axis.set_xticks(batches_all, [str(b) for b in batches_all])
            axis.yaxis.set_major_formatter(plain)
            axis.yaxis.set_minor_formatter(sparse)
            axis.tick_params(axis="y", which="minor", labelsize=7)
            axis.grid(True, which="both", alpha=0.3)
            axis.legend()
        figure.suptitle(f"{suite} on {device}\n{machine}", fontsize=11)
        path = directory / plot_name(suite, device)
        figure.savefig(path, dpi=100)
        written.append(path)
    return written
