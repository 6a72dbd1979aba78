"""Start-up cost of the family on a suite that never touches torch.

500 plain tests, run with every installed family plugin loaded and with them all
blocked (``-p no:...``); everything else is identical. Goal: ratio <= 1.05 and torch
never imported.

    python benchmarks/startup.py [--tests 500] [--repeats 7]
"""

from __future__ import annotations

import argparse

from _harness import family_entry_points, figure, interleaved, make_suite, median, spread


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tests", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=7)
    options = parser.parse_args()

    per_file = 50
    files = {
        f"test_plain_{f}.py": "".join(
            f"def test_{i}():\n    assert {i} + 1 == {i + 1}\n\n" for i in range(per_file)
        )
        for f in range(options.tests // per_file)
    }
    root = make_suite(files)
    plugins = family_entry_points()
    blocked = [arg for name in plugins for arg in ("-p", f"no:{name}")]
    results = interleaved(root, {"with family": [], "family blocked": blocked}, options.repeats)

    print(f"start-up: pytest -q on {options.tests} plain tests, {options.repeats} runs each")
    print(f"family plugins: {', '.join(plugins)}")
    print(f"{'variant':<16} {'median':>9} {'range':>16}  torch imported")
    for name, (times, imported) in results.items():
        print(f"{name:<16} {median(times):>8.3f}s {spread(times):>16}  {imported}")
    ratio = median(results["with family"][0]) / median(results["family blocked"][0])
    verdict = "meets" if ratio <= 1.05 and not results["with family"][1] else "MISSES"
    print(f"ratio with/without: {ratio:.3f} (goal <= 1.05, torch not imported): {verdict} the goal")
    imported = results["with family"][1]
    figure("start-up, 500 torch-free tests: family loaded / blocked", f"{ratio:.3f}x"
           + (", torch imported" if imported else ""), "<= 1.05x, torch not imported",
           ratio <= 1.05 and not imported)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
