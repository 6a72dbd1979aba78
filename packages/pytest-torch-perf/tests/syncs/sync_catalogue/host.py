"""The catalogue's patterns of logging, linear algebra and moves between host and device."""

from __future__ import annotations

import io
import logging
from collections.abc import Callable

import torch

from .common import Build, Pattern, _eval_batch, _string_logger

# --- logging ----------------------------------------------------------------------------


def _print_loss(device: torch.device) -> Callable[[], object]:
    _, _, loss = _eval_batch(device)
    out = io.StringIO()
    return lambda: print("loss:", loss, file=out)


def _format_loss(device: torch.device) -> Callable[[], object]:
    _, _, loss = _eval_batch(device)
    out = io.StringIO()
    return lambda: out.write(f"loss {loss:.4f}\n")


def _log_loss(level: int) -> Build:
    def build(device: torch.device) -> Callable[[], object]:
        _, _, loss = _eval_batch(device)
        logger = _string_logger(logging.INFO)
        return lambda: logger.log(level, "loss %s", loss)

    return build


def _loss_history(device: torch.device) -> Callable[[], object]:
    _, _, loss = _eval_batch(device)
    history: list[torch.Tensor] = []
    return lambda: history.append(loss.detach())


# --- linalg -----------------------------------------------------------------------------


