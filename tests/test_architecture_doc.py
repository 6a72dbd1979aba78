"""docs/architecture.md stays true to the tree: its module tables name modules that
exist, its walk-through of one test names only modules (and their functions and
classes) that exist, each engine has a walk-through, and the contributor guides live in
one place that CONTRIBUTING.md links.

Read from the sources with ``ast``: no part of the family is imported.
(``tests/test_repository.py`` checks the other way round: every module has a row.)
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "architecture.md"
FOLDERS = sorted(
    p
    for p in (REPO / "packages").iterdir()
    if (p / "pyproject.toml").exists() and (p / "src").exists()
)
#: the family's packages by their short name (``perf``) -> their folder in the source tree
PACKAGES = {
    package.name: package
    for folder in FOLDERS
    for package in (folder / "src" / "pytest_torch").glob("*/")
    if (package / "__init__.py").exists()
}
#: a name written from its package: ``perf.engines.wall.timing``, ``core.checks.Check``,
#: ``pytest_torch.perf.outcome.PerfRegressionError``
QUALIFIED = re.compile(
    rf"(?<![\w./-])(?:pytest_torch\.)?({'|'.join(PACKAGES)})((?:\.[A-Za-z_]\w*)+)"
)
#: roots of dotted names that are not the family's, allowed in the walk-through
OTHER_ROOTS = {"torch", "pytest"}
#: a table cell a person can read: longer than this, make it rows
MAX_CELL = 300


def _text() -> str:
    return DOC.read_text()


def _sections(level: int) -> dict[str, str]:
    """The page's sections at heading ``level`` (2: ``## ``), by heading, each with the
    text up to the next heading of that level or above."""
    found: dict[str, str] = {}
    parts = re.split(rf"^(?=#{{1,{level}}} )", _text(), flags=re.M)
    for part in parts:
        heading = re.match(rf"#{{{level}}} (.+)\n", part)
        if heading:
            found[heading.group(1).strip()] = part
    return found


def _walk_through() -> str:
    sections = _sections(2)
    assert "One test on its way through" in sections, "the walk-through section is gone"
    return sections["One test on its way through"]


def _module_path(package: Path, parts: list[str]) -> tuple[Path | None, list[str]]:
    """The longest prefix of ``parts`` that is a module or a room of ``package`` (its
    file: a room's ``__init__.py``, None for a room without one), and the parts left
    over (names inside it)."""
    path: Path | None = package / "__init__.py"
    where = package
    for index, part in enumerate(parts):
        if (where / f"{part}.py").exists():
            return where / f"{part}.py", parts[index + 1 :]
        if not (where / part).is_dir() or part.startswith("_"):
            return path, parts[index:]
        where = where / part
        path = where / "__init__.py" if (where / "__init__.py").exists() else None
    return path, []


@cache
def _names(path: Path) -> dict[str, set[str]]:
    """A module's top-level names, each with the names defined in its body (a class's
    methods and attributes; nothing for a function or a constant)."""
    tree = ast.parse(path.read_text())
    names: dict[str, set[str]] = {}

    def assigned(node: ast.stmt) -> list[str]:
        if isinstance(node, ast.Assign):
            return [t.id for t in node.targets if isinstance(t, ast.Name)]
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            return [node.target.id]
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            return [(a.asname or a.name).split(".")[0] for a in node.names]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return [node.name]
        return []

    for node in tree.body:
        for name in assigned(node):
            inner = set()
            if isinstance(node, ast.ClassDef):
                inner = {n for child in node.body for n in assigned(child)}
            names.setdefault(name, set()).update(inner)
    return names


def resolve(package: str, dotted: str) -> str | None:
    """Why ``package`` + ``dotted`` (``"perf"``, ``".engines.wall.timing"``) names
    nothing in the tree, or None when it names a module, or a name in one."""
    parts = dotted.strip(".").split(".")
    path, rest = _module_path(PACKAGES[package], parts)
    if not rest:
        return None
    if path is None:
        room = ".".join(parts[: len(parts) - len(rest)])
        return f"{package}.{room} has no module {rest[0]!r} (and no __init__.py)"
    module = f"{package}." + ".".join(parts[: len(parts) - len(rest)]).rstrip(".")
    names = _names(path)
    if rest[0] not in names:
        return f"{module.rstrip('.')} has no module or name {rest[0]!r}"
    if len(rest) > 1 and rest[1] not in names[rest[0]]:
        return f"{module.rstrip('.')}.{rest[0]} has no {rest[1]!r}"
    if len(rest) > 2:
        return "a name too deep to check: name the module and its class or function"
    return None


def test_the_walk_through_names_only_modules_that_exist():
    """Every name written from its package in the walk-through (and anywhere else on the
    page) is a module, or a function, class or constant in one, or a method of such a
    class: `perf.engines.flops.counting.FlopCounting`."""
    problems = []
    for match in QUALIFIED.finditer(_text()):
        problem = resolve(match.group(1), match.group(2))
        if problem is not None:
            line = _text().count("\n", 0, match.start()) + 1
            problems.append(f"docs/architecture.md:{line} `{match.group(0)}`: {problem}")
    assert not problems, "\n".join(problems)


def test_the_walk_through_names_modules_from_their_package():
    """In the walk-through a dotted name says its package (`perf.engines.wall.timing`,
    not `engines.wall.timing`), so the test above can check it."""
    dotted = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")
    unqualified = [
        name
        for name in re.findall(r"`([^`\n]+)`", _walk_through())
        if dotted.fullmatch(name)
        and name.split(".")[0] not in {*PACKAGES, "pytest_torch", *OTHER_ROOTS}
    ]
    assert not unqualified, f"name these from their package (perf.…, core.…): {unqualified}"


def test_the_walk_through_follows_one_test_through_each_engine():
    """One walk-through per measurement engine (a room of perf/engines/ with an
    engine.py), naming that engine's module."""
    engines = sorted(
        room.name
        for room in (PACKAGES["perf"] / "engines").iterdir()
        if (room / "engine.py").exists()
    )
    assert len(engines) >= 3, engines  # wall, instructions, flops
    walk = _sections(3)
    missing = [
        name
        for name in engines
        if not any(
            heading.startswith("Through the") and f"perf.engines.{name}.engine" in text
            for heading, text in walk.items()
        )
    ]
    assert not missing, f"no walk-through ('### Through the ... engine') for: {missing}"


