"""One pytest result per test, from every rank's reports.

A phase fails when any rank failed it; it is skipped when every rank skipped it, and
also when some ranks skipped it and the others passed (the test did not run whole: the
reason names the ranks). A failure's report (:mod:`.parts`) names the ranks that caused
it and what their exception said, shows each one's own traceback, then the ranks that
failed only because a peer had gone, what every other rank was doing, and, where the
ranks' collectives differ, the first difference (:mod:`.divergence`). Each rank's
captured output keeps its section, named with the rank. The short summary line
(``-rA``, JUnit's message) starts with the rank.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

import pytest
from _pytest._code.code import ReprFileLocation

from pytest_torch.distributed.causes import after_peer_left, call_site, last_words
from pytest_torch.distributed.divergence import (
    ADVICE,
    MISMATCH,
    OWN_CODE,
    USUAL,
    Explanation,
    explain,
    missing_records,
)
from pytest_torch.distributed.parts import (
    brief,
    consequence_parts,
    doing,
    failed_parts,
    log_of,
    other_parts,
    plain_report,
    properties,
    rank_failures,
    ranks,
    said,
)
from pytest_torch.distributed.pool import RankRun, RankState
from pytest_torch.distributed.processes import describe_exit
from pytest_torch.distributed.stacks import collective

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


def _reports(config: pytest.Config, state: RankState) -> dict[str, pytest.TestReport]:
    found: dict[str, pytest.TestReport] = {}
    for phase in state.phases:
        report = config.hook.pytest_report_from_serializable(config=config, data=phase.report)
        if isinstance(report, pytest.TestReport):
            found[phase.when] = report
    return found


class _Story:
    """What the run says beyond its reports: the ranks' records, read once."""

    def __init__(self, run: RankRun, per_rank: list[dict[str, pytest.TestReport]]) -> None:
        self.run = run
        self.per_rank = per_rank
        self.world = len(run.ranks)

    @property
    def running(self) -> set[int]:
        return {s.rank for s in self.run.ranks if not s.done and s.returncode is None}

    @cached_property
    def explanation(self) -> Explanation | None:
        ended = {}
        for state, reports in zip(self.run.ranks, self.per_rank, strict=True):
            failed = any(r.failed for r in reports.values())
            if state.done:
                ended[state.rank] = "failed" if failed else "finished the test"
            elif state.returncode is None:
                ended[state.rank] = "failed" if failed else "was stopped"
        return explain(self.run.records, ended, self.running)

    @cached_property
    def waits(self) -> dict[int, str]:
        """Rank -> what its record says it waits in."""
        found = {}
        for rank, record in self.run.records.items():
            calls = list(record.waiting().values()) if not record.missing else []
            if rank in self.running and calls:
                call = calls[0]
                group = record.group_of(call).shown()
                where = f", called at {call.site}" if call.site else ""
                found[rank] = f"{call.what()} (#{call.seq} on {group}){where}"
        return found

    def last_calls(self, exclude: set[int]) -> str:
        """ "; rank 1's last collective was #1 on the default group, all_reduce ..."."""
        found = []
        for rank, record in sorted(self.run.records.items()):
            if rank not in exclude and not record.missing and record.calls:
                call = record.calls[-1]
                group = record.group_of(call).shown()
                found.append(
                    f"rank {rank}'s last collective was #{call.seq} on {group}, {call.describe()}"
                )
        return "".join(f"; {text}" for text in found)

    def section(self, shown: bool) -> list[tuple[str, Any]]:
        explanation = self.explanation
        why = missing_records(self.run.records)
        if explanation is None and why and shown:
            return [("collectives, side by side", [f"the ranks kept no record: {why}"])]
        if explanation is None or not explanation.lines or not shown:
            return []
        return [("collectives, side by side", explanation.lines)]

    def diverged(self) -> Explanation | None:
        explanation = self.explanation
        return explanation if explanation is not None and explanation.diverged else None


def merged_reports(
    config: pytest.Config, item: pytest.Item, run: RankRun
) -> list[pytest.TestReport]:
    """The reports pytest logs for ``run`` (each rank's own outcome, should the merging
    fail)."""
    try:
        return _merged_reports(config, item, run)
    except Exception as exc:
        per_rank = [_reports(config, state) for state in run.ranks]
        return [plain_report(item, per_rank, run.ending, f"{type(exc).__name__}: {exc}")]