def _spd_system(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    b = torch.randn(6, 6, device=device)
    return b @ b.mT + 6 * torch.eye(6, device=device), torch.randn(6, 2, device=device)


def _on_system(solve: Callable[[torch.Tensor, torch.Tensor], object]) -> Build:
    """A build judging ``solve(a, rhs)`` on a symmetric positive-definite system."""

    def build(device: torch.device) -> Callable[[], object]:
        a, rhs = _spd_system(device)
        return lambda: solve(a, rhs)

    return build


# --- moves ------------------------------------------------------------------------------


def _two_losses(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    return torch.rand((), device=device), torch.rand((), device=device)


def _tensor_from_device_scalars(device: torch.device) -> Callable[[], object]:
    a, b = _two_losses(device)
    return lambda: torch.tensor([a, b])


def _stack_device_scalars(device: torch.device) -> Callable[[], object]:
    a, b = _two_losses(device)
    return lambda: torch.stack([a, b])


def _images(device: torch.device) -> torch.Tensor:
    torch.manual_seed(0)
    return torch.rand(2, 3, 8, 8, device=device)


def _scalar_tensor_constant(device: torch.device) -> Callable[[], object]:
    x = _images(device)
    return lambda: x * torch.tensor(3.0, device=x.device)


def _full_constant(device: torch.device) -> Callable[[], object]:
    x = _images(device)
    return lambda: x * torch.full((1,), 3.0, device=x.device)


def _normalize_new_tensor(device: torch.device) -> Callable[[], object]:
    images = _images(device)

    def normalize() -> torch.Tensor:
        mean = images.new_tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
        std = images.new_tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
        return (images - mean) / std

    return normalize


def _predictions_cpu(device: torch.device) -> Callable[[], object]:
    logits, _, _ = _eval_batch(device)
    return lambda: logits.argmax(dim=-1).cpu()


def _predictions_to_cpu_async(device: torch.device) -> Callable[[], object]:
    logits, _, _ = _eval_batch(device)
    return lambda: logits.argmax(dim=-1).to("cpu", non_blocking=True)


def _predictions_copied_async(*, pinned: bool) -> Build:
    def build(device: torch.device) -> Callable[[], object]:
        logits, _, _ = _eval_batch(device)
        buffer = torch.empty(logits.shape[0], dtype=torch.long)
        if pinned and device.type == "cuda":
            buffer = buffer.pin_memory()
        return lambda: buffer.copy_(logits.argmax(dim=-1), non_blocking=True)

    return build


def _predictions_tolist(device: torch.device) -> Callable[[], object]:
    logits, _, _ = _eval_batch(device)
    return lambda: logits.argmax(dim=-1).tolist()


def _to_same_device(device: torch.device) -> Callable[[], object]:
    x = _images(device)
    mask = x > 0.5
    return lambda: x * mask.to(x.device)


def _host_batch(*, pinned: bool) -> Build:
    def build(device: torch.device) -> Callable[[], object]:
        torch.manual_seed(0)
        batch = torch.randn(8, 16)
        if pinned:
            if device.type == "cuda":
                batch = batch.pin_memory()
            return lambda: batch.to(device, non_blocking=True)
        return lambda: batch.to(device)

    return build


def _gather_rows(*, host_index: bool) -> Build:
    def build(device: torch.device) -> Callable[[], object]:
        torch.manual_seed(0)
        table = torch.randn(100, 16, device=device)
        index = torch.randint(0, 100, (8,))
        if not host_index:
            index = index.to(device)
        return lambda: table[index]

    return build


PATTERNS: tuple[Pattern, ...] = (
    # logging
    Pattern(
        "print(loss)",
        "logging",
        True,
        "Tensor.__repr__ (torch/_tensor_str.py _tensor_str) reads the values with .item(),"
        " masked_select and tolist.",
        _print_loss,
        ("print",),
    ),
    Pattern(
        'f"{loss:.4f}"',
        "logging",
        True,
        "torch/_tensor.py Tensor.__format__ formats a 0-d tensor with self.detach().item().",
        _format_loss,
        ("item",),
    ),
    Pattern(
        'logger.info("loss %s", loss) with INFO enabled',
        "logging",
        True,
        "An enabled record is formatted with str(loss), i.e. Tensor.__repr__, which reads the"
        " values on the host.",
        _log_loss(logging.INFO),
        ("print",),
    ),
    Pattern(
        'logger.debug("loss %s", loss) with DEBUG disabled',
        "logging",
        False,
        "logging.Logger.debug returns after isEnabledFor(DEBUG) is false, so the tensor is"
        " never formatted.",
        _log_loss(logging.DEBUG),
    ),
    Pattern(
        "keep detached losses for logging later",
        "logging",
        False,
        "Appending loss.detach() to a list keeps the value on the device.",
        _loss_history,
    ),
    # linalg
    Pattern(
        "torch.linalg.inv",
        "linalg",
        True,
        "torch/linalg/__init__.py documents for inv: 'When inputs are on a CUDA device, this"
        " function synchronizes that device with the CPU' (it checks info for singularity).",
        _on_system(lambda a, rhs: torch.linalg.inv(a)),
        ("linalg check",),
    ),
    Pattern(
        "torch.linalg.inv_ex",
        "linalg",
        False,
        "torch/linalg/__init__.py documents for inv_ex: it synchronizes only when"
        " check_errors=True (the default is False).",
        _on_system(lambda a, rhs: torch.linalg.inv_ex(a).inverse),
    ),
    Pattern(
        "torch.linalg.cholesky",
        "linalg",
        True,
        "torch/linalg/__init__.py documents for cholesky: 'When inputs are on a CUDA device,"
        " this function synchronizes that device with the CPU'.",
        _on_system(lambda a, rhs: torch.linalg.cholesky(a)),
        ("linalg check",),
    ),
    Pattern(
        "torch.linalg.cholesky_ex",
        "linalg",
        False,
        "torch/linalg/__init__.py documents for cholesky_ex: it synchronizes only when"
        " check_errors=True (the default is False).",
        _on_system(lambda a, rhs: torch.linalg.cholesky_ex(a).L),
    ),
    Pattern(
        "torch.linalg.solve",
        "linalg",
        True,
        "torch/linalg/__init__.py documents for solve: 'When inputs are on a CUDA device, this"
        " function synchronizes that device with the CPU'.",
        _on_system(torch.linalg.solve),
        ("linalg check",),
    ),
    Pattern(
        "torch.linalg.solve_ex",
        "linalg",
        False,
        "torch/linalg/__init__.py documents for solve_ex: it synchronizes only when"
        " check_errors=True (the default is False).",
        _on_system(lambda a, rhs: torch.linalg.solve_ex(a, rhs).result),
    ),
    # moves
    Pattern(
        "torch.tensor([a, b]) from device scalars",
        "moves",
        True,
        "torch/csrc/utils/tensor_new.cpp internal_new_from_data fills a CPU tensor with"
        " recursive_store/store_scalar, which reads every device element on the host.",
        _tensor_from_device_scalars,
        ("item",),
    ),
    Pattern(
        "torch.stack([a, b]) of device scalars",
        "moves",
        False,
        "stack concatenates on the device; nothing is read back.",
        _stack_device_scalars,
    ),
    Pattern(
        "torch.tensor(3.0, device=x.device)",
        "moves",
        True,
        "tensor_new.cpp builds the value on the CPU and copies it with .to(device,"
        " non_blocking=false); cuda/Copy.cu copy_kernel_cuda then uses memcpy_and_sync, which"
        " the sync debug mode reports.",
        _scalar_tensor_constant,
        ("to(device)",),
    ),
    Pattern(
        "torch.full((1,), 3.0, device=x.device)",
        "moves",
        False,
        "full allocates on the device and fills it with a kernel taking the Python float; no"
        " copy from the host.",
        _full_constant,
    ),
    Pattern(
        "normalise with images.new_tensor(mean)",
        "moves",
        True,
        "new_tensor builds the list on the CPU and copies it to the device with"
        " non_blocking=false (tensor_new.cpp, cuda/Copy.cu memcpy_and_sync).",
        _normalize_new_tensor,
        ("to(device)",),
    ),
    Pattern(
        "predictions.cpu()",
        "moves",
        True,
        "A device-to-host copy without non_blocking goes through memcpy_and_sync"
        " (aten/src/ATen/native/cuda/Copy.cu copy_kernel_cuda).",
        _predictions_cpu,
        ("cpu",),
    ),
    Pattern(
        "predictions.to('cpu', non_blocking=True)",
        "moves",
        False,
        "For a strided CUDA tensor _to_copy allocates the host copy in pinned memory"
        " (pin_out in aten/src/ATen/native/TensorConversions.cpp) and copy_kernel_cuda"
        " issues cudaMemcpyAsync without a stream sync; the values are there once the"
        " stream reaches the copy (read them after an event or a sync).",
        _predictions_to_cpu_async,
    ),
    Pattern(
        "copy_(predictions, non_blocking=True) into a pinned buffer",
        "moves",
        False,
        "copy_kernel_cuda issues cudaMemcpyAsync into the pinned block and records an"
        " event on it; no stream sync.",
        _predictions_copied_async(pinned=True),
    ),
    Pattern(
        "predictions.tolist()",
        "moves",
        True,
        "tolist copies the device tensor to the host to build Python numbers.",
        _predictions_tolist,
        ("tolist",),
    ),
    Pattern(
        "mask.to(x.device) when the mask is already there",
        "moves",
        False,
        "Tensor.to returns the tensor itself when device and dtype already match; no copy.",
        _to_same_device,
    ),
    Pattern(
        "host batch .to(device)",
        "moves",
        True,
        "A host-to-device copy without non_blocking goes through memcpy_and_sync"
        " (aten/src/ATen/native/cuda/Copy.cu copy_kernel_cuda).",
        _host_batch(pinned=False),
        ("to(device)",),
        "the batch was made on the host before the judged code; on a CPU run it looks like"
        " an input (a batch from a DataLoader inside the code is seen)",
    ),
    Pattern(
        "pinned host batch .to(device, non_blocking=True)",
        "moves",
        False,
        "aten/src/ATen/native/cuda/Copy.cu copy_kernel_cuda issues cudaMemcpyAsync and"
        " records an event on the pinned block when non_blocking is set; no stream sync.",
        _host_batch(pinned=True),
    ),
    Pattern(
        "table[index] with a CPU LongTensor index",
        "moves",
        True,
        "The CPU index is copied to the device with a blocking copy; test_torch.py"
        " test_sync_warning expects x[ind_cpu] to sync.",
        _gather_rows(host_index=True),
        ("host index",),
        "the index was made on the host before the judged code; on a CPU run it looks like"
        " an input",
    ),
    Pattern(
        "table[index] with a device LongTensor index",
        "moves",
        False,
        "Advanced indexing with a device integer index is a gather kernel; test_torch.py"
        " test_sync_warning expects x[ind] not to sync.",
        _gather_rows(host_index=False),
    ),
)
