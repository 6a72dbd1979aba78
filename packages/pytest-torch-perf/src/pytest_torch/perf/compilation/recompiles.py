"""Reading dynamo's guard failures for a person: why a function compiled again, in
words (:func:`clean_guard_reason`), and what stops it (:func:`recompile_fix`), chosen by
what the failed guard is about: a dimension's size or range, an input passed another
way, a training loop's changing settings, another object, a Python number baked in.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence

_COMPILE_ID = re.compile(r"^\s*\[?\d+/\d+\]?:\s*")
_SOURCE_COMMENT = re.compile(r"\s{2,}#.*$")


def clean_guard_reason(text: str) -> str:
    """``0/0: tensor 'x' size mismatch ...`` -> ``tensor 'x' size mismatch ...``: the
    compile id, the source comment and the stack dynamo appends are dropped."""
    first = str(text).split("\nUser stack trace:", 1)[0].strip()
    first = _COMPILE_ID.sub("", first)
    # several failed guards of one cached graph come joined by "; ", each with its comment
    parts = [_SOURCE_COMMENT.sub("", part).strip() for part in re.split(r";\s+(?=\S)", first)]
    kept = [part for part in parts if part and not part.startswith(("to avoid", "#"))]
    cleaned = "; ".join(kept) if kept else first
    return cleaned.replace("tensor type, ' but found", "tensor type, but found")


_POSITIONAL = re.compile(r"^args\[(\d+)\]$")
_KEYWORD = re.compile(r"^kwargs\[['\"](\w+)['\"]\]$")


def _argument(name: str) -> str:
    """dynamo's name of an input, as a person would say it: ``args[0]`` (a compiled
    module's wrapper) -> "the 1st positional argument"."""
    positional = _POSITIONAL.match(name)
    if positional:
        number = int(positional.group(1)) + 1
        suffix = {1: "st", 2: "nd", 3: "rd"}.get(number if number < 20 else number % 10, "th")
        return f"the {number}{suffix} positional argument"
    keyword = _KEYWORD.match(name)
    if keyword:
        return f"the keyword argument {keyword.group(1)!r}"
    return repr(name)


_MODULE_PATH = re.compile(r"\._modules\[['\"](\w+)['\"]\]")


def _shorter(name: str) -> str:
    """``self._modules['net']._modules['1'].scale`` -> ``self.net.1.scale``."""
    return _MODULE_PATH.sub(r".\1", name)


_SIZE = re.compile(
    r"tensor '(.+)' size mismatch at index (\d+)(?:\. expected (\d+), actual (\d+))?"
)
_RANGE = re.compile(r"^(\d+) <= (\S+)\.size\(\)\[(\d+)\](?: <= (\d+))?$")
_OPTIONAL = re.compile(r"^(\S+) is (?:not )?None$")
_NONE_FOR_TENSOR = re.compile(r"expected type of '(.+)' to be a tensor type.*NoneType")
_NOT_A_FUNCTION = re.compile(r"Not a function on (\S+?)\.__code__")
_MOMENTUM = re.compile(r"param_groups\[\d+\]\[['\"](betas|momentum)['\"]\]")
_INT_GUARD = re.compile(r"^(\S+) == -?\d+$")
_SCALAR_GUARD = re.compile(r"^(\S+) == [-+.\w]+$")
_FLAG_GUARD = re.compile(r"^(\S+) == (True|False|None|'[^']*')$")
_STACK_VALUE = re.compile(r"^___stack\d+\S* == ")
_PARAMETER = re.compile(r"_(?:parameters|buffers)\[")
_GLOBAL = re.compile(r"^G\[['\"](\w+)['\"]\](.*)$")
_MARKING = re.compile(r"_has_dynamo_dim_marking|_dynamo_\w*indices")
_LEARNING_RATE = re.compile(r"param_groups\[\d+\]\[['\"]lr['\"]\] == ")
_TRAINING = re.compile(r"\.training == (True|False)")


def _intermediate(name: str) -> bool:
    """dynamo's name for a value made by the code before a graph break (``___stack0``)."""
    return name.startswith("___stack")


_SPECIALISED = (
    "sizes 0 and 1 are always compiled apart from other sizes (mark_dynamic and"
    " dynamic=True do not cover them): avoid them (drop_last=True for a DataLoader's last"
    " batch of one; a preallocated cache of fixed length rather than one that grows from"
    " empty), or mark the dimension unbacked"
    " before the call (torch._dynamo.decorators.mark_unbacked(tensor, {index})) if the"
    " code never branches on that size"
)
_INTERMEDIATE = (
    "a tensor made before a graph break (by nonzero, masked_select or boolean indexing,"
    " or computed from an input whose size changes) changes size from call to call, and"
    " the code after the break compiles again for it: compile with dynamic=True, or"
    " remove that graph break (for nonzero and the like, a fixed-size form such as"
    " torch.where with a mask, or torch._dynamo.config.capture_dynamic_output_shape_ops"
    " = True)"
)