def _package_tables() -> dict[str, list[tuple[str, str]]]:
    """Each distribution's section: its rows, (first cell's name, whole row)."""
    tables = {}
    for heading, text in _sections(3).items():
        distribution = re.fullmatch(r"`(pytest-torch-[a-z]+)`", heading)
        if distribution:
            rows = re.findall(r"^(\| `([\w.]+)` \|.*)$", text, re.M)
            tables[distribution.group(1)] = [(name, row) for row, name in rows]
    return tables


def test_every_row_of_the_module_tables_names_a_module_that_exists():
    tables = _package_tables()
    assert sorted(tables) == sorted(folder.name for folder in FOLDERS), (
        "one section (### `pytest-torch-...`) per package with code, and no other"
    )
    problems = []
    for folder in FOLDERS:
        (package,) = (folder / "src" / "pytest_torch").glob("*/__init__.py")
        root = package.parent
        seen = set()
        for name, _ in tables[folder.name]:
            if name in seen:
                problems.append(f"{folder.name}: {name} has two rows")
            seen.add(name)
            path = root.joinpath(*name.split("."))
            if name == "__init__" or path.with_suffix(".py").exists():
                continue
            if (path / "__init__.py").exists():
                continue  # a room, by its __init__ (perf's engine registry: `engines`)
            problems.append(f"{folder.name}: {name} is not a module")
    assert not problems, "\n".join(problems)


def test_every_table_cell_is_short_enough_to_read():
    """A module per row, not a package per cell (perf's row was once 3,370 characters)."""
    long = [
        f"{cell[:60]}... ({len(cell)} characters)"
        for line in _text().splitlines()
        if line.startswith("|")
        for cell in line.strip("|").split(" | ")
        if len(cell) > MAX_CELL
    ]
    assert not long, "\n".join(long)


def _anchors(text: str) -> set[str]:
    """The anchors mkdocs gives the page's headings (its default slugify)."""
    headings = re.findall(r"^#{1,6} (.+)$", text, re.M)
    slugs = set()
    for heading in headings:
        plain = re.sub(r"[`*]", "", heading).strip().lower()
        slugs.add(re.sub(r"[\s]+", "-", re.sub(r"[^\w\s-]", "", plain)))
    return slugs


def test_one_guide_for_checks_engines_and_packages_that_contributing_links():
    """The architecture page holds the one guide for a new check, a new engine and a new
    package; CONTRIBUTING.md links each, and keeps no checklist of its own."""
    doc = _text()
    anchors = _anchors(doc)
    guides = {"adding-a-check", "adding-an-engine", "adding-a-package"}
    assert guides <= anchors, f"docs/architecture.md lacks {sorted(guides - anchors)}"
    assert len(re.findall(r"^#+ Adding a (?:new )?(?:plugin )?package", doc, re.M)) == 1
    contributing = (REPO / "CONTRIBUTING.md").read_text()
    linked = set(re.findall(r"\]\(docs/architecture\.md#([\w-]+)\)", contributing))
    assert guides <= linked, f"CONTRIBUTING.md does not link {sorted(guides - linked)}"
    assert linked <= anchors, f"CONTRIBUTING.md links missing anchors {sorted(linked - anchors)}"
    # no second checklist: a section of CONTRIBUTING's on adding something links, and
    # numbers no steps of its own
    for part in re.split(r"^(?=#+ )", contributing, flags=re.M):
        if re.match(r"#+ Adding", part):
            assert not re.search(r"^\d+\. ", part, re.M), (
                "CONTRIBUTING.md keeps a checklist of its own: link the architecture page's"
            )


def test_the_check_and_engine_guides_name_files_that_exist():
    """The worked example of 'Adding an engine' is the FLOP-count engine: the files it
    names exist, and so do the registry and base the guides point at."""
    sections = _sections(2)
    for title in ("Adding a check", "Adding an engine"):
        for path in re.findall(r"`(perf/[\w/]+\.py)`", sections[title]):
            if "kernel_budget" in path:
                continue  # the check the guide imagines
            assert (PACKAGES["perf"].parent / path).exists(), f"{title}: {path}"
    for name in ("engine.py", "counting.py", "judging.py", "__init__.py"):
        assert (PACKAGES["perf"] / "engines" / "flops" / name).exists(), name
