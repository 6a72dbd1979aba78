"""The instruction-count engine: a call's instructions counted under Valgrind (the
session runs again under Callgrind, ``launch``), recorded per key (``counting.count_key``:
what changes counts, not the machine) and compared by ``judging``."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pytest

from pytest_torch.perf.baselines import BaselineFileError
from pytest_torch.perf.engines.base import CallCheck, fill_count_case
from pytest_torch.perf.engines.instructions import judging, launch, valgrind
from pytest_torch.perf.engines.instructions.counting import (
    Counted,
    count_instructions,
    count_key,
    fmt_count,
)
from pytest_torch.perf.engines.instructions.entry import InstructionBaseline
from pytest_torch.perf.options import MEASURE, UPDATE
from pytest_torch.perf.outcome import Outcome, PerfNotJudgedError, PerfRegressionError

if TYPE_CHECKING:
    from pytest_torch.perf.state import PerfSession
    from pytest_torch.perf.suites.cases import CaseResult

OPTION = f" {MEASURE}=instructions"
RERECORD = f"pytest {UPDATE}{OPTION}"


class InstructionEngine:
    """See the module docstring; an :class:`engines.base.Engine`."""

    name: str = "instructions"
    summary: str = (
        "instructions counted under Valgrind, which no machine load moves; the plugin"
        " starts Valgrind itself"
    )
    section: str = "instructions"
    check: str = "instructions"
    unit: str = judging.UNIT
    fields: tuple[str, str] = ("instructions", "reference_instructions")
    change_digits: int = 2  # counts move by tenths of a %
    #: None: the session's --torch-perf-instruction-tolerance
    tolerances: Mapping[str, float | None] = {"instruction_tolerance": None}
    hints: Mapping[str, str] = {
        "instruction_tolerance": "(0.01 allows 1 % more instructions than the baseline)"
    }
    latency_budgets: str | None = (
        f"this run counts instructions under Valgrind ({MEASURE}=instructions),"
        " where code runs 10 to 100x slower than natively. Budgets are milliseconds: judge"
        f" them in a wall-clock run ({MEASURE}=wall, the default)"
    )
    option: str = OPTION
    recorded_as: str = "{count} instruction count(s) for {keys}"
    figures: str = "instructions counted under Valgrind"
    caption: str = (
        "instructions per call (counted under Valgrind: the calls' smallest, with the"
        " allocator's median)"
    )
    missing: str = "instruction counts under this run's key"

    def launch(self, config: pytest.Config) -> int | None:
        return launch.launch(config)

    def header(self, session: PerfSession) -> list[str] | None:
        return [valgrind.session_header()]

    def parse_entry(self, data: Mapping[str, Any], where: str) -> InstructionBaseline:
        return InstructionBaseline.from_json(data, where)

    def fmt(self, value: float) -> str:
        return fmt_count(value)

    def check_call(self, call: CallCheck, session: PerfSession) -> Outcome:
        """Record (``--torch-update-perf``) or compare the instructions of one call."""
        __tracebackhide__ = True
        label = call.label
        if call.device.type != "cpu":
            raise PerfNotJudgedError(
                f"{label}: instruction counts see only the CPU's work, and this call runs on"
                f" {call.device}: its GPU kernels would count as nothing. Count it on the CPU"
                f" (--torch-device=cpu, or inputs on the CPU), or time it on the GPU with"
                f" {MEASURE}=wall"
            )
        found = valgrind.session()
        key = count_key(found[0] if found is not None else "unknown")
        rerecord = f"{RERECORD} {shlex.quote(call.node_id)}"

        def count() -> Counted:
            counted = count_instructions(call.target, *call.inputs, **call.kwargs)
            call.taken.append(counted)
            return counted

        if session.settings.update:
            outcome, baseline = judging.record(label, count(), key)
            session.keep(self.section, key, label, baseline)
            return outcome
        try:
            recorded = session.file().entries(self.section, label)
        except BaselineFileError as exc:
            raise PerfRegressionError(str(exc)) from None
        if key not in recorded:
            return judging.missing(label, key, recorded, session.settings.strict, rerecord)
        return judging.compare(
            label,
            recorded[key],
            count,
            key=key,
            tolerance=call.tolerances["instruction_tolerance"],
            slack=session.settings.slack_instructions,
            rerecord=rerecord,
        )

    def fill_case(
        self, result: CaseResult, call: CallCheck, outcome: Outcome, session: PerfSession
    ) -> None:
        fill_count_case(result, call, outcome)


INSTRUCTIONS = InstructionEngine()
