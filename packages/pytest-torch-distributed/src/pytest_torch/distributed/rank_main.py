"""A rank's process: ``python -c "...rank_main import main; main()" IN OUT PROBE_IN
PROBE_OUT PARENT``.

It reads its :class:`~.protocol.Setup` from the pipe ``IN``, makes sure it cannot
outlive pytest, arranges for its stacks to be written where the controller reads them,
sets the torchrun environment contract (:func:`torchrun_environment`), and runs its
pytest session (:mod:`.rank_session`) until told to stop; its probes come on
``PROBE_IN`` and are answered on ``PROBE_OUT``.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import sys
import traceback
from multiprocessing.connection import Connection


def main() -> None:
    inbox_fd, outbox_fd, probe_in_fd, probe_out_fd, parent = (int(a) for a in sys.argv[1:6])
    from pytest_torch.distributed.processes import die_with_parent

    die_with_parent(parent)
    inbox = Connection(inbox_fd, writable=False)
    outbox = Connection(outbox_fd, readable=False)
    probes = (Connection(probe_in_fd, writable=False), Connection(probe_out_fd, readable=False))
    from pytest_torch.distributed import protocol as msg

    setup = inbox.recv()
    assert isinstance(setup, msg.Setup)
    # pytest's capture takes over fd 2 during a test: a crash's stack goes to a copy of
    # the real one, the rank's log, which the controller shows when the rank dies
    crash_log = os.fdopen(os.dup(2), "w", buffering=1)
    faulthandler.enable(file=crash_log, all_threads=True)
    stacks = open(setup.stack_file, "a", buffering=1)  # noqa: SIM115 - open for the process
    faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)
    os.environ.update(torchrun_environment(setup, parent))
    os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")  # as torchrun does
    sys.path[:] = setup.sys_path
    try:
        from pytest_torch.distributed.rank_session import run_session

        code = run_session(setup, inbox, outbox, probes)
    except BaseException:
        text = traceback.format_exc()
        sys.stderr.write(text)
        with contextlib.suppress(OSError):
            outbox.send(msg.Broken(setup.rank, text))
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def torchrun_environment(setup: object, parent: int) -> dict[str, str]:
    """What torchrun's agent sets in each worker, for a pool of one node whose agent is
    the pytest process: ``is_torchelastic_launched()`` is true, and
    ``init_process_group()`` with the default ``env://`` joins the store the pool's
    controller hosts (``TORCHELASTIC_USE_AGENT_STORE``), as under torchrun."""
    from pytest_torch.distributed import protocol as msg

    assert isinstance(setup, msg.Setup)
    rank, world = str(setup.rank), str(setup.world_size)
    return {
        "RANK": rank,
        "LOCAL_RANK": rank,
        "GROUP_RANK": "0",
        "ROLE_RANK": rank,
        "ROLE_NAME": "default",
        "WORLD_SIZE": world,
        "LOCAL_WORLD_SIZE": world,
        "GROUP_WORLD_SIZE": "1",
        "ROLE_WORLD_SIZE": world,
        "MASTER_ADDR": setup.store_host,
        "MASTER_PORT": str(setup.store_port),
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_RUN_ID": f"pytest-torch-{parent}-{setup.store_port}",
        "TORCHELASTIC_USE_AGENT_STORE": "True",
        "OMP_NUM_THREADS": str(setup.threads),
    }