def _merged_reports(
    config: pytest.Config, item: pytest.Item, run: RankRun
) -> list[pytest.TestReport]:
    """The reports pytest logs for ``run``: the phases every rank finished, merged, then
    (when the run did not end normally) the phase it stopped in, failed."""
    per_rank = [_reports(config, state) for state in run.ranks]
    story = _Story(run, per_rank)
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
            if when == "call" and merged and merged[-1].skipped:
                continue  # setup skipped (on some ranks): the test did not run here
            report = _merge(item, when, got, story)
            merged.append(report)
            if report.failed and when == "setup":
                break
            continue
        merged.append(_stopped(item, when, got, story))
        break
    return merged


def _base(
    item: pytest.Item, when: str, got: dict[int, pytest.TestReport], first: list[int] | None = None
) -> dict[str, Any]:
    sections = [
        (f"{title} (rank {rank})", text)
        for rank, report in sorted(got.items())
        for title, text in report.sections
    ]
    extras: dict[str, Any] = {}
    order = [*(first or []), *sorted(got)]
    for rank in dict.fromkeys(order):  # what other plugins put on a rank's report
        for name, value in vars(got[rank]).items():
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
        "user_properties": properties(got),
    }


def _merge(
    item: pytest.Item, when: str, got: dict[int, pytest.TestReport], story: _Story
) -> pytest.TestReport:
    """One phase every rank finished. A real failure on any rank fails it; else the
    expected failure of an xfail test on any rank makes it xfailed; else a strict xfail
    that passed everywhere fails; else it is skipped where any rank skipped (the reason
    names the ranks when the others ran it), and passed otherwise."""
    strict = [r for r, rep in sorted(got.items()) if rep.failed and _strict_xpass(rep)]
    failed = [r for r, rep in sorted(got.items()) if rep.failed and r not in strict]
    if failed or strict:
        return _failures(item, when, failed or strict, got, story)
    base = _base(item, when, got)
    xfailed = [r for r, rep in sorted(got.items()) if rep.skipped and hasattr(rep, "wasxfail")]
    if xfailed:
        report = pytest.TestReport(outcome="skipped", longrepr=got[xfailed[0]].longrepr, **base)
        _keep_xfail(report, got[xfailed[0]])
        if len(xfailed) < len(got):
            others = [r for r in got if r not in xfailed]
            note = f"the expected failure happened on {ranks(xfailed)}, not on {ranks(others)}"
            report.sections.append(("xfail", note))
        return report
    skipped = [r for r, rep in sorted(got.items()) if rep.skipped]
    if skipped:
        longrepr = got[skipped[0]].longrepr
        if len(skipped) < len(got):
            ran = [r for r in sorted(got) if r not in skipped]
            reason = (
                f"{_skip_reason(got[skipped[0]])} (skipped on {ranks(skipped)} of"
                f" {story.world}; {ranks(ran)} ran it and passed: the test did not run whole)"
            )
            if isinstance(longrepr, tuple) and len(longrepr) == 3:
                longrepr = (longrepr[0], longrepr[1], reason)
            else:
                longrepr = reason
        return pytest.TestReport(outcome="skipped", longrepr=longrepr, **base)
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


def _split(failed: list[int], got: dict[int, pytest.TestReport]) -> tuple[list[int], list[int]]:
    """The ranks that caused a failure, and those whose collective broke because a peer
    had gone (all of them causes, when every one failed so)."""
    causes = [rank for rank in failed if not after_peer_left(got[rank])] or failed
    return causes, [rank for rank in failed if rank not in causes]


