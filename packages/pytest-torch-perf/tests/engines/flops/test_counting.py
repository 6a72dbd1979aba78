"""Counting FLOPs with torch's FlopCounterMode: exact counts per module and per op,
the work the counter has no formula for (coverage), plain callables and blocks,
unwinding after a raise, and a count's JSON for the baseline file."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack
from torch.utils.checkpoint import checkpoint
from torch.utils.flop_counter import flop_registry

from pytest_torch.perf.engines.flops.counting import (
    KEPT,
    FlopCount,
    FlopCounting,
    count_flops,
    fmt_flops,
    is_custom_op,
    is_matrix_work,
)
from pytest_torch.perf.engines.flops.judging import short_count


@pytest.fixture(autouse=True)
def _own_random_state():
    """The tests make layers and inputs at random: the process's state is left as found."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        yield


def _exact(target, *inputs):
    """Count twice: a count is deterministic, the second equals the first."""
    first, second = count_flops(target, *inputs), count_flops(target, *inputs)
    assert first == second
    return first


def test_a_linear_layer_counts_2_batch_in_out():
    counted = _exact(nn.Linear(64, 32), torch.randn(8, 64))
    assert counted.total == 2 * 8 * 64 * 32 == 32_768
    assert counted.by_op == {"aten.addmm": 32_768}
    assert counted.by_module == {"Linear": 32_768}
    assert counted.uncounted == {}
    # without a bias it is a plain matrix product
    assert count_flops(nn.Linear(64, 32, bias=False), torch.randn(8, 64)).by_op == {
        "aten.mm": 32_768
    }


def test_a_convolution_counts_2_per_multiply_add():
    counted = _exact(nn.Conv2d(3, 8, 3), torch.randn(2, 3, 10, 10))
    # batch x output channels x output pixels (8 x 8) x input channels x kernel (3 x 3) x 2
    assert counted.total == 2 * 8 * 64 * 3 * 9 * 2 == 55_296
    assert counted.by_op == {"aten.convolution": 55_296}
    assert counted.by_module == {"Conv2d": 55_296}


class _MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(16, 32)
        self.act = nn.ReLU()
        self.down = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.act(self.up(x)))


def test_an_mlp_counts_per_module_with_submodules_in_their_parent():
    counted = _exact(_MLP(), torch.randn(5, 16))
    up, down = 2 * 5 * 16 * 32, 2 * 5 * 32 * 4
    assert counted.total == up + down == 6_400
    # largest first; the ReLU does no FLOPs in the counter's sense and is not listed
    assert list(counted.by_module.items()) == [
        ("_MLP", 6_400),
        ("_MLP.up", up),
        ("_MLP.down", down),
    ]
    assert counted.by_op == {"aten.addmm": 6_400}


def _encoder() -> nn.TransformerEncoderLayer:
    return nn.TransformerEncoderLayer(64, 4, dim_feedforward=128, batch_first=True)


def test_a_transformer_layer_in_eval_names_its_fused_kernels_as_not_counted():
    """In eval under inference_mode the layer takes its fused fast path: one kernel with
    no FLOP formula, so the count is short and says so."""
    counted = _exact(_encoder().eval(), torch.randn(2, 16, 64))
    assert counted.uncounted
    assert set(counted.uncounted) <= {
        "aten._transformer_encoder_layer_fwd",
        "aten._native_multi_head_attention",
        "aten._scaled_dot_product_flash_attention_for_cpu",
    }
    assert counted.total < 2_228_224  # what the same layer counts without the fast path


def test_a_transformer_layer_in_train_mode_counts_its_attention():
    """In train mode there is no fast path: every projection and both attention products
    are counted, exactly (dropout makes the CPU pick the math attention: bmm)."""
    batch, seq, d_model, ff = 2, 16, 64, 128
    counted = _exact(_encoder().train(), torch.randn(batch, seq, d_model))
    tokens = batch * seq
    linear = 2 * tokens * (d_model * 3 * d_model + d_model * d_model + 2 * d_model * ff)
    attention = 2 * (2 * batch * seq * seq * d_model)  # q @ k^T and weights @ v, all heads
    assert counted.total == linear + attention == 2_228_224
    assert counted.uncounted == {}
    assert "aten.bmm" in counted.by_op
    assert counted.by_module["TransformerEncoderLayer"] == counted.total
    assert counted.by_module["TransformerEncoderLayer.linear1"] == 2 * tokens * d_model * ff


