"""Realistic PyTorch code patterns, each labelled with whether it makes the host wait for a GPU.

A pattern *synchronises* when its tensors live on a CUDA device and, with
``torch.cuda.set_sync_debug_mode("error")`` armed, running it (after one warm-up call)
raises: the CUDA backend performed a blocking stream synchronisation or a blocking
``memcpy_and_sync`` (a device-to-host read such as ``.item()``, ``bool(t)``, ``print(t)``
or ``nonzero``, or a blocking host-to-device copy such as ``torch.tensor(data,
device="cuda")``). Every label is that CUDA behaviour, and its ``reason`` names the PyTorch
source or documentation it was read from; patterns whose CUDA behaviour could not be
established from the sources are left out. ``build(device)`` sets a pattern up on
``device`` and returns the zero-argument code that is judged, so the catalogue runs on the
CPU (against a detector) and on a CUDA GPU (to confirm the labels).
"""

from __future__ import annotations

import io
import logging
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class Pattern:
    """One labelled pattern.

    ``syncs`` and ``reason`` describe the pattern on CUDA tensors. ``build(device)`` makes
    the models and data on ``device`` and returns the code that is judged. ``operations``
    lists, most important first, the operations a detector should report when it syncs.
    """

    name: str
    area: str
    syncs: bool
    reason: str
    build: Callable[[torch.device], Callable[[], object]]
    operations: tuple[str, ...] = ()
    #: why a CPU-only run cannot tell, "" when it can: a tensor made on the host before
    #: the judged code looks like any other input there
    hidden_on_cpu: str = ""


Build = Callable[[torch.device], Callable[[], object]]
MakeOptimizer = Callable[[Iterator[nn.Parameter]], torch.optim.Optimizer]


class MLP(nn.Module):
    def __init__(self, features: int = 16, hidden: int = 32, classes: int = 10) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class TokenClassifier(nn.Module):
    def __init__(self, vocab: int = 100, dim: int = 16, classes: int = 10) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim, padding_idx=0)
        self.head = nn.Linear(dim, classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(tokens).mean(dim=1))


class PositionalEncoding(nn.Module):
    def __init__(self, dim: int = 16, max_len: int = 64) -> None:
        super().__init__()
        position = torch.arange(max_len).unsqueeze(1)
        frequency = torch.exp(torch.arange(0, dim, 2) * (-math.log(10000.0) / dim))
        pe = torch.zeros(1, max_len, dim)
        pe[0, :, 0::2] = torch.sin(position * frequency)
        pe[0, :, 1::2] = torch.cos(position * frequency)
        self.register_buffer("pe", pe)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.pe[:, : x.size(1)].to(x.device)


def _batch(device: torch.device, n: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(n, 16, device=device), torch.randint(0, 10, (n,), device=device)


def _padding_mask(lengths: torch.Tensor, length: int) -> torch.Tensor:
    """True at the padded positions of right-padded sequences."""
    return torch.arange(length, device=lengths.device) >= lengths[:, None]


def _string_logger(level: int) -> logging.Logger:
    logger = logging.Logger("sync_catalogue", level)
    logger.addHandler(logging.StreamHandler(io.StringIO()))
    return logger


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


# --- embeddings -------------------------------------------------------------------------


def _embedding_step(device: torch.device) -> Callable[[], object]:
    torch.manual_seed(0)
    model = TokenClassifier().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    tokens = torch.randint(1, 100, (8, 12), device=device)
    tokens[:, 9:] = 0
    labels = torch.randint(0, 10, (8,), device=device)

    def step() -> torch.Tensor:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(tokens), labels)
        loss.backward()
        optimizer.step()
        return loss

    return step


def _one_hot(*, num_classes: int) -> Build:
    def build(device: torch.device) -> Callable[[], object]:
        torch.manual_seed(0)
        labels = torch.randint(0, 10, (32,), device=device)
        if num_classes > 0:
            return lambda: F.one_hot(labels, num_classes=num_classes)
        return lambda: F.one_hot(labels)

    return build


def _positional_encoding(device: torch.device) -> Callable[[], object]:
    torch.manual_seed(0)
    encoding = PositionalEncoding().to(device)
    x = torch.randn(4, 12, 16, device=device)
    return lambda: encoding(x)


# --- attention --------------------------------------------------------------------------


