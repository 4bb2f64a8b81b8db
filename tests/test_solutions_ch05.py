"""The chapter 05 reference (masks) against PyTorch's own attention functions.

Tolerances: float64 throughout. atol=1e-12 where our attention and PyTorch's compute the same few
matmuls and one softmax on O(1) values (they differ by a few ulps); atol=1e-10 against
nn.MultiheadAttention, which adds four Linear layers and a head average around the same computation.
Zero tests (masked weights, no future leakage) are exact: a masked score is -inf, exp(-inf) is exactly 0.
"""

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from solutions import ch05_masks as ref

ATOL64 = 1e-12
ATOL_MHA = 1e-10


def randn(*shape, gen):
    return torch.randn(*shape, generator=gen, dtype=torch.float64)


# ----------------------------------------------------------------------------------------- causal mask


@pytest.mark.parametrize("n", [1, 2, 5])
def test_causal_mask_values(n):
    mask = ref.causal_mask(n)
    assert mask.shape == (n, n) and mask.dtype == torch.bool, f"got {tuple(mask.shape)} {mask.dtype}"
    expected = torch.tensor([[j <= i for j in range(n)] for i in range(n)])
    assert torch.equal(mask, expected), "row i must allow exactly the keys j <= i (True = may attend)"


def test_causal_mask_is_created_on_the_requested_device():
    # The meta device has no data: a mask made on the CPU and then used with meta tensors would fail.
    assert ref.causal_mask(4, device="meta").device.type == "meta"
    assert ref.causal_mask_bottom_right(2, 4, device="meta").device.type == "meta"


@pytest.mark.parametrize("shape", [(1, 1, 5, 8), (2, 3, 4, 16), (3, 7, 4)])
def test_causal_mask_matches_sdpa_is_causal(gen, shape):
    q, k, v = (randn(*shape, gen=gen) for _ in range(3))
    n = shape[-2]
    out, weights = ref.masked_attention(q, k, v, ref.causal_mask(n))
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True), atol=ATOL64, rtol=0)
    future = ~ref.causal_mask(n)
    assert (weights[..., future] == 0).all(), "weights on future keys must be exactly 0"


@pytest.mark.parametrize("q_len,k_len", [(1, 1), (1, 6), (3, 6), (6, 6)])
def test_bottom_right_mask_matches_full_recomputation(gen, q_len, k_len):
    # Decoding with a KV cache: the last q_len queries against all k_len keys must reproduce the last
    # q_len rows of full causal attention over k_len positions.
    q, k, v = (randn(2, 2, k_len, 8, gen=gen) for _ in range(3))
    full, _ = ref.masked_attention(q, k, v, ref.causal_mask(k_len))
    mask = ref.causal_mask_bottom_right(q_len, k_len)
    assert mask.shape == (q_len, k_len)
    cached, _ = ref.masked_attention(q[..., -q_len:, :], k, v, mask)
    torch.testing.assert_close(cached, full[..., -q_len:, :], atol=ATOL64, rtol=0)
    torch.testing.assert_close(
        cached, F.scaled_dot_product_attention(q[..., -q_len:, :], k, v, attn_mask=mask), atol=ATOL64, rtol=0
    )


def test_bottom_right_mask_matches_torch_causal_lower_right():
    bias = pytest.importorskip("torch.nn.attention.bias")
    for q_len, k_len in [(1, 5), (2, 5), (5, 5)]:
        torch_mask = bias.causal_lower_right(q_len, k_len)._materialize()
        assert torch.equal(ref.causal_mask_bottom_right(q_len, k_len), torch_mask), (q_len, k_len)