def test_a_custom_op_is_named_as_not_counted_until_it_has_a_formula():
    """A torch.library custom op runs whole below every dispatch mode: relu(x @ w1) @ w2
    counts 0 and is named, whatever its name; with a registered formula it counts."""
    from torch.utils.flop_counter import flop_registry, register_flop_formula

    @torch.library.custom_op("pytest_torch_tests::mlp", mutates_args=())
    def mlp(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        return torch.relu(x @ w1) @ w2

    x, w1, w2 = torch.randn(64, 64), torch.randn(64, 128), torch.randn(128, 64)
    exact = 2 * 64 * 64 * 128 + 2 * 64 * 128 * 64
    counted = count_flops(lambda: mlp(x, w1, w2))
    assert counted.total == 0 and counted.uncounted == {"pytest_torch_tests.mlp": 1}
    assert "register_flop_formula" in short_count(counted.uncounted)
    op = torch.ops.pytest_torch_tests.mlp
    try:

        @register_flop_formula(op)
        def _(x_shape, w1_shape, w2_shape, *args, out_shape=None, **kwargs):
            return (
                2 * x_shape[0] * w1_shape[0] * w1_shape[1]
                + 2 * x_shape[0] * w2_shape[0] * w2_shape[1]
            )

        counted = count_flops(lambda: mlp(x, w1, w2))
        assert counted.total == exact == 2_097_152 and counted.uncounted == {}
    finally:
        flop_registry.pop(op, None)


def test_every_namespace_torch_registers_is_its_own():
    """No op of torch's own is taken for a custom op (checked against this torch, with
    the parts that register ops of their own when imported loaded first)."""
    import importlib
    import warnings

    modules = ["torch._inductor.compile_fx", "torch.onnx", "torch.export", "torch._dynamo"]
    if torch.distributed.is_available():
        modules.append("torch.distributed.tensor")
    with warnings.catch_warnings():  # torch's own deprecations, on import
        warnings.simplefilter("ignore")
        for module in modules:
            importlib.import_module(module)
    names = {str(name).partition(".")[0] for name in torch._C._dispatch_get_all_op_names()}
    assert {
        n for n in names if is_custom_op(n) and not n.startswith("pytest_torch_tests::")
    } == set()


def test_the_advice_for_multihead_attention_counts_it():
    """What the end of the run advises for a fused MultiheadAttention works: with autograd
    on, or in train mode, it counts every projection and both attention products; in
    eval under no_grad it runs fused and counts nothing, need_weights=True or not."""
    mha = nn.MultiheadAttention(64, 4, batch_first=True).eval()
    x = torch.randn(2, 16, 64)
    batch, seq, d_model = 2, 16, 64
    exact = 2 * batch * seq * 4 * d_model * d_model + 2 * (2 * batch * seq * seq * d_model)
    with torch.no_grad():
        fused = count_flops(lambda: mha(x, x, x, need_weights=True))
    assert fused.total == 0 and fused.uncounted == {"aten._native_multi_head_attention": 1}
    assert count_flops(lambda: mha(x, x, x)).total == exact == 1_179_648  # autograd on
    with torch.no_grad():
        assert count_flops(lambda: mha.train()(x, x, x)).total == exact
    advice = short_count(fused.uncounted)
    assert "autograd on" in advice and "train mode" in advice and "need_weights" not in advice


@pytest.mark.parametrize(
    ("make", "shapes", "flops"),
    [
        pytest.param(
            lambda: F.scaled_dot_product_attention, [(2, 4, 16, 8)] * 3, 65_536, id="sdpa"
        ),
        pytest.param(
            lambda: nn.MultiheadAttention(32, 4, batch_first=True).eval(),
            [(2, 8, 32)] * 3,
            None,
            id="mha",
        ),
        pytest.param(lambda: nn.LSTM(8, 16).eval(), [(5, 2, 8)], None, id="lstm"),
        pytest.param(lambda: nn.Bilinear(3, 4, 5), [(2, 3), (2, 4)], None, id="bilinear"),
        pytest.param(lambda: torch.matmul, [(4, 3), (3,)], 2 * 4 * 3, id="mv"),
        pytest.param(lambda: torch.dot, [(3,), (3,)], 2 * 3, id="dot"),
        pytest.param(lambda: torch.linalg.solve, [(4, 4), (4, 1)], None, id="solve"),
    ],
)
def test_matrix_work_is_counted_or_named_never_silently_missing(make, shapes, flops):
    """Each of these ran, at the time of writing on CPU, a kernel with no FLOP formula:
    whatever torch does, the work is either in the count or named as not counted."""
    counted = _exact(make(), *(torch.randn(*shape) for shape in shapes))
    if counted.uncounted:
        assert all(is_matrix_work(op) for op in counted.uncounted)
    else:
        assert counted.total > 0 and (flops is None or counted.total == flops)


def test_a_plain_callable_runs_as_given():
    seen = []

    def product(a, b):
        seen.append(torch.is_inference_mode_enabled())
        return torch.matmul(a, b)

    counted = _exact(product, torch.randn(4, 3), torch.randn(3, 5))
    assert counted == FlopCount(
        120, {"aten.mm": 120}, {}, {}, by_shape={"aten.mm [4, 3] x [3, 5]": 120}
    )
    assert seen == [False, False]  # not under inference_mode: that is for modules

    class Probe(nn.Module):
        def forward(self, x):
            seen.append(torch.is_inference_mode_enabled())
            return x

    count_flops(Probe(), torch.ones(1))
    assert seen[-1] is True


def _global_state():
    from torch.nn.modules import module

    return (
        len(_get_current_dispatch_mode_stack()),
        len(module._global_forward_pre_hooks),
        len(module._global_forward_hooks),
        torch.is_inference_mode_enabled(),
    )


class _Raises(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x):
        self.linear(x)
        raise RuntimeError("boom")


def test_a_call_that_raises_leaves_no_mode_hook_or_inference_mode_behind():
    before = _global_state()
    assert before == (0, 0, 0, False)
    with pytest.raises(RuntimeError, match="boom"):
        count_flops(_Raises(), torch.randn(2, 4))
    assert _global_state() == before
    with FlopCounting() as counting, pytest.raises(RuntimeError, match="boom"):
        _Raises()(torch.randn(2, 4))
    assert _global_state() == before
    # what ran before the raise is still counted, and counting works as before
    assert counting.result.by_module == {"_Raises": 64, "_Raises.linear": 64}
    assert count_flops(nn.Linear(4, 4), torch.randn(2, 4)).total == 64


def test_a_block_counts_everything_in_it_and_nests():
    with FlopCounting() as outer:
        inner = count_flops(nn.Linear(64, 32), torch.randn(8, 64))
        torch.mm(torch.randn(2, 3), torch.randn(3, 4))
    assert inner.total == 32_768
    assert outer.result.total == 32_768 + 2 * 2 * 3 * 4
    assert outer.result.by_module == {"Linear": 32_768}  # the mm ran outside any module
    with pytest.raises(RuntimeError, match="counts once"):
        outer.__enter__()


def test_the_name_rule_covers_every_formula_and_no_pointwise_op():
    """Checked against every operator torch registers: the rule names every op that has
    a FLOP formula (so it describes the counter's own idea of work) and no op tagged
    pointwise."""
    formulas = [str(op) for op in flop_registry if isinstance(op, torch._ops.OpOverloadPacket)]
    assert formulas and all(is_matrix_work(op) for op in formulas)
    pointwise = []
    for full in torch._C._dispatch_get_all_op_names():
        namespace, _, rest = full.partition("::")
        name, _, overload = rest.partition(".")
        try:
            op = getattr(getattr(getattr(torch.ops, namespace), name), overload or "default")
        except (AttributeError, RuntimeError):
            continue
        if torch.Tag.pointwise in op.tags and is_matrix_work(f"{namespace}.{name}"):
            pointwise.append(full)
    assert pointwise == []


#: ops that do matrix, convolution or attention work (fused layers, CPU and cuDNN
#: kernels, quantized and custom namespaces), and ops that do not
# fmt: off
WORK = [
    "aten._transformer_encoder_layer_fwd", "aten._native_multi_head_attention",
    "aten._scaled_dot_product_flash_attention_for_cpu", "aten.mkldnn_rnn_layer",
    "aten._cudnn_rnn", "aten.mv", "aten.addmv", "aten.dot", "aten._trilinear",
    "aten._addmm_activation", "aten._int_mm", "aten._weight_int8pack_mm",
    "aten.cudnn_convolution", "aten._linalg_solve_ex", "aten.linalg_inv_ex",
    "aten._cdist_forward", "quantized::linear", "torchvision.deform_conv2d",
]
NOT_WORK = [
    "aten.detach", "aten.native_layer_norm", "aten._softmax", "aten.embedding",
    "aten.upsample_bilinear2d", "aten._convert_weight_to_int4pack", "aten.lu_unpack",
    "aten._cudnn_rnn_flatten_weight", "aten._thnn_fused_lstm_cell",
    "aten._linalg_check_errors", "aten.slice_inverse", "quantized::linear_prepack",
    "mkldnn::_reorder_convolution_weight",
]
# fmt: on


@pytest.mark.parametrize("op", WORK)
def test_matrix_convolution_and_attention_kernels_are_work(op):
    assert is_matrix_work(op)


@pytest.mark.parametrize("op", NOT_WORK)
def test_views_norms_and_weight_shuffles_are_not(op):
    assert not is_matrix_work(op)


def test_a_count_round_trips_through_json_keeping_the_largest():
    counted = FlopCount(
        total=10_000,
        by_op={"aten.addmm": 6_000, "aten.mm": 4_000},
        by_module={f"Net.layer{i}": 100 + i for i in range(KEPT + 5)},
        uncounted={"aten._native_multi_head_attention": 2},
    )
    data = json.loads(json.dumps(counted.to_json()))
    assert data["total"] == 10_000
    assert len(data["by_module"]) == KEPT
    assert min(data["by_module"].values()) == 105  # the 5 smallest were dropped
    again = FlopCount.from_json(data)
    assert again.total == counted.total and again.by_op == counted.by_op
    assert again.uncounted == counted.uncounted
    assert list(again.by_module) == list(data["by_module"])
    measured = count_flops(_MLP(), torch.randn(5, 16))
    assert FlopCount.from_json(json.loads(json.dumps(measured.to_json()))) == measured


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ({}, KeyError),
        ({"total": -1}, ValueError),
        ({"total": "12"}, ValueError),
        ({"total": True}, ValueError),
        ({"total": 1, "by_op": []}, TypeError),
        ({"total": 1, "uncounted": {"aten.mv": 1.5}}, ValueError),
    ],
)
def test_a_malformed_entry_is_refused(data, error):
    with pytest.raises(error):
        FlopCount.from_json(data)


