"""The chapter 04 reference (multi-head attention) against torch.nn.MultiheadAttention.

Tolerances: float64 throughout. The module chains three matmuls, a softmax and two more matmuls on
O(1) values; torch computes the same sums in a different order (packed in_proj, baddbmm), so
results agree to a few ulps of float64: atol=1e-12 leaves three orders of magnitude of margin.
split_heads / merge_heads only move memory, so they must round-trip *exactly* (atol=0).
"""

import math

import pytest
import torch
from torch import nn

from solutions import ch04_multi_head as ref

ATOL64 = 1e-12

CONFIGS = [  # (batch, Tq, Tk, d_model, n_heads)
    (1, 3, 3, 4, 2),
    (2, 5, 7, 16, 4),
    (3, 4, 6, 24, 8),
    (2, 6, 6, 8, 1),  # one head: plain single-head attention with an output projection
]


def make_pair(d_model, n_heads, bias=True, seed=0):
    """Our module with random weights (biases too, so they are tested) and torch's copy of it."""
    torch.manual_seed(seed)
    mha = ref.MultiHeadAttention(d_model, n_heads, bias=bias).double().eval()
    if bias:
        with torch.no_grad():
            for lin in (mha.w_q, mha.w_k, mha.w_v, mha.w_o):
                lin.bias.normal_()  # nn.Linear's default init is fine, but non-trivial biases test more
    return mha, ref.copy_to_torch_mha(mha).eval()


def torch_call(torch_mha, query, key, value, **kw):
    out, w = torch_mha(query, key, value, need_weights=True, average_attn_weights=False, **kw)
    return out, w


# --- split_heads / merge_heads ---------------------------------------------------------------