def test_is_causal_is_top_left_aligned_the_trap(gen):
    # Documents PyTorch's behaviour that the chapter warns about: with q_len < k_len, is_causal=True
    # uses tril(ones(q_len, k_len)) (top-left), which is NOT what a KV-cache decoder step needs.
    q_len, k_len = 1, 5
    q, k, v = randn(1, q_len, 8, gen=gen), randn(1, k_len, 8, gen=gen), randn(1, k_len, 8, gen=gen)
    top_left = torch.ones(q_len, k_len, dtype=torch.bool).tril()
    torch.testing.assert_close(
        F.scaled_dot_product_attention(q, k, v, is_causal=True),
        F.scaled_dot_product_attention(q, k, v, attn_mask=top_left),
        atol=ATOL64, rtol=0,
    )
    right = F.scaled_dot_product_attention(q, k, v, attn_mask=ref.causal_mask_bottom_right(q_len, k_len))
    wrong = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert (right - wrong).abs().max() > 1e-3, "top-left and bottom-right alignment should differ here"


def test_bottom_right_rejects_more_queries_than_keys():
    with pytest.raises(ValueError):
        ref.causal_mask_bottom_right(5, 3)


# ---------------------------------------------------------------------------------------- padding mask


def test_padding_mask_shape_and_values():
    mask = ref.padding_mask(torch.tensor([3, 1, 4]), 4)
    assert mask.shape == (3, 1, 1, 4) and mask.dtype == torch.bool, f"got {tuple(mask.shape)} {mask.dtype}"
    expected = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]], dtype=torch.bool)
    assert torch.equal(mask[:, 0, 0, :], expected), "True exactly where key position < length"


def test_padding_mask_accepts_a_list_and_keeps_the_device():
    assert torch.equal(ref.padding_mask([2, 0], 3), ref.padding_mask(torch.tensor([2, 0]), 3))
    assert ref.padding_mask(torch.tensor([2, 3], device="meta"), 3).device.type == "meta"


def test_padding_mask_rejects_2d_lengths():
    with pytest.raises(ValueError):
        ref.padding_mask(torch.tensor([[2, 3]]), 3)


# --------------------------------------------------------------------------------------- combine masks


def test_combine_masks_broadcasts_to_batch_heads_q_k():
    combined = ref.combine_masks(ref.causal_mask(4), ref.padding_mask([4, 2], 4))
    assert combined.shape == (2, 1, 4, 4), f"causal (4, 4) & padding (2, 1, 1, 4) -> {tuple(combined.shape)}"
    # sequence 1 (length 2): causal AND key < 2
    expected = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 0, 0]], dtype=torch.bool)
    assert torch.equal(combined[1, 0], expected)
    assert torch.equal(combined[0, 0], ref.causal_mask(4)), "a full-length sequence keeps the plain causal mask"


def test_combine_masks_ignores_none():
    c = ref.causal_mask(3)
    assert ref.combine_masks() is None
    assert ref.combine_masks(None, None) is None
    assert torch.equal(ref.combine_masks(None, c, None), c)


def test_combine_masks_rejects_float_masks():
    with pytest.raises(TypeError, match="bool"):
        ref.combine_masks(ref.causal_mask(3), torch.ones(3, 3))


# ------------------------------------------------------------------------------------ masked attention


def test_masked_attention_matches_sdpa_with_combined_mask(gen):
    B, H, T, d = 3, 2, 5, 8
    q, k, v = (randn(B, H, T, d, gen=gen) for _ in range(3))
    mask = ref.combine_masks(ref.causal_mask(T), ref.padding_mask([5, 3, 1], T))  # (B, 1, T, T)
    out, weights = ref.masked_attention(q, k, v, mask)
    assert out.shape == (B, H, T, d) and weights.shape == (B, H, T, T)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), atol=ATOL64, rtol=0)
    assert (weights.masked_select(~mask) == 0).all(), "masked positions must get exactly zero weight"
    torch.testing.assert_close(weights.sum(-1), torch.ones(B, H, T, dtype=torch.float64), atol=ATOL64, rtol=0)


def test_masked_attention_rejects_a_float_mask():
    q = torch.randn(3, 4)
    with pytest.raises(TypeError, match="bool"):
        ref.masked_attention(q, q, q, torch.ones(3, 3))