def test_counts_show_every_digit():
    assert fmt_flops(2_097_152) == "2,097,152 FLOPs"
    assert fmt_flops(0) == "0 FLOPs"
    assert fmt_flops(1.5e9) == "1,500,000,000 FLOPs"


class _Checkpointed(nn.Module):
    def __init__(self, reentrant: bool | None = None) -> None:
        super().__init__()
        self.block = nn.Sequential(nn.Linear(64, 64), nn.ReLU())
        self.head = nn.Linear(64, 1)
        self.reentrant = reentrant

    def forward(self, x):
        if self.reentrant is None:
            return self.head(self.block(x))
        return self.head(checkpoint(self.block, x, use_reentrant=self.reentrant))


@pytest.mark.parametrize("reentrant", [False, True])
def test_a_checkpoint_recompute_is_counted_and_told_apart(reentrant):
    """Activation checkpointing runs the block's forward again in backward: its Linear,
    2 x 100 x 64 x 64 FLOPs more, counted as it ran; the non-reentrant variant's are
    told apart as recomputed (the reentrant one leaves no mark to tell them by)."""
    x = torch.randn(100, 64, requires_grad=True)
    plain, checkpointed = _Checkpointed(), _Checkpointed(reentrant)
    checkpointed.load_state_dict(plain.state_dict())
    before = count_flops(lambda: plain(x).sum().backward())
    after = count_flops(lambda: checkpointed(x).sum().backward())
    assert before.recomputed == 0
    assert after.total == before.total + 2 * 100 * 64 * 64
    assert after.recomputed == (0 if reentrant else 2 * 100 * 64 * 64)


