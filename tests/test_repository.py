"""The repository a newcomer meets: README commands, CI script, tox envs, package layout."""

from __future__ import annotations

import ast
import configparser
import re
import runpy
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FOLDERS = sorted(p for p in (REPO / "packages").iterdir() if (p / "pyproject.toml").exists())


def _readme_commands() -> dict[str, str]:
    text = (REPO / "README.md").read_text()
    return dict(re.findall(r"<!-- (demo|test)-command -->\n```(?:bash|sh)\n(.+?)\n```", text))


def test_readme_has_exactly_two_commands_near_the_top():
    text = (REPO / "README.md").read_text()
    commands = _readme_commands()
    assert set(commands) == {"demo", "test"}
    assert all("\n" not in c for c in commands.values()), "each is one command line"
    assert text.count("```bash") == 2
    assert text.index("<!-- test-command -->") < 2500


def test_ci_runs_the_readme_test_command():
    ci = (REPO / ".ci" / "run").read_text()
    assert "<!-- test-command -->" in ci, ".ci/run must take its command from README.md"
    assert "tox" not in ci.replace("README", ""), ".ci/run must not restate the command"


def test_tox_runs_every_package_alone_and_together_lint_docs_release_and_demo():
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(REPO / "tox.ini")
    envlist = [e.strip() for e in tox["tox"]["envlist"].split(",")]
    assert envlist == ["suite", "release"]
    assert "scripts/demo.py" in tox["testenv:demo"]["commands"]
    # together: every package installed, the cross-package tests, lint of every package's
    # sources, the demo
    suite = tox["testenv:suite"]
    family = tox["testenv"]["family"]
    assert "{[testenv]family}" in suite["deps"]
    assert re.search(r"^pytest -n 2 \{toxinidir\}/tests \{posargs\}", suite["commands"], re.M)
    # every package's accelerator tests, on the emulated accelerator
    assert re.search(
        r"^pytest --emulated-accelerator .*\{toxinidir\}/packages", suite["commands"], re.M
    )
    # the demo: in the reliability suite, which that command runs
    reliability = (REPO / "tests" / "reliability" / "test_in_any_order_and_company.py").read_text()
    assert '"demo.py"), "--copy-to"' in reliability
    for folder in FOLDERS:
        assert f"packages/{folder.name}" in family, folder.name
        if (folder / "src").exists():
            assert f"packages/{folder.name}/src" in suite["commands"], folder.name
    # alone: the release check installs each package by itself from its wheel and runs
    # its tests with autoload off and its plugins enabled with -p
    assert "release_check.py --tests" in tox["testenv:release"]["commands"]
    release_check = runpy.run_path(str(REPO / "scripts" / "release_check.py"))
    requirements = {requirement for requirement, *_ in release_check["SCENARIOS"]}
    plugins = {f"pytest-torch-{name}" for name in release_check["PLUGINS"]}
    for folder in FOLDERS:
        assert folder.name in requirements, f"{folder.name} is never installed alone"
        if (folder / "src").exists():
            assert folder.name in plugins, f"{folder.name} is never enabled with -p"
    constraints = (REPO / "constraints.txt").read_text()
    assert re.search(r"^torch==2\.13\.0$", constraints, re.M)


