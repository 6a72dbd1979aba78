"""The emulated accelerator's switch: never loaded without ``--emulated-accelerator``,
a missing compiler skips its tests with the reason, its build reused by content."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
EMULATOR = REPO / "tests" / "emulator"


def _build_module():
    spec = importlib.util.spec_from_file_location("_emulator_build_test", EMULATOR / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_without_its_option_the_emulator_is_never_loaded():
    assert "pytest_torch_emulator" not in sys.modules
    current = torch.accelerator.current_accelerator()
    assert current is None or current.type != "emu"
    assert not any(
        "pytest-torch/emulator" in p for p in os.environ.get("PYTHONPATH", "").split(":")
    )


def test_without_a_compiler_the_accelerator_tests_skip_saying_why(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_XDIST_WORKER"}
    env.update(CXX=str(tmp_path / "no-such-compiler"), PYTEST_TORCH_EMULATOR_CACHE=str(tmp_path))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--emulated-accelerator", "-p", "no:randomly",
         "-p", "no:xdist", "-p", "no:cacheprovider", "-rs", "-q",
         "packages/pytest-torch-core/tests/test_peaks.py"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 skipped" in result.stdout, result.stdout
    assert (
        "needs an accelerator; the emulated one could not be built: the emulated accelerator"
        " is built from C++ on first use and needs a C++ compiler (g++ or clang++, or $CXX)"
        " and ninja (`pip install ninja`); not found: $CXX=" in result.stdout
    ), result.stdout


def test_the_build_is_found_by_its_content_not_its_file_times(tmp_path, monkeypatch):
    compiler = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if compiler is None:
        pytest.skip("needs a C++ compiler to key a build")
    build = _build_module()
    source = tmp_path / "backend.cpp"
    source.write_text("// one\n")
    monkeypatch.setattr(build, "SOURCE", source)
    first = build._build_key(compiler)
    os.utime(source, (1, 1))  # an old file time: a fresh checkout's, say
    assert build._build_key(compiler) == first
    source.write_text("// two\n")
    assert build._build_key(compiler) != first
