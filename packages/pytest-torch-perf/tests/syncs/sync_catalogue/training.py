"""The catalogue's patterns of optimizers, training steps and losses."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .common import MLP, Build, MakeOptimizer, Pattern, _batch

# --- optimizers -------------------------------------------------------------------------


def _optimizer_step(make_optimizer: MakeOptimizer, *, first_step: bool) -> Build:
    """A training step; with first_step the optimizer is new, so its state is initialised."""

    def build(device: torch.device) -> Callable[[], object]:
        torch.manual_seed(0)
        model = MLP().to(device)
        x, y = _batch(device)
        optimizer = make_optimizer(model.parameters())

        def step(opt: torch.optim.Optimizer) -> torch.Tensor:
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            return loss

        if first_step:
            return lambda: step(make_optimizer(model.parameters()))
        return lambda: step(optimizer)

    return build


def _lbfgs_step(device: torch.device) -> Callable[[], object]:
    torch.manual_seed(0)
    model = MLP().to(device)
    x, y = _batch(device)
    optimizer = torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=2)

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        return loss

    return lambda: optimizer.step(closure)


def _scheduler_step(
    make_scheduler: Callable[[torch.optim.Optimizer], torch.optim.lr_scheduler.LRScheduler],
) -> Build:
    def build(device: torch.device) -> Callable[[], object]:
        torch.manual_seed(0)
        model = MLP().to(device)
        x, y = _batch(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        scheduler = make_scheduler(optimizer)
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
        return scheduler.step

    return build


def _plateau_step(device: torch.device) -> Callable[[], object]:
    torch.manual_seed(0)
    model = MLP().to(device)
    x, y = _batch(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, patience=2)
    with torch.no_grad():
        val_loss = F.cross_entropy(model(x), y)
    return lambda: scheduler.step(val_loss)


# --- training ---------------------------------------------------------------------------


def _grad_scaler_step(*, fused: bool) -> Build:
    def build(device: torch.device) -> Callable[[], object]:
        torch.manual_seed(0)
        model = MLP().to(device)
        x, y = _batch(device)
        if fused:
            optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, fused=True)
        else:
            optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        scaler = torch.amp.GradScaler(device.type)

        def step() -> torch.Tensor:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            return loss

        return step

    return build


def _clipped_step(*, error_if_nonfinite: bool) -> Build:
    def build(device: torch.device) -> Callable[[], object]:
        torch.manual_seed(0)
        model = MLP().to(device)
        x, y = _batch(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

        def step() -> torch.Tensor:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            nn.utils.clip_grad_norm_(
                model.parameters(), max_norm=1.0, error_if_nonfinite=error_if_nonfinite
            )
            optimizer.step()
            return loss

        return step

    return build


def _skip_nonfinite_step(device: torch.device) -> Callable[[], object]:
    torch.manual_seed(0)
    model = MLP().to(device)
    x, y = _batch(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def step() -> torch.Tensor | None:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        if not torch.isfinite(loss):
            return None
        loss.backward()
        optimizer.step()
        return loss

    return step


# --- losses -----------------------------------------------------------------------------


def _loss_backward(
    compute: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
) -> Build:
    """compute(logits, target, class_weight) on a batch whose every third target is ignored."""

    def build(device: torch.device) -> Callable[[], object]:
        torch.manual_seed(0)
        logits = torch.randn(12, 10, device=device, requires_grad=True)
        target = torch.randint(0, 10, (12,), device=device)
        target[::3] = -100
        class_weight = torch.rand(10, device=device) + 0.5

        def step() -> torch.Tensor:
            loss = compute(logits, target, class_weight)
            loss.backward()
            return loss

        return step

    return build


PATTERNS: tuple[Pattern, ...] = (
    # optimizers
    Pattern(
        "SGD step (foreach)",
        "optimizers",
        False,
        "torch/optim/sgd.py _multi_tensor_sgd updates with _foreach_add_ and a Python-float lr:"
        " nothing is read back to the host.",
        _optimizer_step(lambda p: torch.optim.SGD(p, lr=0.1, foreach=True), first_step=False),
    ),
    Pattern(
        "SGD step (for-loop)",
        "optimizers",
        False,
        "torch/optim/sgd.py _single_tensor_sgd does param.add_(grad, alpha=-lr) with a"
        " Python-float lr: no host read.",
        _optimizer_step(lambda p: torch.optim.SGD(p, lr=0.1, foreach=False), first_step=False),
    ),
    Pattern(
        "SGD with momentum, first step (foreach)",
        "optimizers",
        False,
        "torch/optim/sgd.py _multi_tensor_sgd: a missing momentum buffer is created with"
        " torch.clone(grad).detach() on the device, no host read.",
        _optimizer_step(
            lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, foreach=True), first_step=True
        ),
    ),
    Pattern(
        "SGD with momentum, later steps (for-loop)",
        "optimizers",
        False,
        "torch/optim/sgd.py _single_tensor_sgd: buf.mul_(momentum).add_(grad) and"
        " param.add_(buf, alpha=-lr) stay on the device.",
        _optimizer_step(
            lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, foreach=False), first_step=False
        ),
    ),
    Pattern(
        "Adam first step (foreach)",
        "optimizers",
        False,
        "torch/optim/adam.py Adam._init_group: without capturable/fused, state['step'] is a"
        " CPU tensor and exp_avg/exp_avg_sq are zeros_like on the device: no device read.",
        _optimizer_step(lambda p: torch.optim.Adam(p, lr=1e-3, foreach=True), first_step=True),
    ),
    Pattern(
        "Adam later steps (foreach)",
        "optimizers",
        False,
        "torch/optim/adam.py _multi_tensor_adam: step_t lives on the CPU unless"
        " capturable/fused, so _get_value(step).item() reads host memory and the bias"
        " corrections are Python floats.",
        _optimizer_step(lambda p: torch.optim.Adam(p, lr=1e-3, foreach=True), first_step=False),
    ),
    Pattern(
        "Adam later steps (for-loop)",
        "optimizers",
        False,
        "torch/optim/adam.py _single_tensor_adam: step_t lives on the CPU unless"
        " capturable/fused, so step = _get_value(step_t) is a host read, not a device one.",
        _optimizer_step(lambda p: torch.optim.Adam(p, lr=1e-3, foreach=False), first_step=False),
    ),
    Pattern(
        "Adam step (fused)",
        "optimizers",
        False,
        "torch/optim/adam.py _fused_adam keeps step on the device and calls"
        " torch._fused_adam_, whose aten/src/ATen/native/cuda/FusedAdamKernel.cu kernel reads"
        " step, grad_scale and found_inf through device pointers.",
        _optimizer_step(lambda p: torch.optim.Adam(p, lr=1e-3, fused=True), first_step=False),
    ),
    Pattern(
        "AdamW later steps (foreach)",
        "optimizers",
        False,
        "torch/optim/adamw.py AdamW is Adam with decoupled weight decay; _multi_tensor_adam's"
        " step_t lives on the CPU unless capturable/fused, so no device value is read.",
        _optimizer_step(
            lambda p: torch.optim.AdamW(p, lr=1e-3, weight_decay=0.01, foreach=True),
            first_step=False,
        ),
    ),
    Pattern(
        "AdamW first step (for-loop)",
        "optimizers",
        False,
        "torch/optim/adam.py Adam._init_group puts state['step'] on the CPU and"
        " _single_tensor_adam applies param.mul_(1 - lr * weight_decay): no device read.",
        _optimizer_step(
            lambda p: torch.optim.AdamW(p, lr=1e-3, weight_decay=0.01, foreach=False),
            first_step=True,
        ),
    ),
    Pattern(
        "LBFGS step",
        "optimizers",
        True,
        "torch/optim/lbfgs.py LBFGS.step does loss = float(orig_loss) and"
        " `if opt_cond:` on a device comparison, both host reads.",
        _lbfgs_step,
        ("float", "bool"),
    ),
    Pattern(
        "StepLR scheduler.step()",
        "optimizers",
        False,
        "torch/optim/lr_scheduler.py StepLR computes the new lr in Python floats and"
        " _update_param_group_val assigns it to param_group['lr'].",
        _scheduler_step(lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=10)),
    ),
    Pattern(
        "OneCycleLR scheduler.step()",
        "optimizers",
        False,
        "torch/optim/lr_scheduler.py OneCycleLR.get_lr anneals lr and momentum in Python"
        " floats from the step count; no tensor is read.",
        _scheduler_step(
            lambda o: torch.optim.lr_scheduler.OneCycleLR(o, max_lr=0.1, total_steps=1000)
        ),
    ),
    Pattern(
        "CosineAnnealingLR scheduler.step()",
        "optimizers",
        False,
        "torch/optim/lr_scheduler.py CosineAnnealingLR.get_lr uses math.cos on Python floats;"
        " no tensor is read.",
        _scheduler_step(lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=100)),
    ),
    Pattern(
        "ReduceLROnPlateau.step(val_loss tensor)",
        "optimizers",
        True,
        "torch/optim/lr_scheduler.py ReduceLROnPlateau.step does current = float(metrics),"
        " which copies the device loss to the host.",
        _plateau_step,
        ("float",),
    ),
    # training
    Pattern(
        "AMP GradScaler scale/step/update (Adam)",
        "training",
        True,
        "torch/amp/grad_scaler.py GradScaler._maybe_opt_step reads"
        " sum(v.item() for v in found_inf_per_device.values()) before calling a non-fused"
        " optimizer's step.",
        _grad_scaler_step(fused=False),
        ("item",),
    ),
    Pattern(
        "AMP GradScaler scale/step/update (fused Adam)",
        "training",
        False,
        "torch/amp/grad_scaler.py GradScaler.step hands grad_scale and found_inf to an optimizer"
        " with _step_supports_amp_scaling, and FusedAdamKernel.cu skips the update on the"
        " device, removing the found_inf sync (see its note on GradScaler).",
        _grad_scaler_step(fused=True),
    ),
    Pattern(
        "training step with clip_grad_norm_",
        "training",
        False,
        "torch/nn/utils/clip_grad.py computes the total norm with _foreach_norm and scales the"
        " grads by torch.clamp(max_norm / (total_norm + 1e-6), max=1.0) on the device.",
        _clipped_step(error_if_nonfinite=False),
    ),
    Pattern(
        "clip_grad_norm_(error_if_nonfinite=True)",
        "training",
        True,
        "torch/nn/utils/clip_grad.py _get_total_norm does"
        " `if error_if_nonfinite and torch.logical_or(total_norm.isnan(), total_norm.isinf()):`,"
        " a host read of a device bool.",
        _clipped_step(error_if_nonfinite=True),
        ("bool",),
    ),
    Pattern(
        "skip the step when the loss is not finite",
        "training",
        True,
        "`if not torch.isfinite(loss):` calls Tensor.__bool__, which copies the device bool to"
        " the host (aten _local_scalar_dense).",
        _skip_nonfinite_step,
        ("bool",),
    ),
    # losses
    Pattern(
        "cross_entropy with ignore_index",
        "losses",
        False,
        "aten/src/ATen/native/cuda/Loss.cu nll_loss_forward_out_cuda_template skips ignored"
        " targets and sums total_weight inside the kernel; bad targets are device asserts.",
        _loss_backward(lambda z, t, w: F.cross_entropy(z, t, ignore_index=-100)),
    ),
    Pattern(
        "nll_loss(log_softmax) with ignore_index",
        "losses",
        False,
        "aten/src/ATen/native/cuda/Loss.cu nll_loss forward and backward kernels handle"
        " ignore_index and the mean's total_weight on the device.",
        _loss_backward(lambda z, t, w: F.nll_loss(F.log_softmax(z, dim=-1), t, ignore_index=-100)),
    ),
    Pattern(
        "cross_entropy with label_smoothing",
        "losses",
        False,
        "aten/src/ATen/native/LossNLL.cpp cross_entropy_loss_label_smoothing without weight"
        " divides by (~ignore_mask).sum() as a tensor: no host read.",
        _loss_backward(
            lambda z, t, w: F.cross_entropy(z, t, ignore_index=-100, label_smoothing=0.1)
        ),
    ),
    Pattern(
        "cross_entropy with label_smoothing and class weights",
        "losses",
        True,
        "aten/src/ATen/native/LossNLL.cpp cross_entropy_loss_label_smoothing with a weight and"
        " mean reduction computes weight.gather(0, target.masked_select(~ignore_mask)), and"
        " masked_select has a data-dependent size.",
        _loss_backward(
            lambda z, t, w: F.cross_entropy(z, t, weight=w, ignore_index=-100, label_smoothing=0.1)
        ),
        ("masked_select",),
    ),
)
