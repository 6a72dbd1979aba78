"""One pytest result per test, from every rank's reports.

A phase fails when any rank failed it; it is skipped when every rank skipped it. A
failure's report names the failing ranks and shows each one's own traceback, then what
every other rank was doing (finished, still in a collective — with its stack —, dead
with its exit status). Each rank's captured output keeps its section, named with the
rank. The short summary line (``-rA``, JUnit's message) starts with the rank.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from _pytest._code.code import ReprFileLocation, TerminalRepr
from _pytest._io import TerminalWriter

from pytest_torch.distributed.pool import RankState, TestRun
from pytest_torch.distributed.processes import describe_exit
from pytest_torch.distributed.stacks import collective, innermost_user_frame, shown_stack

PHASES = ("setup", "call", "teardown")
#: how a phase that failed is called in the summary
_FAILED = {"setup": "failed in setup", "call": "failed", "teardown": "failed in teardown"}


@dataclass(eq=False)
class RankFailures(TerminalRepr):
    """A failed phase's long report: the headline, each failing rank's own report, and
    what the other ranks were doing."""

    headline: str
    reprcrash: ReprFileLocation
    parts: list[tuple[str, Any]] = field(default_factory=list)

    def toterminal(self, tw: TerminalWriter) -> None:
        tw.line(self.headline, red=True, bold=True)
        for title, body in self.parts:
            tw.sep("-", title)
            if hasattr(body, "toterminal"):
                body.toterminal(tw)
            else:
                for line in body:
                    tw.line(line)


def _reports(config: pytest.Config, state: RankState) -> dict[str, pytest.TestReport]:
    found: dict[str, pytest.TestReport] = {}
    for phase in state.phases:
        report = config.hook.pytest_report_from_serializable(config=config, data=phase.report)
        if isinstance(report, pytest.TestReport):
            found[phase.when] = report
    return found


def merged_reports(
    config: pytest.Config, item: pytest.Item, run: TestRun
) -> list[pytest.TestReport]:
    """The reports pytest logs for ``run``: the phases every rank finished, merged, then
    (when the run did not end normally) the phase it stopped in, failed."""
    per_rank = [_reports(config, state) for state in run.ranks]
    merged: list[pytest.TestReport] = []
    for when in PHASES:
        got = {
            state.rank: reports[when]
            for state, reports in zip(run.ranks, per_rank, strict=True)
            if when in reports
        }
        complete = len(got) == len(run.ranks)
        if not got and run.ending == "done":
            continue
        if complete or run.ending == "done":
            report = _merge(item, when, got, run, per_rank)
            merged.append(report)
            if report.failed and when == "setup":
                break
            continue
        merged.append(_stopped(item, when, got, run, per_rank))
        break
    return merged


def _base(item: pytest.Item, when: str, got: dict[int, pytest.TestReport]) -> dict[str, Any]:
    sections = [
        (f"{title} (rank {rank})", text)
        for rank, report in sorted(got.items())
        for title, text in report.sections
    ]
    properties = [prop for report in got.values() for prop in report.user_properties]
    return {
        "nodeid": item.nodeid,
        "location": item.location,
        "keywords": {name: 1 for name in item.keywords},
        "when": when,
        "sections": sections,
        "duration": max((r.duration for r in got.values()), default=0.0),
        "start": min((r.start for r in got.values()), default=0.0),
        "stop": max((r.stop for r in got.values()), default=0.0),
        "user_properties": properties,
    }


def _merge(
    item: pytest.Item,
    when: str,
    got: dict[int, pytest.TestReport],
    run: TestRun,
    per_rank: list[dict[str, pytest.TestReport]],
) -> pytest.TestReport:
    base = _base(item, when, got)
    failed = sorted(rank for rank, report in got.items() if report.failed)
    if failed:
        longrepr = _failures(item, when, failed, got, run, per_rank)
        return pytest.TestReport(outcome="failed", longrepr=longrepr, **base)
    skipped = [rank for rank, report in got.items() if report.skipped]
    if skipped and len(skipped) == len(got):
        report = pytest.TestReport(outcome="skipped", longrepr=got[skipped[0]].longrepr, **base)
        _keep_xfail(report, got[skipped[0]])
        return report
    for rank in skipped:
        base["sections"].append((f"rank {rank} skipped", str(got[rank].longrepr)))
    report = pytest.TestReport(outcome="passed", longrepr=None, **base)
    for rank_report in got.values():
        _keep_xfail(report, rank_report)
    return report


def _keep_xfail(report: pytest.TestReport, source: pytest.TestReport) -> None:
    if hasattr(source, "wasxfail"):
        report.wasxfail = source.wasxfail


def _failures(
    item: pytest.Item,
    when: str,
    failed: list[int],
    got: dict[int, pytest.TestReport],
    run: TestRun,
    per_rank: list[dict[str, pytest.TestReport]],
) -> RankFailures:
    world = len(run.ranks)
    first = got[failed[0]].longrepr
    crash = getattr(first, "reprcrash", None)
    ranks = _ranks(failed)
    message = f"{ranks} of {world}: {getattr(crash, 'message', '') or str(first).splitlines()[-1:]}"
    path, lineno = _where(item, crash)
    headline = f"{ranks} of {world} {_FAILED[when]}" + _others(failed, run, per_rank, when)
    parts: list[tuple[str, Any]] = [(f"rank {rank}", got[rank].longrepr) for rank in failed]
    parts += _other_parts(run, per_rank, exclude=set(failed))
    return RankFailures(headline, ReprFileLocation(path, lineno, message), parts)


def _stopped(
    item: pytest.Item,
    when: str,
    got: dict[int, pytest.TestReport],
    run: TestRun,
    per_rank: list[dict[str, pytest.TestReport]],
) -> pytest.TestReport:
    """The phase the run stopped in: a rank died, hung past the timeout, or was still
    busy after another rank failed."""
    base = _base(item, when, got)
    world = len(run.ranks)
    dead = [s.rank for s in run.ranks if s.returncode is not None]
    failed = sorted(rank for rank, report in got.items() if report.failed)
    busy = [s.rank for s in run.ranks if not s.done and s.returncode is None]
    if dead:
        state = run.ranks[dead[0]]
        headline = (
            f"{_ranks(dead)} of {world} {describe_exit(state.returncode, plural=len(dead) > 1)}"
            f" during {when} ({run.waited_s:.1f} s into the test)"
        )
    elif failed:
        headline = (
            f"{_ranks(failed)} of {world} {_FAILED[when]}; {_ranks(busy)} still running"
            f" {run.waited_s:.0f} s later were stopped (their stacks are below)"
        )
    else:
        stuck = [_doing(run.ranks[r]) for r in busy]
        headline = (
            f"timed out after {run.waited_s:.0f} s: {_ranks(busy)} of {world} did not finish"
            f" {when} ({'; '.join(stuck)}). A rank waiting in a collective that another rank"
            f" never called is the usual cause; raise the timeout with the marker's timeout="
            f" or --torch-distributed-timeout if the test is only slow"
        )
    first = got[failed[0]].longrepr if failed else None
    crash = getattr(first, "reprcrash", None)
    path, lineno = _where(item, crash)
    parts: list[tuple[str, Any]] = [(f"rank {rank}", got[rank].longrepr) for rank in failed]
    parts += _other_parts(run, per_rank, exclude=set(failed))
    longrepr = RankFailures(headline, ReprFileLocation(path, lineno, headline), parts)
    return pytest.TestReport(outcome="failed", longrepr=longrepr, **base)


def _where(item: pytest.Item, crash: Any) -> tuple[str, int]:
    if crash is not None and getattr(crash, "path", None):
        return str(crash.path), int(crash.lineno)
    return str(item.path), (item.location[1] or 0) + 1


def _ranks(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def _others(
    failed: list[int], run: TestRun, per_rank: list[dict[str, pytest.TestReport]], when: str
) -> str:
    passed = [s.rank for s in run.ranks if s.rank not in failed]
    return f"; {_ranks(passed)} passed it" if passed else ""


def _doing(state: RankState) -> str:
    where = collective(state.stack)
    phase = state.last_when or "set-up"
    if where:
        return f"rank {state.rank} waiting in {where}"
    frame = innermost_user_frame(state.stack)
    if frame is not None:
        return f"rank {state.rank} busy at {frame.shown()}, in no collective"
    return f"rank {state.rank} busy after {phase}"


def _other_parts(
    run: TestRun, per_rank: list[dict[str, pytest.TestReport]], exclude: set[int]
) -> list[tuple[str, list[str]]]:
    parts: list[tuple[str, list[str]]] = []
    for state, reports in zip(run.ranks, per_rank, strict=True):
        if state.rank in exclude:
            continue
        if state.returncode is not None:
            lines = [f"rank {state.rank} {describe_exit(state.returncode)}"]
            lines += _phases(reports)
            if state.crash:
                lines += state.crash
            elif state.log_tail:
                lines += ["its last output:"]
                lines += [f"  {line}" for line in state.log_tail]
            parts.append((f"rank {state.rank}: died", lines))
        elif not state.done:
            where = collective(state.stack)
            lines = [f"rank {state.rank} was still running" + (f", in {where}" if where else "")]
            lines += _phases(reports)
            if state.stack:
                lines += ["its Python stack when it was stopped (most recent call last):"]
                lines += shown_stack(state.stack)
            else:
                lines += ["(it did not write its stack in time)"]
            parts.append((f"rank {state.rank}: stopped", lines))
        else:
            outcome = "passed" if not any(r.failed for r in reports.values()) else "failed"
            parts.append(
                (
                    f"rank {state.rank}: {outcome}",
                    [f"rank {state.rank} finished the test: {outcome}"],
                )
            )
    return parts


def _phases(reports: dict[str, pytest.TestReport]) -> list[str]:
    done = [f"{when} {report.outcome}" for when, report in reports.items()]
    return [f"finished: {', '.join(done)}"] if done else []