def _failures(
    item: pytest.Item,
    when: str,
    failed: list[int],
    got: dict[int, pytest.TestReport],
    story: _Story,
) -> pytest.TestReport:
    """A phase every rank finished, failed on ``failed``: cause first."""
    world = story.world
    causes, followers = _split(failed, got)
    first = got[causes[0]].longrepr
    crash = getattr(first, "reprcrash", None)
    message = f"{ranks(causes)} of {world} {_FAILED[when]}: {said(got[causes[0]])}"
    path, lineno = _where(item, crash)
    headline = f"{ranks(causes)} of {world} {_FAILED[when]}"
    passed = [s.rank for s in story.run.ranks if s.rank not in failed]
    never_joined = all(after_peer_left(got[rank]) for rank in failed) and passed
    diverged = story.diverged()
    shown = followers
    if never_joined and diverged is not None and diverged.kind != "missing":
        # the ranks met in a call that did not match: one went on with what it received,
        # the other's collective broke when it left
        message = f"{ranks(causes)} of {world} failed: {MISMATCH[diverged.kind]},"
        message += f" {diverged.sentence}"
        headline = (
            f"{message}; {ranks(causes)} then failed in it when {ranks(passed)} left it"
            f" ({brief(got[causes[0]])}); {ranks(passed)} passed, but what"
            f" {'it' if len(passed) == 1 else 'they'} received from that collective is not"
            f" to be trusted. {USUAL[diverged.kind].capitalize()}"
        )
        causes, followers, shown = [], causes, []
    elif never_joined:
        site = call_site(first)
        where = f" (called at {site})" if site else ""
        message = (
            f"{ranks(causes)} of {world} failed in a collective{where} that {ranks(passed)}"
            f" never joined ({brief(got[causes[0]])})"
        )
        headline += (
            f" in a collective{where} that {ranks(passed)} never joined ({ranks(passed)}"
            " finished the test meanwhile): a collective called on some ranks only, or in"
            " another order on each, is the usual cause"
        )
    else:
        headline += f": {said(got[causes[0]])}"
    if diverged is not None and causes:
        headline += f"; the ranks' collectives part at {diverged.sentence}"
        message += f"; their collectives part at {diverged.sentence}"
    headline += _followed(shown, len(causes), "had stopped taking part")
    if passed and not never_joined:
        headline += f"; {ranks(passed)} passed it"
    # a collective broken by a peer that left shows where it was called, not torch's source
    parts = [] if never_joined else failed_parts(causes, got)
    if never_joined:  # the only failure: its collective broke when the others left
        parts += consequence_parts(failed, got, "" if len(failed) == 1 else " (a consequence)")
    else:
        parts += consequence_parts(followers, got)
    parts += other_parts(story.run, story.per_rank, set(failed), story.waits)
    parts += story.section(diverged is not None or bool(never_joined))
    longrepr = rank_failures(headline, ReprFileLocation(path, lineno, message), parts)
    base = _base(item, when, got, first=causes)
    return pytest.TestReport(outcome="failed", longrepr=longrepr, **base)


def _stopped(
    item: pytest.Item, when: str, got: dict[int, pytest.TestReport], story: _Story
) -> pytest.TestReport:
    """The phase the run stopped in: a rank died, hung past the timeout, was still busy
    after another rank failed, or waited in a collective that could not complete."""
    run, per_rank = story.run, story.per_rank
    failed = sorted(rank for rank, report in got.items() if report.failed)
    dead = {s.rank for s in run.ranks if s.returncode is not None}
    if dead:  # the dead caused it; a collective that broke on its peers followed
        followers = [rank for rank in failed if after_peer_left(got[rank])]
        causes = [rank for rank in failed if rank not in followers]
    else:
        causes, followers = _split(failed, got) if failed else ([], [])
    base = _base(item, when, got, first=causes)
    # the phase lasted until the ranks were stopped, however soon some ranks finished it
    earlier = sum(
        max((reports[w].duration for reports in per_rank if w in reports), default=0.0)
        for w in PHASES[: PHASES.index(when)]
    )
    base["duration"] = max(base["duration"], run.waited_s - earlier)
    headline = _headline(when, got, story, causes, followers)
    first = got[causes[0]].longrepr if causes else None
    path, lineno = _where(item, getattr(first, "reprcrash", None))
    everyone = {s.rank for s in run.ranks}
    parts = failed_parts(causes, got)
    parts += other_parts(run, per_rank, everyone - dead, story.waits)
    parts += consequence_parts(followers, got)
    parts += other_parts(run, per_rank, set(failed) | dead, story.waits)
    parts += story.section(True)
    message = headline
    diverged = story.diverged()
    if run.ending in ("stuck", "alone") and diverged is not None:  # the gist first
        message = f"{MISMATCH.get(diverged.kind, 'a collective called on some ranks only')}"
        message += f" ({run.waited_s:.0f} s into the test): {diverged.sentence}"
    longrepr = rank_failures(headline, ReprFileLocation(path, lineno, message), parts)
    return pytest.TestReport(outcome="failed", longrepr=longrepr, **base)


