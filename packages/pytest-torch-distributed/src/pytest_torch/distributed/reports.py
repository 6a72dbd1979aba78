"""One pytest result per test, from every rank's reports.

A phase fails when any rank failed it; it is skipped when every rank skipped it. A
failure's report names the failing ranks and shows each one's own traceback, then what
every other rank was doing (finished, still in a collective — with its stack —, dead
with its exit status). Each rank's captured output keeps its section, named with the
rank. The short summary line (``-rA``, JUnit's message) starts with the rank.
"""

from __future__ import annotations

import re
import time
from typing import Any, Literal

import pytest
from _pytest._code.code import ExceptionChainRepr, ReprFileLocation, ReprTraceback

from pytest_torch.core.properties import number
from pytest_torch.distributed.causes import after_peer_left, call_site, last_words
from pytest_torch.distributed.pool import RankRun, RankState
from pytest_torch.distributed.processes import describe_exit
from pytest_torch.distributed.stacks import collective, innermost_user_frame, shown_stack

PHASES = ("setup", "call", "teardown")
#: a report's own attributes; any other was put there by a plugin in the rank (the
#: checks' notes for the end of the run) and is carried over
_STANDARD = frozenset(
    {
        "nodeid",
        "location",
        "keywords",
        "outcome",
        "longrepr",
        "when",
        "sections",
        "duration",
        "start",
        "stop",
        "user_properties",
        "wasxfail",
        "$report_type",
    }
)
#: how a phase that failed is called in the summary
_FAILED = {"setup": "failed in setup", "call": "failed", "teardown": "failed in teardown"}


ChainElement = tuple[ReprTraceback, ReprFileLocation | None, str | None]


def rank_failures(
    headline: str, crash: ReprFileLocation, parts: list[tuple[str, Any]]
) -> ExceptionChainRepr:
    """A failed phase's long report: the headline, what the ranks that did not fail were
    doing, then each failing rank's own traceback, last (so tools that read the last
    traceback — CI annotations — find the failing line). It is pytest's own chained
    report, so pytest-xdist and JUnit carry it whole; ``crash`` is what the short
    summary line and JUnit's message say."""
    chain: list[ChainElement] = [(_EMPTY, None, headline)]
    tracebacks: list[ChainElement] = []
    for title, body in parts:
        if hasattr(body, "chain"):
            tracebacks.append((_EMPTY, None, _rule(title)))
            tracebacks += list(body.chain)
        elif hasattr(body, "reprtraceback"):
            tracebacks.append((_EMPTY, None, _rule(title)))
            tracebacks.append((body.reprtraceback, body.reprcrash, None))
        else:
            lines = body if isinstance(body, list) else str(body).splitlines()
            chain.append((_EMPTY, None, "\n".join([_rule(title), *lines])))
    chain += tracebacks
    last = chain[-1]
    chain[-1] = (last[0], crash, last[2])
    return ExceptionChainRepr(chain)


_EMPTY = ReprTraceback(reprentries=[], extraline=None, style="long")


def _rule(title: str) -> str:
    return f"{'-' * 30} {title} {'-' * max(3, 46 - len(title))}"


def phase_report(
    item: pytest.Item,
    when: Literal["setup", "call", "teardown"],
    outcome: Literal["passed", "failed", "skipped"],
    longrepr: Any,
) -> pytest.TestReport:
    """A report for ``item`` made here rather than by pytest's protocol: a test its
    ranks could not collect, start or join a process group for."""
    now = time.time()
    keywords: dict[str, Literal[1]] = dict.fromkeys(item.keywords, 1)
    return pytest.TestReport(
        item.nodeid, item.location, keywords, outcome, longrepr, when, start=now, stop=now
    )


def _reports(config: pytest.Config, state: RankState) -> dict[str, pytest.TestReport]:
    found: dict[str, pytest.TestReport] = {}
    for phase in state.phases:
        report = config.hook.pytest_report_from_serializable(config=config, data=phase.report)
        if isinstance(report, pytest.TestReport):
            found[phase.when] = report
    return found


