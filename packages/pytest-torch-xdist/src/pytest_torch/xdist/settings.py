"""The xdist options of a session and this process's place in the run, read once at
start-up (``options.read_settings``) and never changed, kept in
``config.stash[settings_key]``; what :mod:`.workers` decides and changes from them is in
``state``. Nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest


@dataclass(frozen=True)
class XdistSettings:
    """The xdist options of a session, and this process's place in the run."""

    #: --torch-num-threads: "auto", "none" or a count
    threads: str | int
    #: how many workers the run has (0 without xdist)
    workers: int
    #: this worker's number, None outside workers
    worker: int | None
    #: --torch-xdist-gpus as given (None: not given), checked against the machine later
    gpus: object = None
    #: --torch-gpu-memory-fraction: "auto", a fraction, or None
    fraction: float | str | None = None
    #: pytest-xdist's --tx specs
    tx_specs: tuple[str, ...] = ()
    #: where the GPU options came from (the flag, or the ini name and file), for error
    #: messages; set by ``options.read_settings``
    gpus_source: str = ""
    fraction_source: str = ""


settings_key = pytest.StashKey[XdistSettings]()
