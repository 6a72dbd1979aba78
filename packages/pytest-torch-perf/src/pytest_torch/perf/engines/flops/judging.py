"""Judging FLOP counts (``--torch-perf-measure=flops``, ``@pytest.mark.torch_max_flops``):
recording one, comparing one with its baseline under the same key, checking one against
a budget, and saying where the FLOPs went and which work they leave out.

The rule is the family's (``rule.judge``: ``new > baseline * (1 + tolerance) + slack``)
with no slack and a tolerance of 0 by default: a count is exact. Every message names the
ops that ran without a FLOP formula (``counting``), and a change in them since the
baseline, so a short count is never silent. Nothing here measures: counts are handed in.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from typing import Any

from pytest_torch.perf.engines.flops.counting import KEPT, FlopCount, fmt_flops, is_custom_op
from pytest_torch.perf.outcome import Outcome
from pytest_torch.perf.records import PerfRecord
from pytest_torch.perf.rule import Verdict, improved, judge

#: How much larger than its baseline a FLOP count may be (``flop_tolerance``): none. A
#: count is exact and has no machine noise (the same ops on the same shapes count the
#: same every time, on any machine), so any growth is the code's.
DEFAULT_FLOP_TOLERANCE = 0.0
#: the table's check, the statistic and the unit of a FLOP count
CHECK = "flops"
STAT = "exact"
UNIT = "FLOPs"
#: the modules and the ops a message names, each
NAMED = 5


def flop_key(device_type: str | None = None) -> str:
    """The key a count is filed under: ``torch=2.13.0`` (``torch=2.13.0 device=cuda``
    with a device type). FLOP formulas, and the ops torch's modules dispatch to, change
    between torch releases, so the version is in the key; its local build tag (``+cpu``,
    ``+cu121``) changes neither, so it is not, and a CPU wheel's count compares with a
    CUDA wheel's. The device type decides which kernels run (on CPU,
    ``scaled_dot_product_attention`` runs a kernel with no formula; on CUDA, one with)."""
    import torch

    key = f"torch={str(torch.__version__).split('+')[0]}"
    return f"{key} device={device_type}" if device_type else key


@dataclass(frozen=True)
class FlopBaseline:
    """A FLOP count recorded for one test under one key, and when."""

    counted: FlopCount
    recorded: str

    def to_json(self) -> dict[str, Any]:
        return {**self.counted.to_json(), "recorded": self.recorded}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FlopBaseline:
        """KeyError, TypeError or ValueError for a malformed entry."""
        return cls(FlopCount.from_json(data), str(data.get("recorded", "?")))


@dataclass(frozen=True)
class FlopVerdict:
    """A count compared with its baseline: the rule's verdict, the table's verdict
    ("REGRESSION", "ok", "improved 12.50 %") and the message for a person."""

    verdict: Verdict
    text: str
    message: str
    improved: bool
    #: the ops without a FLOP formula ran other times than in the baseline
    coverage_changed: bool

    @property
    def regressed(self) -> bool:
        return self.verdict.regressed


def judge_count(
    label: str, baseline: FlopCount, now: FlopCount, tolerance: float, rerecord: str
) -> FlopVerdict:
    """``now`` against ``baseline`` under the rule; the message of a regression names the
    modules and ops that grew most, and says what to do (``rerecord``: the command)."""
    verdict = judge(now.total, baseline.total, tolerance, 0)
    better = improved(verdict, tolerance)
    changed = dict(baseline.uncounted) != dict(now.uncounted)
    coverage = coverage_lines(now, baseline)
    if verdict.regressed:
        lines = [
            f"FLOP count regression in {label}:",
            f"  FLOPs per call: {fmt_flops(now.total)} vs baseline {fmt_flops(baseline.total)}"
            f" = {_ratio_text(verdict)}; limit {fmt_flops(verdict.limit)}"
            f" = baseline x (1 + tolerance {tolerance:g})",
            *attribution(baseline, now),
            *recompute_lines(now, baseline),
            *coverage,
            "  FLOP counts are exact: the extra FLOPs are the code's, not the machine's"
            " (unless the work depends on unseeded random data: seed it with torch_seed)."
            f" If they are intended, re-record with: {rerecord}",
        ]
        return FlopVerdict(verdict, "REGRESSION", "\n".join(lines), False, changed)
    if better:
        text = f"improved {100 * -verdict.change:.2f} %"
        message = (
            f"{label}: {text} ({fmt_flops(now.total)} per call vs baseline"
            f" {fmt_flops(baseline.total)}); consider re-recording with: {rerecord}"
        )
    else:
        text = "ok"
        same = "as recorded" if now.total == baseline.total else f"{100 * verdict.change:+.2f} %"
        message = f"{label}: ok ({fmt_flops(now.total)} per call, {same})"
    return FlopVerdict(verdict, text, "\n".join([message, *coverage]), better, changed)


def _ratio_text(verdict: Verdict) -> str:
    if math.isinf(verdict.ratio):
        return "new work (the baseline counted 0)"
    return f"{verdict.ratio:.4f}x ({100 * verdict.change:+.2f} %)"


def compare(
    label: str, baseline: FlopBaseline, now: FlopCount, tolerance: float, rerecord: str
) -> Outcome:
    """The outcome of comparing ``now`` with ``baseline`` (see :func:`judge_count`)."""
    judged = judge_count(label, baseline.counted, now, tolerance, rerecord)
    change = judged.verdict.change
    row = PerfRecord(
        label,
        CHECK,
        STAT,
        now.total,
        judged.text,
        reference=baseline.counted.total,
        change_pct=None if math.isinf(change) else 100 * change,
        unit=UNIT,
    )
    status = "fail" if judged.regressed else "pass"
    return Outcome(status, judged.message, row, measured=now, notes=coverage_lines(now))


def coverage_changed(
    label: str, baseline: FlopBaseline, now: FlopCount, strict: bool, rerecord: str
) -> Outcome:
    """A count within its limit while ops without a FLOP formula ran other times than
    at recording: the count cannot say whether the work grew (a second attention call
    adds no FLOPs to it), so it is not judged."""
    lines = [
        f"{label}: not judged: {fmt_flops(now.total)} per call is within the limit of"
        f" baseline {fmt_flops(baseline.counted.total)}, but the work it cannot count changed:",
        *coverage_lines(now, baseline.counted),
        "  Count that work (see the end of the run), or, if the change is intended,"
        f" re-record with: {rerecord}",
    ]
    row = PerfRecord(
        label, CHECK, STAT, now.total, "not judged: uncounted work changed",
        reference=baseline.counted.total, unit=UNIT,
    )  # fmt: skip
    status = "fail" if strict else "skip"
    return Outcome(status, "\n".join(lines), row, measured=now, judged=False)


def recorded(label: str, now: FlopCount, key: str) -> Outcome:
    """The outcome of recording ``now`` for ``label`` under ``key``."""
    row = PerfRecord(label, CHECK, STAT, now.total, "recorded", unit=UNIT)
    message = f"recorded {label}: {fmt_flops(now.total)} per call under {key}"
    coverage = coverage_lines(now)
    return Outcome("pass", "\n".join([message, *coverage]), row, measured=now, notes=coverage)


def _version(key: str) -> tuple[int, ...]:
    """``torch=2.13.0 device=cpu`` -> (2, 13, 0): the release numbers, for ordering."""
    release = key.split()[0].removeprefix("torch=")
    return tuple(int(part) for part in re.findall(r"\d+", release)[:3])


def other_release(key: str, found: Mapping[str, FlopBaseline]) -> str | None:
    """The key of the count recorded for the same device type under another torch
    release (the newest such), or None."""
    device = key.split()[1:]
    same_device = [other for other in found if other.split()[1:] == device and other != key]
    return max(same_device, key=lambda other: (_version(other), other), default=None)


def across_releases(outcome: Outcome, recorded_under: str, key: str, rerecord: str) -> Outcome:
    """A comparison with a count recorded under another torch release: identical counts
    pass, saying where the baseline came from; a change is judged as any other, and its
    message says that torch itself may have made it."""
    then, now = recorded_under.split()[0], key.split()[0]
    outcome.record.verdict += f" (baseline from {then})"
    note = (
        f"  the baseline was recorded under {then}, this run is {now}: FLOP formulas and the"
        f" ops torch dispatches to change between releases, so the change may be torch's."
        f" If it is, re-record under this release with: {rerecord}"
    )
    if outcome.status != "pass":
        outcome.message = f"{outcome.message}\n{note}"
    return outcome


def missing(label: str, key: str, found: Mapping[str, FlopBaseline], now: FlopCount,
            strict: bool, rerecord: str) -> Outcome:  # fmt: skip
    """No count under this run's key: none at all, or only under other keys."""
    if not found:
        verdict = "no baseline"
        message = (
            f"no FLOP count recorded for {label} under {key} (this run counted"
            f" {fmt_flops(now.total)}). Record one with: {rerecord}"
        )
    else:
        verdict = "not comparable"
        others = "; ".join(
            f"{fmt_flops(entry.counted.total)} under {other}"
            for other, entry in sorted(found.items())
        )
        message = (
            f"{label}: not comparable: its FLOP count was recorded as {others}; this run"
            f" counted {fmt_flops(now.total)} under {key}. The device type decides which"
            f" kernels run, and which of them have a FLOP formula, so counts are compared"
            f" on the same device type only (across torch releases too). Run on that device"
            f" type, or record one for this one with: {rerecord}"
        )
    row = PerfRecord(label, CHECK, STAT, now.total, verdict, unit=UNIT)
    return Outcome("fail" if strict else "skip", message, row, measured=now, judged=False)


