"""tox's inline plugin for this repository: keep a full run inside the disk it has.

Every test environment holds its own copy of torch (about 0.9 GB), so the thirteen
environments of a full ``tox`` run need over 12 GB when all are kept. When, after an
environment has run, the disk holding it has less than ``TOX_KEEP_ENVS_ABOVE_GIB``
(default 8) GiB free, its folder is removed: the next environment has the room it needs,
and a later run of that environment installs it again (about 30 s).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from tox.plugin import impl
from tox.tox_env.api import ToxEnv

GIB = 1024**3


def keep_above_bytes() -> float:
    raw = os.environ.get("TOX_KEEP_ENVS_ABOVE_GIB", "8")
    try:
        return float(raw) * GIB
    except ValueError:
        message = f"TOX_KEEP_ENVS_ABOVE_GIB={raw!r}: expected a number of GiB, e.g. 8"
        raise SystemExit(message) from None


@impl
def tox_env_teardown(tox_env: ToxEnv) -> None:
    env_dir = Path(tox_env.env_dir)
    if not env_dir.is_dir():
        return
    free = shutil.disk_usage(env_dir).free
    threshold = keep_above_bytes()
    if free >= threshold:
        return
    shutil.rmtree(env_dir, ignore_errors=True)
    print(
        f"{tox_env.name}: removed {env_dir} after its run: {free / GIB:.1f} GiB free on its disk,"
        f" under {threshold / GIB:g} GiB (TOX_KEEP_ENVS_ABOVE_GIB); the next run installs it again"
    )
