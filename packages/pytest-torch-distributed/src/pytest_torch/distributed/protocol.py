"""What the controller (the pytest process) and its ranks say to each other.

Each rank is a child process that reads :class:`Setup` once, then :class:`Run` per test
until :class:`Stop`; it answers with :class:`Ready` once its pytest session has
collected the tests it may be asked to run, then one :class:`Phase` per test phase as
it happens (so a rank that hangs or dies is known to be in setup, call or teardown) and
:class:`Done` when the test's teardown is over. On a second pair of pipes, served by a
thread of its own (so it answers while the test's thread waits in a collective), a
rank answers each :class:`Probe` with its :class:`~.collectives.Record`. Messages are
pickled over a pipe (``multiprocessing.connection``); nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pytest_torch.distributed.collectives import Record


@dataclass(frozen=True)
class Setup:
    """Everything a rank needs to join the pool and start its pytest session."""

    rank: int
    world_size: int
    backend: str
    #: the rank's device, "cpu" or e.g. "cuda:1"
    device: str
    store_host: str
    store_port: int
    threads: int
    #: the controller's command line (plugins, options) and the test ids this rank may
    #: be asked to run
    args: list[str]
    nodeids: list[str]
    sys_path: list[str]
    basetemp: str
    cache_dir: str
    #: faulthandler writes every thread's stack here on SIGUSR1
    stack_file: str
    #: pytest's fd capture writes the rank's output here during a test, so that what a
    #: rank wrote before it died (a C++ library's last words) can still be read
    capture_dir: str = ""


@dataclass(frozen=True)
class Run:
    seq: int
    nodeid: str
    #: the process group's own timeout, seconds
    timeout: float
    #: the test's own rendezvous (``MASTER_PORT`` during the test), for code that opens
    #: a process group itself with ``init_process_group()`` (0: none)
    store_port: int = 0
    #: the folder every rank of the test shares (``shared_tmp_path``)
    shared_dir: str = ""


@dataclass(frozen=True)
class Stop:
    pass


@dataclass(frozen=True)
class Ready:
    rank: int
    #: the thread that runs the tests (its stack is the one a person reads)
    main_thread: int
    #: test id -> ("skipped" or "error", why this rank could not collect it)
    missing: dict[str, tuple[str, str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Phase:
    """One phase's report, serialized by ``pytest_report_to_serializable``."""

    seq: int
    rank: int
    when: str
    outcome: str
    report: dict[str, Any]


@dataclass(frozen=True)
class RankWarning:
    """A warning a test raised in a rank, as text (its class may not be importable in
    the controller)."""

    category_module: str
    category_name: str
    message: str
    filename: str
    lineno: int


@dataclass(frozen=True)
class Done:
    seq: int
    rank: int
    #: what the test left changed in the rank (the pool is then replaced), or ""
    disturbed: str = ""
    #: the warnings the test raised in the rank
    warnings: tuple[RankWarning, ...] = ()


@dataclass(frozen=True)
class Probe:
    """Asks a rank for its record of the current (or last) test's collectives."""

    number: int
    #: with the test's line for each call (the first such read costs about a second)
    stacks: bool = False
    #: only the calls not completed yet
    active: bool = False


@dataclass(frozen=True)
class StackProbe:
    """Asks a rank for its main thread's Python stack, read by its probe thread (no
    signal: a ``faulthandler`` dump from a signal handler can crash a process whose
    native threads are busy)."""

    number: int


@dataclass(frozen=True)
class Stacked:
    """A rank's answer to the stack probe of that ``number``: (file, line, function) of
    each frame of its main thread, outermost first."""

    number: int
    frames: tuple[tuple[str, int, str], ...]


@dataclass(frozen=True)
class Recorded:
    """A rank's answer to the probe of that ``number``."""

    number: int
    record: Record


@dataclass(frozen=True)
class Broken:
    """The rank cannot go on (its session failed to start, a message it cannot read)."""

    rank: int
    text: str
