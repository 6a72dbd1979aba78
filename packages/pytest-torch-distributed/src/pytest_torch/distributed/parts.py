"""The pieces of a failed test's report: each rank's part, in pytest's own chained form.

A failure's long report is a headline, then the ranks that caused it (each one's own
traceback; ranks that failed alike share one), then the ranks that failed only because
a peer had gone (a short form: their traceback is torch's collective, not the test's),
then what every other rank was doing (finished, stopped with its stack, dead with its
exit status), then the ranks' collectives side by side where they differ.
"""

from __future__ import annotations

import re
import time
from typing import Any, Literal

import pytest
from _pytest._code.code import ExceptionChainRepr, ReprFileLocation, ReprTraceback

from pytest_torch.core.properties import number
from pytest_torch.distributed.pool import RankRun, RankState
from pytest_torch.distributed.processes import describe_exit
from pytest_torch.distributed.stacks import collective, innermost_user_frame, shown_stack

ChainElement = tuple[ReprTraceback, ReprFileLocation | None, str | None]
_EMPTY = ReprTraceback(reprentries=[], extraline=None, style="long")
#: a part: its title and a rank's report (a traceback) or lines of text
Part = tuple[str, Any]


def rank_failures(headline: str, crash: ReprFileLocation, parts: list[Part]) -> ExceptionChainRepr:
    """A failed phase's long report: the headline, then the parts in order. It is
    pytest's own chained report, so pytest-xdist and JUnit carry it whole; ``crash`` is
    what the short summary line and JUnit's message say."""
    chain: list[ChainElement] = [(_EMPTY, None, headline)]
    for title, body in parts:
        if hasattr(body, "chain"):
            chain.append((_EMPTY, None, _rule(title)))
            chain += list(body.chain)
        elif hasattr(body, "reprtraceback"):
            chain.append((_EMPTY, None, _rule(title)))
            chain.append((body.reprtraceback, body.reprcrash, None))
        else:
            lines = body if isinstance(body, list) else str(body).splitlines()
            chain.append((_EMPTY, None, "\n".join([_rule(title), *lines])))
    last = chain[-1]
    chain[-1] = (last[0], crash, last[2])
    return ExceptionChainRepr(chain)


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


def ranks(numbers: list[int]) -> str:
    """ "rank 1", "ranks 0, 2"."""
    return ("rank " if len(numbers) == 1 else "ranks ") + ", ".join(map(str, numbers))


def said(report: pytest.TestReport) -> str:
    """What a failed report's exception said, on one line."""
    crash = getattr(report.longrepr, "reprcrash", None)
    text = getattr(crash, "message", "") or str(report.longrepr).strip().splitlines()[-1]
    line = text.splitlines()[0] if text else ""
    return line[1:].strip() if line.startswith("E ") else line


def brief(report: pytest.TestReport) -> str:
    """What a rank said, without the native source location and the boilerplate advice
    of gloo's and NCCL's errors."""
    text = re.sub(r"\[[^\] ]+\.(?:cc|cpp|h|hpp):\d+\] ", "", said(report))
    return text.split(". This is typically")[0]


def failed_parts(failed: list[int], got: dict[int, pytest.TestReport]) -> list[Part]:
    """Each failing rank's report; ranks that failed the same way (a collective check
    raises the same error everywhere) share one."""
    groups: dict[str, list[int]] = {}
    for rank in failed:
        text = _without_rank_details(str(got[rank].longrepr))
        groups.setdefault(text, []).append(rank)
    parts: list[Part] = []
    for numbers in groups.values():
        title = ranks(numbers) + (" (the same failure on each)" if len(numbers) > 1 else "")
        parts.append((title, got[numbers[0]].longrepr))
    return parts


def consequence_parts(
    followers: list[int], got: dict[int, pytest.TestReport], title: str = " (a consequence)"
) -> list[Part]:
    """Ranks whose collective broke because a peer had gone: what broke and where the
    test called it, without torch's own frames."""
    parts: list[Part] = []
    for rank in followers:
        report = got[rank]
        lines = [f"rank {rank}'s collective broke because a peer had gone: {said(report)[:300]}"]
        lines += [f"  at {site}" for site in _user_lines(report.longrepr)[-3:]]
        parts.append((f"rank {rank}{title}", lines))
    return parts


def _user_lines(longrepr: Any) -> list[str]:
    """``test_x.py:30 in test_step``: the frames of a traceback outside torch and the
    runner, outermost first."""
    chain = getattr(longrepr, "chain", None)
    traceback = chain[-1][0] if chain else getattr(longrepr, "reprtraceback", None)
    found = []
    for entry in getattr(traceback, "reprentries", []) or []:
        location = getattr(entry, "reprfileloc", None)
        if location is None:
            continue
        path = str(location.path).replace("\\", "/")
        if "/torch/" not in path and "/_pytest/" not in path:
            found.append(f"{location.path}:{location.lineno}")
    return found


