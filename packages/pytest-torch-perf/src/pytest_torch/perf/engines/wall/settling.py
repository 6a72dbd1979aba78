"""Settling a verdict from repeated measurements, in proportion to what interference can
explain, and the sentences that say how it was settled.

A measurement over its limit is taken again before anything fails. Each one counts as:

- **over** when it was judged from enough undisturbed samples, on a core as fast as
  the one the reference was recorded on, and is over the limit;
- **over even so** when it was busy (too few undisturbed samples) or its core ran
  slower than at recording, but the generous reading, which takes out every wait and
  divides by every core slowdown seen, is still over the limit: no interference that
  was measured can explain the excess;
- **busy** (or **slower host**) when interference (or a slower core) could have put
  it over the limit.

Two overs of either kind make a failure; a measurement within the limit passes (time
lost to other processes only adds, so the code is at least that fast); two of the
others, or three measurements without a decision, are "not judged".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from pytest_torch.perf.engines.wall.contention import MAX_CORE_FACTOR
from pytest_torch.perf.engines.wall.entry import Baseline
from pytest_torch.perf.engines.wall.timing import LatencyResult, fmt_ms
from pytest_torch.perf.options import BASELINES, BUSY_MAX_TIME, STRICT, THREADS, UPDATE

NOT_JUDGED = "not judged: machine busy"
NOT_JUDGED_HOST = "not judged: slower host"
#: how a measurement over its limit counts (see the module docstring)
OVER, OVER_EVEN_SO, BUSY, SLOWER_HOST = "over", "over even so", "busy", "slower host"
#: Measurements one verdict may take (a limit crossed is measured again).
MAX_MEASUREMENTS = 3

Measured = tuple[LatencyResult, Mapping[str, int]]


@dataclass(frozen=True)
class Settled:
    """How repeated measurements ended: "within" the limit, "over" it in two judged
    measurements, or "busy" (over it only where interference could explain it)."""

    decision: str
    taken: list[Measured]
    #: per measurement: "within", or how it counted when over its limit
    kinds: tuple[str, ...] = ()

    @property
    def last(self) -> Measured:
        return self.taken[-1]

    @property
    def generous(self) -> bool:
        """The failure rests on the generous reading of a busy measurement."""
        return self.decision == "over" and self.kinds[-1] == OVER_EVEN_SO

    @property
    def not_judged(self) -> str:
        """The verdict when nothing was decided: busy, or a slower host."""
        return NOT_JUDGED if BUSY in self.kinds else NOT_JUDGED_HOST

    def notes(self, value: Callable[[LatencyResult], float]) -> list[str]:
        """What the measurements said, for the message (``value``: the statistic)."""

        def shown(result: LatencyResult) -> str:
            return f"{fmt_ms(value(result))}{' (machine busy)' if result.busy else ''}"

        *earlier, last = [result for result, _ in self.taken]
        if self.decision == "within":
            notes = []
            if earlier:
                notes.append(
                    f"over the limit at first ({', '.join(map(shown, earlier))}), then within"
                    f" it ({fmt_ms(value(last))}): treated as noise"
                )
            if last.busy and last.interference is not None:
                notes.append(
                    f"measured while the machine was busy ({last.interference.evidence()});"
                    " within the limit even so: time taken by other processes only adds, so"
                    " the code is at least this fast"
                )
            return notes
        if self.decision == "over":
            counted = [
                result
                for (result, _), kind in zip(self.taken[:-1], self.kinds[:-1], strict=True)
                if kind in (OVER, OVER_EVEN_SO)
            ]
            note = f"confirmed by a second measurement (first: {shown(counted[0])})"
            busy = [
                fmt_ms(value(result))
                for (result, _), kind in zip(self.taken, self.kinds, strict=True)
                if kind in (BUSY, SLOWER_HOST)
            ]
            if busy:
                note += f"; disturbed and not counted: {', '.join(busy)}"
            return [note]
        return [f"measured {len(self.taken)} times: {', '.join(map(shown, [*earlier, last]))}"]


def settle(
    measure: Callable[[], Measured],
    over: Callable[[LatencyResult], bool],
    counts: Callable[[LatencyResult], str],
) -> Settled:
    """Measure until the verdict is clear (at most :data:`MAX_MEASUREMENTS` times).
    ``over``: the statistic is over the limit; ``counts``: how a measurement over it
    counts (:data:`OVER`, :data:`OVER_EVEN_SO`, :data:`BUSY` or :data:`SLOWER_HOST`)."""
    taken: list[Measured] = []
    kinds: list[str] = []
    while True:
        taken.append(measure())
        result = taken[-1][0]
        if not over(result):
            kinds.append("within")
            return Settled("within", taken, tuple(kinds))
        kinds.append(counts(result))
        judged = sum(kind in (OVER, OVER_EVEN_SO) for kind in kinds)
        if judged == 2:
            return Settled("over", taken, tuple(kinds))
        if len(kinds) - judged == 2 or len(taken) >= MAX_MEASUREMENTS:
            return Settled("busy", taken, tuple(kinds))


def counted(busy: bool, slower_host: bool, over_even_so: bool) -> str:
    """How a measurement over its limit counts: at face value when it was neither busy
    nor on a slower core, else by whether its generous reading is over too."""
    if not busy and not slower_host:
        return OVER
    if over_even_so:
        return OVER_EVEN_SO
    return BUSY if busy else SLOWER_HOST


def _skipped_or_failed(strict: bool) -> str:
    return f"failed ({STRICT})" if strict else f"skipped ({STRICT} fails it)"


def busy_advice(strict: bool) -> str:
    return (
        f"This test is {_skipped_or_failed(strict)}. Run perf tests where nothing else"
        " competes for the cores: no heavy jobs beside them, and no more xdist workers x"
        f" {THREADS} than cores; or let a busy measurement sample longer for"
        f" undisturbed samples ({BUSY_MAX_TIME})."
    )


def generous_reading(result: LatencyResult, stat: str, limit_ms: float, host: float = 1.0) -> str:
    """The arithmetic that leaves a measurement over its limit (or not) once everything
    interference can explain is taken out: what was taken out, and where that leaves
    the code (``host``: how much slower this host's core runs than the recording one's)."""
    found = result.interference
    assert found is not None  # only a monitor makes a measurement busy
    taken_out = []
    if found.waited_share >= 0.005:
        taken_out.append(f"the {100 * found.waited_share:.0f} % of the time this process waited")
    if found.core_factor > 1.0:
        taken_out.append(f"a core up to {found.core_factor:.2f}x slow")
    if host > 1.0:
        taken_out.append(f"a core {host:.2f}x slower than the one the baseline was recorded on")
    fastest = result.generous(stat) / host
    where = (
        f"still {fastest / limit_ms:.1f}x the limit of {fmt_ms(limit_ms)}"
        if fastest > limit_ms
        else f"within the limit of {fmt_ms(limit_ms)}, so the excess may not be the code's"
    )
    return (
        f"after taking out {', and '.join(taken_out) or 'nothing'}, the code can have run"
        f" at best at {stat} {fmt_ms(fastest)}: {where}"
    )


def machine_line(
    result: LatencyResult, settled: Settled, stat: str, limit_ms: float, host: float = 1.0
) -> str:
    """The failure message's line on the machine: quiet, busy but judged from the
    undisturbed samples, or busy (or slower) and over the limit even so."""
    found = result.interference
    if found is None:
        return ""
    if settled.generous:
        state = "busy" if result.busy else "slower than at recording"
        return (
            f"  machine: {state} ({found.evidence()}); over the limit even so:"
            f" {generous_reading(result, stat, limit_ms, host)}"
        )
    if found.disturbed:
        return (
            f"  machine: busy, judged from the {found.undisturbed} undisturbed samples"
            f" ({found.evidence()})"
        )
    return f"  machine: not busy ({found.evidence()})"


#: a core probe this much slower than where a baseline was recorded is a slower core
#: (the probe varies 4 % between processes on one host)
SLOWER_CORE = 1.1


def host_factor(result: LatencyResult, baseline: Baseline) -> float:
    """How much slower this process's core ran the core probe than the process that
    recorded ``baseline`` did, when notably slower (1.0 otherwise; at most
    ``MAX_CORE_FACTOR``): what a slower host, or a core slowed all along, can explain."""
    found = result.interference
    if found is None or not found.core_probe_s or not baseline.core_probe_us:
        return 1.0
    ratio = found.core_probe_s * 1e6 / baseline.core_probe_us
    return min(ratio, MAX_CORE_FACTOR) if ratio > SLOWER_CORE else 1.0


#: A process's address layout alone slowed a 27 µs call up to 1.8x for the process's
#: whole life, a 0.1 ms one up to 1.2x (benchmarks/perf_busy_machine.py, idle): the
#: shorter the call, the more of it is the interpreter's and torch's dispatch. A
#: regression of a call shorter than ``SHORT_CALL_MS`` by less than ``LAYOUT_REACH``
#: is measured again in a fresh process before it fails; the margins are wide because
#: a real regression costs only that process's start-up, and a fresh process within
#: the limit shows the code that fast.
SHORT_CALL_MS = 1.0
LAYOUT_REACH = 2.5
#: what the messages say a layout can do
LAYOUT_SEEN = "up to 1.8x for a 27 µs call, 1.2x for a 0.1 ms one, on the machines measured"


def in_layout_reach(baseline_ms: float, ratio: float) -> bool:
    """A regression a process's address layout alone may explain: a short call, a
    modest ratio."""
    return baseline_ms < SHORT_CALL_MS and ratio < LAYOUT_REACH


def layout_note(baseline_ms: float, ratio: float, fresh: str = "") -> str:
    """For a modest regression of a short call: the one cause no measurement inside a
    process can see, and how to tell it from the code's (empty otherwise). ``fresh``:
    why no fresh process measured it (see ``fresh_process``)."""
    if not in_layout_reach(baseline_ms, ratio):
        return ""
    unchecked = f" It could not be measured again in a fresh process: {fresh}." if fresh else ""
    return (
        "  note: a short call can run slower in one process than in another by their"
        " address layouts alone (where the interpreter's and torch's code and data land"
        f" in memory; {LAYOUT_SEEN}), and no machine figure shows it.{unchecked}"
        " If a re-run passes, that was it. More work per call (a batch, several steps) or"
        " a wider latency_tolerance for this test keeps it out of reach."
    )


def fresh_confirmed(stat: str, figure_ms: float, ratio: float) -> str:
    """The failure's line when a fresh process measured the regression too."""
    return (
        f"  confirmed in a fresh process (another address layout): {stat}"
        f" {fmt_ms(figure_ms)} = {ratio:.2f}x"
    )