def _qkv(device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Query, key, value (batch 2, heads 2, length 8, head dim 8) and a boolean keep-mask."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 8, 8, device=device) for _ in range(3))
    keep = (torch.rand(8, 8, device=device) > 0.3) | torch.eye(8, dtype=torch.bool, device=device)
    return q, k, v, keep


def _sdpa_with_mask(device: torch.device) -> Callable[[], object]:
    q, k, v, keep = _qkv(device)
    return lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=keep)


def _sdpa_causal(device: torch.device) -> Callable[[], object]:
    q, k, v, _ = _qkv(device)
    return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)


def _manual_masked_attention(device: torch.device) -> Callable[[], object]:
    q, k, v, keep = _qkv(device)

    def attend() -> torch.Tensor:
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        scores = scores.masked_fill(~keep, float("-inf"))
        return scores.softmax(dim=-1) @ v

    return attend


def _mha_training_step(device: torch.device) -> Callable[[], object]:
    torch.manual_seed(0)
    attention = nn.MultiheadAttention(16, num_heads=2, batch_first=True).to(device)
    optimizer = torch.optim.SGD(attention.parameters(), lr=0.1)
    x = torch.randn(4, 10, 16, device=device)
    padding = _padding_mask(torch.tensor([10, 7, 4, 9], device=device), 10)

    def step() -> torch.Tensor:
        optimizer.zero_grad()
        out, _ = attention(x, x, x, key_padding_mask=padding)
        loss = out.pow(2).mean()
        loss.backward()
        optimizer.step()
        return loss

    return step


# --- transformers -----------------------------------------------------------------------


def _encoder(device: torch.device) -> nn.TransformerEncoder:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(
        d_model=16, nhead=2, dim_feedforward=32, dropout=0.0, batch_first=True
    )
    return nn.TransformerEncoder(layer, num_layers=2).to(device).eval()


def _encoder_inference(*, padding: bool = False, causal: bool = False) -> Build:
    def build(device: torch.device) -> Callable[[], object]:
        encoder = _encoder(device)
        src = torch.randn(4, 10, 16, device=device)
        kwargs: dict[str, torch.Tensor] = {}
        if padding:
            lengths = torch.tensor([10, 7, 4, 9], device=device)
            kwargs["src_key_padding_mask"] = _padding_mask(lengths, 10)
        if causal:
            kwargs["mask"] = nn.Transformer.generate_square_subsequent_mask(10, device=device)

        def infer() -> torch.Tensor:
            with torch.no_grad():
                return encoder(src, **kwargs)

        return infer

    return build


def _decoder_inference(*, causal_hint: bool) -> Build:
    def build(device: torch.device) -> Callable[[], object]:
        torch.manual_seed(0)
        layer = nn.TransformerDecoderLayer(
            d_model=16, nhead=2, dim_feedforward=32, dropout=0.0, batch_first=True
        )
        decoder = nn.TransformerDecoder(layer, num_layers=2).to(device).eval()
        tgt = torch.randn(4, 6, 16, device=device)
        memory = torch.randn(4, 10, 16, device=device)
        tgt_mask = nn.Transformer.generate_square_subsequent_mask(6, device=device)

        def infer() -> torch.Tensor:
            with torch.no_grad():
                if causal_hint:
                    return decoder(tgt, memory, tgt_mask=tgt_mask, tgt_is_causal=True)
                return decoder(tgt, memory, tgt_mask=tgt_mask)

        return infer

    return build


# --- sampling ---------------------------------------------------------------------------


def _next_token_logits(device: torch.device) -> torch.Tensor:
    torch.manual_seed(0)
    return torch.randn(4, 50, device=device)


def _multinomial(num_samples: int, *, replacement: bool) -> Build:
    def build(device: torch.device) -> Callable[[], object]:
        probs = _next_token_logits(device).softmax(dim=-1)
        return lambda: torch.multinomial(probs, num_samples, replacement=replacement)

    return build


def _greedy(device: torch.device) -> Callable[[], object]:
    logits = _next_token_logits(device)
    return lambda: logits.argmax(dim=-1)


def _top_k_multinomial(device: torch.device) -> Callable[[], object]:
    logits = _next_token_logits(device)

    def sample() -> torch.Tensor:
        values, indices = logits.topk(10, dim=-1)
        choice = torch.multinomial(values.softmax(dim=-1), 1)
        return indices.gather(-1, choice)

    return sample


