"""What synchronises on a GPU: the operations, why each one waits, and what to write instead.

The names are what ``allow=`` accepts. ``aten_sync`` judges one aten operation on tensors
that live on the device: a host read, a data-dependent output shape, or a check that the
CUDA kernel makes on the host. Checks that only the CPU kernels make are not here: on a
GPU they do not happen.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SyncOperation:
    """One kind of synchronising operation."""

    summary: str
    #: why the host waits for the device on a GPU
    why: str
    #: the sync-free spelling, "" when there is none
    instead: str = ""


#: Operation names a user can pass to ``allow=``, with what each one is.
OPERATIONS: dict[str, SyncOperation] = {
    "item": SyncOperation(
        "Tensor.item() copies a value to the host",
        "the value is copied to the host, which waits for every queued kernel",
        "keep the value on the device (return or accumulate the tensor; .item() once at"
        " the end of the epoch)",
    ),
    "bool": SyncOperation(
        "bool(tensor) / `if tensor:` reads the value on the host",
        "Python needs the value to choose a branch, so the host waits for the device",
        "compute both branches and pick with torch.where(cond, a, b), or keep the"
        " condition on the device until a point where you sync anyway",
    ),
    "float": SyncOperation(
        "float(tensor) reads the value on the host",
        "the value is copied to the host, which waits for every queued kernel",
        "keep the tensor (x.float() converts on the device)",
    ),
    "int": SyncOperation(
        "int(tensor) / using a tensor as a Python index reads the value on the host",
        "the value is copied to the host, which waits for every queued kernel",
        "index with the tensor itself (x.index_select(0, i), x.gather(...)); for sizes and"
        " slice bounds, use a Python int known before the step (or pad to a fixed size)",
    ),
    "print": SyncOperation(
        "str/repr/print/f-string/logging of a tensor copies it to the host",
        "formatting reads every value on the host, which waits for the device",
        "log outside the hot path, or every N steps, or log .detach() tensors that you"
        " format after the step",
    ),
    "cpu": SyncOperation(
        "Tensor.cpu() copies to the host",
        "a blocking copy from the device waits for every queued kernel",
        "keep it on the device, or copy with .to('cpu', non_blocking=True) into pinned"
        " memory and read it after a torch.cuda.Event",
    ),
    "to(cpu)": SyncOperation(
        "Tensor.to('cpu') copies to the host",
        "a blocking copy from the device waits for every queued kernel",
        "keep it on the device, or copy without blocking: .to('cpu', non_blocking=True)"
        " (torch puts the copy in pinned memory) or dst.copy_(x, non_blocking=True) into"
        " a pin_memory() tensor, and read it only after a torch.cuda.Event has completed",
    ),
    "to(device)": SyncOperation(
        "a blocking copy of host data to the device",
        "a blocking copy from pageable host memory waits for the device's stream",
        "create it on the device (torch.full/zeros/arange(..., device=x.device)), keep"
        " constants in a registered buffer, or pin_memory() and non_blocking=True",
    ),
    "host index": SyncOperation(
        "indexing a device tensor with a host index (a Python list, a CPU tensor)",
        "the index is copied to the device with a blocking copy",
        "a slice (x[:, -1:] for x[:, [-1]]) or an index made on the device"
        " (torch.arange(n, device=x.device))",
    ),
    "tolist": SyncOperation(
        "Tensor.tolist() copies to the host",
        "every value is copied to the host, which waits for the device",
        "keep the tensor; convert once at the end",
    ),
    "numpy": SyncOperation(
        "Tensor.numpy() copies to the host",
        "every value is copied to the host, which waits for the device",
        "keep the tensor; convert once at the end",
    ),
    "equal": SyncOperation(
        "torch.equal returns a Python bool",
        "the answer is read on the host",
        "(a == b).all() keeps the answer on the device",
    ),
    "allclose": SyncOperation(
        "torch.allclose returns a Python bool",
        "the answer is read on the host",
        "torch.isclose(a, b).all() keeps the answer on the device",
    ),
    "nonzero": SyncOperation(
        "nonzero/argwhere: the output shape depends on the data",
        "the host must learn how many elements are non-zero to allocate the output",
        "torch.nonzero_static(x, size=n) or a mask used with torch.where",
    ),
    "where(cond)": SyncOperation(
        "torch.where with one argument is nonzero: data-dependent shape",
        "the host must learn how many elements are true to allocate the output",
        "torch.where(cond, a, b) with three arguments, or torch.nonzero_static",
    ),
    "masked_select": SyncOperation(
        "masked_select: the output shape depends on the data",
        "the host must learn how many elements are selected to allocate the output",
        "keep the full shape: torch.where(mask, x, 0) or x.masked_fill(~mask, 0)",
    ),
    "boolean mask indexing": SyncOperation(
        "x[mask] and x[mask] = v: the mask becomes indices with a data-dependent shape",
        "the mask is turned into indices (nonzero), whose count the host must learn",
        "x[mask] = v -> x.masked_fill_(mask, v) or torch.where(mask, v, x); x[mask] ->"
        " torch.where(mask, x, 0) and reduce with the mask",
    ),
    "unique": SyncOperation(
        "unique: the output shape depends on the data",
        "the host must learn how many distinct values there are",
        "torch.bincount(x, minlength=n) or a one-hot sum when the value range is known",
    ),
    "repeat_interleave": SyncOperation(
        "repeat_interleave with tensor repeats and no output_size",
        "the host must learn the sum of the repeats to allocate the output",
        "pass output_size= when you know the total",
    ),
    "bincount": SyncOperation(
        "bincount: the output size depends on the data",
        "the host reads the largest value to size the output",
        "x.new_zeros(n).scatter_add_(0, x, torch.ones_like(x)) when n is known",
    ),
    "multinomial": SyncOperation(
        "torch.multinomial validates its probabilities on the host",
        "the kernel reads (probs >= 0 and finite) and the row sums with .item() before sampling",
        "sample with the Gumbel-max trick:"
        " (probs.log() - torch.empty_like(probs).exponential_().log()).argmax(-1)",
    ),
    "linalg check": SyncOperation(
        "linalg.inv/cholesky/solve/... raise on a singular input: the error code is read on"
        " the host",
        "the LAPACK/cuSOLVER info is copied to the host to decide whether to raise",
        "the *_ex variant (torch.linalg.inv_ex, cholesky_ex, solve_ex) and check `info`"
        " on the device",
    ),
    "nested tensor from mask": SyncOperation(
        "nn.Transformer* inference with a padding mask builds a nested tensor from the mask",
        "the sequence lengths in the mask are copied to the host",
        "pass enable_nested_tensor=False to nn.TransformerEncoder, or no padding mask when"
        " no sequence is padded",
    ),
    "histc": SyncOperation(
        "torch.histc with min == max reads the data's range on the host",
        "the kernel copies min and max to the host to place the bins",
        "pass the range: torch.histc(x, bins, min=lo, max=hi)",
    ),
    "cuda sync": SyncOperation(
        "an operation the CUDA backend reported as synchronizing",
        "the CUDA backend's sync check fired for it",
    ),
}

#: allow= names, with one line each (kept for the error message of a bad allow= entry)
SYNC_OPERATIONS: dict[str, str] = {name: op.summary for name, op in OPERATIONS.items()}

_UNIQUE = {"_unique", "_unique2", "unique_dim", "unique_consecutive", "unique_dim_consecutive"}
_INDEX_PUT = {"index_put_", "index_put", "_index_put_impl_"}
_SIMPLE = {
    "_local_scalar_dense": "item",
    "nonzero": "nonzero",
    "masked_select": "masked_select",
    "bincount": "bincount",
    "equal": "equal",
    "allclose": "allclose",
    "_linalg_check_errors": "linalg check",
    "_nested_tensor_from_mask_left_aligned": "nested tensor from mask",
    "_nested_tensor_from_mask": "nested tensor from mask",
}


def masked_fill_put(args: tuple[Any, ...], kwargs: dict[str, Any], on_device: Any) -> bool:
    """``x[mask] = v`` that index_put_ turns into masked_fill_ (no sync).

    aten/src/ATen/native/TensorAdvancedIndexing.cpp canDispatchToMaskedFill: one mask on
    the tensor's device, and a one-element value on the host (a Python scalar).
    """
    import torch

    indices = [
        i for i in (args[1] if len(args) > 1 else kwargs.get("indices", ())) if i is not None
    ]
    values = args[2] if len(args) > 2 else kwargs.get("values")
    return (
        len(indices) == 1
        and indices[0].dtype in (torch.bool, torch.uint8)
        and on_device(indices[0]) == on_device(args[0])
        and isinstance(values, torch.Tensor)
        and values.numel() == 1
        and not on_device(values)
    )


def host_index(args: tuple[Any, ...], on_device: Any) -> bool:
    """``x[idx]`` / ``x[idx] = v`` on a device tensor with an index on the host.

    A Python list index or a CPU LongTensor is copied to the device first
    (TensorAdvancedIndexing.cpp make_info: ``indice.to(self.device())``), a blocking copy.
    """
    import torch

    if len(args) < 2 or not on_device(args[0]):
        return False
    return any(
        isinstance(index, torch.Tensor)
        and index.dim() > 0
        and index.dtype not in (torch.bool, torch.uint8)
        and not on_device(index)
        for index in args[1] or ()
    )


def _has_mask_index(indices: Any) -> bool:
    import torch

    return any(
        isinstance(index, torch.Tensor) and index.dtype in (torch.bool, torch.uint8)
        for index in (indices or ())
    )


def aten_sync(
    name: str, overload: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> str | None:
    """The operation name when aten op ``name`` on device tensors syncs on a GPU, else None."""
    if name in _SIMPLE:
        return _SIMPLE[name]
    if name in _UNIQUE:
        return "unique"
    if name == "index" and _has_mask_index(args[1] if len(args) > 1 else kwargs.get("indices")):
        return "boolean mask indexing"
    if name in _INDEX_PUT and _has_mask_index(args[1] if len(args) > 1 else kwargs.get("indices")):
        return "boolean mask indexing"
    if name == "multinomial":
        samples = args[1] if len(args) > 1 else kwargs.get("num_samples", 1)
        replacement = args[2] if len(args) > 2 else kwargs.get("replacement", False)
        # only the one-sample and without-replacement path checks on the host
        return "multinomial" if samples == 1 or not replacement else None
    if name == "repeat_interleave" and overload in ("Tensor", "self_Tensor"):
        return "repeat_interleave" if kwargs.get("output_size") is None else None
    if name == "histc":
        low = args[2] if len(args) > 2 else kwargs.get("min", 0)
        high = args[3] if len(args) > 3 else kwargs.get("max", 0)
        return "histc" if low == high else None
    return None


#: Python-level calls whose host reads happen only on the CPU (checks the CUDA code skips)
def cpu_only_reads(callee: str, call: Any) -> bool:
    """True when the reads inside ``callee`` (an ``ast.Call`` or None) skip CUDA.

    ``one_hot(x, num_classes=n)`` range-checks x with ``.item()`` only on devices other
    than CUDA/MPS/XLA (aten/src/ATen/native/Onehot.cpp); without num_classes it reads the
    maximum on every device.
    """
    import ast

    if callee.rsplit(".", 1)[-1] != "one_hot" or not isinstance(call, ast.Call):
        return False
    given = call.args[1] if len(call.args) > 1 else None
    for keyword in call.keywords:
        if keyword.arg == "num_classes":
            given = keyword.value
    if given is None:
        return False
    minus_one = (
        isinstance(given, ast.UnaryOp)
        and isinstance(given.op, ast.USub)
        and isinstance(given.operand, ast.Constant)
        and given.operand.value == 1
    )
    return not minus_one