def over_budget(label: str, now: FlopCount, gflops: float) -> str | None:
    """The failure of a body that counted more than ``gflops`` billion FLOPs
    (``@pytest.mark.torch_max_flops``), naming where they went; None within it."""
    limit = budget_flops(gflops)
    if now.total <= limit:
        return None
    over = now.total - limit
    lines = [
        f"FLOP budget exceeded in {label}:",
        f"  FLOPs of the test body: {fmt_flops(now.total)}, over the budget of {gflops!r}"
        f" GFLOPs ({_limit_text(limit)}) by {fmt_flops(over)}{_share_over(over, limit)}",
        *_largest_lines("most FLOPs per module (each with its submodules'):", now.by_module, now),
        *_largest_lines("most FLOPs per aten op:", now.by_op, now),
        *recompute_lines(now),
        *coverage_lines(now),
        "  FLOP counts are exact: the body does this much work on any machine. Make it do"
        " less, or, if the work is intended, raise the budget to at least"
        f" @pytest.mark.torch_max_flops(gflops={_enough(now.total)})",
    ]
    return "\n".join(lines)


def _limit_text(limit: int) -> str:
    return fmt_flops(limit) if limit else "0 FLOPs: less than one FLOP"


def _share_over(over: int, limit: int) -> str:
    """ " (50 %)", " (140 %)", " (3,900 %)": how far over, in plain digits; nothing for a
    budget of 0 FLOPs (every FLOP is over it)."""
    if not limit:
        return ""
    percent = 100 * over / limit
    return f" ({percent:,.0f} %)" if percent >= 10 else f" ({percent:.2g} %)"


