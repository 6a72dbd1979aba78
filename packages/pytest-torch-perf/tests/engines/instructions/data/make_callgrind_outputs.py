"""Re-make the recorded Callgrind outputs the instruction-count tests read.

    valgrind --tool=callgrind --instr-atstart=no --collect-atstart=no --dump-line=no \
        --callgrind-out-file=/tmp/cg/callgrind.%p python make_callgrind_outputs.py /tmp/cg

then gzip the two newest files to ``mlp-10-calls.callgrind.gz`` and
``mlp-11-calls.callgrind.gz``: ten and eleven calls of a 3-layer 64-wide MLP on one
thread, in inference mode, counted after two warm-up runs (torch 2.13.0 CPU, Python
3.11, Valgrind 3.19.0).
"""

import sys

import torch

from pytest_torch.perf.engines.instructions import client_requests

torch.set_num_threads(1)
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(64, 64),
    torch.nn.ReLU(),
    torch.nn.Linear(64, 64),
    torch.nn.ReLU(),
    torch.nn.Linear(64, 64),
)
x = torch.randn(8, 64)


def work(calls: int) -> None:
    for _ in range(calls):
        model(x)


assert client_requests.running_on_valgrind(), "run me under valgrind (see the docstring)"
client_requests.start_instrumentation()
with torch.inference_mode():
    for calls in (10, 11):
        work(calls)
        work(calls)
        client_requests.toggle_collect()
        work(calls)
        client_requests.toggle_collect()
        client_requests.dump_stats(f"mlp-{calls}-calls")
client_requests.stop_instrumentation()
print(f"written under {sys.argv[1]}")
