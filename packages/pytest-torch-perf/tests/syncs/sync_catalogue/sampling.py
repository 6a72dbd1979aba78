"""The catalogue's patterns of sampling."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .common import Build, Pattern, _batch

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


PATTERNS: tuple[Pattern, ...] = (
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
)
