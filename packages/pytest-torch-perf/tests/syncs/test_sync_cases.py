"""The question asked of real code: would this synchronise if the tensors lived on a GPU?
(training steps, moves, printing, data loaders, threads, and CUDA's own check)."""

from __future__ import annotations

import inspect
import os

import pytest
import torch

from pytest_torch.perf import assert_no_host_sync, find_host_syncs

# these tests draw from the global random generators; torch_seed restores them
pytestmark = pytest.mark.usefixtures("torch_seed")


def line_of(fn, text: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


# --- the question asked: would this synchronise if the tensors lived on a GPU? ---


def events_of(fn, *args):
    return [(e.title(), e.lineno) for e in find_host_syncs(fn, *args)[1]]


class Positional(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("pe", torch.randn(1, 64, 8))

    def forward(self, x):
        return x + self.pe[:, : x.shape[1]].to(x.device)


def test_sync_free_training_steps_are_not_flagged():
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    x, y = torch.randn(6, 8), torch.randint(0, 4, (6,))
    for optimizer in (
        torch.optim.Adam(model.parameters(), foreach=False),
        torch.optim.Adam(model.parameters(), foreach=True),
        torch.optim.AdamW(model.parameters()),
        torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
    ):

        def step(optimizer=optimizer):
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            return loss.detach()

        assert events_of(step) == []  # the first step creates the step counters
        assert events_of(step) == []  # later steps read them


def test_same_device_moves_and_host_tensors_by_design_are_not_syncs():
    assert events_of(Positional(), torch.randn(2, 5, 8)) == []
    x = torch.randn(4)
    device = x.device
    assert events_of(lambda: (x.to(device), x.to(x.device), torch.zeros(3, device=device))) == []
    index = torch.randint(0, 10, (8,))
    assert events_of(lambda: torch.nn.functional.one_hot(index, num_classes=10)) == []
    assert events_of(lambda: torch.zeros(3).sum().item()) == []  # made on the host, read there
    assert events_of(lambda: torch.linalg.inv_ex(torch.eye(3) + x[0])) == []


def sample(probs):
    return torch.multinomial(probs, 1)


def test_syncs_inside_ops_and_kernels_are_found_with_the_call_that_caused_them():
    probs = torch.softmax(torch.randn(2, 5), -1)
    a = torch.eye(3) * 2 + torch.randn(3, 3) * 0.1
    index = torch.randint(0, 10, (8,))

    def code():
        torch.nn.functional.one_hot(index)  # no num_classes: the maximum is read
        torch.linalg.inv(a)
        torch.linalg.cholesky(a @ a.T)
        return sample(probs)

    assert events_of(code) == [
        ("torch.nn.functional.one_hot → item", line_of(code, "one_hot(index)")),
        ("torch.linalg.inv → linalg check", line_of(code, "linalg.inv(")),
        ("torch.linalg.cholesky → linalg check", line_of(code, "cholesky(")),
        ("multinomial", line_of(sample, "torch.multinomial")),
    ]


def test_printing_formatting_and_building_tensors_from_device_values_are_found():
    import io
    import logging

    loss = torch.randn(())
    h = torch.randn(3)
    logger = logging.getLogger("pytest_torch.test")
    logger.addHandler(logging.StreamHandler(io.StringIO()))
    logger.setLevel(logging.INFO)

    def code():
        print(h, file=io.StringIO())
        text = f"{loss:.3f}"
        logger.info("loss %s", h)
        pair = torch.tensor([loss, loss])
        constant = torch.tensor([1.0, 2.0], device=h.device)
        clean = torch.stack([loss, loss]) + torch.full((2,), 1.0, device=h.device)
        masked = h.clone()
        masked[masked > 0] = 0  # a Python scalar: index_put_ becomes masked_fill_, no sync
        masked[masked < 0] = h.mean()  # a device value: the mask becomes indices
        return text, pair, constant, clean, masked

    assert events_of(code) == [
        ("print", line_of(code, "print(h")),
        ("item", line_of(code, 'f"{loss')),
        ("logger.info → print", line_of(code, "logger.info")),
        ("torch.tensor → item", line_of(code, "pair =")),
        ("torch.tensor → to(device)", line_of(code, "constant =")),
        ("boolean mask indexing", line_of(code, "masked[masked < 0] = h.mean()")),
    ]


def test_a_value_moved_to_the_host_on_purpose_costs_one_sync():
    x = torch.randn(5)
    assert events_of(lambda: x.sum().cpu().item() + x.max().to("cpu").item()) == [
        ("cpu", line_of(test_a_value_moved_to_the_host_on_purpose_costs_one_sync, "cpu().item")),
        (
            "to(cpu)",
            line_of(test_a_value_moved_to_the_host_on_purpose_costs_one_sync, "cpu().item"),
        ),
    ]
    assert torch.equal(x, x)  # the tensor moved "to the host" is still x's value


def test_batches_from_a_data_loader_live_on_the_host_until_moved():
    from torch.utils.data import DataLoader, TensorDataset

    model = torch.nn.Linear(4, 2)
    device = next(model.parameters()).device
    loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 2)), batch_size=4)

    def epoch():
        for x, y in loader:
            x, y = x.to(device), y.to(device)  # a blocking copy to the GPU each
            model(x)

    def epoch_pinned():
        for x, _ in loader:
            model(x.to(device, non_blocking=True))

    _, events = find_host_syncs(epoch)
    assert [(e.operation, e.count, e.lineno) for e in events] == [
        ("to(device)", 8, line_of(epoch, "x.to(device)"))
    ]
    assert find_host_syncs(epoch_pinned)[1] == []