def test_fully_masked_row_nan_with_inf_uniform_with_finite_fill(gen):
    q, k, v = (randn(1, 3, 4, gen=gen) for _ in range(3))
    mask = torch.tensor([[True, False, False], [False, False, False], [True, True, True]])
    _, w_inf = ref.masked_attention(q, k, v, mask)
    assert torch.isnan(w_inf[0, 1]).all(), "-inf everywhere in a row: softmax is 0/0 = NaN"
    assert not torch.isnan(w_inf[0, [0, 2]]).any(), "rows with at least one allowed key stay finite"
    _, w_min = ref.masked_attention(q, k, v, mask, fill_value=torch.finfo(torch.float64).min)
    torch.testing.assert_close(w_min[0, 1], torch.full((3,), 1 / 3, dtype=torch.float64), atol=ATOL64, rtol=0)
    torch.testing.assert_close(w_min[0, [0, 2]], w_inf[0, [0, 2]], atol=ATOL64, rtol=0)


def test_additive_mask_is_equivalent_in_sdpa(gen):
    q, k, v = (randn(2, 4, 8, gen=gen) for _ in range(3))
    mask = ref.causal_mask(4)
    additive = ref.to_additive_mask(mask, torch.float64)
    assert additive.dtype == torch.float64 and (additive[mask] == 0).all() and (additive[~mask] == -math.inf).all()
    torch.testing.assert_close(
        F.scaled_dot_product_attention(q, k, v, attn_mask=additive),
        F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
        atol=ATOL64, rtol=0,
    )


# ---------------------------------------------------------------------- nn.MultiheadAttention conventions


