"""Run the code snippets of documentation pages, as tests/test_docs.py does, in any
environment: ``python scripts/doc_snippets.py docs/performance.md [...]``.

- ```python blocks starting with ``# file: NAME`` are files of a small test suite, one
  per page, which must pass under pytest (with the family's installed plugins);
- other ```python blocks are executed in order; when the paragraph after one is just
  "prints", the ```text block that follows must equal what it printed.

The release check runs it with one feature of the family installed alone, so the pages
are proven to work with only what they say to install.
"""

from __future__ import annotations

import contextlib
import io
import re
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.M | re.S)


def blocks(page: Path) -> list[tuple[str, str, str]]:
    """(language, code, prose before the block) for each fenced block of a page."""
    text = page.read_text()
    found, position = [], 0
    for match in FENCE.finditer(text):
        found.append((match.group(1), match.group(2), text[position : match.start()].strip()))
        position = match.end()
    return found


def run_code_blocks(page: Path) -> int:
    """Execute the page's plain python blocks; AssertionError when shown output is not
    the real output. Returns how many blocks ran."""
    found = blocks(page)
    ran = 0
    for index, (language, code, _) in enumerate(found):
        if language != "python" or code.startswith("# file:"):
            continue
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, f"{page.name} block {index}", "exec"), {"__name__": "docs"})
        ran += 1
        if index + 1 < len(found) and found[index + 1][2] == "prints":
            assert found[index + 1][0] == "text", f"{page.name} block {index + 1}"
            assert out.getvalue() == found[index + 1][1], (
                f"{page.name} block {index} printed:\n{out.getvalue()}\nthe page shows:\n"
                f"{found[index + 1][1]}"
            )
    return ran


def example_files(page: Path) -> dict[str, str]:
    """The page's ``# file: NAME`` blocks, by file name."""
    files = {}
    for language, code, _ in blocks(page):
        if language == "python" and code.startswith("# file:"):
            files[code.splitlines()[0].removeprefix("# file:").strip()] = code
    return files


def family_plugins() -> list[str]:
    """Entry-point names of the family's installed pytest plugins."""
    return sorted(
        ep.name
        for ep in metadata.entry_points(group="pytest11")
        if ep.dist is not None and ep.dist.name.startswith("pytest-torch")
    )


def pytest_args() -> list[str]:
    """Arguments that enable every installed plugin of the family (also with autoload
    off) and keep perf measurements short."""
    plugins = family_plugins()
    args = [arg for name in plugins for arg in ("-p", name)]
    return args + (["--torch-perf-max-time=0.05"] if "torch_perf" in plugins else [])


def main(pages: list[str]) -> int:
    failed = 0
    for name in pages:
        page = Path(name)
        ran = run_code_blocks(page)
        files = example_files(page)
        summary = "no example test files"
        if files:
            with tempfile.TemporaryDirectory() as folder:
                for file_name, code in files.items():
                    Path(folder, file_name).write_text(code)
                result = subprocess.run(
                    [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                     "-p", "no:randomly", *pytest_args()],
                    cwd=folder, capture_output=True, text=True,
                )  # fmt: skip
            summary = (result.stdout.strip().splitlines() or ["(no output)"])[-1].strip("= ")
            if result.returncode != 0 or " passed" not in f" {summary}":
                failed += 1
                print(result.stdout[-4000:], result.stderr[-2000:], sep="\n")
        print(f"{page.name}: {ran} code blocks ran; example tests: {summary}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
