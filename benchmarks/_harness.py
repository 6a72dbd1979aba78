"""Shared helpers of the benchmarks: generated suites and interleaved, repeated timing."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path

# Runs pytest in a fresh interpreter and says whether torch was imported.
PROBE = (
    "import sys, pytest\n"
    "rc = pytest.main(sys.argv[1:])\n"
    "print('TORCH_IMPORTED=%s' % ('torch' in sys.modules))\n"
    "sys.exit(int(rc))\n"
)


def figure(name: str, value: str, goal: str, met: bool | None) -> None:
    """One figure for benchmarks/run_all.py's table (met: None when there is no goal)."""
    verdict = "-" if met is None else ("met" if met else "MISSED")
    print(f"FIGURE|{name}|{value}|{goal}|{verdict}", flush=True)


def family_entry_points() -> list[str]:
    names = set()
    for ep in metadata.entry_points(group="pytest11"):
        if ep.dist is not None and ep.dist.name.startswith("pytest-torch"):
            names.add(ep.name)
    return sorted(names)


def make_suite(files: dict[str, str]) -> Path:
    root = Path(tempfile.mkdtemp(prefix="pytest-torch-bench-"))
    (root / "pytest.ini").write_text("[pytest]\n")
    for name, text in files.items():
        (root / name).write_text(text)
    return root


def run_pytest(
    root: Path,
    args: Sequence[str],
    extra_env: dict[str, str] | None = None,
    check: bool = True,
) -> tuple[float, bool, str]:
    """Wall seconds, whether torch was imported, and the output of one pytest run
    (``extra_env`` added to its environment); a failing run stops the benchmark unless
    ``check`` is false (its failures are then the caller's to report)."""
    # Bytecode is cached as after a normal `pip install` (the warm-up run writes it),
    # so the figures do not count compiling the plugins' sources on every start.
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("PYTEST_") and k != "PYTHONDONTWRITEBYTECODE"
    }
    env.update(extra_env or {})
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-c", PROBE, "-q", "-p", "no:cacheprovider", *args],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
    )
    elapsed = time.perf_counter() - start
    if check and result.returncode != 0:
        raise SystemExit(f"pytest failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return elapsed, "TORCH_IMPORTED=True" in result.stdout, result.stdout


def interleaved(
    root: Path, variants: dict[str, list[str]], repeats: int
) -> dict[str, tuple[list[float], bool]]:
    """Time each variant ``repeats`` times, alternating them so drift hits all alike."""
    for args in variants.values():  # warm the file-system and bytecode caches
        run_pytest(root, args)
    times: dict[str, list[float]] = {name: [] for name in variants}
    imported: dict[str, bool] = {}
    for _ in range(repeats):
        for name, args in variants.items():
            seconds, torch_imported, _ = run_pytest(root, args)
            times[name].append(seconds)
            imported[name] = torch_imported
    return {name: (times[name], imported[name]) for name in variants}


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def spread(values: Sequence[float]) -> str:
    return f"{min(values):.3f}-{max(values):.3f} s"


@contextmanager
def two_cpu_hogs() -> Iterator[None]:
    """Two CPU-bound processes (``python -c "while True: pass"``) beside the block."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    time.sleep(0.5)
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