def budget_flops(gflops: float) -> int:
    """A budget in GFLOPs as whole FLOPs, exactly as written: 1.019338752 GFLOPs is
    1,019,338,752 FLOPs (``gflops * 1e9`` would be 1,019,338,751.9999999)."""
    return int(Decimal(repr(gflops)).scaleb(9).to_integral_value(rounding=ROUND_FLOOR))


def _enough(flops: int) -> str:
    """A budget in GFLOPs that ``flops`` fit in: rounded up to 3 significant digits."""
    needed = Decimal(flops).scaleb(-9)
    step = Decimal(1).scaleb(needed.adjusted() - 2)
    return f"{needed.quantize(step, rounding=ROUND_CEILING).normalize():f}"


def _largest_lines(title: str, counts: Mapping[str, int], now: FlopCount) -> list[str]:
    if not counts:
        return []
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:NAMED]
    share = [100 * flops / now.total if now.total else 0.0 for _, flops in ranked]
    return [f"  {title}"] + [
        f"    {flops:>15,}  {name}  ({percent:.1f} %)"
        for (name, flops), percent in zip(ranked, share, strict=True)
    ]


def attribution(baseline: FlopCount, now: FlopCount) -> list[str]:
    """The lines naming the modules and the ops whose FLOPs grew most."""
    if not baseline.by_module and not baseline.by_op:
        return ["  (the baseline keeps no per-module or per-op FLOPs: re-record it to see where)"]
    new, gone = _renamed(baseline.by_module, now.by_module)
    modules = _grew_most(
        baseline.by_module, {k: v for k, v in now.by_module.items() if k not in new}
    )
    ops = _grew_most(baseline.by_op, now.by_op)
    # a baseline recorded before counts kept shapes has none: every shape would "grow"
    shapes = _grew_most(baseline.by_shape, now.by_shape) if baseline.by_shape else []
    if not modules and not ops and not new and not gone:
        return ["  no single module or op grew: the extra FLOPs are spread thinly"]
    lines = ["  grew most (FLOPs per call: baseline -> now):"]
    if modules:
        lines += ["    modules (each with its submodules'):", *modules]
    lines += _renamed_lines(new, gone)
    if ops:
        lines += ["    aten ops:", *ops]
    if shapes:
        lines += ["    aten ops by the shapes of their inputs:", *shapes]
    elif now.by_shape and not baseline.by_shape:
        lines += ["    (the baseline keeps no FLOPs per input shape: re-record it to see them)"]
    return lines


