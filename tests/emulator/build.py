"""Build the test suite's emulated accelerator once per machine, and say where it is.

``site_folder()`` returns a folder to put on ``sys.path`` (and ``PYTHONPATH``, for
subprocesses and xdist workers) that holds the package ``pytest_torch_emulator``
(``device.py`` as its ``__init__.py`` beside the compiled ``_C`` extension built from
``backend.cpp``) and a ``pytest_torch_emulator-0.0.0.dist-info`` whose
``entry_points.txt`` declares the ``torch.backends`` entry point, so that
``import torch`` loads the emulated accelerator in any process that has the folder
on its path.

The folder lives in a cache, ``$PYTEST_TORCH_EMULATOR_CACHE``, else
``$XDG_CACHE_HOME/pytest-torch/emulator``, else ``~/.cache/pytest-torch/emulator``,
named after a hash of everything the binary depends on: the sources, the compile
flags, torch's version and commit, the Python version and platform, and the
compiler's ``--version``. File times play no part, so a fresh checkout reuses the
build and any change to an input builds anew. A build happens in a temporary folder
beside the final one and is renamed into place, and builders take a lock on the
cache, so concurrent processes (xdist workers, parallel CI jobs) build it once: the
others wait and find it.

Run as a script it builds (or reuses) the folder and prints it and the time taken.

This file imports only the standard library at its top: it runs before torch is
imported, and reads torch's version without importing it.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

__all__ = ["EmulatorBuildError", "EmulatorUnavailable", "cache_root", "site_folder"]

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "backend.cpp"
DEVICE_MODULE = HERE / "device.py"

PACKAGE = "pytest_torch_emulator"
EXTENSION = "_C"
DIST_INFO = f"{PACKAGE}-0.0.0.dist-info"

# -O1 builds in about the time of -O0 (16 s against 14 s on two cores) and its glue
# (the fallback's bookkeeping, copies, allocation) runs twice as fast; -O2 builds
# slower again for no gain the tests can see. The measurements are in README.md.
COMPILE_FLAGS = ("-O1",)

# Bumped when the layout of the site folder changes, so that old folders are not reused.
LAYOUT_VERSION = "1"

ENTRY_POINTS = f"[torch.backends]\nemu = {PACKAGE}:autoload\n"
METADATA = (
    "Metadata-Version: 2.1\n"
    "Name: pytest-torch-emulator\n"
    "Version: 0.0.0\n"
    "Summary: The emulated accelerator of the pytest-torch test suite (test-only)\n"
)

_OUTPUT_TAIL = 6000  # characters of compiler output kept in a build error


class EmulatorUnavailable(RuntimeError):
    """The emulated accelerator cannot be built here: a tool it needs is missing."""


class EmulatorBuildError(RuntimeError):
    """Compiling the emulated accelerator failed; the message ends with the compiler's output."""


def cache_root() -> Path:
    """The folder that holds the built site folders (and the builders' lock)."""
    explicit = os.environ.get("PYTEST_TORCH_EMULATOR_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "pytest-torch" / "emulator"


def site_folder() -> Path:
    """Return the site folder of the emulated accelerator, building it on first use.

    Raises EmulatorUnavailable when no C++ compiler or no ninja is found, and
    EmulatorBuildError when compiling fails.
    """
    compiler = _find_compiler()
    root = cache_root()
    target = root / f"site-{_build_key(compiler)}"
    if target.is_dir():
        return target
    ninja = _find_ninja()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not target.is_dir():  # another process may have built it meanwhile
                _remove_abandoned_builds(root)
                _build(target, compiler, ninja)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return target


def _missing(what: str) -> EmulatorUnavailable:
    return EmulatorUnavailable(
        "the emulated accelerator is built from C++ on first use and needs a C++ "
        "compiler (g++ or clang++, or $CXX) and ninja (`pip install ninja`); "
        f"not found: {what}"
    )


def _find_compiler() -> str:
    """The compiler torch's extension builder will use: $CXX, else c++, g++ or clang++."""
    explicit = os.environ.get("CXX")
    if explicit:
        if shutil.which(explicit) is None:
            raise _missing(f"$CXX={explicit!r}")
        return explicit
    for name in ("c++", "g++", "clang++"):
        if shutil.which(name) is not None:
            return name
    raise _missing("a C++ compiler (c++, g++, clang++ on PATH)")


def _find_ninja() -> Path:
    """Ninja's folder: on PATH, or beside this Python (a venv's `pip install ninja`)."""
    found = shutil.which("ninja")
    if found is None:
        found = shutil.which("ninja", path=str(Path(sys.executable).parent))
    if found is None:
        raise _missing("ninja (on PATH or beside the Python interpreter)")
    return Path(found).parent


def _torch_version() -> tuple[str, str]:
    """torch's version and commit, without importing torch when it is not imported yet."""
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "version"):
        return str(torch.__version__), str(torch.version.git_version)
    spec = importlib.util.find_spec("torch")
    for location in (spec.submodule_search_locations or []) if spec else []:
        version_file = Path(location) / "version.py"
        if version_file.is_file():
            namespace: dict[str, object] = {}
            exec(compile(version_file.read_text(), str(version_file), "exec"), namespace)
            return str(namespace["__version__"]), str(namespace["git_version"])
    raise EmulatorUnavailable("the emulated accelerator needs torch, which is not installed")


