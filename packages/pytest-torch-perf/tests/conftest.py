from __future__ import annotations

import torch
import torch._dynamo

# torch.compile's machinery, which benchmark suites load, is loaded here, once: in-process pytester
# runs drop the modules a run imported, and it cannot be imported twice in one process
# (numpy, torch and the `run` fixture come from the conftest.py at the repository's root,
# which this package's sdist ships at its own root).
torch._dynamo.list_backends()
torch.compile(torch.nn.Linear(2, 2), backend="eager")(torch.ones(1, 2))
