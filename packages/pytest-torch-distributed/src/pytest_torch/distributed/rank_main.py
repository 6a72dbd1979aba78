"""A rank's process: ``python -c "...rank_main import main; main()" IN OUT PARENT``.

It reads its :class:`~.protocol.Setup` from the pipe ``IN``, makes sure it cannot
outlive pytest, arranges for its stacks to be written where the controller reads them,
sets the torchrun environment contract, and runs its pytest session
(:mod:`.rank_session`) until told to stop.
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
    inbox_fd, outbox_fd, parent = (int(arg) for arg in sys.argv[1:4])
    from pytest_torch.distributed.processes import die_with_parent

    die_with_parent(parent)
    inbox = Connection(inbox_fd, writable=False)
    outbox = Connection(outbox_fd, readable=False)
    from pytest_torch.distributed import protocol as msg

    setup = inbox.recv()
    assert isinstance(setup, msg.Setup)
    # pytest's capture takes over fd 2 during a test: a crash's stack goes to a copy of
    # the real one, the rank's log, which the controller shows when the rank dies
    crash_log = os.fdopen(os.dup(2), "w", buffering=1)
    faulthandler.enable(file=crash_log, all_threads=True)
    stacks = open(setup.stack_file, "a", buffering=1)  # noqa: SIM115 - open for the process
    faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)
    os.environ.update(
        RANK=str(setup.rank),
        LOCAL_RANK=str(setup.rank),
        WORLD_SIZE=str(setup.world_size),
        LOCAL_WORLD_SIZE=str(setup.world_size),
        GROUP_RANK="0",
        MASTER_ADDR=setup.store_host,
        MASTER_PORT=str(setup.store_port),
        OMP_NUM_THREADS=str(setup.threads),
    )
    sys.path[:] = setup.sys_path
    try:
        from pytest_torch.distributed.rank_session import run_session

        code = run_session(setup, inbox, outbox)
    except BaseException:
        text = traceback.format_exc()
        sys.stderr.write(text)
        with contextlib.suppress(OSError):
            outbox.send(msg.Broken(setup.rank, text))
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