def _compiler_version(compiler: str) -> str:
    try:
        result = subprocess.run(
            [compiler, "--version"], capture_output=True, text=True, check=False, timeout=60
        )
    except OSError as error:
        raise _missing(f"a working C++ compiler ({compiler}: {error})") from error
    return result.stdout + result.stderr


def _build_key(compiler: str) -> str:
    digest = hashlib.sha256()
    parts = (
        LAYOUT_VERSION,
        SOURCE.read_bytes(),
        DEVICE_MODULE.read_bytes(),
        repr(COMPILE_FLAGS),
        *_torch_version(),
        sys.version,
        sys.implementation.cache_tag or "",
        sysconfig.get_platform(),
        sysconfig.get_config_var("EXT_SUFFIX") or "",
        _compiler_version(compiler),
    )
    for part in parts:
        data = part if isinstance(part, bytes) else part.encode()
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()[:20]


def _remove_abandoned_builds(root: Path) -> None:
    """Temporary folders of builds that were killed; only called under the lock."""
    for leftover in root.glob(".build-*"):
        shutil.rmtree(leftover, ignore_errors=True)


# Runs in a separate interpreter: building with torch.utils.cpp_extension.load also
# imports the extension, and the extension registers the backend with torch, which
# must happen once per process and only in processes that asked for it.
# Only the error's message is printed on failure: it holds the compiler's output,
# which a traceback would push out of the tail that the build error keeps.
_BUILD_SCRIPT = """
import sys
from torch.utils.cpp_extension import load
try:
    load(
        name=sys.argv[1],
        sources=[sys.argv[2]],
        build_directory=sys.argv[3],
        extra_cflags=sys.argv[4:],
        with_cuda=False,
        verbose=False,
    )
except Exception as error:
    sys.exit(f"{type(error).__name__}: {error}")
"""


def _build(target: Path, compiler: str, ninja: Path) -> None:
    scratch = Path(tempfile.mkdtemp(prefix=".build-", dir=target.parent))
    try:
        build_directory = scratch / "build"
        build_directory.mkdir()
        _compile(build_directory, compiler, ninja)
        site = scratch / "site"
        package = site / PACKAGE
        package.mkdir(parents=True)
        shutil.copyfile(DEVICE_MODULE, package / "__init__.py")
        for binary in build_directory.glob(f"{EXTENSION}*.so"):
            shutil.copyfile(binary, package / binary.name)
        dist_info = site / DIST_INFO
        dist_info.mkdir()
        (dist_info / "METADATA").write_text(METADATA)
        (dist_info / "entry_points.txt").write_text(ENTRY_POINTS)
        (dist_info / "top_level.txt").write_text(f"{PACKAGE}\n")
        os.replace(site, target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _compile(build_directory: Path, compiler: str, ninja: Path) -> None:
    environment = dict(os.environ)
    environment.update(
        CXX=compiler,
        PATH=f"{ninja}{os.pathsep}{environment.get('PATH', '')}",
        # An emulator already on PYTHONPATH must not load beside the one being built.
        TORCH_DEVICE_BACKEND_AUTOLOAD="0",
    )
    command = [
        sys.executable,
        "-c",
        _BUILD_SCRIPT,
        EXTENSION,
        str(SOURCE),
        str(build_directory),
        *COMPILE_FLAGS,
    ]
    result = subprocess.run(command, env=environment, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        output = (result.stdout + result.stderr).strip()
        raise EmulatorBuildError(
            f"building the emulated accelerator from {SOURCE} failed "
            f"(exit status {result.returncode}); the end of the build's output:\n"
            + output[-_OUTPUT_TAIL:]
        )
    if not any(build_directory.glob(f"{EXTENSION}*.so")):
        raise EmulatorBuildError(
            f"building the emulated accelerator produced no {EXTENSION}*.so in {build_directory}"
        )


def main() -> int:
    start = time.perf_counter()
    try:
        folder = site_folder()
    except (EmulatorUnavailable, EmulatorBuildError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(folder)
    print(f"ready in {time.perf_counter() - start:.2f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
