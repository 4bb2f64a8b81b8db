"""Checks for chapter 02-qkv-attention.

- MISTAKES: the typical wrong implementations, used to name a learner's mistake. The builder evaluates
  them on the visible-check inputs (so a notebook can say "this is what a missing scale gives"), and
  the hidden checks evaluate them on grading-time inputs.
- check_*: the hidden checks, one per graded function.
"""

import math

import torch

from autograder.checks import Case, compare_with_reference, generator, run_learner
from solutions import ch02_qkv_attention as ref

# --- Known mistakes -----------------------------------------------------------------------------


def _naive_softmax(x, dim=-1):
    e = torch.exp(x)
    return e / e.sum(dim=dim, keepdim=True)


def _sdpa_variant(q, k, v, mask=None, softmax_dim=-1, scale=None, invert_mask=False, mask_after=False, transpose_k=True):
    scale = math.sqrt(q.size(-1)) if scale is None else scale
    scores = q @ (k.transpose(-2, -1) if transpose_k else k) / scale
    keep = None if mask is None else (mask if not invert_mask else ~mask)
    if keep is not None and not mask_after:
        scores = scores.masked_fill(~keep, float("-inf"))
    weights = torch.softmax(scores, dim=softmax_dim)
    if keep is not None and mask_after:
        weights = weights.masked_fill(~keep, 0.0)
    return weights @ v, weights


STABILITY_MISTAKES = {"no max subtracted, so exp overflows for large inputs": _naive_softmax}

SOFTMAX_MISTAKES = {
    "the `dim` argument is ignored (softmax always over the last dimension)": lambda x, dim=-1: torch.softmax(x, dim=-1),
    "softmax over the whole tensor instead of along `dim`": lambda x, dim=-1: torch.exp(x) / torch.exp(x).sum(),
}

SDPA_MISTAKES = {
    "softmax over the wrong dimension (dim=-2, the queries, instead of dim=-1, the keys)": lambda q, k, v, mask=None: _sdpa_variant(q, k, v, mask, softmax_dim=-2),
    "missing scale: the scores are not divided by sqrt(d_k)": lambda q, k, v, mask=None: _sdpa_variant(q, k, v, mask, scale=1.0),
    "scores divided by d_k instead of sqrt(d_k)": lambda q, k, v, mask=None: _sdpa_variant(q, k, v, mask, scale=q.size(-1)),
    "inverted mask: in this course True means 'may attend', so fill where the mask is False": lambda q, k, v, mask=None: _sdpa_variant(q, k, v, mask, invert_mask=True),
    "mask applied after the softmax: masked scores must become -inf before it, so each row still sums to 1": lambda q, k, v, mask=None: _sdpa_variant(q, k, v, mask, mask_after=True),
    "K is not transposed: the scores are Q Kᵀ, not Q K": lambda q, k, v, mask=None: _sdpa_variant(q, k, v, mask, transpose_k=False),
}


def _self_attention_scaled_by_d_model(x, w_q, w_k, w_v, mask=None):
    return _sdpa_variant(x @ w_q, x @ w_k, x @ w_v, mask, scale=math.sqrt(x.size(-1)))


SELF_ATTENTION_MISTAKES = {
    "scores scaled by sqrt(d_model) (the width of x) instead of sqrt(d_k) (the width of Q and K)": _self_attention_scaled_by_d_model,
    "Q, K and V projected with the wrong weight matrices (check which of w_q, w_k, w_v each uses)": lambda x, w_q, w_k, w_v, mask=None: ref.scaled_dot_product_attention(x @ w_k, x @ w_q, x @ w_v, mask),
    **{
        m: (lambda f: lambda x, w_q, w_k, w_v, mask=None: f(x @ w_q, x @ w_k, x @ w_v, mask))(f)
        for m, f in SDPA_MISTAKES.items()
    },
}

ERROR_HINTS = {
    "cannot be multiplied": "K is not transposed: the scores are Q Kᵀ (k.transpose(-2, -1)), not Q K.",
    "must match the size": "a shape mismatch: check which dimension you transpose and sum over.",
    "Expected a proper Tensor but got": "a tensor created on another device; create tensors with device=x.device.",
}

# --- Hidden checks --------------------------------------------------------------------------------