def fresh_disturbed(stat: str, fresh: LatencyResult) -> str:
    """Why a fresh process's measurement over the limit confirms nothing: other
    processes disturbed it enough to explain that."""
    assert fresh.interference is not None  # only a monitor makes a measurement busy
    return (
        f"it measured {stat} {fmt_ms(fresh.stat(stat))}, but other processes disturbed"
        f" it enough to explain that ({fresh.interference.evidence()})"
    )


def fresh_within(stat: str, here_ms: float, here_ratio: float, fresh_ms: float) -> str:
    """The note of a short call over its limit in this process, within it in a fresh one."""
    return (
        f"over the limit in this process ({stat} {fmt_ms(here_ms)} = {here_ratio:.2f}x) and"
        f" within it in a fresh one ({fmt_ms(fresh_ms)}): a short call can run slower in"
        " one process than in another by their address layouts alone, so the fresh"
        " process's figure counts"
    )


def disturbance(result: LatencyResult) -> str:
    """Who disturbed a busy measurement, with the figures."""
    found = result.interference
    assert found is not None  # only a monitor makes a measurement busy
    who = (
        "other processes slowed the measurement down"
        if found.waited_share >= 0.005 or found.slowed < found.set_aside
        else "its core ran slow for most of the measurement"
    )
    return f"{who}: {found.evidence()}"


def not_judged_cause(
    result: LatencyResult, baseline: Baseline, host: float, stat: str, limit_ms: float
) -> str:
    """What kept a comparison from a verdict, and the arithmetic that shows it."""
    assert result.interference is not None  # only a monitor makes a measurement busy
    causes = []
    if result.busy:
        causes.append(disturbance(result))
    if host > 1.0:
        causes.append(
            f"this process's core ran a fixed hash {host:.2f}x slower than the one that"
            f" recorded the baseline ({1e6 * (result.interference.core_probe_s or 0):.3g} µs"
            f" vs {baseline.core_probe_us:.3g} µs at best)"
        )
    return f"{'; and '.join(causes)}; {generous_reading(result, stat, limit_ms, host)}"


def slower_host_advice(strict: bool) -> str:
    return (
        f"This test is {_skipped_or_failed(strict)}. Its core is slower than the recording"
        " one's by more than the code's excess: a slower host that shares the machine key"
        " (cloud runners of one CPU model differ), or a core slowed by a neighbour all"
        " along. Re-run it; if this host is simply slower, record baselines on it"
        f" ({UPDATE}) and keep them apart ({BASELINES})."
    )