def _top_k_exponential_race(device: torch.device) -> Callable[[], object]:
    logits = _next_token_logits(device)

    def sample() -> torch.Tensor:
        values, indices = logits.topk(10, dim=-1)
        probs = values.softmax(dim=-1)
        choice = (probs / torch.empty_like(probs).exponential_()).argmax(dim=-1, keepdim=True)
        return indices.gather(-1, choice)

    return sample


def _beam_step(device: torch.device) -> Callable[[], object]:
    torch.manual_seed(0)
    batch, beams, vocab = 2, 4, 50
    beam_scores = torch.zeros(batch, beams, device=device)
    history = torch.randint(0, vocab, (batch, beams, 5), device=device)
    logits = torch.randn(batch, beams, vocab, device=device)

    def step() -> tuple[torch.Tensor, torch.Tensor]:
        scores = beam_scores.unsqueeze(-1) + logits.log_softmax(dim=-1)
        top_scores, flat = scores.view(batch, -1).topk(beams, dim=-1)
        parent = torch.div(flat, vocab, rounding_mode="floor")
        token = flat % vocab
        kept = history.gather(1, parent.unsqueeze(-1).expand(-1, -1, history.size(-1)))
        return top_scores, torch.cat([kept, token.unsqueeze(-1)], dim=-1)

    return step


def _beam_search_early_stop(device: torch.device) -> Callable[[], object]:
    torch.manual_seed(0)
    steps, beams, vocab, eos = 6, 4, 20, 3
    step_logits = torch.randn(steps, beams, vocab, device=device)

    def search() -> torch.Tensor:
        finished = torch.zeros(beams, dtype=torch.bool, device=device)
        tokens = []
        for t in range(steps):
            token = step_logits[t].argmax(dim=-1)
            tokens.append(token)
            finished = finished | (token == eos)
            if finished.all():
                break
        return torch.stack(tokens, dim=-1)

    return search


def _categorical_policy(device: torch.device) -> Callable[[], object]:
    torch.manual_seed(0)
    policy = nn.Linear(16, 6).to(device)
    observations = torch.randn(8, 16, device=device)

    def act() -> tuple[torch.Tensor, torch.Tensor]:
        dist = torch.distributions.Categorical(logits=policy(observations))
        action = dist.sample()
        return action, dist.log_prob(action)

    return act


def _gaussian_latent(*, distribution: bool, validate_args: bool = False) -> Build:
    def build(device: torch.device) -> Callable[[], object]:
        torch.manual_seed(0)
        encoder = nn.Linear(16, 8).to(device)
        x = torch.randn(8, 16, device=device)

        def sample() -> torch.Tensor:
            mu, raw_scale = encoder(x).chunk(2, dim=-1)
            sigma = F.softplus(raw_scale) + 1e-3
            if distribution:
                normal = torch.distributions.Normal(mu, sigma, validate_args=validate_args)
                return normal.rsample()
            return mu + sigma * torch.randn_like(sigma)

        return sample

    return build


def _shuffle_on_device(device: torch.device) -> Callable[[], object]:
    x, y = _batch(device, 32)

    def shuffle() -> tuple[torch.Tensor, torch.Tensor]:
        order = torch.randperm(x.size(0), device=x.device)
        return x[order], y[order]

    return shuffle


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