def merged_reports(
    config: pytest.Config, item: pytest.Item, run: RankRun
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
    extras: dict[str, Any] = {}
    for _, report in sorted(got.items()):  # what other plugins put on a rank's report
        for name, value in vars(report).items():
            if name not in _STANDARD:
                extras.setdefault(name, value)
    return {
        **extras,
        "nodeid": item.nodeid,
        "location": item.location,
        "keywords": {name: 1 for name in item.keywords},
        "when": when,
        "sections": sections,
        "duration": max((r.duration for r in got.values()), default=0.0),
        "start": min((r.start for r in got.values()), default=0.0),
        "stop": max((r.stop for r in got.values()), default=0.0),
        "user_properties": _properties(got),
    }


#: the figure a measured peak is recorded under (``torch_memory.<device>.peak_mib``)
PEAK_SUFFIX = "peak_mib"


def _properties(got: dict[int, pytest.TestReport]) -> list[tuple[str, object]]:
    """One rank's properties (figures of different ranks cannot be mixed): the rank with
    the largest measured peak, named in ``torch_distributed.peak_rank``; else the first
    failing rank; else the lowest."""
    if not got:
        return []
    peaks = {
        rank: max(
            (
                number(value) or 0.0
                for name, value in report.user_properties
                if name.endswith(PEAK_SUFFIX)
            ),
            default=None,
        )
        for rank, report in got.items()
    }
    measured = {rank: peak for rank, peak in peaks.items() if peak is not None}
    if measured:
        chosen = max(sorted(measured), key=lambda rank: measured[rank])
        return [*got[chosen].user_properties, ("torch_distributed.peak_rank", chosen)]
    failed = [rank for rank, report in sorted(got.items()) if report.failed]
    return list(got[failed[0] if failed else min(got)].user_properties)


def _merge(
    item: pytest.Item,
    when: str,
    got: dict[int, pytest.TestReport],
    run: RankRun,
    per_rank: list[dict[str, pytest.TestReport]],
) -> pytest.TestReport:
    """One phase every rank finished. A real failure on any rank fails it; else the
    expected failure of an xfail test on any rank makes it xfailed; else a strict xfail
    that passed everywhere fails; else it is skipped where every rank skipped, and
    passed otherwise (a skip on some ranks only is noted)."""
    base = _base(item, when, got)
    strict = [r for r, rep in sorted(got.items()) if rep.failed and _strict_xpass(rep)]
    failed = [r for r, rep in sorted(got.items()) if rep.failed and r not in strict]
    if failed:
        longrepr = _failures(item, when, failed, got, run, per_rank)
        return pytest.TestReport(outcome="failed", longrepr=longrepr, **base)
    xfailed = [r for r, rep in sorted(got.items()) if rep.skipped and hasattr(rep, "wasxfail")]
    if xfailed:
        report = pytest.TestReport(outcome="skipped", longrepr=got[xfailed[0]].longrepr, **base)
        _keep_xfail(report, got[xfailed[0]])
        if len(xfailed) < len(got):
            others = [r for r in got if r not in xfailed]
            base_note = (
                f"the expected failure happened on {_ranks(xfailed)}, not on {_ranks(others)}"
            )
            report.sections.append(("xfail", base_note))
        return report
    if strict:
        longrepr = _failures(item, when, strict, got, run, per_rank)
        return pytest.TestReport(outcome="failed", longrepr=longrepr, **base)
    skipped = [r for r, rep in sorted(got.items()) if rep.skipped]
    if skipped and len(skipped) == len(got):
        return pytest.TestReport(outcome="skipped", longrepr=got[skipped[0]].longrepr, **base)
    for rank in skipped:
        base["sections"].append((f"rank {rank} skipped", _skip_reason(got[rank])))
    report = pytest.TestReport(outcome="passed", longrepr=None, **base)
    for rank_report in got.values():
        _keep_xfail(report, rank_report)
    return report


def _strict_xpass(report: pytest.TestReport) -> bool:
    return str(report.longrepr).startswith("[XPASS(strict)]")


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr)