def _mha_by_hand(mha, x, mask):
    """nn.MultiheadAttention's computation with its own weights, through our masked_attention."""
    B, T, D = x.shape
    H = mha.num_heads
    w_q, w_k, w_v = mha.in_proj_weight.chunk(3)
    b_q, b_k, b_v = mha.in_proj_bias.chunk(3)

    def heads(t):  # (B, T, D) -> (B, H, T, D // H)
        return t.view(B, T, H, D // H).transpose(1, 2)

    q, k, v = heads(F.linear(x, w_q, b_q)), heads(F.linear(x, w_k, b_k)), heads(F.linear(x, w_v, b_v))
    out, weights = ref.masked_attention(q, k, v, mask)  # (B, H, T, d_k), (B, H, T, T)
    out = out.transpose(1, 2).reshape(B, T, D)
    return mha.out_proj(out), weights.mean(dim=1)


def test_matches_multihead_attention_with_converted_masks(gen):
    torch.manual_seed(0)
    B, T, D, H = 3, 5, 8, 2
    mha = nn.MultiheadAttention(D, H, batch_first=True).double().eval()
    x = randn(B, T, D, gen=gen)
    lengths = [5, 3, 2]
    ours = ref.combine_masks(ref.causal_mask(T), ref.padding_mask(lengths, T))  # (B, 1, T, T)
    out_t, w_t = mha(
        x, x, x,
        attn_mask=ref.to_mha_mask(ref.causal_mask(T)),  # (T, T), True = may NOT attend
        key_padding_mask=ref.to_mha_mask(ref.padding_mask(lengths, T)[:, 0, 0, :]),  # (B, T)
    )
    out_r, w_r = _mha_by_hand(mha, x, ours)
    torch.testing.assert_close(out_r, out_t, atol=ATOL_MHA, rtol=0)
    torch.testing.assert_close(w_r, w_t, atol=ATOL_MHA, rtol=0)


def test_unconverted_mask_silently_changes_multihead_attention(gen):
    # Passing our True = may attend mask to nn.MultiheadAttention does not raise: it masks the
    # complement (the past and the diagonal). Row 0 may then see only the future.
    torch.manual_seed(0)
    T, D = 4, 8
    mha = nn.MultiheadAttention(D, 2, batch_first=True).double().eval()
    x = randn(1, T, D, gen=gen)
    _, w_right = mha(x, x, x, attn_mask=ref.to_mha_mask(ref.causal_mask(T)))
    _, w_wrong = mha(x, x, x, attn_mask=ref.causal_mask(T))
    assert (w_right[0][~ref.causal_mask(T)] == 0).all()
    assert (w_wrong[0, 0, 1:] > 0).all() and w_wrong[0, 0, 0] == 0, "row 0 attends only the future"


# ------------------------------------------------------------------------------ no future leakage (grads)


def _attention_fn(mask, gen, d=6):
    w_q, w_k, w_v = (randn(d, d, gen=gen) / math.sqrt(d) for _ in range(3))

    def fn(x):  # (T, d) -> (T, d)
        return ref.masked_attention(x @ w_q, x @ w_k, x @ w_v, mask)[0]

    return fn


@pytest.mark.parametrize("T", [1, 4, 7])
def test_no_future_leakage_under_causal_mask(gen, T):
    x = randn(T, 6, gen=gen)
    dep = ref.dependency_matrix(_attention_fn(ref.causal_mask(T), gen), x)
    assert dep.shape == (T, T)
    future = ~ref.causal_mask(T)
    assert (dep[future] == 0).all(), f"output i depends on input j > i: {dep[future].abs().max():.3e}"
    assert (dep[~future] > 0).all(), "output i should depend on every input j <= i"


def test_leakage_without_mask(gen):
    T = 5
    x = randn(T, 6, gen=gen)
    dep = ref.dependency_matrix(_attention_fn(None, gen), x)
    assert (dep > 0).all(), "without a mask every output depends on every input"


def test_real_tokens_ignore_padding_inputs(gen):
    T, length = 5, 3
    x = randn(T, 6, gen=gen)
    mask = ref.padding_mask([length], T)[0, 0]  # (1, T): broadcasts over the query rows
    dep = ref.dependency_matrix(_attention_fn(mask, gen), x)
    assert (dep[:length, length:] == 0).all(), "no real token's output may depend on a padding input"
    # A padding position's own output still depends on itself, through its QUERY (queries are not masked);
    # it depends on no other padding position.
    pad = dep[length:, length:]
    assert (pad.diagonal() > 0).all() and (pad - torch.diag(pad.diagonal()) == 0).all()


def test_dependency_matrix_matches_backward(gen):
    T, d = 4, 6
    x = randn(T, d, gen=gen)
    fn = _attention_fn(ref.causal_mask(T), gen)
    dep = ref.dependency_matrix(fn, x)
    i = 2
    for j in range(T):  # row i, column j by explicit backward passes over each output coordinate
        rows = []
        for c in range(d):
            xg = x.clone().requires_grad_(True)
            fn(xg)[i, c].backward()
            rows.append(xg.grad[j])
        torch.testing.assert_close(dep[i, j], torch.stack(rows).norm(), atol=ATOL64, rtol=0)


def test_exercise_layers_have_the_dependencies_their_docstrings_state(gen):
    # look_ahead depends on the present and the future only; causal_self_attention (plain tensor operations)
    # equals masked_attention under the causal mask and depends on the past and the present only.
    x = torch.randn(5, 3, generator=gen, dtype=torch.float64)
    future = torch.ones(5, 5, dtype=torch.bool).triu(diagonal=1)
    d_ahead = ref.dependency_matrix(ref.look_ahead, x)
    assert (d_ahead[future.T & ~torch.eye(5, dtype=torch.bool)] == 0).all() and (d_ahead[future] > 0).all()
    d_causal = ref.dependency_matrix(ref.causal_self_attention, x)
    assert (d_causal[future] == 0).all() and (d_causal[~future] > 0).all()
    torch.testing.assert_close(ref.causal_self_attention(x), ref.masked_attention(x, x, x, ref.causal_mask(5))[0], atol=1e-12, rtol=0)
