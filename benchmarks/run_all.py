"""Every benchmark of the family, one after the other, and one table of their figures.

    python benchmarks/run_all.py [--quick] [--only NAME ...]

Each benchmark runs in a fresh interpreter, alone on the machine (never several at
once: they measure time). Their own reports are printed as they finish; the table at
the end gathers the figures with their goals. --quick uses fewer repeats (a smoke
run: figures are noisier). Takes about an hour on 2 cores, 10 minutes with --quick.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: script, full arguments, --quick arguments
BENCHMARKS = [
    ("startup.py", [], ["--repeats", "3"]),
    ("fixture_cost.py", [], ["--tests", "200", "--repeats", "3"]),
    ("perf_accuracy.py", [], ["--rounds", "3"]),
    ("perf_cost.py", [], ["--calls", "5"]),
    ("perf_estimators.py", [], ["--rounds", "2"]),
    ("perf_busy_machine.py", [], ["--reruns", "3", "--slow-reruns", "2", "--record-reruns", "2"]),
    ("memory_cost.py", [], ["--repeats", "10"]),
    ("leak_cost.py", [], ["--repeats", "5"]),
    ("determinism_cost.py", [], ["--repeats", "3"]),
    ("sync_cost.py", [], ["--repeats", "5"]),
    ("compile_cost.py", [], ["--repeats", "2"]),
    ("xdist_threads.py", [], ["--repeats", "1"]),
    ("distributed_pool.py", [], ["--tests", "10"]),
    ("collective_record.py", [], ["--pairs", "2", "--calls", "1000"]),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats, noisier figures")
    parser.add_argument("--only", nargs="*", help="run only these scripts (e.g. startup.py)")
    options = parser.parse_args()
    rows: list[tuple[str, str, str, str, str]] = []
    failed = []
    for script, full, quick in BENCHMARKS:
        if options.only and script not in options.only:
            continue
        arguments = quick if options.quick else full
        print(f"\n##### {script} {' '.join(arguments)}", flush=True)
        started = time.perf_counter()
        result = subprocess.run(
            [sys.executable, str(HERE / script), *arguments], capture_output=True, text=True
        )
        for line in result.stdout.splitlines():
            if line.startswith("FIGURE|"):
                _, name, value, goal, verdict = line.split("|", 4)
                rows.append((script.removesuffix(".py"), name, value, goal, verdict))
            else:
                print(line)
        print(f"({time.perf_counter() - started:.0f} s)", flush=True)
        if result.returncode != 0:
            failed.append(script)
            print(result.stderr[-3000:], file=sys.stderr)
    widths = [max(len(row[i]) for row in [HEADER, *rows]) for i in range(5)]
    print("\n" + "  ".join(h.ljust(w) for h, w in zip(HEADER, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))
    missed = [row for row in rows if row[4] == "MISSED"]
    print(
        f"\n{len(rows)} figures, {sum(r[4] == 'met' for r in rows)} goals met, {len(missed)} missed"
    )
    if failed:
        print(f"benchmarks that failed to run: {', '.join(failed)}")
    return 1 if failed else 0


HEADER = ("benchmark", "figure", "measured", "goal", "verdict")

if __name__ == "__main__":
    raise SystemExit(main())
