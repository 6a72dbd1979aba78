"""Judging FLOP counts, with made-up counts: regressions and where they grew, the ok and
improved cases, coverage (ops without a FLOP formula), budgets, the baseline key and
entries, and the outcomes of recording and of a missing baseline."""

from __future__ import annotations

import json
import re

import pytest

from pytest_torch.perf.engines.flops.counting import KEPT, FlopCount
from pytest_torch.perf.engines.flops.judging import (
    DEFAULT_FLOP_TOLERANCE,
    FlopBaseline,
    across_releases,
    compare,
    coverage_lines,
    flop_key,
    judge_count,
    missing,
    other_release,
    over_budget,
    recorded,
)

BASELINE = FlopCount(
    total=2_097_152,
    by_op={"aten.addmm": 1_572_864, "aten.mm": 524_288},
    by_module={"Net": 2_097_152, "Net.fc1": 1_048_576, "Net.fc2": 1_048_576},
)
#: fc2 does twice the work
GROWN = FlopCount(
    total=3_145_728,
    by_op={"aten.addmm": 2_621_440, "aten.mm": 524_288},
    by_module={"Net": 3_145_728, "Net.fc2": 2_097_152, "Net.fc1": 1_048_576},
)
MHA = "aten._native_multi_head_attention"


def test_a_regression_says_by_how_much_where_and_what_to_do():
    judged = judge_count("t::test_net", BASELINE, GROWN, DEFAULT_FLOP_TOLERANCE, "RERECORD")
    assert judged.regressed and judged.text == "REGRESSION" and not judged.improved
    assert judged.message.splitlines() == [
        "FLOP count regression in t::test_net:",
        "  FLOPs per call: 3,145,728 FLOPs vs baseline 2,097,152 FLOPs = 1.5000x (+50.00 %);"
        " limit 2,097,152 FLOPs = baseline x (1 + tolerance 0)",
        "  grew most (FLOPs per call: baseline -> now):",
        "    modules (each with its submodules'):",
        "            +1,048,576  Net.fc2  (1,048,576 -> 2,097,152)",
        "            +1,048,576  Net  (2,097,152 -> 3,145,728)",
        "    aten ops:",
        "            +1,048,576  aten.addmm  (1,572,864 -> 2,621,440)",
        "  FLOP counts are exact: the extra FLOPs are the code's, not the machine's (unless"
        " the work depends on unseeded random data: seed it with torch_seed). If they are"
        " intended, re-record with: RERECORD",
    ]


def test_the_outcome_of_a_regression_fails_with_the_figures_in_its_row():
    baseline = FlopBaseline(BASELINE, "2026-12-03T12:00:00+00:00")
    outcome = compare("t", baseline, GROWN, 0.0, "RERECORD")
    assert outcome.status == "fail" and "FLOP count regression in t:" in outcome.message
    row = outcome.record
    assert (row.check, row.stat, row.verdict, row.unit) == ("flops", "exact", "REGRESSION", "FLOPs")
    assert (row.measured, row.reference, row.change_pct) == (3_145_728, 2_097_152, 50.0)
    assert outcome.measured == GROWN


def test_work_without_a_formula_is_named_in_every_message():
    now = FlopCount(GROWN.total, GROWN.by_op, GROWN.by_module, {MHA: 2})
    line = (
        "  not counted: aten._native_multi_head_attention (2 calls) has no FLOP formula:"
        " its work is not in these figures"
    )
    baseline = FlopCount(BASELINE.total, BASELINE.by_op, BASELINE.by_module, {MHA: 2})
    assert line in judge_count("t", baseline, now, 0.0, "R").message.splitlines()
    assert line in judge_count("t", now, now, 0.0, "R").message.splitlines()
    assert line in recorded("t", now, "torch=2.13.0").message.splitlines()
    two = FlopCount(0, uncounted={MHA: 1, "aten.mv": 3})
    assert coverage_lines(two) == [
        "  not counted: aten._native_multi_head_attention (1 call), aten.mv (3 calls) have no"
        " FLOP formula: their work is not in these figures"
    ]


def test_ok_is_the_same_count():
    judged = judge_count("t", BASELINE, BASELINE, 0.0, "R")
    assert not judged.regressed and judged.text == "ok" and not judged.coverage_changed
    assert judged.message == "t: ok (2,097,152 FLOPs per call, as recorded)"
    outcome = compare("t", FlopBaseline(BASELINE, "then"), BASELINE, 0.0, "R")
    assert outcome.status == "pass" and outcome.record.verdict == "ok"