@pytest.mark.parametrize("batch,seq,d_model,n_heads", [(1, 3, 4, 2), (2, 5, 12, 3), (3, 7, 64, 8), (2, 4, 6, 1)])
def test_split_merge_round_trip_is_exact(gen, batch, seq, d_model, n_heads):
    x = torch.randn(batch, seq, d_model, generator=gen, dtype=torch.float64)
    heads = ref.split_heads(x, n_heads)
    assert heads.shape == (batch, n_heads, seq, d_model // n_heads), f"split_heads gave {tuple(heads.shape)}"
    assert torch.equal(ref.merge_heads(heads), x), "merge_heads(split_heads(x)) must give x back exactly"


def test_split_heads_gives_each_head_a_feature_slice_of_every_position(gen):
    batch, seq, d_model, n_heads = 2, 5, 12, 3
    d_k = d_model // n_heads
    x = torch.randn(batch, seq, d_model, generator=gen)
    heads = ref.split_heads(x, n_heads)
    for h in range(n_heads):
        # head h, position t must hold features h*d_k .. (h+1)*d_k - 1 of position t (no mixing of positions)
        assert torch.equal(heads[:, h], x[:, :, h * d_k:(h + 1) * d_k]), (
            f"head {h} is not the feature slice {h * d_k}:{(h + 1) * d_k} of each position: "
            "a reshape without transpose?"
        )


def test_reshape_without_transpose_is_not_split_heads(gen):
    # The classic bug: x.reshape(B, H, T, d_k) has the right shape but mixes positions.
    x = torch.randn(2, 5, 12, generator=gen)
    wrong = x.reshape(2, 3, 5, 4)
    assert not torch.equal(wrong, ref.split_heads(x, 3))


def test_split_heads_rejects_indivisible_width():
    with pytest.raises(ValueError, match="divisible"):
        ref.split_heads(torch.zeros(1, 2, 10), 3)
    with pytest.raises(ValueError, match="divisible"):
        ref.MultiHeadAttention(10, 3)


# --- against nn.MultiheadAttention -----------------------------------------------------------


@pytest.mark.parametrize("batch,tq,tk,d_model,n_heads", CONFIGS)
@pytest.mark.parametrize("bias", [True, False])
def test_self_attention_matches_torch(gen, batch, tq, tk, d_model, n_heads, bias):
    mha, torch_mha = make_pair(d_model, n_heads, bias)
    x = torch.randn(batch, tq, d_model, generator=gen, dtype=torch.float64)
    out, w = mha(x, x, x)
    out_t, w_t = torch_call(torch_mha, x, x, x)
    assert out.shape == (batch, tq, d_model) and w.shape == (batch, n_heads, tq, tq)
    torch.testing.assert_close(out, out_t, atol=ATOL64, rtol=0)
    torch.testing.assert_close(w, w_t, atol=ATOL64, rtol=0)


@pytest.mark.parametrize("batch,tq,tk,d_model,n_heads", CONFIGS)
def test_cross_attention_matches_torch(gen, batch, tq, tk, d_model, n_heads):
    mha, torch_mha = make_pair(d_model, n_heads)
    tgt = torch.randn(batch, tq, d_model, generator=gen, dtype=torch.float64)  # decoder side: queries
    mem = torch.randn(batch, tk, d_model, generator=gen, dtype=torch.float64)  # encoder side: keys, values
    out, w = mha(tgt, mem, mem)
    out_t, w_t = torch_call(torch_mha, tgt, mem, mem)
    assert out.shape == (batch, tq, d_model) and w.shape == (batch, n_heads, tq, tk), "weights: tgt_len x src_len"
    torch.testing.assert_close(out, out_t, atol=ATOL64, rtol=0)
    torch.testing.assert_close(w, w_t, atol=ATOL64, rtol=0)


@pytest.mark.parametrize("batch,tq,tk,d_model,n_heads", CONFIGS)
def test_distinct_key_and_value_match_torch(gen, batch, tq, tk, d_model, n_heads):
    mha, torch_mha = make_pair(d_model, n_heads)
    q, k, v = (torch.randn(batch, t, d_model, generator=gen, dtype=torch.float64) for t in (tq, tk, tk))
    torch.testing.assert_close(mha(q, k, v)[0], torch_call(torch_mha, q, k, v)[0], atol=ATOL64, rtol=0)


def test_causal_mask_matches_torch_with_inverted_mask(gen):
    batch, t, d_model, n_heads = 2, 6, 16, 4
    mha, torch_mha = make_pair(d_model, n_heads)
    x = torch.randn(batch, t, d_model, generator=gen, dtype=torch.float64)
    causal = torch.ones(t, t, dtype=torch.bool).tril()  # ours: True = may attend
    out, w = mha(x, x, x, mask=causal)
    out_t, w_t = torch_call(torch_mha, x, x, x, attn_mask=~causal)  # torch: True = IGNORE
    torch.testing.assert_close(out, out_t, atol=ATOL64, rtol=0)
    torch.testing.assert_close(w, w_t, atol=ATOL64, rtol=0)
    assert (w[..., ~causal] == 0).all(), "future positions must get exactly zero weight"
    # Passing our mask to torch unchanged is the classic mistake: torch then hides the past and the
    # present, and the last row (all True) is fully masked. It must not agree.
    out_wrong, _ = torch_call(torch_mha, x, x, x, attn_mask=causal)
    assert not torch.allclose(out, out_wrong), "our mask passed to torch unchanged should NOT agree"


def test_padding_mask_matches_torch_key_padding_mask(gen):
    batch, tq, tk, d_model, n_heads = 3, 4, 6, 16, 4
    mha, torch_mha = make_pair(d_model, n_heads)
    q = torch.randn(batch, tq, d_model, generator=gen, dtype=torch.float64)
    mem = torch.randn(batch, tk, d_model, generator=gen, dtype=torch.float64)
    lengths = torch.tensor([6, 3, 1])
    keep = torch.arange(tk) < lengths[:, None]  # (B, Tk) True = real token
    out, w = mha(q, mem, mem, mask=keep[:, None, None, :])  # (B, 1, 1, Tk) broadcasts over heads and queries
    out_t, w_t = torch_call(torch_mha, q, mem, mem, key_padding_mask=~keep)  # torch: True = padding, ignore
    torch.testing.assert_close(out, out_t, atol=ATOL64, rtol=0)
    torch.testing.assert_close(w, w_t, atol=ATOL64, rtol=0)


def test_per_example_mask_matches_torch_3d_mask(gen):
    batch, tq, tk, d_model, n_heads = 2, 5, 7, 12, 3
    mha, torch_mha = make_pair(d_model, n_heads)
    q = torch.randn(batch, tq, d_model, generator=gen, dtype=torch.float64)
    mem = torch.randn(batch, tk, d_model, generator=gen, dtype=torch.float64)
    mask = torch.rand(batch, tq, tk, generator=gen) < 0.6  # (B, Tq, Tk) True = may attend
    mask[..., 0] = True  # no fully masked row (0/0, see chapter 05)
    out, w = mha(q, mem, mem, mask=mask[:, None])  # (B, 1, Tq, Tk)
    # torch wants a 3-D mask as (B * H, Tq, Tk), batch-major, and True = ignore.
    torch_mask = (~mask).repeat_interleave(n_heads, dim=0)
    out_t, w_t = torch_call(torch_mha, q, mem, mem, attn_mask=torch_mask)
    torch.testing.assert_close(out, out_t, atol=ATOL64, rtol=0)
    torch.testing.assert_close(w, w_t, atol=ATOL64, rtol=0)


def test_gradients_match_torch(gen):
    mha, torch_mha = make_pair(16, 4)
    x = torch.randn(2, 5, 16, generator=gen, dtype=torch.float64)
    mha(x, x, x)[0].square().sum().backward()
    torch_call(torch_mha, x, x, x)[0].square().sum().backward()
    g_in = torch.cat([mha.w_q.weight.grad, mha.w_k.weight.grad, mha.w_v.weight.grad])
    torch.testing.assert_close(g_in, torch_mha.in_proj_weight.grad, atol=1e-10, rtol=0)
    torch.testing.assert_close(mha.w_o.weight.grad, torch_mha.out_proj.weight.grad, atol=1e-10, rtol=0)


def test_dropout_only_in_training():
    torch.manual_seed(0)
    mha = ref.MultiHeadAttention(16, 4, dropout=0.5)
    x = torch.randn(2, 5, 16)
    mha.eval()
    assert torch.equal(mha(x, x, x)[0], mha(x, x, x)[0]), "eval mode must be deterministic"
    mha.train()
    _, w = mha(x, x, x)
    assert (w == 0).any(), "with p=0.5 in training some attention weights must be dropped"


# --- loop over heads, parameter count --------------------------------------------------------


@pytest.mark.parametrize("batch,tq,tk,d_model,n_heads", CONFIGS)
def test_equals_a_python_loop_over_heads(gen, batch, tq, tk, d_model, n_heads):
    mha, _ = make_pair(d_model, n_heads)
    q = torch.randn(batch, tq, d_model, generator=gen, dtype=torch.float64)
    mem = torch.randn(batch, tk, d_model, generator=gen, dtype=torch.float64)
    mask = torch.rand(batch, tq, tk, generator=gen) < 0.7
    mask[..., 0] = True
    batched, _ = mha(q, mem, mem, mask[:, None])  # mask (B, 1, Tq, Tk): same for every head
    looped = ref.multi_head_attention_loop(mha, q, mem, mem, mask)
    torch.testing.assert_close(batched, looped, atol=ATOL64, rtol=0)


@pytest.mark.parametrize("d_model,n_heads", [(512, 8), (512, 1), (64, 4), (24, 3)])
@pytest.mark.parametrize("bias", [True, False])
def test_parameter_count(d_model, n_heads, bias):
    mha = ref.MultiHeadAttention(d_model, n_heads, bias=bias)
    counted = sum(p.numel() for p in mha.parameters())
    assert counted == ref.mha_parameter_count(d_model, bias) == 4 * d_model**2 + (4 * d_model if bias else 0)
    torch_mha = nn.MultiheadAttention(d_model, n_heads, bias=bias, batch_first=True)
    assert counted == sum(p.numel() for p in torch_mha.parameters()), "same count as torch's module"


def test_submodule_names_and_shapes():
    mha = ref.MultiHeadAttention(512, 8)
    assert mha.d_k == 64
    for name in ("w_q", "w_k", "w_v", "w_o"):
        lin = getattr(mha, name)
        assert isinstance(lin, nn.Linear) and lin.weight.shape == (512, 512), name


def test_dropout_output_uses_the_returned_weights():
    torch.manual_seed(0)
    mha = ref.MultiHeadAttention(16, 4, dropout=0.3).double().train()
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    out, w = mha(x, x, x)
    v = ref.split_heads(mha.w_v(x), 4)
    torch.testing.assert_close(out, mha.w_o(ref.merge_heads(w @ v)), atol=ATOL64, rtol=0)


def test_runs_on_the_meta_device():
    # Code that creates a tensor on the wrong device fails here even without a GPU (see design notes).
    mha = ref.MultiHeadAttention(16, 4).to("meta")
    x = torch.empty(2, 5, 16, device="meta")
    causal = torch.ones(5, 5, dtype=torch.bool, device="meta").tril()
    out, w = mha(x, x, x, causal)
    assert out.device.type == "meta" and out.shape == (2, 5, 16) and w.shape == (2, 4, 5, 5)


# --- The fixed SelfAttention of note 003 ("find the bug") ------------------------------------------


def sa_pair(embed_size, heads, seed=0):
    """The fixed SelfAttention with random weights, and our MultiHeadAttention computing the same function
    (no q/k/v biases: the notes' layers have none)."""
    torch.manual_seed(seed)
    sa = ref.SelfAttention(embed_size, heads).double()
    mha = ref.MultiHeadAttention(embed_size, heads).double()
    with torch.no_grad():
        for ours, theirs in ((mha.w_q, sa.queries), (mha.w_k, sa.keys), (mha.w_v, sa.values)):
            ours.weight.copy_(theirs.weight)
            ours.bias.zero_()
        mha.w_o.weight.copy_(sa.fc_out.weight)
        mha.w_o.bias.copy_(sa.fc_out.bias)
    return sa, mha


@pytest.mark.parametrize("batch,tq,tk,d_model,n_heads", CONFIGS)
def test_fixed_self_attention_is_multi_head_attention(gen, batch, tq, tk, d_model, n_heads):
    sa, mha = sa_pair(d_model, n_heads)
    q = torch.randn(batch, tq, d_model, generator=gen, dtype=torch.float64)
    k = torch.randn(batch, tk, d_model, generator=gen, dtype=torch.float64)
    v = torch.randn(batch, tk, d_model, generator=gen, dtype=torch.float64)
    mask = torch.rand(batch, 1, tq, tk, generator=gen) < 0.7
    mask[..., 0] = True  # no fully masked row
    torch.testing.assert_close(sa(v, k, q, None), mha(q, k, v)[0], atol=ATOL64, rtol=0)  # note the argument order
    torch.testing.assert_close(sa(v, k, q, mask), mha(q, k, v, mask)[0], atol=ATOL64, rtol=0)


def test_fixed_self_attention_uses_every_parameter():
    # The notes' class leaves queries/keys/values unused (no gradient); the fix must train all of them.
    sa = ref.SelfAttention(16, 4)
    x = torch.randn(2, 5, 16)
    sa(x, x, x, None).square().sum().backward()
    for name, p in sa.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, f"{name} gets no gradient"


def test_fixed_self_attention_scales_by_head_dim(gen):
    # One head of width 4 inside embed_size 16: the scores must be divided by sqrt(4), not sqrt(16).
    sa = ref.SelfAttention(16, 4).double()
    x = torch.randn(1, 3, 16, generator=gen, dtype=torch.float64)
    with torch.no_grad():
        q = sa.queries(x).view(1, 3, 4, 4).transpose(1, 2)
        k = sa.keys(x).view(1, 3, 4, 4).transpose(1, 2)
        v = sa.values(x).view(1, 3, 4, 4).transpose(1, 2)
        w = torch.softmax(q @ k.transpose(-2, -1) / 2.0, dim=-1)  # sqrt(head_dim) = 2
        expected = sa.fc_out((w @ v).transpose(1, 2).reshape(1, 3, 16))
        torch.testing.assert_close(sa(x, x, x, None), expected, atol=ATOL64, rtol=0)


def test_fixed_self_attention_fully_masked_row_is_uniform_not_nan():
    sa = ref.SelfAttention(8, 2).double()
    x = torch.randn(1, 3, 8, dtype=torch.float64)
    mask = torch.tensor([[False, False, False], [True, False, False], [True, True, True]])
    out = sa(x, x, x, mask)
    assert not out.isnan().any()
    with torch.no_grad():  # row 0: -1e20 everywhere, so uniform weights: the mean of the values, then fc_out
        uniform = sa.fc_out(sa.values(x).mean(dim=1))  # (1, 8)
    torch.testing.assert_close(out[0, 0], uniform[0], atol=ATOL64, rtol=0)


@pytest.mark.parametrize("embed_size,heads", [(512, 8), (24, 3)])
def test_fixed_self_attention_parameter_names_and_shapes(embed_size, heads):
    shapes = {name: tuple(p.shape) for name, p in ref.SelfAttention(embed_size, heads).named_parameters()}
    e = embed_size
    assert shapes == {"values.weight": (e, e), "keys.weight": (e, e), "queries.weight": (e, e), "fc_out.weight": (e, e), "fc_out.bias": (e,)}
    assert sum(math.prod(s) for s in shapes.values()) == ref.mha_parameter_count(e) - 3 * e  # no q/k/v biases
