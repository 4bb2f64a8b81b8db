"""Reference solutions for chapter 02-qkv-attention: Q, K, V and scaled dot-product attention.

This module is the single source of truth for the chapter's exercises: the instructor notebook's
solution cells are generated from these functions, and the hidden grading checks compare learners'
functions against them.

Conventions used throughout the course:
- batch-first shapes, written as comments: (batch, heads, seq, d_k);
- boolean masks with True = "may attend" (the same convention as
  torch.nn.functional.scaled_dot_product_attention).
"""

import math

import torch
from torch import Tensor


def stable_softmax(x: Tensor, dim: int = -1) -> Tensor:
    """Softmax along `dim` that does not overflow for large inputs.

    softmax(x)_i = exp(x_i - m) / sum_j exp(x_j - m), where m is the maximum of x ALONG `dim` (one maximum
    per slice, kept as a size-1 dimension so it broadcasts). Subtracting it changes nothing mathematically
    but keeps every exponent <= 0, so exp never overflows. Returns a tensor of x's shape and dtype.
    """
    x_max = x.amax(dim=dim, keepdim=True)  # (..., 1, ...) the largest entry along dim
    e = torch.exp(x - x_max)  # every exponent <= 0
    return e / e.sum(dim=dim, keepdim=True)


def scaled_dot_product_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """softmax(q kᵀ / sqrt(d_k)) v, with an optional boolean mask (True = may attend).

    q: (..., n, d_k)   k: (..., m, d_k)   v: (..., m, d_v)
    mask: bool, broadcastable to (..., n, m); masked scores become -inf (not 0) before the softmax
    returns (output (..., n, d_v), weights (..., n, m))
    A query whose keys are all masked has no defined softmax (0/0): its row of weights is NaN here, as the
    formula gives (PyTorch's own F.scaled_dot_product_attention returns zeros instead; both are accepted).
    """
    if mask is not None and mask.dtype != torch.bool:
        raise TypeError(f"mask must be a bool tensor (True = may attend), got dtype {mask.dtype}")
    d_k = q.size(-1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)  # (..., n, m)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))  # masked keys get zero weight
    weights = stable_softmax(scores, dim=-1)  # (..., n, m), each row sums to 1
    return weights @ v, weights  # (..., n, d_v), (..., n, m)


def self_attention(
    x: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor, mask: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """Single-head self-attention: Q, K and V are all projections of the same sequence x.

    x: (..., n, d_model)   w_q, w_k: (d_model, d_k)   w_v: (d_model, d_v)
    mask: bool, broadcastable to (..., n, n), True = may attend
    returns (output (..., n, d_v), weights (..., n, n))
    """
    q = x @ w_q  # (..., n, d_k)
    k = x @ w_k  # (..., n, d_k)
    v = x @ w_v  # (..., n, d_v)
    return scaled_dot_product_attention(q, k, v, mask)


def dot_product_variance(
    d_k: int, n_samples: int, generator: torch.Generator | None = None
) -> tuple[float, float]:
    """The sqrt(d_k) experiment: variance of q·k for random q, k with i.i.d. N(0, 1) entries.

    Draws n_samples pairs (q, k) of dimension d_k and returns
    (variance of q·k, variance of q·k / sqrt(d_k)). Theory: d_k and 1.
    """
    q = torch.randn(n_samples, d_k, generator=generator)  # (n_samples, d_k)
    k = torch.randn(n_samples, d_k, generator=generator)  # (n_samples, d_k)
    scores = (q * k).sum(dim=-1)  # (n_samples,) one dot product per pair
    return scores.var().item(), (scores / math.sqrt(d_k)).var().item()