@pytest.mark.parametrize(
    ("extra", "verdict"), [(0, "ok"), (100_000, "ok"), (100_001, "REGRESSION")]
)
def test_the_limit_is_baseline_times_one_plus_tolerance(extra, verdict):
    baseline, now = FlopCount(1_000_000), FlopCount(1_100_000 - 100_000 + extra)
    assert judge_count("t", baseline, now, 0.1, "R").text == verdict


def test_a_smaller_count_has_improved_and_suggests_re_recording():
    now = FlopCount(1_572_864, {"aten.addmm": 1_048_576, "aten.mm": 524_288})
    judged = judge_count("t", BASELINE, now, 0.0, "RERECORD")
    assert judged.improved and not judged.regressed and judged.text == "improved 25.00 %"
    assert judged.message == (
        "t: improved 25.00 % (1,572,864 FLOPs per call vs baseline 2,097,152 FLOPs);"
        " consider re-recording with: RERECORD"
    )


def test_a_drop_into_a_fused_kernel_is_not_a_silent_improvement():
    """The same layer in eval took its fused fast path: 0 FLOPs counted, one kernel
    without a formula. The message says that the work moved out of the count."""
    fused = FlopCount(0, uncounted={"aten._transformer_encoder_layer_fwd": 1})
    judged = judge_count("t", BASELINE, fused, 0.0, "R")
    assert judged.improved and judged.coverage_changed
    lines = judged.message.splitlines()
    assert "aten._transformer_encoder_layer_fwd (1 call) has no FLOP formula" in lines[1]
    assert lines[2] == (
        "  ops without a FLOP formula ran other times than in the baseline"
        " (aten._transformer_encoder_layer_fwd 0 -> 1 calls): part of the change may be"
        " work that moved into or out of the count"
    )
    # and back: the growth is work that is counted again
    back = judge_count("t", fused, BASELINE, 0.0, "R")
    assert back.regressed and "new work (the baseline counted 0)" in back.message
    assert "aten._transformer_encoder_layer_fwd 1 -> 0 calls" in back.message
    assert compare("t", FlopBaseline(fused, "then"), BASELINE, 0.0, "R").record.change_pct is None


def test_a_module_below_the_baselines_top_is_named_as_such():
    modules = {f"Net.block{i}": 1_000 + i for i in range(KEPT)}
    baseline = FlopCount(sum(modules.values()), by_module=modules)
    now = FlopCount(baseline.total + 5_000, by_module={**modules, "Net.extra": 5_000})
    message = judge_count("t", baseline, now, 0.0, "R").message
    assert f"up to +5,000  Net.extra  (below the baseline's top {KEPT} -> 5,000)" in message
    # a baseline that kept everything had none of it: a module it does not list is not
    # growth of that module but a new name (added, renamed, or its work moved there)
    small = FlopCount(1_000, by_module={"Net.block0": 1_000})
    grown = FlopCount(6_000, by_module={"Net.block0": 1_000, "Net.extra": 5_000})
    message = judge_count("t", small, grown, 0.0, "R").message
    assert "    modules the baseline lists no FLOPs for (FLOPs now): Net.extra (5,000)" in message
    assert "Net.extra  (0 -> 5,000)" not in message


def test_a_layer_inserted_into_a_sequential_is_new_names_not_growth():
    """Sequential(Linear(64, 64), ReLU(), Linear(64, 8)) on 32 rows, then a second
    Linear(64, 64) inserted first: every index after it shifts."""
    baseline = FlopCount(
        294_912,
        by_module={"Sequential": 294_912, "Sequential.0": 262_144, "Sequential.2": 32_768},
        by_op={"aten.addmm": 294_912},
    )
    now = FlopCount(
        557_056,
        by_module={
            "Sequential": 557_056,
            "Sequential.0": 262_144,
            "Sequential.1": 262_144,
            "Sequential.3": 32_768,
        },
        by_op={"aten.addmm": 557_056},
    )
    lines = judge_count("t", baseline, now, 0.0, "R").message.splitlines()
    grew = lines[lines.index("    modules (each with its submodules'):") + 1]
    assert grew.split() == ["+262,144", "Sequential", "(294,912", "->", "557,056)"]
    assert (
        "    modules the baseline lists no FLOPs for (FLOPs now): Sequential.1 (262,144),"
        " Sequential.3 (32,768)"
    ) in lines
    assert "    modules that count no FLOPs now (FLOPs then): Sequential.2 (32,768)" in lines
    assert not any("(0 ->" in line for line in lines)