def _keep_xfail(report: pytest.TestReport, source: pytest.TestReport) -> None:
    if hasattr(source, "wasxfail"):
        report.wasxfail = source.wasxfail


def _failures(
    item: pytest.Item,
    when: str,
    failed: list[int],
    got: dict[int, pytest.TestReport],
    run: RankRun,
    per_rank: list[dict[str, pytest.TestReport]],
) -> ExceptionChainRepr:
    world = len(run.ranks)
    # a rank whose collective broke because another rank had failed is named after it
    causes = [rank for rank in failed if not after_peer_left(got[rank])] or failed
    followers = [rank for rank in failed if rank not in causes]
    first = got[causes[0]].longrepr
    crash = getattr(first, "reprcrash", None)
    said = getattr(crash, "message", "") or str(first).strip().splitlines()[-1]
    message = f"{_ranks(causes)} of {world}: {said}"
    path, lineno = _where(item, crash)
    headline = f"{_ranks(causes)} of {world} {_FAILED[when]}"
    passed = [s.rank for s in run.ranks if s.rank not in failed]
    never_joined = all(after_peer_left(got[rank]) for rank in failed) and passed
    if never_joined:
        site = call_site(first)
        where = f" (called at {site})" if site else ""
        message = (
            f"{_ranks(causes)} of {world} failed in a collective{where} that {_ranks(passed)}"
            f" never joined ({said})"
        )
        headline += (
            f" in a collective{where} that {_ranks(passed)} never joined ({_ranks(passed)}"
            " finished the test meanwhile): a collective called on some ranks only, or in"
            " another order on each, is the usual cause"
        )
    headline += _followed(followers, len(causes), "had stopped taking part")
    if not never_joined:
        headline += _others(failed, run, per_rank, when)
    parts: list[tuple[str, Any]] = list(_other_parts(run, per_rank, exclude=set(failed)))
    parts += _failed_parts(followers, got) + _failed_parts(causes, got)
    return rank_failures(headline, ReprFileLocation(path, lineno, message), parts)


