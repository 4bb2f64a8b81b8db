"""The chapter 07 reference against PyTorch's own LayerNorm, TransformerEncoderLayer and CrossEntropyLoss.

Tolerances:
- float64, atol=1e-12: layer_norm, label smoothing, the Noam formula (a handful of O(1) operations
  lose ~1e-15) and the encoder layer (a few matmuls of width <= 64, a softmax and two LayerNorms
  on O(1) values: the observed error is ~1e-15, so 1e-12 leaves three orders of margin).
- float32, atol=1e-5: the encoder layer in eval mode without grad, where PyTorch takes its fused
  "fast path" kernel and sums in another order (observed error ~5e-7).
- Statistical checks (dropout) state their standard error next to the bound.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from solutions import ch07_ffn_layernorm as ref
from solutions.ch04_multi_head import MultiHeadAttention

ATOL64 = 1e-12
ATOL32 = 1e-5

D_MODEL, N_HEADS, D_FF, B, T = 16, 4, 64, 3, 6


# --------------------------------------------------------------------------------------- layer_norm
@pytest.mark.parametrize("shape", [(5,), (2, 7), (2, 3, 16), (2, 3, 4, 8)])
@pytest.mark.parametrize("eps", [1e-5, 1e-6, 0.1])
def test_layer_norm_matches_torch(gen, shape, eps):
    d = shape[-1]
    x = 3.0 + 2.0 * torch.randn(shape, generator=gen, dtype=torch.float64)  # mean 3, std 2: not normalised yet
    w = torch.randn(d, generator=gen, dtype=torch.float64)
    b = torch.randn(d, generator=gen, dtype=torch.float64)
    expected = F.layer_norm(x, (d,), w, b, eps)
    torch.testing.assert_close(ref.layer_norm(x, w, b, eps), expected, atol=ATOL64, rtol=0)

    module = nn.LayerNorm(d, eps=eps, dtype=torch.float64)
    with torch.no_grad():
        module.weight.copy_(w)
        module.bias.copy_(b)
    torch.testing.assert_close(ref.layer_norm(x, w, b, eps), module(x), atol=ATOL64, rtol=0)


def test_layer_norm_without_affine_has_zero_mean_unit_biased_variance(gen):
    x = 5.0 + 4.0 * torch.randn(4, 10, 32, generator=gen, dtype=torch.float64)
    y = ref.layer_norm(x, None, None, eps=0.0)
    torch.testing.assert_close(y, F.layer_norm(x, (32,), eps=0.0), atol=ATOL64, rtol=0)
    torch.testing.assert_close(y.mean(-1), torch.zeros(4, 10, dtype=torch.float64), atol=ATOL64, rtol=0)
    # Biased variance (divide by d): the unbiased one would be d / (d - 1) = 32/31, a likely bug.
    torch.testing.assert_close(y.var(-1, unbiased=False), torch.ones(4, 10, dtype=torch.float64), atol=1e-10, rtol=0)


def test_layer_norm_of_a_constant_row_is_the_bias_not_nan():
    x = torch.full((2, 8), 7.0, dtype=torch.float64)
    b = torch.arange(8, dtype=torch.float64)
    y = ref.layer_norm(x, torch.ones(8, dtype=torch.float64), b)
    assert not torch.isnan(y).any(), "a constant row has variance 0: eps must be inside the square root"
    torch.testing.assert_close(y, b.expand(2, 8), atol=ATOL64, rtol=0)


def test_layer_norm_does_not_depend_on_the_batch(gen):
    x = torch.randn(8, 5, 16, generator=gen, dtype=torch.float64)
    w, b = torch.ones(16, dtype=torch.float64), torch.zeros(16, dtype=torch.float64)
    alone = ref.layer_norm(x[:1], w, b)
    in_batch = ref.layer_norm(x, w, b)[:1]
    torch.testing.assert_close(alone, in_batch, atol=0, rtol=0)


# --------------------------------------------------------------------------------------- FeedForward
@pytest.mark.parametrize("activation,act_fn", [("relu", F.relu), ("gelu", F.gelu)])
def test_feed_forward_is_linear_act_linear(gen, activation, act_fn):
    torch.manual_seed(0)
    ff = ref.FeedForward(D_MODEL, D_FF, activation=activation).double()
    x = torch.randn(B, T, D_MODEL, generator=gen, dtype=torch.float64)
    expected = act_fn(x @ ff.linear1.weight.T + ff.linear1.bias) @ ff.linear2.weight.T + ff.linear2.bias
    out = ff(x)
    assert out.shape == (B, T, D_MODEL)
    torch.testing.assert_close(out, expected, atol=ATOL64, rtol=0)


def test_feed_forward_is_position_wise(gen):
    torch.manual_seed(1)
    ff = ref.FeedForward(D_MODEL, D_FF).double()
    x = torch.randn(B, T, D_MODEL, generator=gen, dtype=torch.float64)
    one_at_a_time = torch.stack([ff(x[:, t]) for t in range(T)], dim=1)  # (B, T, D)
    torch.testing.assert_close(ff(x), one_at_a_time, atol=ATOL64, rtol=0)
    perm = torch.randperm(T, generator=gen)
    torch.testing.assert_close(ff(x[:, perm]), ff(x)[:, perm], atol=ATOL64, rtol=0)


def test_feed_forward_parameter_count():
    for d_model, d_ff in [(16, 64), (512, 2048)]:
        ff = ref.FeedForward(d_model, d_ff)
        n = sum(p.numel() for p in ff.parameters())
        assert n == ref.ffn_parameter_count(d_model, d_ff) == 2 * d_model * d_ff + d_ff + d_model


def test_feed_forward_rejects_unknown_activation():
    with pytest.raises(ValueError, match="activation"):
        ref.FeedForward(8, 32, activation="swish")


# --------------------------------------------------------------------------------------- EncoderLayer
def _random_layer(norm_first: bool, activation: str, dtype=torch.float64) -> ref.EncoderLayer:
    torch.manual_seed(3)
    layer = ref.EncoderLayer(D_MODEL, N_HEADS, D_FF, norm_first=norm_first, activation=activation).to(dtype)
    with torch.no_grad():  # LayerNorm starts as (1, 0): make the copied scale and shift visible
        for norm in (layer.norm1, layer.norm2):
            norm.weight.normal_(1.0, 0.3)
            norm.bias.normal_(0.0, 0.3)
    return layer


def _from_torch(torch_layer: nn.TransformerEncoderLayer, norm_first: bool, activation: str) -> ref.EncoderLayer:
    """Our layer with the weights of a PyTorch layer, copied here (not with the module's own helper)."""
    d = torch_layer.self_attn.embed_dim
    ours = ref.EncoderLayer(d, torch_layer.self_attn.num_heads, torch_layer.linear1.out_features,
                            norm_first=norm_first, activation=activation).to(torch_layer.linear1.weight.dtype)
    w_q, w_k, w_v = torch_layer.self_attn.in_proj_weight.chunk(3)  # packed rows: q, k, v
    b_q, b_k, b_v = torch_layer.self_attn.in_proj_bias.chunk(3)
    with torch.no_grad():
        for lin, w, b in [(ours.self_attn.w_q, w_q, b_q), (ours.self_attn.w_k, w_k, b_k), (ours.self_attn.w_v, w_v, b_v),
                          (ours.self_attn.w_o, torch_layer.self_attn.out_proj.weight, torch_layer.self_attn.out_proj.bias),
                          (ours.ff.linear1, torch_layer.linear1.weight, torch_layer.linear1.bias),
                          (ours.ff.linear2, torch_layer.linear2.weight, torch_layer.linear2.bias),
                          (ours.norm1, torch_layer.norm1.weight, torch_layer.norm1.bias),
                          (ours.norm2, torch_layer.norm2.weight, torch_layer.norm2.bias)]:
            lin.weight.copy_(w)
            lin.bias.copy_(b)
    return ours


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-ln", "pre-ln"])
def test_torch_weights_copied_into_ours_give_the_same_output(gen, norm_first):
    # The opposite direction from copy_to_torch_encoder_layer, so that the test does not trust that helper.
    torch.manual_seed(6)
    torch_layer = nn.TransformerEncoderLayer(D_MODEL, N_HEADS, D_FF, dropout=0.0, batch_first=True,
                                             norm_first=norm_first, dtype=torch.float64)
    with torch.no_grad():
        for norm in (torch_layer.norm1, torch_layer.norm2):
            norm.weight.normal_(1.0, 0.3)
            norm.bias.normal_(0.0, 0.3)
        torch_layer.self_attn.in_proj_bias.normal_(0.0, 0.1)
    ours = _from_torch(torch_layer, norm_first, "relu")
    x = torch.randn(B, T, D_MODEL, generator=gen, dtype=torch.float64)
    for name, mask, torch_kwargs in _masks(gen):
        torch.testing.assert_close(ours(x, mask), torch_layer(x, **torch_kwargs), atol=ATOL64, rtol=0,
                                   msg=lambda m: f"mask={name}: {m}")


def _masks(gen):
    """(name, our mask True = may attend, kwargs for nn.TransformerEncoderLayer True = NOT allowed)."""
    causal = torch.ones(T, T, dtype=torch.bool).tril()  # (T, T)
    lengths = torch.tensor([T, 4, 2])
    padding = (torch.arange(T)[None, :] < lengths[:, None])[:, None, None, :]  # (B, 1, 1, T)
    rand = torch.rand(T, T, generator=gen) < 0.5
    rand |= torch.eye(T, dtype=torch.bool)  # no fully masked row
    return [
        ("none", None, {}),
        ("causal", causal, {"src_mask": ~causal}),
        ("random", rand, {"src_mask": ~rand}),
        ("padding", padding, {"src_key_padding_mask": ~padding[:, 0, 0, :]}),
    ]


def test_encoder_layer_has_the_agreed_submodules():
    layer = ref.EncoderLayer(D_MODEL, N_HEADS, D_FF)
    assert isinstance(layer.self_attn, MultiHeadAttention)
    assert isinstance(layer.ff, ref.FeedForward)
    # the course's LayerNorm (built on layer_norm, so nothing calls F.layer_norm), with nn.LayerNorm's parameter names
    assert isinstance(layer.norm1, ref.LayerNorm) and isinstance(layer.norm2, ref.LayerNorm)
    assert [n for n, _ in layer.norm1.named_parameters()] == [n for n, _ in nn.LayerNorm(D_MODEL).named_parameters()]
    assert layer.ff.linear1.in_features == D_MODEL and layer.ff.linear1.out_features == D_FF


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-ln", "pre-ln"])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_layer_matches_torch(gen, norm_first, activation):
    layer = _random_layer(norm_first, activation)
    torch_layer = ref.copy_to_torch_encoder_layer(layer)
    x = torch.randn(B, T, D_MODEL, generator=gen, dtype=torch.float64)
    for name, mask, torch_kwargs in _masks(gen):
        ours = layer(x, mask)
        theirs = torch_layer(x, **torch_kwargs)
        assert ours.shape == (B, T, D_MODEL)
        torch.testing.assert_close(
            ours, theirs, atol=ATOL64, rtol=0,
            msg=lambda m: f"mask={name}, norm_first={norm_first}: {m}\n"
            "(PyTorch's bool masks mean True = NOT allowed; ours True = may attend)",
        )


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-ln", "pre-ln"])
def test_encoder_layer_matches_torch_fast_path_float32(gen, norm_first):
    layer = _random_layer(norm_first, "relu", dtype=torch.float32).eval()
    torch_layer = ref.copy_to_torch_encoder_layer(layer).eval()
    x = torch.randn(B, T, D_MODEL, generator=gen)
    with torch.no_grad():  # eval + no_grad: PyTorch may use its fused kernel
        for name, mask, torch_kwargs in _masks(gen):
            torch.testing.assert_close(layer(x, mask), torch_layer(x, **torch_kwargs), atol=ATOL32, rtol=0,
                                       msg=lambda m: f"mask={name}: {m}")


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-ln", "pre-ln"])
def test_encoder_layer_gradients_match_torch(gen, norm_first):
    layer = _random_layer(norm_first, "relu")
    torch_layer = ref.copy_to_torch_encoder_layer(layer)
    x = torch.randn(B, T, D_MODEL, generator=gen, dtype=torch.float64)
    target = torch.randn(B, T, D_MODEL, generator=gen, dtype=torch.float64)
    ((layer(x) - target) ** 2).sum().backward()
    ((torch_layer(x) - target) ** 2).sum().backward()
    pairs = [  # (our gradient, PyTorch's gradient)
        (layer.ff.linear1.weight.grad, torch_layer.linear1.weight.grad),
        (layer.ff.linear2.bias.grad, torch_layer.linear2.bias.grad),
        (layer.norm1.weight.grad, torch_layer.norm1.weight.grad),
        (layer.norm2.bias.grad, torch_layer.norm2.bias.grad),
        (layer.self_attn.w_o.weight.grad, torch_layer.self_attn.out_proj.weight.grad),
        (layer.self_attn.w_q.weight.grad, torch_layer.self_attn.in_proj_weight.grad[:D_MODEL]),  # rows q, k, v
    ]
    for ours, theirs in pairs:
        torch.testing.assert_close(ours, theirs, atol=ATOL64, rtol=0)


def test_encoder_layer_dropout_is_off_in_eval_and_on_in_train(gen):
    torch.manual_seed(4)
    layer = ref.EncoderLayer(D_MODEL, N_HEADS, D_FF, dropout=0.5).double()
    x = torch.randn(B, T, D_MODEL, generator=gen, dtype=torch.float64)
    layer.eval()
    torch.testing.assert_close(layer(x), layer(x), atol=0, rtol=0)
    layer.train()
    assert not torch.allclose(layer(x), layer(x)), "with dropout=0.5 two training passes should differ"


def test_parameter_grad_norms(gen):
    torch.manual_seed(5)
    layers = nn.ModuleList([ref.FeedForward(8, 16) for _ in range(3)])
    x = torch.randn(4, 8, generator=gen)
    for layer in layers:
        x = layer(x)
    x.sum().backward()
    norms = ref.parameter_grad_norms(layers)
    manual = [math.sqrt(sum((p.grad**2).sum().item() for p in layer.parameters())) for layer in layers]
    assert norms == pytest.approx(manual, rel=1e-5)


# --------------------------------------------------------------------------------------- noam_lr
@pytest.mark.parametrize("d_model,warmup", [(512, 4000), (256, 1000), (1024, 8000)])
def test_noam_lr_at_known_points(d_model, warmup):
    def formula(s):
        return d_model**-0.5 * min(s**-0.5, s * warmup**-1.5)

    for step in [1, 2, warmup // 2, warmup - 1, warmup, warmup + 1, 4 * warmup, 100_000]:
        assert math.isclose(ref.noam_lr(step, d_model, warmup), formula(step), rel_tol=1e-12)
    assert math.isclose(ref.noam_lr(1, d_model, warmup), d_model**-0.5 * warmup**-1.5, rel_tol=1e-12)
    peak = (d_model * warmup) ** -0.5
    assert math.isclose(ref.noam_lr(warmup, d_model, warmup), peak, rel_tol=1e-12)
    # linear before the peak, 1/sqrt(step) after it
    assert math.isclose(ref.noam_lr(warmup // 2, d_model, warmup), peak / 2, rel_tol=1e-12)
    assert math.isclose(ref.noam_lr(4 * warmup, d_model, warmup), peak / 2, rel_tol=1e-12)
    lrs = [ref.noam_lr(s, d_model, warmup) for s in range(1, 3 * warmup)]
    assert max(range(len(lrs)), key=lrs.__getitem__) + 1 == warmup, "the peak must be at step = warmup"


def test_noam_lr_paper_peak():
    # d_model = 512, warmup = 4000 (the paper's base model): peak (512 * 4000)^-0.5, about 7.0e-4
    assert ref.noam_lr(4000, 512, 4000) == pytest.approx(6.987712429686844e-4, rel=1e-12)


def test_noam_lr_rejects_step_zero_and_works_with_lambda_lr():
    with pytest.raises(ValueError, match="step >= 1"):
        ref.noam_lr(0, 512, 4000)
    p = nn.Parameter(torch.zeros(1))
    opt = torch.optim.Adam([p], lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: ref.noam_lr(s + 1, 512, 4000))
    seen = []
    for _ in range(5):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert seen == pytest.approx([ref.noam_lr(s, 512, 4000) for s in range(1, 6)], rel=1e-12)


# --------------------------------------------------------------------------------------- label smoothing
def test_label_smoothed_targets_values():
    q = ref.label_smoothed_targets(torch.tensor([2, 0]), 5, 0.1, dtype=torch.float64)
    assert q.shape == (2, 5)
    torch.testing.assert_close(q.sum(-1), torch.ones(2, dtype=torch.float64), atol=ATOL64, rtol=0)
    assert q[0, 2].item() == pytest.approx(0.9 + 0.1 / 5, abs=1e-15)
    assert q[0, 0].item() == pytest.approx(0.1 / 5, abs=1e-15)


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
@pytest.mark.parametrize("n_classes", [2, 7, 100])
def test_label_smoothed_cross_entropy_matches_torch(gen, eps, n_classes):
    logits = 3 * torch.randn(11, n_classes, generator=gen, dtype=torch.float64)
    target = torch.randint(n_classes, (11,), generator=gen)
    expected = nn.CrossEntropyLoss(label_smoothing=eps)(logits, target)
    torch.testing.assert_close(ref.label_smoothed_cross_entropy(logits, target, eps), expected, atol=ATOL64, rtol=0)
    # the same as cross-entropy against the smoothed distribution used as a soft target
    q = ref.label_smoothed_targets(target, n_classes, eps, dtype=torch.float64)
    torch.testing.assert_close(F.cross_entropy(logits, q), expected, atol=ATOL64, rtol=0)


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_label_smoothed_cross_entropy_ignores_padding_like_torch(gen, eps):
    # padding targets (ignore_index) count neither in the sum nor in the mean, as in F.cross_entropy
    logits = 3 * torch.randn(9, 6, generator=gen, dtype=torch.float64)
    target = torch.randint(6, (9,), generator=gen)
    target[[1, 4, 5]] = 0
    for ignore in (-100, 0):
        padded = target.clone()
        padded[[1, 4, 5]] = ignore
        expected = F.cross_entropy(logits, padded, label_smoothing=eps, ignore_index=ignore)
        got = ref.label_smoothed_cross_entropy(logits, padded, eps, ignore_index=ignore)
        torch.testing.assert_close(got, expected, atol=ATOL64, rtol=0)


def test_layer_norm_module_matches_nn_layer_norm(gen):
    ours, theirs = ref.LayerNorm(8).double(), nn.LayerNorm(8, dtype=torch.float64)
    with torch.no_grad():
        for p in (ours.weight, ours.bias):
            p.copy_(torch.randn(8, generator=gen, dtype=torch.float64))
    theirs.load_state_dict(ours.state_dict())
    x = torch.randn(2, 3, 8, generator=gen, dtype=torch.float64)
    torch.testing.assert_close(ours(x), theirs(x), atol=ATOL64, rtol=0)


def test_the_seed_variant_eps_over_k_minus_1_is_not_torchs(gen):
    # Note 002 §2.13.3 gives the true class 1 - eps and the others eps / (K - 1): a different loss.
    K, eps = 10, 0.1
    logits = torch.randn(6, K, generator=gen, dtype=torch.float64)
    target = torch.randint(K, (6,), generator=gen)
    seed_q = torch.full((6, K), eps / (K - 1), dtype=torch.float64)
    seed_q[torch.arange(6), target] = 1 - eps
    diff = (F.cross_entropy(logits, seed_q) - nn.CrossEntropyLoss(label_smoothing=eps)(logits, target)).abs()
    assert diff > 1e-4


# --------------------------------------------------------------------------------------- dropout
def test_inverted_dropout_scales_kept_units_and_preserves_the_mean():
    p, n = 0.1, 200_000
    x = torch.full((n,), 2.0)
    y = ref.inverted_dropout(x, p, torch.Generator().manual_seed(0))
    kept = y != 0
    torch.testing.assert_close(y[kept], torch.full_like(y[kept], 2.0 / (1 - p)))
    # fraction dropped: binomial standard error sqrt(p(1-p)/n) = 6.7e-4; 5e-3 is > 7 standard errors
    assert abs((~kept).float().mean().item() - p) < 5e-3
    # mean: standard error 2 * sqrt(p / ((1-p) n)) = 1.5e-3; 0.01 is > 6 standard errors
    assert abs(y.mean().item() - 2.0) < 0.01


def test_inverted_dropout_eval_and_edge_cases(gen):
    x = torch.randn(4, 5, generator=gen)
    assert ref.inverted_dropout(x, 0.5, training=False) is x
    assert torch.equal(ref.inverted_dropout(x, 0.0), x)
    assert torch.equal(ref.inverted_dropout(x, 1.0), torch.zeros_like(x))
    with pytest.raises(ValueError):
        ref.inverted_dropout(x, 1.5)


def test_inverted_dropout_matches_nn_dropout_in_distribution():
    p, n = 0.3, 100_000
    torch.manual_seed(0)
    theirs = nn.Dropout(p)(torch.ones(n))
    ours = ref.inverted_dropout(torch.ones(n), p, torch.Generator().manual_seed(0))
    assert theirs.unique().tolist() == pytest.approx(ours.unique().tolist())  # [0, 1/(1-p)]
    assert abs((theirs == 0).float().mean().item() - (ours == 0).float().mean().item()) < 0.01