def test_a_baseline_without_a_breakdown_asks_to_be_re_recorded():
    message = judge_count("t", FlopCount(100), FlopCount(200), 0.0, "R").message
    assert "the baseline keeps no per-module or per-op FLOPs: re-record it" in message


def test_within_budget_is_no_failure():
    assert over_budget("t", FlopCount(1_000_000), gflops=0.001) is None
    assert over_budget("t", FlopCount(0, uncounted={MHA: 1}), gflops=1) is None


def test_over_budget_names_where_the_flops_went_and_the_budget_that_would_do():
    now = FlopCount(
        total=1_500_000,
        by_op={"aten.addmm": 1_000_000, "aten.bmm": 500_000},
        by_module={"Net": 1_400_000, "Net.attn": 900_000, "Net.ffn": 500_000},
        uncounted={"aten.mv": 1},
    )
    message = over_budget("t::test_net", now, gflops=0.001)
    assert message is not None
    assert message.splitlines() == [
        "FLOP budget exceeded in t::test_net:",
        "  FLOPs of the test body: 1,500,000 FLOPs, over the budget of 0.001 GFLOPs"
        " (1,000,000 FLOPs) by 500,000 FLOPs (50 %)",
        "  most FLOPs per module (each with its submodules'):",
        "          1,400,000  Net  (93.3 %)",
        "            900,000  Net.attn  (60.0 %)",
        "            500,000  Net.ffn  (33.3 %)",
        "  most FLOPs per aten op:",
        "          1,000,000  aten.addmm  (66.7 %)",
        "            500,000  aten.bmm  (33.3 %)",
        "  not counted: aten.mv (1 call) has no FLOP formula: its work is not in these figures",
        "  FLOP counts are exact: the body does this much work on any machine. Make it do"
        " less, or, if the work is intended, raise the budget to at least"
        " @pytest.mark.torch_max_flops(gflops=0.0015)",
    ]
    # the budget it suggests is enough
    assert over_budget("t", now, gflops=0.0015) is None


@pytest.mark.parametrize(
    ("gflops", "budget"),
    [
        # an 8x8 matmul (1,024 FLOPs) under a budget below one FLOP: no ZeroDivisionError
        (1e-12, "1e-12 GFLOPs (0 FLOPs: less than one FLOP) by 1,024 FLOPs"),
        (0.0, "0.0 GFLOPs (0 FLOPs: less than one FLOP) by 1,024 FLOPs"),
        # 2.4x the budget: in plain digits, never "1.4e+02 %"
        (4.27e-7, "4.27e-07 GFLOPs (427 FLOPs) by 597 FLOPs (140 %)"),
        (1e-8, "1e-08 GFLOPs (10 FLOPs) by 1,014 FLOPs (10,140 %)"),
        (1.02e-6, "1.02e-06 GFLOPs (1,020 FLOPs) by 4 FLOPs (0.39 %)"),
    ],
)
def test_any_budget_is_judged_and_its_excess_told_in_plain_digits(gflops, budget):
    message = over_budget("t", FlopCount(1_024, by_op={"aten.mm": 1_024}), gflops=gflops)
    assert message is not None
    assert (
        message.splitlines()[1]
        == f"  FLOPs of the test body: 1,024 FLOPs, over the budget of {budget}"
    )


def test_after_an_upgrade_the_newest_other_release_of_the_same_device_type_is_used():
    found = {
        key: FlopBaseline(BASELINE, "then")
        for key in ("torch=2.9.1 device=cpu", "torch=2.10.0 device=cpu", "torch=2.12.0 device=cuda")
    }
    assert other_release("torch=2.13.0 device=cpu", found) == "torch=2.10.0 device=cpu"
    assert other_release("torch=2.13.0 device=xpu", found) is None
    assert other_release("torch=2.13.0", {"torch=2.12.0": found["torch=2.9.1 device=cpu"]}) == (
        "torch=2.12.0"
    )
    same = across_releases(
        compare("t", found["torch=2.10.0 device=cpu"], BASELINE, 0.0, "RERECORD"),
        "torch=2.10.0 device=cpu", "torch=2.13.0 device=cpu", "RERECORD",
    )  # fmt: skip
    assert same.status == "pass" and same.record.verdict == "ok (baseline from torch=2.10.0)"
    grown = across_releases(
        compare("t", found["torch=2.10.0 device=cpu"], GROWN, 0.0, "RERECORD"),
        "torch=2.10.0 device=cpu", "torch=2.13.0 device=cpu", "RERECORD",
    )  # fmt: skip
    assert grown.status == "fail"
    assert grown.message.endswith(
        "the baseline was recorded under torch=2.10.0, this run is torch=2.13.0: FLOP formulas"
        " and the ops torch dispatches to change between releases, so the change may be"
        " torch's. If it is, re-record under this release with: RERECORD"
    )