def test_host_indices_packed_sequences_and_ctc_lengths():
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

    h = torch.randn(3, 5, 8)
    lengths = torch.tensor([5, 3, 2])
    gru = torch.nn.GRU(8, 4, batch_first=True)

    def last_tokens():
        a = h[:, [-1], :]  # a Python list index is copied to the device
        b = h[torch.arange(3), lengths - 1]  # arange without device=: made on the host
        return a, b, h[:, -1:, :], h[torch.arange(3, device=h.device), lengths - 1]

    def packed(x):
        out, _ = gru(pack_padded_sequence(x, lengths.cpu(), batch_first=True))
        out, out_lengths = pad_packed_sequence(out, batch_first=True)
        return out_lengths.tolist()  # the lengths come back on the host by design

    log_probs = torch.randn(6, 2, 5).log_softmax(-1)
    targets = torch.randint(1, 5, (2, 3))

    def ctc():
        sizes = torch.full((2,), 6, device=h.device), torch.full((2,), 3, device=h.device)
        return torch.nn.functional.ctc_loss(log_probs, targets, *sizes)

    assert events_of(last_tokens) == [
        ("host index", line_of(last_tokens, "a = h[")),
        ("host index", line_of(last_tokens, "b = h[")),
    ]
    assert events_of(packed, h) == [("cpu", line_of(packed, "lengths.cpu()"))]
    assert events_of(ctc) == [("torch.nn.functional.ctc_loss → to(cpu)", line_of(ctc, "ctc_loss("))]


