"""The catalogue's patterns of embeddings, attention and transformers."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .common import Build, Pattern, PositionalEncoding, TokenClassifier, _padding_mask

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


PATTERNS: tuple[Pattern, ...] = (
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
)