def _headline(
    when: str,
    got: dict[int, pytest.TestReport],
    story: _Story,
    causes: list[int],
    followers: list[int],
) -> str:
    run, world = story.run, story.world
    dead = [s.rank for s in run.ranks if s.returncode is not None]
    busy = [s.rank for s in run.ranks if not s.done and s.returncode is None]
    diverged = story.diverged()
    advice = ADVICE.get(_kind(diverged), ADVICE["missing"])
    if dead:
        state = run.ranks[dead[0]]
        headline = (
            f"{ranks(dead)} of {world}"
            f" {describe_exit(state.returncode, len(dead) > 1, log_of(state))}"
            f" during {when} ({run.waited_s:.1f} s into the test)"
        )
        words = last_words(state.captured)
        if words:
            headline += f"; it said: {words}"
            if "Received data size doesn't match" in words:
                headline += (
                    f"; the data {ranks(dead)} received did not fit its own tensor: the"
                    " ranks passed tensors of different shapes or dtypes to the same collective"
                )
        headline += story.last_calls(set(dead))
        return headline + _followed(followers, len(dead), "had died")
    if run.ending in ("stuck", "alone") and busy:
        return _never_complete(story, busy, diverged, advice)
    if causes:
        state_of = {s.rank: s for s in run.ranks}
        stopped = "; ".join(
            doing(state_of[rank], story.waits.get(rank, "")).replace(f"rank {rank} ", "", 1)
            for rank in busy
        )
        return (
            f"{ranks(causes)} of {world} {_FAILED[when]}: {said(got[causes[0]])};"
            f" {ranks(busy)}, still running {run.waited_s - run.failed_s:.0f} s later"
            f" ({stopped}), {'was' if len(busy) == 1 else 'were'} stopped (stacks below)"
            + _followed(followers, len(causes), "had stopped taking part")
        )
    stuck = [doing(run.ranks[r], story.waits.get(r, "")) for r in busy]
    headline = (
        f"timed out after {run.waited_s:.0f} s: {ranks(busy)} of {world} did not finish"
        f" {when} ({'; '.join(stuck)})"
    )
    own_code = [r for r in busy if r not in story.waits and not collective(run.ranks[r].stack)]
    if own_code and _kind(diverged) == "missing":
        were = "was" if len(own_code) == 1 else "were"
        whose = "its" if len(own_code) == 1 else "their"
        advice = f"{ranks(own_code)} {were} still in {whose} own code, {OWN_CODE}"
    if diverged is not None:
        return f"{headline}; the ranks' collectives part at {diverged.sentence}: {advice}"
    return (
        f"{headline}. A rank waiting in a collective that another rank never called is the"
        " usual cause; raise the timeout with the marker's timeout= or"
        " --torch-distributed-timeout if the test is only slow"
    )


def _never_complete(
    story: _Story, busy: list[int], diverged: Explanation | None, advice: str
) -> str:
    """A run ended because its ranks wait in collectives that cannot complete."""
    run, world = story.run, story.world
    if diverged is not None:
        elsewhere = "".join(
            f"; rank {rank} meanwhile waits in {story.waits[rank]}"
            for rank in diverged.absent
            if rank in busy and rank in story.waits
        )
        return (
            f"{ranks(busy)} of {world} waited in a collective that could never complete"
            f" ({run.waited_s:.0f} s into the test): {diverged.sentence}{elsewhere}."
            f" {advice[0].upper()}{advice[1:]}"
        )
    others = [s.rank for s in run.ranks if s.rank not in busy]
    state = run.ranks[busy[0]]
    waits = story.waits.get(state.rank) or collective(state.stack) or "a collective"
    if run.ending == "stuck" and len(busy) > 1:
        return (
            f"{ranks(busy)} of {world} waited in collectives that can never complete"
            f" ({'; '.join(doing(run.ranks[r], story.waits.get(r, '')) for r in busy)})"
        )
    return (
        f"rank {state.rank} of {world} waited in {waits}, a collective"
        f" that {ranks(others)} never joined: {ranks(others)} had finished the test"
        f" {max(run.alone_s, 0):.0f} s earlier and left the process group, so it could never"
        " complete. A collective called on some ranks only (under an `if rank == ...`,"
        " or after an early return) is the usual cause"
    )


def _kind(diverged: Explanation | None) -> str:
    return "missing" if diverged is None else diverged.kind


def _where(item: pytest.Item, crash: Any) -> tuple[str, int]:
    if crash is not None and getattr(crash, "path", None):
        return str(crash.path), int(crash.lineno)
    return str(item.path), (item.location[1] or 0) + 1


def _followed(followers: list[int], causes: int, what: str) -> str:
    """ "; rank 0 then failed in a collective, because its peer had died"."""
    if not followers:
        return ""
    whose = "its" if causes == 1 else "their"
    return f"; {ranks(followers)} then failed in a collective, because {whose} peer {what}"