def _repeated(reasons: Sequence[str]) -> bool:
    """Two compiled versions failed on the same Python number: torch already tried it as
    a dynamic value, and the code specialised it again."""
    names = [m.group(1) for m in map(_SCALAR_GUARD.match, reasons) if m]
    return len(names) != len(set(names))


def guard_key(reason: str) -> tuple[str, ...] | None:
    """What a guard is about (a tensor's dimension, a Python number), so that the same
    guard failing in two recompiles of one function can be told apart from two guards."""
    size = _SIZE.search(reason)
    if size:
        return ("size", size.group(1), size.group(2))
    number = _SCALAR_GUARD.match(reason)
    return ("number", number.group(1)) if number else None


def _number_fix(name: str, integer: bool, repeated: bool) -> str:
    """A Python int or float baked into the graph changed.  torch retries an argument,
    and any float, once as a dynamic value; a global's or a module's int and a length it
    bakes in for good."""
    kind = "int" if integer else "number"
    shown = _shorter(name)
    in_global = _GLOBAL.match(shown)
    if in_global:
        shown = in_global.group(1) + in_global.group(2)
    if shown.startswith("len(") and shown.endswith(")"):
        return (
            f"the length of {shown[4:-1]!r} (a list, tuple or dict) is baked into the"
            f" graph and changed: each length compiles once; keep it fixed (pad it to a"
            f" few lengths), or, where the items have one shape, stack them into one"
            f" tensor before the call"
        )
    if integer and shown.startswith("self."):
        return (
            f"the Python int {shown!r} is baked into the graph and changed: each value"
            f" compiles once (a loop count or a size has to be fixed); keep it constant,"
            f" or, for a module attribute that only enters arithmetic,"
            f" torch._dynamo.config.allow_unspec_int_on_nn_module = True (one more"
            f" compile, then any value)"
        )
    if integer and in_global:
        return (
            f"the global int {shown!r} is baked into the graph and changed: each value"
            f" compiles once; keep it constant, or pass it to the compiled function as an"
            f" argument (torch then compiles once more with it dynamic, for every value)"
        )
    if repeated:
        return (
            f"the Python {kind} {shown!r} is fixed by the code it enters (a loop count, a"
            f" size, a branch, or an operator argument torch keeps constant, such as"
            f" dropout's p), so every new value compiles again, even after torch made it"
            f" dynamic, and dynamic=True does not help: keep it to a few values (one"
            f" compile each), or make that code independent of it (e.g. dropout's mask"
            f" drawn by hand against a tensor p)"
        )
    avoid = (
        "hold it as a tensor (a buffer, for a module)"
        if in_global or shown.startswith("self.")
        else "compile with dynamic=True, or pass it as a tensor (torch.tensor(value))"
    )
    return (
        f"the Python {kind} {shown!r} was baked into the graph and changed: torch compiles"
        f" once more with it as a dynamic value, which then serves every value. Allow"
        f" this one recompile, or avoid it: {avoid}"
    )


_AUTOGRAD_KEY = re.compile(r"Autograd\w*")


def _dispatch_key_fix(reason: str) -> str:
    """An input is another kind of tensor than the one compiled for."""
    expected, _, actual = reason.partition("actual")
    if bool(_AUTOGRAD_KEY.search(expected)) != bool(_AUTOGRAD_KEY.search(actual)):
        return (
            "an input made under torch.inference_mode() (an inference tensor) took the"
            " place of an ordinary tensor, or the other way round: each kind compiles"
            " once; make every call's inputs the same way (all under"
            " torch.inference_mode(), or use torch.no_grad() instead of it)"
        )
    if ("Conjugate" in expected) != ("Conjugate" in actual) or ("Negative" in expected) != (
        "Negative" in actual
    ):
        return (
            "an input is a conjugated or negated view (x.conj()) in one call and not in"
            " another: call .resolve_conj() / .resolve_neg() before the call"
        )
    return (
        "an input is another kind of tensor than the one compiled for (a tensor subclass,"
        " a view of another kind, another backend): pass the same kind every call"
    )


