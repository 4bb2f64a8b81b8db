"""The chapter 02 reference against PyTorch's own softmax and scaled_dot_product_attention.

Tolerances: float64 throughout, atol=1e-12 (a few matmuls and one softmax on O(1) values lose far less).
"""

import math

import pytest
import torch
import torch.nn.functional as F

from solutions import ch02_qkv_attention as ref

ATOL64 = 1e-12

SHAPES = [  # (batch dims, n, m, d_k, d_v)
    ((), 3, 3, 4, 4),
    ((2,), 5, 7, 8, 6),
    ((2, 3), 4, 4, 16, 16),
]


@pytest.mark.parametrize("shape,dim", [((5,), -1), ((2, 3, 4), 1), ((4, 6), 0), ((2, 3, 4), -1)])
def test_stable_softmax_matches_torch(gen, shape, dim):
    x = torch.randn(shape, generator=gen, dtype=torch.float64)
    torch.testing.assert_close(ref.stable_softmax(x, dim=dim), torch.softmax(x, dim=dim), atol=ATOL64, rtol=0)


def test_stable_softmax_survives_large_inputs_where_naive_fails():
    x = torch.tensor([1000.0, 1001.0, 1002.0])  # float32: exp(1000) = inf
    naive = torch.exp(x) / torch.exp(x).sum()
    assert torch.isnan(naive).all(), "the naive formula should overflow here, or this test shows nothing"
    torch.testing.assert_close(ref.stable_softmax(x), torch.softmax(x, dim=-1))


@pytest.mark.parametrize("batch,n,m,d_k,d_v", SHAPES)
def test_sdpa_matches_torch_without_mask(gen, batch, n, m, d_k, d_v):
    q = torch.randn(*batch, n, d_k, generator=gen, dtype=torch.float64)
    k = torch.randn(*batch, m, d_k, generator=gen, dtype=torch.float64)
    v = torch.randn(*batch, m, d_v, generator=gen, dtype=torch.float64)
    out, weights = ref.scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v), atol=ATOL64, rtol=0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(*batch, n, dtype=torch.float64), atol=ATOL64, rtol=0)


@pytest.mark.parametrize("batch,n,m,d_k,d_v", SHAPES)
def test_sdpa_matches_torch_with_boolean_mask(gen, batch, n, m, d_k, d_v):
    q = torch.randn(*batch, n, d_k, generator=gen, dtype=torch.float64)
    k = torch.randn(*batch, m, d_k, generator=gen, dtype=torch.float64)
    v = torch.randn(*batch, m, d_v, generator=gen, dtype=torch.float64)
    mask = torch.rand(*batch, n, m, generator=gen) < 0.6
    mask[..., 0] = True  # no fully masked row (its softmax is 0/0, see chapter 05)
    out, weights = ref.scaled_dot_product_attention(q, k, v, mask)
    # Same convention as torch: True = may attend.
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), atol=ATOL64, rtol=0)
    assert (weights[~mask] == 0).all(), "masked positions must get exactly zero weight"


def test_causal_mask_matches_is_causal(gen):
    q, k, v = (torch.randn(2, 3, 5, 8, generator=gen, dtype=torch.float64) for _ in range(3))
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    out, _ = ref.scaled_dot_product_attention(q, k, v, causal)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True), atol=ATOL64, rtol=0)


def test_sdpa_rejects_a_float_mask():
    q = torch.randn(3, 4)
    with pytest.raises(TypeError, match="bool"):
        ref.scaled_dot_product_attention(q, q, q, torch.ones(3, 3))


def test_self_attention_is_sdpa_of_projections(gen):
    x = torch.randn(2, 6, 16, generator=gen, dtype=torch.float64)
    w_q, w_k = (torch.randn(16, 4, generator=gen, dtype=torch.float64) for _ in range(2))
    w_v = torch.randn(16, 8, generator=gen, dtype=torch.float64)
    out, weights = ref.self_attention(x, w_q, w_k, w_v)
    assert out.shape == (2, 6, 8) and weights.shape == (2, 6, 6)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(x @ w_q, x @ w_k, x @ w_v), atol=ATOL64, rtol=0)


@pytest.mark.parametrize("d_k", [4, 64, 256])
def test_dot_product_variance_matches_theory(d_k):
    # 40 000 samples: the sample variance of q·k has relative standard error sqrt((2 + 6/d_k) / n),
    # under 1% of d_k for d_k >= 4 (E[(q·k)^4] = 3 d_k^2 + 6 d_k); 8% is more than 8 standard errors.
    raw, scaled = ref.dot_product_variance(d_k, 40_000, torch.Generator().manual_seed(d_k))
    assert abs(raw - d_k) < 0.08 * d_k, f"variance of q·k is {raw:.3f}, theory says {d_k}"
    assert abs(scaled - 1) < 0.08, f"variance of q·k/sqrt(d_k) is {scaled:.3f}, theory says 1"
    assert math.isclose(raw, scaled * d_k, rel_tol=1e-5), "both variances must come from the same samples"
