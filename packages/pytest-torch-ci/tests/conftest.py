from __future__ import annotations

import contextlib

import matplotlib.backends.backend_agg
import matplotlib.figure  # noqa: F401
import torch


# torch and matplotlib are imported here, once: in-process pytester runs drop the
# modules a run imported, and torch cannot be imported twice in one process. What the
# plugin touches lazily (torch.save/load, a failing torch.testing comparison, a drawing)
# is exercised once here for the same reason.
def _load_lazy_modules() -> None:
    import io
    import tempfile
    from pathlib import Path

    from pytest_torch.ci.heatmaps import draw

    buffer = io.BytesIO()
    torch.save({"x": torch.ones(1)}, buffer)
    buffer.seek(0)
    torch.load(buffer)
    with contextlib.suppress(AssertionError):
        torch.testing.assert_close(torch.ones(2), torch.zeros(2))
    with tempfile.TemporaryDirectory() as folder:
        draw(torch.ones(2, 2), torch.zeros(2, 2), Path(folder) / "warm.png", name="warm-up")


_load_lazy_modules()