def recompile_fix(
    reasons: Sequence[str],
    after_break_parameters: Collection[str] | None = None,
    broken: bool = False,
    again: Collection[tuple[str, ...]] = (),
) -> str:
    """What stops this kind of recompile (the first reason that has a known fix).
    ``after_break_parameters``: for the code after a graph break, the parameter names
    of its function (any other tensor there was made before the break); ``broken``:
    the compiled code has graph breaks; ``again``: the guards (``guard_key``) that
    failed first in another recompile of this function too."""
    for reason in reasons:
        fix = (
            _range_fix(reason)
            or _size_fix(reason, after_break_parameters, broken, again)
            or _input_fix(reason)
            or _training_fix(reason)
            or _object_fix(reason)
            or _number_guard_fix(reason, reasons, again)
        )
        if fix is not None:
            return fix
    return ""


def _range_fix(reason: str) -> str | None:
    """A dynamic dimension's size fell outside the range the compiled code holds for."""
    limited = _RANGE.match(reason.split(";")[0].strip())
    if not limited:
        return None
    low, name, index, high = limited.groups()
    if _intermediate(name):
        return _INTERMEDIATE
    if high is None and int(low) == 2:
        return (
            f"dimension {index} of {_argument(name)} is dynamic for sizes of 2 and"
            f" more, and this call has a size of 0 or 1: " + _SPECIALISED.format(index=index)
        )
    return (
        f"dimension {index} of {_argument(name)} is dynamic, but the compiled code"
        f" holds only for sizes {low}..{high or 'up'}, and this call falls outside."
        f" The bound comes from a branch on that size in the code (e.g. `if"
        f" x.shape[{index}] > {high or low}:`: each side compiles once; allow the"
        f" recompile, or torch.cond to keep both sides in one graph), from min= or"
        f" max= given to mark_dynamic (widen them), or from an operator that treats"
        f" some sizes apart (allow the recompile)"
    )


def _size_fix(
    reason: str,
    after_break_parameters: Collection[str] | None,
    broken: bool,
    again: Collection[tuple[str, ...]],
) -> str | None:
    """A tensor's size changed from the one compiled for."""
    size = _SIZE.search(reason)
    if not size:
        return None
    name, index, expected, actual = size.groups()
    if _intermediate(name) or (
        after_break_parameters is not None
        and name.isidentifier()
        and name not in after_break_parameters
    ):
        return _INTERMEDIATE
    if _PARAMETER.search(name):
        return (
            f"{_shorter(name)!r} has another size here: modules of one class share"
            f" their compiled code, and each shape of their parameters and"
            f" buffers compiles once (a stack of layers of different widths"
            f" compiled one by one does this): expect one recompile per shape and"
            f" allow them; with more than torch._dynamo.config.recompile_limit"
            f" shapes, raise it, or the rest runs uncompiled"
        )
    tensor = _argument(name)
    if {expected, actual} & {"0", "1"}:  # (None when torch gave no sizes)
        return (
            f"dimension {index} of {tensor} changes to or from a size of 0 or 1: "
            + _SPECIALISED.format(index=index)
        )
    if ("size", name, index) in again:
        return (
            f"dimension {index} of {tensor} compiles again for each size, even"
            f" after torch made it dynamic: the code fixes that size (a branch on"
            f" it, torch.func.vmap over it, an operator that needs a fixed size),"
            f" so mark_dynamic raises an error there and dynamic=True does not"
            f" help: pad inputs to a few fixed sizes (drop_last=True for a"
            f" DataLoader's last batch), or allow one recompile per size"
        )
    last_batch = (
        " (if this is a DataLoader's last, smaller batch, drop_last=True avoids it)"
        if index == "0" and expected and actual and int(actual) < int(expected)
        else ""
    )
    mark = (
        f"torch._dynamo.maybe_mark_dynamic(tensor, {index}): with graph breaks,"
        f" mark_dynamic fails when the code after a break fixes that size"
        if broken
        else f"torch._dynamo.mark_dynamic(tensor, {index})"
    )
    return (
        f"dimension {index} of {tensor} changes between calls{last_batch}: mark it"
        f" dynamic before the first call, with every input whose size goes with it"
        f" ({mark}), compile with dynamic=True, or pad inputs to a few fixed sizes"
    )