def test_a_sync_inside_an_installed_library_is_shown_at_the_users_line(tmp_path, monkeypatch):
    import importlib

    library = tmp_path / "site-packages" / "metriclib"
    library.mkdir(parents=True)
    (library / "__init__.py").write_text(
        "def update(total, x):\n    return total + x.sum().item()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path / "site-packages"))
    metriclib = importlib.import_module("metriclib")
    x = torch.randn(4)

    def step():
        return metriclib.update(0.0, x)

    (event,) = find_host_syncs(step)[1]
    assert (event.lineno, event.via, event.title()) == (
        line_of(step, "metriclib.update"),
        f"metriclib{os.sep}__init__.py:2",
        "metriclib.update → item",
    )
    assert f"(in metriclib{os.sep}__init__.py:2)" in event.describe()
    with pytest.raises(AssertionError, match=r"To accept a known one: allow=\('item',\)\."):
        assert_no_host_sync(step)


def test_checks_in_two_threads_at_once_each_see_their_own_syncs():
    import threading
    import warnings

    filters = list(warnings.filters)
    x = torch.randn(4)
    results: dict[str, list] = {}

    def check(name, code):
        results[name] = [e.operation for e in find_host_syncs(code)[1]]

    threads = [
        threading.Thread(target=check, args=("item", lambda: [x.sum().item() for _ in range(200)])),
        threading.Thread(target=check, args=("clean", lambda: [x * 2 for _ in range(200)])),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == {"item": ["item"], "clean": []}
    assert "item" not in vars(torch.Tensor)
    assert warnings.filters == filters  # restored, whatever the order the threads ran in


def test_an_op_run_on_another_thread_is_shown_where_the_checked_call_waits():
    import sys
    import threading

    from pytest_torch.perf.syncs.recorder import Recorder

    recorder = Recorder()  # made on this thread, as find_host_syncs makes it

    go = threading.Event()

    def op_on_a_device_thread():
        go.wait()
        recorder.add("nonzero", sys._getframe(), "cuda")

    def checked_call():  # autograd runs CUDA backward ops on its own device threads
        worker = threading.Thread(target=op_on_a_device_thread)
        worker.start()
        go.set() or worker.join()  # one line: the worker runs while this thread is on it

    checked_call()
    (record,) = recorder.pending
    assert record.site.lineno == line_of(checked_call, "worker.join()")


def test_cudas_own_check_is_armed_only_where_cuda_is_in_use_and_restored(monkeypatch):
    calls: list = []
    monkeypatch.setattr(torch.cuda, "get_sync_debug_mode", lambda: 0)
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", calls.append)
    x = torch.randn(3)

    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    find_host_syncs(lambda: x.sum().item())
    assert calls == []  # CPU-only code: CUDA is neither armed nor initialised

    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    find_host_syncs(lambda: x.sum().item())
    assert calls == ["warn", 0]  # armed for the call, then put back


@pytest.mark.cuda(reason="the host-sync check arms CUDA's own sync debug mode")
def test_cudas_own_check_is_armed_when_the_call_itself_starts_cuda(pytester):
    pytester.makepyfile(
        """
        import torch
        from pytest_torch.perf import find_host_syncs

        def test_it():
            assert not torch.cuda.is_initialized()
            x = torch.randn(64)
            _, events = find_host_syncs(lambda: (x.cuda() * 2).sum().item())
            found = {(e.operation, e.confirmed) for e in events}
            assert ("item", True) in found, found
            assert torch.cuda.get_sync_debug_mode() == 0
        """
    )
    pytester.runpytest_subprocess("-p", "no:randomly").assert_outcomes(passed=1)


@pytest.mark.cuda(reason="the host-sync check arms CUDA's own sync debug mode")
def test_a_sync_free_cuda_training_step_passes_and_allow_names_work_on_cuda():
    """The real thing on a GPU: an optimizer step with clip_grad_norm_ raises nothing
    (CUDA's own check armed too), and allow= accepts a known .item() there."""
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)
    ).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batch = torch.linspace(-1, 1, 8 * 32, device="cuda").reshape(8, 32)
    target = torch.arange(8, device="cuda") % 4

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(batch), target)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return loss.detach()

    step()  # optimizer state made outside the checked call, as in a training loop
    assert_no_host_sync(step)
    assert_no_host_sync(lambda: step().item(), allow="item")
    with pytest.raises(AssertionError, match=r"item \[cuda\]"):
        assert_no_host_sync(lambda: step().item())
