"""Unit tests of the baseline file (the regression rule: test_rule.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pytest_torch.perf.baselines import BaselineFile, BaselineFileError
from pytest_torch.perf.engines.wall.entry import Baseline


def entry(latency_ms=1.0, threads=2, **extra) -> Baseline:
    return Baseline(
        latency_ms=latency_ms,
        stat="median",
        spread=0.01,
        device="cpu",
        threads=threads,
        torch="2.13.0",
        python="3.11.7",
        recorded="2026-11-30T00:00:00+00:00",
        **extra,
    )


def test_round_trip_and_merge_keep_every_entry(tmp_path):
    store = BaselineFile(tmp_path / "b.json")
    assert store.read().get("machines", {}) == {}
    store.merge({"machines": {"machine A": {"t::a": entry(1.0)}}})
    store.merge(
        {"machines": {"machine A": {"t::b": entry(2.0)}, "machine B": {"t::a": entry(3.0)}}}
    )
    data = store.read().get("machines", {})
    assert data["machine A"]["t::a"].latency_ms == 1.0
    assert data["machine A"]["t::b"].latency_ms == 2.0
    assert store.lookup("machines", "machine B", "t::a").latency_ms == 3.0
    assert store.lookup("machines", "machine C", "t::a") is None


def test_an_entry_keeps_its_reference_loop_and_how_busy_its_recording_was(tmp_path):
    store = BaselineFile(tmp_path / "b.json")
    busy = Baseline(**{**entry(core_probe_us=9.5).__dict__, "samples": 731,
                       "undisturbed_samples": 90})  # fmt: skip
    store.merge({"machines": {"machine A": {"t::a": busy, "t::b": entry()}}})
    text = (tmp_path / "b.json").read_text()
    assert '"core_probe_us": 9.5' in text and text.count("core_probe_us") == 1
    assert '"undisturbed_samples": 90' in text and text.count('"samples"') == 1
    fresh = BaselineFile(tmp_path / "b.json")
    assert fresh.lookup("machines", "machine A", "t::a") == busy
    assert fresh.lookup("machines", "machine A", "t::b").undisturbed_samples is None


def test_formatting_is_sorted_stable_and_rounded(tmp_path):
    store = BaselineFile(tmp_path / "b.json")
    store.merge(
        {"machines": {"m": {"z": entry(1.23456789), "a": entry(2.0, peak_memory={"cuda:0": 5})}}}
    )
    first = store.path.read_text()
    store.merge({"machines": {"m": {"z": entry(1.23456789)}}})
    assert store.path.read_text() == first
    assert first.endswith("}\n")
    document = json.loads(first)
    assert list(document["machines"]["m"]) == ["a", "z"]
    assert document["machines"]["m"]["z"]["latency_ms"] == 1.235
    assert first == json.dumps(document, indent=2, sort_keys=True) + "\n"


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("{not json", "is not valid JSON (line 1"),
        ("", "is not valid JSON"),
        ("[]", "does not have the expected layout"),
        ('{"format": 1, "machines": []}', "does not have the expected layout"),
        ('{"format": 99, "machines": {}}', "has format 99"),
        ('{"format": 1, "machines": {"m": {"t": {"stat": "median"}}}}', "entry is malformed"),
    ],
)
def test_unusable_files_are_reported_with_their_path_and_never_replaced(
    tmp_path, content, expected
):
    path = tmp_path / "b.json"
    path.write_text(content)
    store = BaselineFile(path)
    with pytest.raises(BaselineFileError) as info:
        store.read().get("machines", {})
    assert str(path) in str(info.value)
    assert expected in str(info.value)
    with pytest.raises(BaselineFileError):
        store.merge({"machines": {"m": {"t": entry()}}})
    assert path.read_text() == content


INSTRUCTIONS = {"instructions": 2_000_000, "spread": 0.001, "repeats": 5, "interpreter": 80_000}


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"instructions": 0}, "instructions must be above 0, got 0"),
        ({"instructions": -5}, "instructions must be above 0, got -5"),
        ({"instructions": 2.5e6}, "a whole number expected, got 2500000.0"),
        ({"instructions": True}, "a whole number expected, got True"),
        ({"interpreter": -1}, "interpreter must be from 0 to the instructions (2,000,000), got -1"),
        ({"interpreter": 3_000_000}, "interpreter must be from 0 to the instructions"),
        ({"allocator": 2_000_001}, "allocator must be from 0 to the instructions"),
        (
            {"allocator": 1_950_000},
            "interpreter and allocator add up to more than the instructions (80,000 + 1,950,000",
        ),
        ({"spread": -0.1}, "spread must be a finite number >= 0, got -0.1"),
        ({"spread": float("nan")}, "spread must be a finite number >= 0, got nan"),
        ({"repeats": -1}, "repeats must be 0 or more, got -1"),
        ({"functions": {"f (lib.so)": -3}}, "functions: 'f (lib.so)' has a negative count (-3)"),
    ],
)
def test_instruction_counts_no_recording_writes_are_malformed(tmp_path, change, expected):
    path = tmp_path / "b.json"
    document = {"format": 1, "machines": {}, "instructions": {"key": {"t::a": INSTRUCTIONS}}}
    document["instructions"]["key"]["t::a"] = {**INSTRUCTIONS, **change}
    path.write_text(json.dumps(document))
    with pytest.raises(BaselineFileError) as info:
        BaselineFile(
            path, rerecord="pytest --torch-update-perf --torch-perf-measure=instructions"
        ).read()
    message = str(info.value)
    assert f"{path}: instructions 't::a': entry is malformed ({expected}" in message
    assert message.endswith(
        f"move it aside and re-record: mv {path} {path}.old && pytest --torch-update-perf"
        " --torch-perf-measure=instructions"
    )


def test_a_merge_conflict_is_named_with_how_to_resolve_it(tmp_path):
    path = tmp_path / ".torch-perf-baselines.json"
    path.write_text(
        '{\n  "format": 1,\n<<<<<<< HEAD\n  "machines": {"a": {}}\n=======\n'
        '  "machines": {"b": {}}\n>>>>>>> feature\n}\n'
    )
    with pytest.raises(BaselineFileError) as info:
        BaselineFile(path).read()
    message = str(info.value)
    assert "holds an unresolved merge conflict (<<<<<<< at line 3)" in message
    assert "git checkout --ours -- .torch-perf-baselines.json" in message
    assert message.endswith("re-record what the other changed: pytest --torch-update-perf")


def test_a_newer_format_says_upgrade_or_move_it_aside(tmp_path):
    path = tmp_path / "b.json"
    path.write_text('{"format": 99, "machines": {}}')
    with pytest.raises(BaselineFileError) as info:
        BaselineFile(path, rerecord="pytest --torch-update-perf").read()
    assert str(info.value) == (
        f"the perf baseline file {path} has format 99; this version of pytest-torch-perf"
        " reads format 1. Nothing was changed. A newer pytest-torch-perf wrote it: upgrade"
        f" pytest-torch-perf, or move it aside and re-record: mv {path} {path}.old &&"
        " pytest --torch-update-perf"
    )


WRITER = """
import sys
from pytest_torch.perf.baselines import BaselineFile
from pytest_torch.perf.engines.wall.entry import Baseline
path, worker = sys.argv[1], int(sys.argv[2])
store = BaselineFile(path)
for index in range(5):
    entry = Baseline(float(index + 1), "median", 0.0, "cpu", 1, "2.13.0", "3.11", "now")
    store.merge({"machines": {f"machine {worker % 2}": {f"test_{worker}_{index}": entry}}})