def test_the_test_runs_demo_leaves_out_only_the_sessions_under_valgrind(monkeypatch):
    """tox -e demo shows every step; the test run leaves out the two Valgrind sessions
    (pytest-torch-perf's tests run them), and nothing else."""
    monkeypatch.syspath_prepend(str(REPO / "scripts"))  # as when the script runs
    demo = runpy.run_path(str(REPO / "scripts" / "demo.py"), run_name="demo")
    monkeypatch.setattr(demo["shutil"], "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(demo["sys"], "platform", "linux")
    every = [" ".join(args) for _, args in demo["steps"]([])]
    shown = [" ".join(args) for _, args in demo["steps"]([], instruction_counts=False)]
    left_out = [step for step in every if step not in shown]
    assert len(every) == 7 and shown == [step for step in every if step not in left_out]
    assert len(left_out) == 2
    assert all("--torch-perf-measure=instructions" in step for step in left_out)
    assert "--torch-update-perf" in left_out[0] and "--torch-update-perf" not in left_out[1]
    reliability = REPO / "tests" / "reliability" / "test_in_any_order_and_company.py"
    assert '"--without-instruction-counts"' in reliability.read_text()


def test_every_package_has_its_own_readme_typing_marker_and_build_settings():
    for folder in FOLDERS:
        pyproject = tomllib.loads((folder / "pyproject.toml").read_text())
        assert pyproject["build-system"]["build-backend"] == "hatchling.build"
        wheel = pyproject["tool"]["hatch"]["build"]["targets"]["wheel"]
        assert "dev-mode-exact" not in (folder / "pyproject.toml").read_text()
        assert (folder / "README.md").read_text().strip()
        if folder.name == "pytest-torch":
            # the meta-package ships no code: the namespace root is core's
            assert wheel == {"bypass-selection": True}
            assert not (folder / "src").exists()
            continue
        assert wheel["packages"] == ["src/pytest_torch"]
        assert list((folder / "src" / "pytest_torch").rglob("py.typed"))
        namespace_init = folder / "src" / "pytest_torch" / "__init__.py"
        assert namespace_init.exists() == (folder.name == "pytest-torch-core")


def test_package_readmes_read_on_an_index_page():
    """A README is the long description on an index page: no links into the checkout."""
    for folder in FOLDERS:
        text = (folder / "README.md").read_text()
        relative = re.findall(r"\]\((?!https?://)([^)]+)\)", text)
        assert not relative, f"{folder.name}/README.md links {relative}"


def test_siblings_never_import_from_the_namespace_root():
    # their tests too (except core's tests of the root itself)
    root_tests = REPO / "packages/pytest-torch-core/tests/test_namespace_root.py"
    for folder in FOLDERS:
        if folder.name == "pytest-torch":
            continue
        for source in [*(folder / "src").rglob("*.py"), *(folder / "tests").rglob("*.py")]:
            if source == root_tests:
                continue
            text = source.read_text()
            assert not re.search(
                r"^\s*(from pytest_torch import|import pytest_torch$)", text, re.M
            ), source


def test_siblings_meet_only_through_cores_public_modules():
    """A package's code imports only itself and core's public modules: never another
    feature's modules (they meet through hooks) and never core's wiring (core.plugin)."""
    import ast

    problems = []
    for folder in FOLDERS:
        if not (folder / "src").exists():
            continue
        own = f"pytest_torch.{folder.name.removeprefix('pytest-torch-')}"
        for source in (folder / "src").rglob("*.py"):
            if source.parent.name == "pytest_torch":
                continue  # the namespace root re-exports every feature by design
            for node in ast.walk(ast.parse(source.read_text())):
                names = []
                if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    names = [node.module]
                elif isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                for name in names:
                    if not name.startswith("pytest_torch."):
                        continue
                    allowed = name == own or name.startswith(own + ".")
                    allowed |= name.startswith("pytest_torch.core") and (
                        name != "pytest_torch.core.plugin"
                    )
                    if not allowed:
                        where = source.relative_to(REPO)
                        problems.append(f"{where}:{node.lineno} imports {name}")
    assert not problems, "\n".join(problems)


def _named(node):
    """``MarkerSpec`` for ``MarkerSpec`` and ``markers.MarkerSpec``; the text of a string
    annotation (``"CiSettings"``); None for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _declares_markers(module: str) -> bool:
    """Where a `MarkerSpec` may be declared: a package's `markers` module, or a check's
    own module in a `checks/` room (`checks.latency_budget`), beside the check that
    acts on the marker."""
    return module == "markers" or module.startswith("checks.")


def test_markers_settings_and_marker_lookups_each_have_one_home():
    """Every package declares its `MarkerSpec`s in its `markers` module or, for a check
    of core's registry in a `checks/` room, in the check's module; it keeps its
    settings' stash key (`StashKey[...Settings]`) in its `settings` module; a test's
    marker is asked of its spec (`MarkerSpec.mark_on`), so only core's `markers` calls
    `get_closest_marker`."""
    problems = []
    for folder in FOLDERS:
        for package in sorted((folder / "src" / "pytest_torch").glob("*/")):
            for source in sorted(package.rglob("*.py")):
                module = ".".join(source.relative_to(package).with_suffix("").parts)
                where = source.relative_to(REPO)
                for node in ast.walk(ast.parse(source.read_text())):
                    if (
                        isinstance(node, ast.Call)
                        and _named(node.func) == "MarkerSpec"
                        and not _declares_markers(module)
                    ):
                        problems.append(f"{where}:{node.lineno} declares a MarkerSpec")
                    if (
                        isinstance(node, ast.Subscript)
                        and _named(node.value) == "StashKey"
                        and (_named(node.slice) or "").endswith("Settings")
                        and module != "settings"
                    ):
                        problems.append(f"{where}:{node.lineno} makes a settings StashKey")
                    if (
                        isinstance(node, ast.Attribute)
                        and node.attr == "get_closest_marker"
                        and (package.name, module) != ("core", "markers")
                    ):
                        problems.append(
                            f"{where}:{node.lineno} calls get_closest_marker (use the"
                            f" spec's mark_on)"
                        )
    assert not problems, "\n".join(problems)


def _root_conftest():
    import importlib.util

    spec = importlib.util.spec_from_file_location("_root_conftest", REPO / "conftest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_state_guard_lets_a_test_be_the_first_to_initialise_cuda():
    """Initialising CUDA cannot be undone: the first test that does it is compared with
    CUDA's defaults, so it passes unless it left a debug mode or device behind."""
    guard = _root_conftest()
    before = {guard.CUDA_INITIALISED: False}
    clean = {
        guard.CUDA_INITIALISED: True,
        "torch.cuda.get_rng_state_all()": [[1, 2]],
        "torch.cuda.get_sync_debug_mode()": 0,
        "torch.cuda.current_device()": 0,
    }
    guard._cuda_started(before, clean)
    assert before == clean  # nothing would be reported
    before, dirty = (
        {guard.CUDA_INITIALISED: False},
        dict(clean, **{"torch.cuda.current_device()": 1}),
    )
    guard._cuda_started(before, dirty)
    assert before["torch.cuda.current_device()"] == 0 != dirty["torch.cuda.current_device()"]


def _architecture_tables() -> dict[str, list[str]]:
    """docs/architecture.md's module tables: for each distribution (its section,
    ``### `pytest-torch-perf` ``), the name in the first cell of every row of its tables
    (a module by its dotted name in the package, ``engines.wall.timing``)."""
    doc = (REPO / "docs" / "architecture.md").read_text()
    tables: dict[str, list[str]] = {}
    sections = re.split(r"^(?=#{2,3} )", doc, flags=re.M)
    for section in sections:
        heading = re.match(r"### `(pytest-torch-[a-z]+)`\n", section)
        if heading:
            tables[heading.group(1)] = re.findall(r"^\| `([\w.]+)` \|", section, re.M)
    return tables


def test_every_module_is_named_in_the_architecture_table():
    """docs/architecture.md has a table per package with a row for every module of the
    package, so a newcomer finds where each thing lives (and a new module is placed in
    the doc); a module in a sub-package by its dotted name in the package
    (`engines.wall.timing`). tests/test_architecture_doc.py checks the other way: every
    row names a module that exists."""
    tables = _architecture_tables()
    missing = []
    for folder in FOLDERS:
        for package in sorted((folder / "src" / "pytest_torch").glob("*/")):
            rows = set(tables.get(folder.name, ()))
            for source in sorted(package.rglob("*.py")):
                if source.stem == "__init__":
                    continue
                name = ".".join(source.relative_to(package).with_suffix("").parts)
                if name not in rows:
                    missing.append(f"{folder.name}: {name}")
    assert not missing, f"docs/architecture.md's tables have no row for: {', '.join(missing)}"


def _sources():
    """Every module of every package's code, with its path from the repository root."""
    for folder in FOLDERS:
        for source in sorted((folder / "src").rglob("*.py")):
            yield source.relative_to(REPO), source.read_text()


#: what a module and a function may grow to (DESIGN.md: "500 at the very most, no
#: function over 80"); past that, split it along a seam: a helper, a module per concern
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80


def test_no_module_over_500_lines_and_no_function_over_80():
    import ast

    problems = []
    for path, text in _sources():
        lines = len(text.splitlines())
        if lines > MAX_MODULE_LINES:
            problems.append(f"{path}: module of {lines} lines (at most {MAX_MODULE_LINES})")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                assert node.end_lineno is not None
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    problems.append(
                        f"{path}:{node.lineno} {node.name} {length} lines"
                        f" (at most {MAX_FUNCTION_LINES})"
                    )
    assert not problems, "\n".join(problems)


def test_every_plugin_module_is_wiring_of_at_most_300_lines():
    """A plugin.py holds only pytest wiring; the work lives in plain modules."""
    plugins = [(path, text) for path, text in _sources() if path.name == "plugin.py"]
    assert len(plugins) == len([f for f in FOLDERS if (f / "src").exists()])
    problems = [
        f"{path}: {len(text.splitlines())} lines (at most 300)"
        for path, text in plugins
        if len(text.splitlines()) > 300
    ]
    assert not problems, "\n".join(problems)


def test_no_sub_package_shares_its_name_with_a_module_beside_it():
    """`perf/suites/` beside a `perf/suites.py` would leave one of them unimportable."""
    clashes = [
        str(init.parent.relative_to(REPO))
        for folder in FOLDERS
        for init in (folder / "src").rglob("__init__.py")
        if init.parent.with_suffix(".py").exists()
    ]
    assert not clashes, clashes


def _literal(tree: ast.Module, name: str) -> object:
    """The value of ``name = <literal>`` (annotated or not) at the top of a module."""
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if any(isinstance(t, ast.Name) and t.id == name for t in targets) and node.value:
            return ast.literal_eval(node.value)
    raise AssertionError(f"no plain `{name} = ...` literal")


def _type_checking_imports(tree: ast.Module) -> dict[str, str]:
    return {
        alias.name: str(statement.module)
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING")
        for statement in node.body
        if isinstance(statement, ast.ImportFrom)
        for alias in statement.names
        if alias.asname == alias.name
    }


def test_public_names_are_declared_once_and_the_root_says_the_same():
    """A package's public names are plain data in its `__init__` (`EXPORTS`, name ->
    module, and `__all__`) with the same `from M import N as N` lines under TYPE_CHECKING;
    the namespace root maps each to its distribution and imports it from its package
    for type checkers. Read from the source, with no part of the family imported."""
    core_src = REPO / "packages" / "pytest-torch-core" / "src"
    root_tree = ast.parse((core_src / "pytest_torch" / "__init__.py").read_text())
    root = _literal(root_tree, "DISTRIBUTIONS")
    assert isinstance(root, dict)
    assert _type_checking_imports(root_tree) == {
        name: distribution.replace("pytest-torch-", "pytest_torch.")
        for name, distribution in root.items()
    }, "the root's TYPE_CHECKING imports and DISTRIBUTIONS disagree"
    distributions = set()
    for init in sorted(REPO.glob("packages/*/src/pytest_torch/*/__init__.py")):
        package = f"pytest_torch.{init.parent.name}"
        distributions.add(init.parents[3].name)
        tree = ast.parse(init.read_text())
        own = _literal(tree, "EXPORTS")
        assert isinstance(own, dict), init
        assert _type_checking_imports(tree) == own, f"{init}: TYPE_CHECKING and EXPORTS disagree"
        assert sorted(_literal(tree, "__all__")) == sorted(own), f"{init}: __all__ and EXPORTS"
        from_root = sorted(name for name, d in root.items() if d == init.parents[3].name)
        assert from_root == sorted(own), f"{init}: the root re-exports {from_root}"
        src = init.parents[2]
        for name, module in own.items():
            assert module.startswith(f"{package}."), f"{init}: {name} is another package's"
            path = src / Path(*module.split("."))
            assert path.with_suffix(".py").exists() or (path / "__init__.py").exists(), module
            assert re.search(
                rf"^(class|def) {name}\b|^{name}\b", path.with_suffix(".py").read_text(), re.M
            ), f"{module} defines no {name}"
    assert set(root.values()) <= distributions, "the root names a distribution that does not exist"