def test_the_key_is_the_torch_release_without_its_build_tag():
    import torch

    key = flop_key()
    assert re.fullmatch(r"torch=[0-9][^+\s]*", key)
    assert str(torch.__version__).startswith(key.removeprefix("torch="))
    assert flop_key("cuda") == f"{key} device=cuda"


def test_a_baseline_entry_round_trips_through_json():
    now = FlopCount(GROWN.total, GROWN.by_op, GROWN.by_module, {MHA: 2})
    entry = FlopBaseline(now, "2026-12-03T12:00:00+00:00")
    data = json.loads(json.dumps(entry.to_json()))
    assert data["total"] == now.total and data["recorded"] == entry.recorded
    assert FlopBaseline.from_json(data) == entry


def test_recording_says_what_was_recorded_under_which_key():
    outcome = recorded("t", GROWN, "torch=2.13.0")
    assert outcome.status == "pass"
    assert outcome.message == "recorded t: 3,145,728 FLOPs per call under torch=2.13.0"
    assert (outcome.record.verdict, outcome.record.measured) == ("recorded", 3_145_728)


def test_a_missing_baseline_skips_or_fails_when_strict_and_names_other_keys():
    none = missing("t", "torch=2.13.0", {}, GROWN, strict=False, rerecord="RERECORD")
    assert none.status == "skip" and not none.judged
    assert none.message == (
        "no FLOP count recorded for t under torch=2.13.0 (this run counted 3,145,728 FLOPs)."
        " Record one with: RERECORD"
    )
    other = {"torch=2.12.0": FlopBaseline(BASELINE, "then")}
    elsewhere = missing("t", "torch=2.13.0", other, GROWN, strict=True, rerecord="RERECORD")
    assert elsewhere.status == "fail" and elsewhere.record.verdict == "not comparable"
    assert (
        "recorded as 2,097,152 FLOPs under torch=2.12.0; this run counted 3,145,728 FLOPs"
        " under torch=2.13.0" in elsewhere.message
    )
    assert elsewhere.message.endswith("record one for this one with: RERECORD")


def test_a_recompute_in_backward_is_said_where_it_grew():
    """A checkpointed block's forward runs again in backward; torch's module tracker
    files it also under the module whose backward ran (here the ReLU): the message says
    how much was recomputation and why that module shows FLOPs."""
    modules = {"Net": 2_496_000, "Net.block": 2_457_600, "Net.block.0": 2_457_600}
    baseline = FlopCount(2_496_000, by_op={"aten.mm": 1_664_000, "aten.addmm": 832_000},
                         by_module=modules)  # fmt: skip
    now = FlopCount(
        3_315_200,
        by_op={"aten.mm": 1_664_000, "aten.addmm": 1_651_200},
        by_module={**{k: v + 819_200 for k, v in modules.items()}, "Net.block.1": 819_200},
        recomputed=819_200,
    )
    said = "  of these, 819,200 FLOPs (baseline: 0 FLOPs) ran again in backward: activation"
    message = judge_count("t", baseline, now, 0.0, "R").message
    assert any(line.startswith(said) for line in message.splitlines()), message
    assert "under the module whose backward was running" in message
    assert "ran again in backward" not in judge_count("t", now, now, 0.0, "R").message
    budget = over_budget("t", now, 0.001)
    assert budget is not None and "  of these, 819,200 FLOPs ran again in backward:" in budget


def test_the_shapes_whose_flops_grew_are_named_once_the_baseline_keeps_them():
    shape = "aten.mm [100, 64] x [64, 64]"
    baseline = FlopCount(819_200, by_op={"aten.mm": 819_200}, by_shape={shape: 819_200})
    grown = "aten.mm [100, 96] x [96, 64]"
    now = FlopCount(1_228_800, by_op={"aten.mm": 1_228_800}, by_shape={grown: 1_228_800})
    lines = judge_count("t", baseline, now, 0.0, "R").message.splitlines()
    at = lines.index("    aten ops by the shapes of their inputs:")
    assert lines[at + 1].split() == ["+1,228,800", *grown.split(), "(0", "->", "1,228,800)"]
    unshaped = FlopCount(819_200, by_op={"aten.mm": 819_200})
    message = judge_count("t", unshaped, now, 0.0, "R").message
    assert "(the baseline keeps no FLOPs per input shape: re-record it to see them)" in message
    assert grown not in message