def _renamed(
    before: Mapping[str, int], now: Mapping[str, int]
) -> tuple[dict[str, int], dict[str, int]]:
    """The modules with FLOPs now that the baseline does not name, and those it names
    that count none now: added or removed, renamed (a ``Sequential``'s indices shift
    when a layer is inserted), or their work moved (counts keep no module at 0). New
    ones are known only where the baseline kept every module (fewer than :data:`KEPT`);
    a count made now keeps them all."""
    new = {name: flops for name, flops in now.items() if name not in before}
    gone = {name: flops for name, flops in before.items() if name not in now}
    return (new if len(before) < KEPT else {}), gone


def _renamed_lines(new: Mapping[str, int], gone: Mapping[str, int]) -> list[str]:
    def named(counts: Mapping[str, int]) -> str:
        ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
        shown = ", ".join(f"{name} ({flops:,})" for name, flops in ranked[:NAMED])
        return shown + (f" and {len(ranked) - NAMED} more" if len(ranked) > NAMED else "")

    lines = []
    if new:
        lines.append(f"    modules the baseline lists no FLOPs for (FLOPs now): {named(new)}")
    if gone:
        lines.append(f"    modules that count no FLOPs now (FLOPs then): {named(gone)}")
    if lines:
        lines.append(
            "    (added or removed, renamed: a Sequential's indices shift when a layer is"
            " inserted, or their work moved: compare their parents' figures)"
        )
    return lines


def recompute_lines(now: FlopCount, baseline: FlopCount | None = None) -> list[str]:
    """What activation checkpointing added, where its share differs from the baseline's
    (any share, without one): its recompute in backward is counted as it ran, and torch's
    module tracker files it in two places."""
    if now.recomputed == (baseline.recomputed if baseline is not None else 0):
        return []
    was = f" (baseline: {fmt_flops(baseline.recomputed)})" if baseline is not None else ""
    how = (
        "activation checkpointing recomputes the checkpointed forward there. torch files"
        " each recomputed op under the recomputed modules and also under the module whose"
        " backward was running, which may do no such work itself (an activation, a norm)"
    )
    return [f"  of these, {fmt_flops(now.recomputed)}{was} ran again in backward: {how}"]