def _stopped(
    item: pytest.Item,
    when: str,
    got: dict[int, pytest.TestReport],
    run: RankRun,
    per_rank: list[dict[str, pytest.TestReport]],
) -> pytest.TestReport:
    """The phase the run stopped in: a rank died, hung past the timeout, or was still
    busy after another rank failed."""
    base = _base(item, when, got)
    # the phase lasted until the ranks were stopped, however soon some ranks finished it
    earlier = sum(
        max((reports[w].duration for reports in per_rank if w in reports), default=0.0)
        for w in PHASES[: PHASES.index(when)]
    )
    base["duration"] = max(base["duration"], run.waited_s - earlier)
    world = len(run.ranks)
    dead = [s.rank for s in run.ranks if s.returncode is not None]
    failed = sorted(rank for rank, report in got.items() if report.failed)
    busy = [s.rank for s in run.ranks if not s.done and s.returncode is None]
    if dead:
        state = run.ranks[dead[0]]
        headline = (
            f"{_ranks(dead)} of {world}"
            f" {describe_exit(state.returncode, len(dead) > 1, _log(state))}"
            f" during {when} ({run.waited_s:.1f} s into the test)"
        )
        said = last_words(state.captured)
        if said:
            headline += f"; it said: {said}"
        followers = [rank for rank in failed if after_peer_left(got[rank])]
        headline += _followed(followers, len(dead), "had died")
    elif run.ending == "alone" and busy:
        state = run.ranks[busy[0]]
        others = [s.rank for s in run.ranks if s.rank != state.rank]
        headline = (
            f"rank {state.rank} of {world} waited in {collective(state.stack)}, a collective"
            f" that {_ranks(others)} never joined: {_ranks(others)} had finished the test"
            f" {run.alone_s:.0f} s earlier and left the process group, so it could never"
            " complete. A collective called on some ranks only (under an `if rank == ...`,"
            " or after an early return) is the usual cause"
        )
    elif failed:
        headline = (
            f"{_ranks(failed)} of {world} {_FAILED[when]}; {_ranks(busy)}, still running"
            f" {run.waited_s - run.failed_s:.0f} s later, {'was' if len(busy) == 1 else 'were'}"
            " stopped (stacks below)"
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
    parts: list[tuple[str, Any]] = list(_other_parts(run, per_rank, exclude=set(failed)))
    parts += _failed_parts(failed, got)
    longrepr = rank_failures(headline, ReprFileLocation(path, lineno, headline), parts)
    return pytest.TestReport(outcome="failed", longrepr=longrepr, **base)


def _failed_parts(failed: list[int], got: dict[int, pytest.TestReport]) -> list[tuple[str, Any]]:
    """Each failing rank's report; ranks that failed the same way (a collective check
    raises the same error everywhere) share one."""
    groups: dict[str, list[int]] = {}
    for rank in failed:
        text = _without_rank_details(str(got[rank].longrepr))
        groups.setdefault(text, []).append(rank)
    parts: list[tuple[str, Any]] = []
    for ranks in groups.values():
        title = _ranks(ranks) + (" (the same failure on each)" if len(ranks) > 1 else "")
        parts.append((title, got[ranks[0]].longrepr))
    return parts


def _without_rank_details(text: str) -> str:
    """A failure's text with what differs between ranks that failed alike left out: the
    values of the ``rank`` argument and object addresses."""
    text = re.sub(r"\brank = \d+", "rank = N", text)
    return re.sub(r" at 0x[0-9a-f]+", "", text)


def _where(item: pytest.Item, crash: Any) -> tuple[str, int]:
    if crash is not None and getattr(crash, "path", None):
        return str(crash.path), int(crash.lineno)
    return str(item.path), (item.location[1] or 0) + 1


def _followed(followers: list[int], causes: int, what: str) -> str:
    """ "; rank 0 then failed in a collective, because its peer had died"."""
    if not followers:
        return ""
    whose = "its" if causes == 1 else "their"
    return f"; {_ranks(followers)} then failed in a collective, because {whose} peer {what}"


def _log(state: RankState) -> str:
    return "\n".join(state.log_tail)


def _ranks(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def _others(
    failed: list[int], run: RankRun, per_rank: list[dict[str, pytest.TestReport]], when: str
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
    run: RankRun, per_rank: list[dict[str, pytest.TestReport]], exclude: set[int]
) -> list[tuple[str, list[str]]]:
    parts: list[tuple[str, list[str]]] = []
    for state, reports in zip(run.ranks, per_rank, strict=True):
        if state.rank in exclude:
            continue
        if state.returncode is not None:
            lines = [f"rank {state.rank} {describe_exit(state.returncode, log=_log(state))}"]
            lines += _phases(reports)
            if state.captured:
                lines += ["what it wrote during the test before it died (last lines):"]
                lines += [f"  {line}" for line in state.captured]
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
            line = f"rank {state.rank} finished the test: {outcome}"
            if outcome == "failed":
                line = f"rank {state.rank} finished the test: {_outcomes(reports)}"
            parts.append((f"rank {state.rank}: {outcome}", [line]))
    return parts


def _outcomes(reports: dict[str, pytest.TestReport]) -> str:
    """ "setup passed, call failed (RuntimeError: ...)"."""
    shown = []
    for when, report in reports.items():
        text = f"{when} {report.outcome}"
        if report.failed:
            crash = getattr(report.longrepr, "reprcrash", None)
            said = getattr(crash, "message", "") or str(report.longrepr).strip().splitlines()[-1]
            text += f" ({said.splitlines()[0][:200]})"
        shown.append(text)
    return ", ".join(shown)


def _phases(reports: dict[str, pytest.TestReport]) -> list[str]:
    done = [f"{when} {report.outcome}" for when, report in reports.items()]
    return [f"finished: {', '.join(done)}"] if done else []