"""


def test_concurrent_writers_lose_nothing(tmp_path):
    path = str(tmp_path / "b.json")
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, path, str(w)]) for w in range(8)]
    assert [writer.wait(timeout=120) for writer in writers] == [0] * 8
    data = BaselineFile(path).read().get("machines", {})
    found = {key for tests in data.values() for key in tests}
    assert found == {f"test_{w}_{i}" for w in range(8) for i in range(5)}


def test_lookups_parse_the_file_once_and_read_and_merge_refresh_them(tmp_path, monkeypatch):
    store = BaselineFile(tmp_path / "b.json")
    store.merge({"machines": {"m": {"a": entry(1.0)}}})
    reads = []
    real_read = BaselineFile._read
    monkeypatch.setattr(BaselineFile, "_read", lambda self: reads.append(1) or real_read(self))
    fresh = BaselineFile(store.path)
    assert fresh.lookup("machines", "m", "a").latency_ms == 1.0
    assert fresh.lookup("machines", "m", "b") is None
    assert len(reads) == 1
    fresh.merge({"machines": {"m": {"b": entry(2.0)}}})
    assert fresh.lookup("machines", "m", "b").latency_ms == 2.0
    # a run reads the file once before its first test; its lookups use that read
    checked = BaselineFile(store.path)
    checked.read()
    reads.clear()
    assert checked.lookup("machines", "m", "b").latency_ms == 2.0
    assert reads == []
