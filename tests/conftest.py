from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy  # noqa: F401
import pytest
import torch  # noqa: F401

# torch and numpy are imported here, once: in-process pytester runs drop the modules a
# run imported, and these two cannot be imported twice in one process.

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def run_python(tmp_path):
    """Run Python in a fresh process, in tmp_path, with a controlled environment."""

    def _run(
        code: str, *, autoload: bool = True, check: bool = True
    ) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
        if not autoload:
            env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
        result = subprocess.run(
            [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True
        )
        if check and result.returncode not in (0, 5):
            raise AssertionError(f"exit {result.returncode}\n{result.stdout}\n{result.stderr}")
        return result

    return _run