def _input_fix(reason: str) -> str | None:
    """An input came another way than the one compiled for (None, dtype, rank, gradients,
    strides, kind of tensor) or under another grad mode or autocast."""
    optional = _OPTIONAL.match(reason) or _NONE_FOR_TENSOR.search(reason)
    if optional:
        return (
            f"{_argument(optional.group(1))} was None in one call and not in another:"
            f" each way compiles once; pass it the same way every call (e.g. always"
            f" a tensor, such as a mask of ones)"
        )
    if "dtype mismatch" in reason:
        return "the dtype of an input changes between calls: cast inputs to one dtype"
    if "rank mismatch" in reason:
        return "an input's number of dimensions changes between calls: keep one layout"
    if "requires_grad mismatch" in reason:
        return (
            "an input needs gradients in one call and not in another: keep it the"
            " same, or compile one function for training and one for inference"
        )
    if "GLOBAL_STATE changed" in reason and "autocast" in reason:
        return (
            "torch.autocast was switched on or off around the call: each setting"
            " compiles once; keep the compiled call always inside (or always outside)"
            " torch.autocast, or put the autocast inside the compiled function"
        )
    if "grad_mode" in reason:
        return (
            "called with gradients on and off (torch.no_grad() or"
            " torch.inference_mode() around some calls): keep one grad mode for a"
            " compiled function, or compile one for training and one for inference"
        )
    if "stride mismatch" in reason:
        return (
            "an input's strides changed between calls. Either its layout changed (a"
            " transposed, permuted or sliced view: call .contiguous() before the call,"
            " or keep one layout), or it is contiguous and a size it has changed (a"
            " tensor that grows, such as a cache, whose size is marked dynamic or"
            " unbacked): then torch compiles once more with the strides dynamic too;"
            " allow that recompile, or use a preallocated tensor of fixed size"
        )
    if "dispatch key set mismatch" in reason:
        return _dispatch_key_fix(reason)
    return None


def _training_fix(reason: str) -> str | None:
    """A training loop changed what the compiled code baked in: the optimizer's momentum
    or learning rate, train/eval mode, a value read on the host, a dimension's marking,
    the device."""
    if _MOMENTUM.search(reason):
        return (
            "the optimizer's momentum (betas or momentum) is a Python number baked"
            " into the compiled optimizer step, and a scheduler changes it every step"
            " (OneCycleLR and CyclicLR do, with cycle_momentum=True; they write Python"
            " numbers, so tensor betas do not help): pass cycle_momentum=False, or"
            " leave the optimizer step uncompiled"
        )
    if _LEARNING_RATE.search(reason):
        return (
            "the learning rate is a Python number baked into the compiled optimizer"
            " step, and the LR scheduler changed it: give the optimizer a tensor,"
            " e.g. torch.optim.AdamW(params, lr=torch.tensor(1e-3))"
        )
    if _TRAINING.search(reason):
        return (
            "the model switched between train() and eval(): each mode compiles once;"
            " expect one recompile per mode, or compile one model per mode"
        )
    if _STACK_VALUE.match(reason):
        return (
            "a value read on the host (.item(), .tolist(), a Python number computed"
            " from a tensor) is baked into the code after a graph break, and it"
            " changed, so that code compiled again: where it only enters arithmetic,"
            " keep it a tensor (no break, nothing baked in); where it sets a loop"
            " count or a size, torch._dynamo.config.capture_scalar_outputs = True"
            " with dynamic=True, or a fixed count"
        )
    if _MARKING.search(reason):
        return (
            "a tensor was marked (mark_dynamic, mark_unbacked) in some calls and not"
            " in others: each way compiles once; mark the same dimensions before"
            " every call, including the first"
        )
    if "device mismatch" in reason:
        return "an input moves between devices: keep inputs on one device"
    return None


def _object_fix(reason: str) -> str | None:
    """Another object, function or setting took the place of the one compiled with."""
    function = _NOT_A_FUNCTION.search(reason)
    if function:
        return (
            f"a different function was passed as {_shorter(function.group(1))!r}"
            f" (here one that is not a Python function, such as a builtin or a C"
            f" function): each function compiles once; pass the same one every call,"
            f" or expect one compile per function"
        )
    if "___check_obj_id" in reason or "id(" in reason:
        return (
            "a new object (a module, a function, a non-tensor argument) took the"
            " place of the one compiled: reuse the same object between calls"
        )
    flag = _FLAG_GUARD.match(reason)
    if flag:
        return (
            f"the setting {_shorter(flag.group(1))!r} changed, and the compiled code"
            f" depends on it: each value compiles once; expect one recompile per"
            f" setting, or compile one model per setting"
        )
    if "GLOBAL_STATE changed" in reason:
        return (
            "a global torch setting (grad mode, autocast, deterministic algorithms,"
            " the default dtype...) differs from the one compiled with: keep it the"
            " same around the compiled call"
        )
    return None


def _number_guard_fix(
    reason: str, reasons: Sequence[str], again: Collection[tuple[str, ...]]
) -> str | None:
    """A Python number baked into the graph changed (see :func:`_number_fix`)."""
    number = _INT_GUARD.match(reason) or _SCALAR_GUARD.match(reason)
    if not number:
        return None
    name = number.group(1)
    repeated = _repeated(reasons) or ("number", name) in again
    return _number_fix(name, _INT_GUARD.match(reason) is not None, repeated)