def check_stable_softmax(fn):
    g = generator(1)
    cases = [
        Case("a vector of 5", (torch.randn(5, generator=g),)),
        Case("a (2, 3, 4) tensor along dim=1", (torch.randn(2, 3, 4, generator=g),), {"dim": 1}),
        Case("a (4, 6) tensor along dim=0", (torch.randn(4, 6, generator=g),), {"dim": 0}),
        Case("large scores (|x| up to 1000)", (1000 * torch.randn(3, 8, generator=g),)),
    ]
    mistakes = {**STABILITY_MISTAKES, **SOFTMAX_MISTAKES}
    compare_with_reference(fn, ref.stable_softmax, cases, ("softmax",), mistakes, ERROR_HINTS)


def _attention_cases(g):
    b, h, n = 2, 3, 4
    causal = torch.ones(n, n, dtype=torch.bool).tril()  # (n, n) True = may attend
    lengths = torch.tensor([7, 4])  # padding mask for a batch of 2 sequences of 7 keys
    padding = (torch.arange(7)[None, :] < lengths[:, None])[:, None, :]  # (2, 1, 7)
    return [
        Case("q, k, v of shape (3, 4)", (torch.randn(3, 4, generator=g), torch.randn(3, 4, generator=g), torch.randn(3, 4, generator=g))),
        Case(
            "cross-attention, batch 2: q (2, 5, 8), k (2, 7, 8), v (2, 7, 6), padding mask (2, 1, 7)",
            (torch.randn(2, 5, 8, generator=g), torch.randn(2, 7, 8, generator=g), torch.randn(2, 7, 6, generator=g), padding),
        ),
        Case(
            f"batch {b}, {h} heads: q, k, v of shape ({b}, {h}, {n}, 16), causal mask ({n}, {n})",
            (torch.randn(b, h, n, 16, generator=g), torch.randn(b, h, n, 16, generator=g), torch.randn(b, h, n, 16, generator=g), causal),
        ),
    ]


def check_scaled_dot_product_attention(fn):
    cases = _attention_cases(generator(2))
    compare_with_reference(fn, ref.scaled_dot_product_attention, cases, ("output", "weights"), SDPA_MISTAKES, ERROR_HINTS)


def check_self_attention(fn):
    g = generator(3)
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    cases = [
        Case("x (4, 8), d_k = d_v = 4", (torch.randn(4, 8, generator=g), *(torch.randn(8, 4, generator=g) for _ in range(3)))),
        Case(
            "x (2, 6, 16), d_k = 4, d_v = 8, causal mask",
            (torch.randn(2, 6, 16, generator=g), torch.randn(16, 4, generator=g), torch.randn(16, 4, generator=g), torch.randn(16, 8, generator=g), causal),
        ),
        Case("x (3, 2, 5, 12), d_k = d_v = 6", (torch.randn(3, 2, 5, 12, generator=g), *(torch.randn(12, 6, generator=g) for _ in range(3)))),
    ]
    compare_with_reference(fn, ref.self_attention, cases, ("output", "weights"), SELF_ATTENTION_MISTAKES, ERROR_HINTS)


def check_dot_product_variance(fn, n_samples=40_000, rel=0.08):
    """Statistical check: the sample variances must be near d_k and 1 (8% is > 5 standard errors here)."""
    name = getattr(fn, "__name__", "your function")
    for d_k in (16, 256):
        seed = generator(4).initial_seed() + d_k
        case = Case(f"d_k = {d_k}, n_samples = {n_samples}", (d_k, n_samples, torch.Generator().manual_seed(seed)))
        result = run_learner(fn, case, ERROR_HINTS)
        if not (isinstance(result, tuple) and len(result) == 2 and all(isinstance(r, float) for r in result)):
            raise AssertionError(f"{name} should return a tuple of two Python floats, got {result!r}.")
        raw, scaled = result
        again = fn(d_k, n_samples, torch.Generator().manual_seed(seed))
        if again != result:
            raise AssertionError(f"{name} gave different results for the same generator seed: draw the samples with generator=generator.")
        if abs(raw - d_k) > rel * d_k:
            hint = " (that is about 1: did you return the scaled variance first?)" if abs(raw - 1) < rel else ""
            raise AssertionError(f"{name}({d_k}, {n_samples}): variance of q·k is {raw:.4g}, expected about d_k = {d_k}{hint}.")
        if abs(scaled - 1) > rel:
            hint = " (that is about 1/d_k: divide by sqrt(d_k), not d_k)" if abs(scaled * d_k - 1) < rel else ""
            raise AssertionError(f"{name}({d_k}, {n_samples}): variance of q·k/sqrt(d_k) is {scaled:.4g}, expected about 1{hint}.")
