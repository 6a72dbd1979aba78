"""The bad-input catalogue: every marker, option and fixture of the family, misused.

Each case must stop with a usage or collection error (or, for a fixture called with bad
arguments, a failure at the user's line) that names the option, marker or test and
what was expected, and must never show a traceback into the plugins.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import pytest

PLUGINS = (
    "torch_core",
    "torch_perf",
    "torch_memory",
    "torch_determinism",
    "torch_xdist",
    "torch_ci",
    "torch_distributed",
)

# a plugin traceback would show one of these (a traceback entry reads "path:line: in name")
FORBIDDEN = ("Traceback (most recent call last)", "INTERNALERROR")
PLUGIN_FRAME = re.compile(r"pytest_torch[/\\]\S+\.py:\d+: in ")

PLAIN = "def test_plain():\n    assert True\n"


def marked(decorator: str, body: str = "    assert True", args: str = "") -> str:
    return f"import pytest\n\n\n{decorator}\ndef test_marked({args}):\n{body}\n"


@dataclass
class Case:
    id: str
    args: tuple[str, ...] = ()
    source: str = PLAIN
    ini: str = ""
    #: every one of these must appear in the output
    expect: tuple[str, ...] = ()
    #: "usage" (exit 4), "collection" (exit 2 with an error while collecting), "failure"
    kind: str = "usage"
    setup: dict[str, str] = field(default_factory=dict)


CASES = [
    # ---- options, command line and ini -------------------------------------------------
    Case(
        "seed-not-a-number",
        ("--torch-seed=abc",),
        expect=("--torch-seed", "expected a non-negative integer seed, got 'abc'"),
    ),
    Case("seed-negative", ("--torch-seed=-5",), expect=("--torch-seed", "-5")),
    Case("seed-ini", ini="torch_seed = lucky", expect=("torch_seed", "'lucky'")),
    Case("device-unknown", ("--torch-device=tpu",), expect=("--torch-device", "tpu", "cpu")),
    Case(
        "perf-max-time-zero",
        ("--torch-perf-max-time=0",),
        expect=("--torch-perf-max-time", "expected a positive, finite number, got '0'"),
    ),
    Case(
        "perf-slack-negative",
        ("--torch-perf-slack-ms=-1",),
        expect=("--torch-perf-slack-ms", "expected a finite number >= 0"),
    ),
    Case(
        "perf-max-time-infinite",
        ("--torch-perf-max-time=inf",),
        expect=("--torch-perf-max-time", "expected a positive, finite number, got 'inf'"),
    ),
    Case(
        "perf-slack-nan",
        ("--torch-perf-slack-ms=nan",),
        expect=("--torch-perf-slack-ms", "expected a finite number >= 0, got 'nan'"),
    ),
    Case(
        "perf-slack-ini", ini="torch_perf_slack_ms = tiny", expect=("torch_perf_slack_ms", "'tiny'")
    ),
    Case(
        "perf-busy-max-time-negative",
        ("--torch-perf-busy-max-time=-2",),
        expect=("--torch-perf-busy-max-time", "expected a positive, finite number, got '-2'"),
    ),
    Case(
        "perf-busy-max-time-ini",
        ini="torch_perf_busy_max_time = nan",
        expect=("torch_perf_busy_max_time (in", "expected a positive, finite number, got 'nan'"),
    ),
    Case(
        "perf-min-undisturbed-zero",
        ("--torch-perf-min-undisturbed=0",),
        expect=("--torch-perf-min-undisturbed", "expected a whole number >= 1, got '0'"),
    ),
    Case(
        "perf-min-undisturbed-ini",
        ini="torch_perf_min_undisturbed = 2.5",
        expect=("torch_perf_min_undisturbed (in", "expected a whole number >= 1, got '2.5'"),
    ),
    Case(
        "perf-fresh-processes-negative",
        ("--torch-perf-fresh-processes=-1",),
        expect=("--torch-perf-fresh-processes", "expected a whole number >= 0, got '-1'"),
    ),
    Case(
        "perf-fresh-processes-ini",
        ini="torch_perf_fresh_processes = some",
        expect=("torch_perf_fresh_processes (in", "expected a whole number >= 0, got 'some'"),
    ),
    Case(
        "perf-threads-zero",
        ("--torch-perf-threads=0",),
        expect=("--torch-perf-threads", "expected a whole number >= 1", "'0'"),
    ),
    Case(
        "perf-threads-ini",
        ini="torch_perf_threads = all",
        expect=("torch_perf_threads (in tox.ini)", "'all'", "--torch-perf-threads=1"),
    ),
    Case(
        "baselines-under-a-file",
        ("--torch-update-perf", "--torch-perf-baselines=blocker/baselines.json"),
        setup={"blocker": "a file"},
        expect=("blocker", "is a file", "--torch-perf-baselines"),
    ),
    Case(
        "benchmark-json-is-a-folder",
        ("--torch-benchmark-json=folder",),
        setup={"folder/keep": ""},
        expect=("--torch-benchmark-json", "is a folder"),
    ),
    Case(
        "benchmark-plot-is-a-file",
        ("--torch-benchmark-plot=blocker",),
        setup={"blocker": "a file"},
        expect=("--torch-benchmark-plot", "is not a folder"),
    ),
    Case(
        "leak-iterations-zero",
        ("--torch-leak-iterations=0",),
        expect=("--torch-leak-iterations", "0"),
    ),
    Case(
        "leak-iterations-word",
        ("--torch-leak-iterations=many",),
        expect=("--torch-leak-iterations", "'many'"),
    ),
    Case(
        "leak-iterations-ini",
        ini="torch_leak_iterations = -2",
        expect=("torch_leak_iterations", "-2"),
    ),
    Case(
        "leak-tolerance-tensors-negative",
        ("--torch-leak-tolerance-tensors=-1",),
        expect=("--torch-leak-tolerance-tensors", "-1"),
    ),
    Case(
        "leak-tolerance-bytes-word",
        ("--torch-leak-tolerance-bytes=lots",),
        expect=("--torch-leak-tolerance-bytes", "'lots'"),
    ),
    Case("memory-top-negative", ("--torch-memory-top=-3",), expect=("--torch-memory-top", "-3")),
    Case("num-threads-zero", ("--torch-num-threads=0",), expect=("--torch-num-threads", "0")),
    Case(
        "num-threads-word",
        ("--torch-num-threads=lots",),
        expect=("--torch-num-threads", "'lots'", "auto"),
    ),
    Case(
        "xdist-gpus-word", ("--torch-xdist-gpus=first",), expect=("--torch-xdist-gpus", "'first'")
    ),
    Case(
        "gpu-fraction-above-one",
        ("--torch-gpu-memory-fraction=1.5",),
        expect=("--torch-gpu-memory-fraction", "1.5"),
    ),
    Case(
        "gpu-fraction-word",
        ("--torch-gpu-memory-fraction=half",),
        expect=("--torch-gpu-memory-fraction", "'half'"),
    ),
    Case(
        "annotations-unknown",
        ("--torch-github-annotations=maybe",),
        expect=("--torch-github-annotations", "expected on, off or auto, got 'maybe'"),
    ),
    Case(
        "artifacts-is-a-file",
        ("--torch-failure-artifacts=blocker",),
        setup={"blocker": "a file"},
        expect=("--torch-failure-artifacts", "blocker", "is not a folder"),
    ),
    Case(
        "distributed-timeout-zero",
        ("--torch-distributed-timeout=0",),
        expect=("--torch-distributed-timeout", "expected a positive, finite number, got '0'"),
    ),
    Case(
        "distributed-timeout-word",
        ("--torch-distributed-timeout=long",),
        expect=("--torch-distributed-timeout", "'long'", "--torch-distributed-timeout=60"),
    ),
    Case(
        "distributed-timeout-ini",
        ini="torch_distributed_timeout = -3",
        expect=("torch_distributed_timeout (in", "expected a positive, finite number, got '-3'"),
    ),
    # ---- markers: wrong arguments ------------------------------------------------------
    Case(
        "latency-marker-without-ms",
        source=marked("@pytest.mark.torch_max_latency()"),
        kind="collection",
        expect=("test_marked", "torch_max_latency"),
    ),
    Case(
        "latency-marker-negative",
        source=marked("@pytest.mark.torch_max_latency(ms=-1)"),
        kind="collection",
        expect=("test_marked", "torch_max_latency", "-1"),
    ),
    Case(
        "latency-marker-text",
        source=marked("@pytest.mark.torch_max_latency('fast')"),
        kind="collection",
        expect=("test_marked", "torch_max_latency", "'fast'"),
    ),
    Case(
        "latency-marker-unknown-stat",
        source=marked("@pytest.mark.torch_max_latency(5, stat='p50')"),
        kind="collection",
        expect=("test_marked", "'p50'", "median"),
    ),
    Case(
        "memory-marker-without-budget",
        source=marked("@pytest.mark.torch_max_memory()"),
        kind="collection",
        expect=("test_marked", "torch_max_memory"),
    ),
    Case(
        "memory-marker-negative",
        source=marked("@pytest.mark.torch_max_memory(mb=-1)"),
        kind="collection",
        expect=("test_marked", "torch_max_memory", "-1"),
    ),
    Case(
        "memory-marker-unknown-device",
        source=marked("@pytest.mark.torch_max_memory(10, device='tpu')"),
        kind="collection",
        expect=("test_marked", "'tpu'"),
    ),
    Case(
        "leak-marker-zero-iterations",
        source=marked("@pytest.mark.torch_memory_leak(iterations=0)"),
        kind="collection",
        expect=("test_marked", "torch_memory_leak", "iterations"),
    ),
    Case(
        "leak-marker-bad-bytes",
        source=marked("@pytest.mark.torch_memory_leak(tolerance_bytes='lots')"),
        kind="collection",
        expect=("test_marked", "tolerance_bytes", "'lots'"),
    ),
    Case(
        "leak-marker-unknown-keyword",
        source=marked("@pytest.mark.torch_memory_leak(repeats=3)"),
        kind="collection",
        expect=("test_marked", "repeats"),
    ),
    Case(
        "threads-marker-zero",
        source=marked("@pytest.mark.torch_threads(0)"),
        kind="collection",
        expect=("test_marked", "torch_threads", "0"),
    ),
    Case(
        "threads-marker-missing",
        source=marked("@pytest.mark.torch_threads()"),
        kind="collection",
        expect=("test_marked", "torch_threads"),
    ),
    Case(
        "gpu-exclusive-with-arguments",
        source=marked("@pytest.mark.torch_gpu_exclusive(2)"),
        kind="collection",
        expect=("test_marked", "torch_gpu_exclusive"),
    ),
    Case(
        "devices-marker-unknown",
        source=marked("@pytest.mark.torch_devices('tpu')"),
        kind="collection",
        expect=("test_marked", "'tpu'"),
    ),
    Case(
        "devices-marker-empty",
        source=marked("@pytest.mark.torch_devices()"),
        kind="collection",
        expect=("test_marked", "torch_devices"),
    ),
    Case(
        "distributed-marker-zero-ranks",
        source=marked("@pytest.mark.torch_distributed(world_size=0)"),
        kind="collection",
        expect=("test_marked", "torch_distributed", "world_size", "got 0"),
    ),
    Case(
        "distributed-marker-world-size-text",
        source=marked("@pytest.mark.torch_distributed('two')"),
        kind="collection",
        expect=("test_marked", "torch_distributed", "world_size", "'two'"),
    ),
    Case(
        "distributed-marker-negative-timeout",
        source=marked("@pytest.mark.torch_distributed(world_size=2, timeout=-1)"),
        kind="collection",
        expect=("test_marked", "torch_distributed", "timeout", "-1"),
    ),
    Case(
        "distributed-marker-unknown-keyword",
        source=marked("@pytest.mark.torch_distributed(world_size=2, shards=3)"),
        kind="collection",
        expect=("test_marked", "torch_distributed", "shards", "world_size="),
    ),
    Case(
        "distributed-marker-unknown-device",
        source=marked("@pytest.mark.torch_distributed(world_size=2, device='tpu')"),
        kind="collection",
        expect=("test_marked", "torch_distributed", "'tpu'"),
    ),
    Case(
        "distributed-marker-backend-not-built",
        source=marked("@pytest.mark.torch_distributed(world_size=2, backend='nonesuch')"),
        kind="collection",
        expect=("test_marked", "torch_distributed", "'nonesuch'", "leave backend unset"),
    ),
    Case(
        "benchmark-suite-bad-batch-sizes",
        source="import torch\nfrom pytest_torch.perf import benchmark_suite\n\n\n@benchmark_suite(batch_sizes=[0])\ndef test_marked(batch_size):\n    return torch.nn.Linear(2, 2), torch.randn(batch_size, 2)\n",
        kind="collection",
        expect=("test_marked", "batch_sizes"),
    ),
    # ---- markers on the wrong kind of test ---------------------------------------------
    Case(
        "leak-marker-on-a-latency-test",
        source=marked(
            "@pytest.mark.torch_memory_leak\n@pytest.mark.torch_max_latency(5)",
            "    latency(lambda: None)",
            "latency",
        ),
        kind="collection",
        expect=("test_marked", "torch_memory_leak"),
    ),
    Case(
        "benchmark-marker-by-hand",
        source=marked("@pytest.mark.torch_benchmark(batch_sizes=(1,))", args="batch_size"),
        kind="collection",
        expect=("test_marked", "@benchmark_suite"),
    ),
    # ---- fixtures outside their scope or with bad arguments ----------------------------
    Case(
        "latency-from-a-session-fixture",
        source="import pytest\n\n\n@pytest.fixture(scope='session')\ndef timed(latency):\n    return latency\n\n\ndef test_marked(timed):\n    pass\n",
        kind="failure",
        expect=("ScopeMismatch", "latency", "timed"),
    ),
    Case(
        "torch-seed-from-a-module-fixture",
        source="import pytest\n\n\n@pytest.fixture(scope='module')\ndef data(torch_seed):\n    return torch_seed\n\n\ndef test_marked(data):\n    pass\n",
        kind="failure",
        expect=("ScopeMismatch", "torch_seed", "data"),
    ),
    Case(
        "perf-baseline-negative-tolerance",
        source="def test_marked(perf_baseline):\n    perf_baseline(lambda: None, latency_tolerance=-1)\n",
        kind="failure",
        expect=("latency_tolerance must be a finite number >= 0, got -1", "test_marked"),
    ),
    Case(
        "perf-baseline-infinite-tolerance",
        source="def test_marked(perf_baseline):\n    perf_baseline(lambda: None, memory_tolerance=float('inf'))\n",
        kind="failure",
        expect=(
            "memory_tolerance must be a finite number >= 0, got inf (0.1 allows 10 % more",
            "test_marked",
        ),
    ),
    Case(
        "rank-fixture-without-the-marker",
        source="def test_marked(rank):\n    pass\n",
        kind="failure",
        expect=(
            "test_marked",
            "the rank fixture is for tests that run on ranks",
            "@pytest.mark.torch_distributed(world_size=2)",
        ),
    ),
    Case(
        "make-tensor-bad-shape",
        source="def test_marked(make_tensor):\n    make_tensor('wide')\n",
        kind="failure",
        expect=("test_marked", "make_tensor: the shape must be"),
    ),
]


def test_the_catalogue_covers_at_least_thirty_cases():
    assert len(CASES) >= 30
    assert len({case.id for case in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_bad_input_is_named_and_explained(pytester: pytest.Pytester, case: Case):
    for name, content in case.setup.items():
        path = pytester.path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    if case.ini:
        pytester.makeini(f"[pytest]\n{case.ini}\n")
    pytester.makepyfile(test_case=case.source)
    plugins = [arg for name in PLUGINS for arg in ("-p", name)]
    result = pytester.runpytest(*plugins, "-p", "xdist", *case.args)
    output = "\n".join(result.outlines + result.errlines)
    if case.kind == "usage":
        assert result.ret == pytest.ExitCode.USAGE_ERROR, output
    elif case.kind == "collection":
        assert result.ret == pytest.ExitCode.INTERRUPTED, output
        assert "ERROR collecting" in output or "error" in output.lower(), output
    else:
        assert result.ret == pytest.ExitCode.TESTS_FAILED, output
    for expected in case.expect:
        assert expected in output, f"{expected!r} not in:\n{output}"
    for forbidden in FORBIDDEN:
        assert forbidden not in output, f"{forbidden!r} in:\n{output}"
    assert not PLUGIN_FRAME.search(output), f"a plugin frame in:\n{output}"
