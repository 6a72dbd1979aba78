"""torch.compile's trace logger stays out of pytest's captured logs."""

from __future__ import annotations

import logging

from pytest_torch.core.torch_logs import TRACE_LOGGER, detach_capture_handlers


def test_a_compiled_failure_shows_the_users_log_not_torchs_trace_records(pytester):
    pytester.makepyfile(
        """
        import logging

        import torch

        def test_compiled():
            logging.getLogger("users.own").warning("the user's own line")
            double = torch.compile(lambda x: (x * 2).sin(), backend="eager")
            double(torch.ones(8))
            assert False
        """
    )
    result = pytester.runpytest("-p", "torch_core", "-p", "no:randomly")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*Captured log call*", "WARNING *users.own*the user's own line"])
    assert TRACE_LOGGER not in result.stdout.str()


def test_only_the_handlers_the_root_logger_shares_come_off():
    logger = logging.getLogger(TRACE_LOGGER)
    own, shared = logging.NullHandler(), logging.NullHandler()
    root = logging.getLogger()
    logger.addHandler(own)
    logger.addHandler(shared)
    root.addHandler(shared)
    try:
        detach_capture_handlers()
        assert own in logger.handlers  # TORCH_TRACE's handler is torch's own
        assert shared not in logger.handlers
        assert shared in root.handlers
    finally:
        logger.removeHandler(own)
        root.removeHandler(shared)
