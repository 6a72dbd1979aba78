"""torch.compile's structured-trace logger kept out of pytest's log capture.

pytest attaches its capture handlers to every logger that does not propagate, and
``torch.__trace`` is one: it never propagates, is always at DEBUG, and its records carry
a payload for ``TORCH_TRACE`` files (tlparse), not a message. Captured, each compile adds
dozens of empty ``DEBUG torch.__trace`` lines to a failing test's report, and torch, which
builds a trace payload whenever that logger has a handler, builds them all for nothing.
"""

from __future__ import annotations

import logging

TRACE_LOGGER = "torch.__trace"


def detach_capture_handlers() -> None:
    """Take the handlers the root logger also has (pytest's capture, a user's logging
    setup: none of them would get these records from torch's own design) off torch's
    trace logger; its own handler (``TORCH_TRACE``) stays. pytest removes its handlers
    at the end of each phase, so there is nothing to undo."""
    logger = logging.Logger.manager.loggerDict.get(TRACE_LOGGER)
    if not isinstance(logger, logging.Logger):
        return  # torch.compile was never imported
    shared = logging.getLogger().handlers
    for handler in [h for h in logger.handlers if h in shared]:
        logger.removeHandler(handler)