def _grew_most(before: Mapping[str, int], now: Mapping[str, int]) -> list[str]:
    """The lines of the names whose FLOPs grew most, the deepest module first among
    equals (its parents grew by as much). A name the baseline does not keep had 0 when
    the baseline kept everything, else fell below its largest :data:`KEPT`."""
    truncated = len(before) >= KEPT
    grown: list[tuple[int, str, str]] = []
    for name, flops in now.items():
        was = before.get(name)
        if was is None and truncated:
            change, text = flops, f"up to +{flops:,}"
            was_text = f"below the baseline's top {KEPT}"
        else:
            change, text, was_text = flops - (was or 0), f"+{flops - (was or 0):,}", f"{was or 0:,}"
        if change > 0:
            grown.append((change, name, f"      {text:>16}  {name}  ({was_text} -> {flops:,})"))
    grown.sort(key=lambda item: (-item[0], -item[1].count("."), item[1]))
    return [line for _, _, line in grown[:NAMED]]


def coverage_lines(now: FlopCount, baseline: FlopCount | None = None) -> list[str]:
    """What the figures leave out: the ops that ran with no FLOP formula, and (against a
    baseline) how their calls changed, which moves work into or out of the count."""
    lines = []
    if now.uncounted:
        listed = ", ".join(f"{op} ({_calls(calls)})" for op, calls in sorted(now.uncounted.items()))
        many = len(now.uncounted) > 1
        lines.append(
            f"  not counted: {listed} {'have' if many else 'has'} no FLOP formula:"
            f" {'their' if many else 'its'} work is not in these figures"
        )
    if baseline is not None and dict(baseline.uncounted) != dict(now.uncounted):
        ops = sorted(set(baseline.uncounted) | set(now.uncounted))
        moves = ", ".join(
            f"{op} {baseline.uncounted.get(op, 0)} -> {now.uncounted.get(op, 0)}" for op in ops
        )
        lines.append(
            f"  ops without a FLOP formula ran other times than in the baseline ({moves}"
            " calls): part of the change may be work that moved into or out of the count"
        )
    return lines


def _calls(count: int) -> str:
    return f"{count:,} call" if count == 1 else f"{count:,} calls"


#: how to count the work of formula-less ops, by a part of their name
_COUNT_IT = (
    ("scaled_dot_product", "count its attention with torch.nn.attention.sdpa_kernel"
     "(SDPBackend.MATH), whose matmuls have formulas"),
    ("transformer_encoder", "run the layer in train mode, which takes no fused fast path"),
    # need_weights=True (the default) does not help: in eval under no_grad the fused
    # path runs with it too (measured, torch 2.13)
    ("multi_head_attention", "call nn.MultiheadAttention with autograd on (not under"
     " torch.no_grad() or inference_mode()) or in train mode: either takes its unfused"
     " path, whose matmuls have formulas"),
    ("mkldnn_rnn", "count it under torch.backends.mkldnn.flags(enabled=False)"),
)  # fmt: skip


def short_count(uncounted: Mapping[str, int]) -> str:
    """Why a FLOP count is short of a test's work, and what counts it, for the end of
    the run."""
    ops = ", ".join(sorted(uncounted))
    advice = sorted({how for op in uncounted for part, how in _COUNT_IT if part in op})
    custom = sorted(op for op in uncounted if is_custom_op(op))
    if custom:
        advice.append(
            f"a custom op runs whole, its work unseen: give {', '.join(custom)} a formula"
            " with torch.utils.flop_counter.register_flop_formula"
        )
    found = "; ".join(advice) if advice else "no FLOP formula exists for them"
    return (
        f"ops without a FLOP formula ran ({ops}), so their work is not in the count it was"
        f" checked by ({found}; or check that code by latency)"
    )