def test_the_recomputed_share_and_shapes_round_trip_and_old_entries_have_none():
    count = FlopCount(10, by_op={"aten.mm": 10}, recomputed=4, by_shape={"aten.mm [2] x [2]": 10})
    assert FlopCount.from_json(json.loads(json.dumps(count.to_json()))) == count
    assert not {"recomputed", "by_shape"} & set(FlopCount(10).to_json())
    old = FlopCount.from_json({"total": 10})
    assert old.recomputed == 0 and old.by_shape == {}


def test_each_ops_flops_are_kept_by_the_shapes_of_its_inputs():
    """A Linear(64, 64) on 100 rows is one addmm of bias [64], input [100, 64] and the
    transposed weight [64, 64]; a training step's shapes add up to its total."""
    assert _exact(nn.Linear(64, 64), torch.randn(100, 64)).by_shape == {
        "aten.addmm [64] x [100, 64] x [64, 64]": 2 * 100 * 64 * 64
    }
    model = nn.Sequential(nn.Linear(32, 48), nn.ReLU(), nn.Linear(48, 8))
    step = count_flops(lambda: model(torch.randn(16, 32)).sum().backward())
    assert sum(step.by_shape.values()) == step.total
    # the gradient of the second layer's input: its output's [16, 8] by its weight
    assert step.by_shape["aten.mm [16, 8] x [8, 48]"] == 2 * 16 * 8 * 48
