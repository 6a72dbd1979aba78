"""Set the family's one version: ``python scripts/set_version.py 0.2.0``.

VERSION at the repository root is the version of every package; this script writes it
there, into each pyproject.toml (the package version and the meta-package's pins on
its siblings) and into the install commands of the docs that pin ``pytest-torch``.
``tests/test_release.py`` fails when any of them disagree, and when
CHANGELOG.md has no section for the version.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SIBLING_PIN = re.compile(r'("pytest-torch-[a-z]+(?:\[[a-z]+\])?==)[^"]+(")')
VERSION_LINE = re.compile(r'^version = "[^"]+"$', re.MULTILINE)
#: install commands in the docs pin the meta-package (its name on the public index is
#: another project's): ``"pytest-torch==0.1.0"``
DOC_PIN = re.compile(r"(\bpytest-torch(?:\[[a-z,]+\])?==)\d[\w.]*\d")
PINNED_DOCS = ("README.md", "packages/pytest-torch/README.md", "docs/index.md")
PEP440 = re.compile(r"^\d+\.\d+\.\d+(?:(?:a|b|rc)\d+)?(?:\.post\d+)?(?:\.dev\d+)?$")


def pyprojects() -> list[Path]:
    return sorted((REPO / "packages").glob("*/pyproject.toml"))


def set_version(version: str) -> list[Path]:
    """Write ``version`` everywhere; the files changed."""
    if not PEP440.match(version):
        raise SystemExit(f"set_version: {version!r} is not a release version like 0.2.0")
    changed = []
    for path in pyprojects():
        text = path.read_text()
        new = VERSION_LINE.sub(f'version = "{version}"', text, count=1)
        new = SIBLING_PIN.sub(rf"\g<1>{version}\g<2>", new)
        if new != text:
            path.write_text(new)
            changed.append(path)
    for name in PINNED_DOCS:
        path = REPO / name
        text = path.read_text()
        new = DOC_PIN.sub(rf"\g<1>{version}", text)
        if new != text:
            path.write_text(new)
            changed.append(path)
    (REPO / "VERSION").write_text(version + "\n")
    return changed


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    changed = set_version(argv[0])
    for path in changed:
        print(f"updated {path.relative_to(REPO)}")
    changelog = (REPO / "CHANGELOG.md").read_text()
    if f"## {argv[0]}" not in changelog:
        print(f"now add a '## {argv[0]}' section to CHANGELOG.md", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