def _eval_batch(device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    logits = torch.randn(32, 10, device=device)
    y = torch.randint(0, 10, (32,), device=device)
    return logits, y, F.cross_entropy(logits, y)


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


# --- the catalogue ----------------------------------------------------------------------


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
    # embeddings
    Pattern(
        "Embedding(padding_idx) training step",
        "embeddings",
        False,
        "aten/src/ATen/native/cuda/Embedding.cu embedding_dense_backward_cuda: with at most"
        " 3072 indices and no scale_grad_by_freq, embedding_backward_feature_kernel skips"
        " padding_idx on the device without sorting.",
        _embedding_step,
    ),
    Pattern(
        "F.one_hot(labels, num_classes=10)",
        "embeddings",
        False,
        "aten/src/ATen/native/Onehot.cpp one_hot reads min/max only for CPU tensors"
        " (for cuda it relies on device asserts from scatter); test_torch.py test_sync_warning"
        " expects no sync.",
        _one_hot(num_classes=10),
    ),
    Pattern(
        "F.one_hot(labels) without num_classes",
        "embeddings",
        True,
        "aten/src/ATen/native/Onehot.cpp one_hot sets num_classes = self.max().item() + 1"
        " when num_classes == -1; test_torch.py test_sync_warning expects a sync.",
        _one_hot(num_classes=-1),
        ("item",),
    ),
    Pattern(
        "positional encoding sliced from a registered buffer",
        "embeddings",
        False,
        "The buffer moved with the module, so self.pe[:, :n] is a view and Tensor.to(x.device)"
        " on a tensor already there returns it without a copy.",
        _positional_encoding,
    ),
    # attention
    Pattern(
        "scaled_dot_product_attention with a boolean attn_mask",
        "attention",
        False,
        "aten/src/ATen/native/transformers/attention.cpp scaled_dot_product_attention turns a"
        " bool mask into an additive one with at::where and picks the kernel from shapes and"
        " dtypes only (sdp_utils); no value is read.",
        _sdpa_with_mask,
    ),
    Pattern(
        "scaled_dot_product_attention(is_causal=True)",
        "attention",
        False,
        "aten/src/ATen/native/transformers/attention.cpp: the causal mask is built on the"
        " device (or applied inside the fused kernel) and the backend is chosen from shapes"
        " and dtypes only.",
        _sdpa_causal,
    ),
    Pattern(
        "attention scores masked_fill(-inf) + softmax",
        "attention",
        False,
        "masked_fill with a Python-float value is an elementwise device kernel"
        " (Tensor.masked_fill(mask, Scalar)); matmul and softmax read nothing back.",
        _manual_masked_attention,
    ),
    Pattern(
        "MultiheadAttention with key_padding_mask, training step",
        "attention",
        False,
        "torch/nn/functional.py multi_head_attention_forward converts the bool mask with"
        " _canonical_mask (zeros_like().masked_fill_) and only checks shapes"
        " (_check_key_padding_mask); the rest is baddbmm/softmax on the device.",
        _mha_training_step,
    ),
    # transformers
    Pattern(
        "TransformerEncoder inference without a padding mask",
        "transformers",
        False,
        "torch/nn/modules/transformer.py takes the dense fast path"
        " torch._transformer_encoder_layer_fwd, whose native_multi_head_attention_cuda"
        " (aten/src/ATen/native/transformers/cuda/attention.cu) chooses kernels from shapes"
        " only.",
        _encoder_inference(),
    ),
    Pattern(
        "TransformerEncoder inference with src_key_padding_mask",
        "transformers",
        True,
        "torch/nn/modules/transformer.py TransformerEncoder.forward calls"
        " torch._nested_tensor_from_mask_left_aligned (sizes.equal(nums)) and"
        " torch._nested_tensor_from_mask, which copies the sizes with .to(kCPU)"
        " (aten/src/ATen/native/nested/NestedTensorTransformerFunctions.cpp).",
        _encoder_inference(padding=True),
        ("nested tensor from mask",),
    ),
    Pattern(
        "TransformerEncoder inference with a causal mask and no is_causal",
        "transformers",
        True,
        "torch/nn/modules/transformer.py _detect_is_causal_mask does"
        " bool((mask == causal_comparison).all()) when is_causal is None.",
        _encoder_inference(causal=True),
        ("bool",),
    ),
    Pattern(
        "TransformerDecoder inference with tgt_mask and no tgt_is_causal",
        "transformers",
        True,
        "torch/nn/modules/transformer.py TransformerDecoder.forward calls"
        " _detect_is_causal_mask(tgt_mask, None, seq_len), which does"
        " bool((mask == causal_comparison).all()).",
        _decoder_inference(causal_hint=False),
        ("bool",),
    ),
    Pattern(
        "TransformerDecoder inference with tgt_mask and tgt_is_causal=True",
        "transformers",
        False,
        "torch/nn/modules/transformer.py _detect_is_causal_mask returns the hint unchecked,"
        " and functional.py multi_head_attention_forward drops the float mask for SDPA's"
        " is_causal (float masks also keep MultiheadAttention off its native fast path).",
        _decoder_inference(causal_hint=True),
    ),
    # sampling
    Pattern(
        "torch.multinomial(probs, 1)",
        "sampling",
        True,
        "aten/src/ATen/native/Distributions.cpp multinomial_out: with one sample it validates"
        " probabilities with ((self.max() < INFINITY) & (self.min() >= 0)).item() and"
        " (self.sum(1) == 0).sum().item().",
        _multinomial(1, replacement=False),
        ("multinomial",),
    ),
    Pattern(
        "torch.multinomial(probs, 5) without replacement",
        "sampling",
        True,
        "aten/src/ATen/native/Distributions.cpp multinomial_out: without replacement it"
        " validates probabilities with .item() before the exponential-race topk.",
        _multinomial(5, replacement=False),
        ("multinomial",),
    ),
    Pattern(
        "torch.multinomial(probs, 5, replacement=True)",
        "sampling",
        False,
        "aten/src/ATen/native/Distributions.cpp skips the .item() checks when sampling several"
        " with replacement; cuda/MultinomialKernel.cu checks probabilities with"
        " CUDA_KERNEL_ASSERT and samples on the device.",
        _multinomial(5, replacement=True),
    ),
    Pattern(
        "greedy decoding with argmax",
        "sampling",
        False,
        "argmax is a device reduction whose result stays a tensor.",
        _greedy,
    ),
    Pattern(
        "top-k sampling with torch.multinomial",
        "sampling",
        True,
        "topk stays on the device but torch.multinomial(probs, 1) validates probabilities"
        " with .item() (aten/src/ATen/native/Distributions.cpp multinomial_out).",
        _top_k_multinomial,
        ("multinomial",),
    ),
    Pattern(
        "top-k sampling with an exponential race (argmax of p / Exp(1))",
        "sampling",
        False,
        "The Gumbel trick multinomial_out itself uses (Distributions.cpp) done with"
        " exponential_, div and argmax on the device, without its .item() checks.",
        _top_k_exponential_race,
    ),
    Pattern(
        "beam-search step with topk + gather",
        "sampling",
        False,
        "topk (aten/src/ATen/native/cuda/TensorTopK.cu launches gather kernels only), integer"
        " division and gather keep every value on the device.",
        _beam_step,
    ),
    Pattern(
        "beam search that stops with `if finished.all():`",
        "sampling",
        True,
        "`if finished.all():` calls Tensor.__bool__ on a device tensor each step, a copy to"
        " the host (aten _local_scalar_dense).",
        _beam_search_early_stop,
        ("bool",),
    ),
    Pattern(
        "Categorical(logits=...).sample() and log_prob",
        "sampling",
        True,
        "torch/distributions/categorical.py Categorical.sample calls"
        " torch.multinomial(probs_2d, 1, True), whose one-sample path validates with .item()"
        " (Distributions.cpp); argument validation may add `if not torch._is_all_true(valid):`.",
        _categorical_policy,
        ("multinomial",),
    ),
    Pattern(
        "Normal(mu, sigma, validate_args=True).rsample()",
        "sampling",
        True,
        "torch/distributions/distribution.py Distribution.__init__ checks loc and scale with"
        " `if not torch._is_all_true(valid):`, a host read of a device bool.",
        _gaussian_latent(distribution=True, validate_args=True),
        ("bool",),
    ),
    Pattern(
        "Normal(mu, sigma, validate_args=False).rsample()",
        "sampling",
        False,
        "Without validation Normal only broadcasts loc and scale, and rsample is"
        " loc + _standard_normal(...) * scale with normal_() on the device"
        " (torch/distributions/normal.py, utils.py).",
        _gaussian_latent(distribution=True, validate_args=False),
    ),
    Pattern(
        "reparameterised sample mu + sigma * randn_like(sigma)",
        "sampling",
        False,
        "randn_like, mul and add are device kernels; nothing validates values on the host.",
        _gaussian_latent(distribution=False),
    ),
    Pattern(
        "shuffle a batch with torch.randperm on the device",
        "sampling",
        False,
        "aten/src/ATen/native/cuda/Randperm.cu sorts random keys on the device, indexing with"
        " a device LongTensor is a kernel; test_torch.py test_sync_warning expects no sync"
        " for randperm.",
        _shuffle_on_device,
    ),
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
