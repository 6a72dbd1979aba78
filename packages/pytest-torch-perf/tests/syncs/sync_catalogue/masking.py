"""The catalogue's patterns of masking and metrics."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from .common import Build, Pattern, _eval_batch

# --- masking ----------------------------------------------------------------------------


def _detections(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    return torch.rand(100, 4, device=device), torch.rand(100, device=device)


def _filter_boxes(device: torch.device) -> Callable[[], object]:
    boxes, scores = _detections(device)
    return lambda: boxes[scores > 0.5]


def _where_scores(device: torch.device) -> Callable[[], object]:
    _, scores = _detections(device)
    return lambda: torch.where(scores > 0.5, scores, 0.0)


def _masked_fill_scores(device: torch.device) -> Callable[[], object]:
    _, scores = _detections(device)

    def suppress() -> torch.Tensor:
        keep = scores > 0.5
        return scores.masked_fill(~keep, 0.0)

    return suppress


def _activations(device: torch.device) -> torch.Tensor:
    torch.manual_seed(0)
    return torch.randn(64, 32, device=device)


def _mask_assign_scalar(device: torch.device) -> Callable[[], object]:
    x = _activations(device)

    def clamp() -> torch.Tensor:
        x[x < 0] = 0.0
        return x

    return clamp


def _mask_assign_device_scalar(device: torch.device) -> Callable[[], object]:
    x = _activations(device)

    def impute() -> torch.Tensor:
        x[x < 0] = x.mean()
        return x

    return impute


def _masked_fill_inplace(device: torch.device) -> Callable[[], object]:
    x = _activations(device)
    return lambda: x.masked_fill_(x < 0, 0.0)


def _nonzero(device: torch.device) -> Callable[[], object]:
    torch.manual_seed(0)
    labels = torch.randint(0, 10, (64,), device=device)
    return lambda: torch.nonzero(labels == 3)


def _edges_from_adjacency(device: torch.device) -> Callable[[], object]:
    torch.manual_seed(0)
    adjacency = torch.rand(16, 16, device=device) > 0.8
    return lambda: torch.where(adjacency)


def _unique(device: torch.device) -> Callable[[], object]:
    torch.manual_seed(0)
    labels = torch.randint(0, 10, (64,), device=device)
    return lambda: torch.unique(labels)


def _repeat_interleave(*, output_size: bool) -> Build:
    def build(device: torch.device) -> Callable[[], object]:
        torch.manual_seed(0)
        x = torch.randn(8, 16, device=device)
        counts = torch.randint(1, 4, (8,), device=device)
        total = int(counts.sum())
        if output_size:
            return lambda: x.repeat_interleave(counts, dim=0, output_size=total)
        return lambda: x.repeat_interleave(counts, dim=0)

    return build


def _lengths_mask(*, from_max: bool) -> Build:
    def build(device: torch.device) -> Callable[[], object]:
        lengths = torch.tensor([5, 3, 8, 2], device=device)
        if from_max:
            return lambda: torch.arange(lengths.max(), device=lengths.device) < lengths[:, None]
        torch.manual_seed(0)
        padded = torch.randn(4, 8, 16, device=device)
        return lambda: torch.arange(padded.size(1), device=padded.device) < lengths[:, None]

    return build


# --- metrics ----------------------------------------------------------------------------


def _running_loss(*, item: bool) -> Build:
    def build(device: torch.device) -> Callable[[], object]:
        _, _, loss = _eval_batch(device)
        total: float | torch.Tensor = 0.0 if item else torch.zeros((), device=device)

        def accumulate() -> float | torch.Tensor:
            nonlocal total
            if item:
                total += loss.item()
            else:
                total += loss.detach()
            return total

        return accumulate

    return build


def _accuracy_tensor(device: torch.device) -> Callable[[], object]:
    logits, y, _ = _eval_batch(device)
    correct = torch.zeros((), dtype=torch.long, device=device)

    def accumulate() -> torch.Tensor:
        correct.add_((logits.argmax(dim=-1) == y).sum())
        return correct

    return accumulate


def _confusion_bincount(device: torch.device) -> Callable[[], object]:
    logits, y, _ = _eval_batch(device)
    classes = logits.size(-1)

    def confusion() -> torch.Tensor:
        pred = logits.argmax(dim=-1)
        counts = torch.bincount(y * classes + pred, minlength=classes * classes)
        return counts.view(classes, classes)

    return confusion


def _confusion_scatter_add(device: torch.device) -> Callable[[], object]:
    logits, y, _ = _eval_batch(device)
    classes = logits.size(-1)
    confusion = torch.zeros(classes, classes, dtype=torch.long, device=device)

    def accumulate() -> torch.Tensor:
        pred = logits.argmax(dim=-1)
        confusion.view(-1).scatter_add_(0, y * classes + pred, torch.ones_like(pred))
        return confusion

    return accumulate


def _early_stopping(device: torch.device) -> Callable[[], object]:
    _, _, val_loss = _eval_batch(device)
    best: float | torch.Tensor = math.inf

    def check() -> bool:
        nonlocal best
        improved = False
        if val_loss < best:
            best = val_loss
            improved = True
        return improved

    return check


def _histogram(device: torch.device) -> Callable[[], object]:
    x = _activations(device)
    return lambda: torch.histc(x, bins=20)


PATTERNS: tuple[Pattern, ...] = (
    # masking
    Pattern(
        "NMS-style filtering boxes[scores > t]",
        "masking",
        True,
        "Indexing with a boolean mask runs nonzero to size the result; test_torch.py"
        " test_sync_warning expects x[mask] to sync.",
        _filter_boxes,
        ("boolean mask indexing",),
    ),
    Pattern(
        "torch.where(keep, scores, 0.0)",
        "masking",
        False,
        "Three-argument where is an elementwise device kernel with a fixed output shape.",
        _where_scores,
    ),
    Pattern(
        "scores.masked_fill(~keep, 0.0)",
        "masking",
        False,
        "masked_fill with a Python-float value is an elementwise device kernel with a fixed"
        " output shape.",
        _masked_fill_scores,
    ),
    Pattern(
        "x[mask] = 0.0 (a Python scalar)",
        "masking",
        False,
        "aten/src/ATen/native/TensorAdvancedIndexing.cpp _index_put_impl_ sends a single bool"
        " mask with a one-element CPU value to masked_fill_ (canDispatchToMaskedFill);"
        " test_torch.py test_sync_warning expects no sync.",
        _mask_assign_scalar,
    ),
    Pattern(
        "x[mask] = x.mean() (a device scalar)",
        "masking",
        True,
        "With a device value index_put_ cannot take the masked_fill_ shortcut and expands the"
        " mask with nonzero; test_torch.py test_sync_warning expects a sync.",
        _mask_assign_device_scalar,
        ("boolean mask indexing",),
    ),
    Pattern(
        "x.masked_fill_(mask, 0.0)",
        "masking",
        False,
        "masked_fill_ with a Python-float value is an in-place elementwise device kernel.",
        _masked_fill_inplace,
    ),
    Pattern(
        "torch.nonzero(labels == c)",
        "masking",
        True,
        "nonzero's output size depends on the data, so the count is copied to the host;"
        " test_torch.py test_sync_warning expects a sync.",
        _nonzero,
        ("nonzero",),
    ),
    Pattern(
        "edge list from an adjacency matrix with torch.where(adjacency)",
        "masking",
        True,
        "One-argument torch.where is nonzero(as_tuple=True), whose output size is read on the"
        " host.",
        _edges_from_adjacency,
        ("where(cond)",),
    ),
    Pattern(
        "torch.unique(labels)",
        "masking",
        True,
        "unique's output size depends on the data; the CUDA implementation copies the number"
        " of unique values to the host to size the result.",
        _unique,
        ("unique",),
    ),
    Pattern(
        "repeat_interleave with tensor repeats",
        "masking",
        True,
        "Without output_size the result size is repeats.sum() read on the host; test_torch.py"
        " test_sync_warning expects a sync.",
        _repeat_interleave(output_size=False),
        ("repeat_interleave",),
    ),
    Pattern(
        "repeat_interleave with tensor repeats and output_size",
        "masking",
        False,
        "With output_size the size is known on the host; test_torch.py test_sync_warning"
        " expects no sync.",
        _repeat_interleave(output_size=True),
    ),
    Pattern(
        "padding mask from lengths with torch.arange(lengths.max())",
        "masking",
        True,
        "arange takes a Scalar end: torch/csrc/utils/python_arg_parser.cpp"
        " PythonArgs::scalar_slow converts the 0-d device tensor with .item().",
        _lengths_mask(from_max=True),
        ("item",),
    ),
    Pattern(
        "padding mask from lengths with torch.arange(padded.size(1))",
        "masking",
        False,
        "The length comes from the padded tensor's shape (a Python int) and the comparison"
        " with lengths runs on the device.",
        _lengths_mask(from_max=False),
    ),
    # metrics
    Pattern(
        "total += loss.item()",
        "metrics",
        True,
        "Tensor.item() copies the device value to the host (aten _local_scalar_dense).",
        _running_loss(item=True),
        ("item",),
    ),
    Pattern(
        "total += loss.detach()",
        "metrics",
        False,
        "The running total is a device tensor; the in-place add is a device kernel.",
        _running_loss(item=False),
    ),
    Pattern(
        "accuracy kept as a tensor: correct += (pred == y).sum()",
        "metrics",
        False,
        "argmax, eq, sum and add_ are device kernels and the count stays a tensor.",
        _accuracy_tensor,
    ),
    Pattern(
        "confusion matrix with torch.bincount",
        "metrics",
        True,
        "bincount's CUDA implementation (_bincount_cuda_template) reads self.min() and"
        " self.max() on the host to size and check the histogram, even with minlength.",
        _confusion_bincount,
        ("bincount",),
    ),
    Pattern(
        "confusion matrix with scatter_add_ into a fixed buffer",
        "metrics",
        False,
        "aten/src/ATen/native/cuda/ScatterGatherKernel.cu scatter_add_cuda_kernel adds on the"
        " device; indices are checked with device asserts.",
        _confusion_scatter_add,
    ),
    Pattern(
        "early stopping with `if val_loss < best:`",
        "metrics",
        True,
        "`if val_loss < best:` calls Tensor.__bool__ on a device comparison, a copy to the host.",
        _early_stopping,
        ("bool",),
    ),
    Pattern(
        "torch.histc(x) with the default range",
        "metrics",
        True,
        "aten/src/ATen/native/cuda/SummaryOps.cu _histc_cuda_template reads the data's min and"
        " max on the host when min == max (the default 0, 0).",
        _histogram,
        ("histc",),
    ),
)