def _without_rank_details(text: str) -> str:
    """A failure's text with what differs between ranks that failed alike left out: the
    values of the ``rank`` argument and object addresses."""
    text = re.sub(r"\brank = \d+", "rank = N", text)
    return re.sub(r" at 0x[0-9a-f]+", "", text)


def log_of(state: RankState) -> str:
    return "\n".join(state.log_tail)


def doing(state: RankState, waits: str = "") -> str:
    """What a rank still running was doing: ``rank 0 waiting in all_reduce, called at
    ...``; ``waits`` is what its record says it waits in, where it kept one."""
    if waits:
        return f"rank {state.rank} waiting in {waits}"
    where = collective(state.stack)
    if where:
        return f"rank {state.rank} waiting in {where}"
    frame = innermost_user_frame(state.stack)
    if frame is not None:
        return f"rank {state.rank} busy at {frame.shown()}, in no collective"
    return f"rank {state.rank} busy after {state.last_when or 'set-up'}"


def other_parts(
    run: RankRun,
    per_rank: list[dict[str, pytest.TestReport]],
    exclude: set[int],
    waits: dict[int, str],
) -> list[Part]:
    """What each rank not in ``exclude`` did: finished, stopped (with its stack), died."""
    parts: list[Part] = []
    for state, reports in zip(run.ranks, per_rank, strict=True):
        if state.rank in exclude:
            continue
        if state.returncode is not None:
            parts.append((f"rank {state.rank}: died", _died(state, reports)))
        elif not state.done:
            where = waits.get(state.rank) or collective(state.stack)
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


def _died(state: RankState, reports: dict[str, pytest.TestReport]) -> list[str]:
    lines = [f"rank {state.rank} {describe_exit(state.returncode, log=log_of(state))}"]
    lines += _phases(reports)
    if state.captured:
        lines += ["what it wrote during the test before it died (last lines):"]
        lines += [f"  {line}" for line in state.captured]
    if state.crash:
        lines += state.crash
    elif state.log_tail:
        lines += ["its last output:"]
        lines += [f"  {line}" for line in state.log_tail]
    return lines


def _outcomes(reports: dict[str, pytest.TestReport]) -> str:
    """ "setup passed, call failed (RuntimeError: ...)"."""
    shown = []
    for when, report in reports.items():
        text = f"{when} {report.outcome}"
        if report.failed:
            text += f" ({said(report)[:200]})"
        shown.append(text)
    return ", ".join(shown)


def _phases(reports: dict[str, pytest.TestReport]) -> list[str]:
    done = [f"{when} {report.outcome}" for when, report in reports.items()]
    return [f"finished: {', '.join(done)}"] if done else []


def plain_report(
    item: pytest.Item, per_rank: list[dict[str, pytest.TestReport]], ending: str, error: str
) -> pytest.TestReport:
    """Each rank's own outcome, for when the merged report could not be made: the user's
    result is never lost to a fault of the merging."""
    lines = [
        f"pytest-torch-distributed could not merge the ranks' reports ({error});"
        " each rank's own result follows. Please report this with the output."
    ]
    failed = ending != "done"
    for rank, reports in enumerate(per_rank):
        for when, report in reports.items():
            failed = failed or report.failed
            said_ = f": {said(report)}" if report.failed else ""
            lines.append(f"rank {rank}: {when} {report.outcome}{said_}")
        if not reports:
            lines.append(f"rank {rank}: no result ({ending})")
    return phase_report(
        item, "call", "failed" if failed else "passed", "\n".join(lines) if failed else None
    )


#: the figure a measured peak is recorded under (``torch_memory.<device>.peak_mib``)
PEAK_SUFFIX = "peak_mib"


def properties(got: dict[int, pytest.TestReport]) -> list[tuple[str, object]]:
    """One rank's properties under their own names (figures of different ranks cannot
    be mixed): the rank with the largest measured peak, named in
    ``torch_distributed.peak_rank``; else the first failing rank; else the lowest. What
    another rank recorded differently follows, as ``name (rank 1)``."""
    chosen, found = _chosen_properties(got)
    for rank, report in sorted(got.items()):
        if rank != chosen:
            found += [
                (f"{name} (rank {rank})", value)
                for name, value in report.user_properties
                if (name, value) not in got[chosen].user_properties
            ]
    return found


def _chosen_properties(got: dict[int, pytest.TestReport]) -> tuple[int, list[tuple[str, object]]]:
    if not got:
        return -1, []
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
        return chosen, [*got[chosen].user_properties, ("torch_distributed.peak_rank", chosen)]
    failed = [rank for rank, report in sorted(got.items()) if report.failed]
    chosen = failed[0] if failed else min(got)
    return chosen, list(got[chosen].user_properties)
