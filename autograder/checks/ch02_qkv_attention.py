"""Checks for chapter 02-qkv-attention.

- MISTAKES: the typical wrong implementations, used to name a learner's mistake. The builder evaluates
  them on the visible-check inputs (so a notebook can say "this is what a missing scale gives"), and
  the hidden checks evaluate them on grading-time inputs.
- FORBIDDEN: the built-ins these exercises ask the learner to write instead of calling (torch function
  names as a torch function mode sees them, and how a learner would write them).
- CHECKS: the hidden check of each graded cell, by grade id (run in this process by checks.run_check).
"""

import math

import torch

from autograder.checks import builtins
from autograder.checks import Call, Case, Check, Returned, Seeded, function_check, generator, outcome
from solutions import ch02_qkv_attention as ref

# --- Known mistakes -----------------------------------------------------------------------------


def _naive_softmax(x, dim=-1):
    e = torch.exp(x)
    return e / e.sum(dim=dim, keepdim=True)


def _sdpa_variant(q, k, v, mask=None, softmax_dim=-1, scale=None, invert_mask=False, mask_after=False, transpose_k=True,
                  mask_zero=False, naive=False, fill=float("-inf"), mask_ignored=False):
    scale = math.sqrt(q.size(-1)) if scale is None else scale
    scores = q @ (k.transpose(-2, -1) if transpose_k else k) / scale
    keep = None if mask is None or mask_ignored else (mask if not invert_mask else ~mask)
    if keep is not None and not mask_after:
        scores = scores.masked_fill(~keep, 0.0 if mask_zero else fill)
    weights = (_naive_softmax if naive else ref.stable_softmax)(scores, dim=softmax_dim)
    if keep is not None and mask_after:
        weights = weights.masked_fill(~keep, 0.0)
    return weights @ v, weights


STABILITY_MISTAKES = {"no max subtracted, so exp overflows for large inputs": _naive_softmax}

def _whole_tensor_max(x, dim=-1):
    e = torch.exp(x - x.max())  # one maximum for the whole tensor: rows far below it underflow to 0
    return e / e.sum(dim=dim, keepdim=True)


SOFTMAX_MISTAKES = {
    "the `dim` argument is ignored (softmax always over the last dimension)": lambda x, dim=-1: ref.stable_softmax(x, dim=-1),
    # (with the maximum subtracted, so that on large inputs it is not the same NaNs as "no max subtracted")
    "softmax over the whole tensor instead of along `dim`": lambda x, dim=-1: torch.exp(x - x.max()) / torch.exp(x - x.max()).sum(),
    "the maximum is taken over the whole tensor (x.max()), not along `dim`: slices far below it underflow to 0/0": _whole_tensor_max,
}

ALL_SOFTMAX_MISTAKES = {**STABILITY_MISTAKES, **SOFTMAX_MISTAKES}

# Named by the visible check of a float64 case only, [0., -200.] (where float32 gives exactly [1., 0.]): the hidden checks
# name it from the values (every value a float32 number, within float32 rounding of the reference).
PRECISION_MISTAKES = {
    "computed in float32 and cast back to float64: precision is lost (e^-200 becomes 0); keep the input's dtype throughout (no .float())":
        lambda x, dim=-1: ref.stable_softmax(x.float(), dim=dim).to(x.dtype),
}

SDPA_MISTAKES = {
    "softmax over the wrong dimension (dim=-2, the queries, instead of dim=-1, the keys)": lambda q, k, v, mask=None: _sdpa_variant(q, k, v, mask, softmax_dim=-2),
    "missing scale: the scores are not divided by sqrt(d_k)": lambda q, k, v, mask=None: _sdpa_variant(q, k, v, mask, scale=1.0),
    "scores divided by d_k instead of sqrt(d_k)": lambda q, k, v, mask=None: _sdpa_variant(q, k, v, mask, scale=q.size(-1)),
    "inverted mask: in this course True means 'may attend', so fill where the mask is False": lambda q, k, v, mask=None: _sdpa_variant(q, k, v, mask, invert_mask=True),
    "mask applied after the softmax: masked scores must become -inf before it, so each row still sums to 1": lambda q, k, v, mask=None: _sdpa_variant(q, k, v, mask, mask_after=True),
    "K is not transposed: the scores are Q Kᵀ, not Q K": lambda q, k, v, mask=None: _sdpa_variant(q, k, v, mask, transpose_k=False),
    "masked scores set to 0 instead of -inf: a 0 score still gets weight e^0 / sum; use float('-inf')": lambda q, k, v, mask=None: _sdpa_variant(q, k, v, mask, mask_zero=True),
    "a softmax without the max subtracted overflows for large scores (inf / inf = nan)": lambda q, k, v, mask=None: _sdpa_variant(q, k, v, mask, naive=True),
    "d_k read from the wrong dimension (q.shape[1]): with batch and head dimensions in front, d_k is the last one, q.shape[-1]": lambda q, k, v, mask=None: _sdpa_variant(q, k, v, mask, scale=math.sqrt(q.shape[1])),
    "masked scores filled with a large negative number (e.g. -1e9) instead of -inf: a query whose keys are all masked then gets equal weights on every key, instead of none": lambda q, k, v, mask=None: _sdpa_variant(q, k, v, mask, fill=-1e9),
    "the mask is not used: masked_fill returns a new tensor, so assign its result (scores = scores.masked_fill(...))": lambda q, k, v, mask=None: _sdpa_variant(q, k, v, mask, mask_ignored=True),
}

SDPA_SHAPE_MISTAKES = {
    "output and weights returned in the wrong order: return output, weights": lambda q, k, v, mask=None: ref.scaled_dot_product_attention(q, k, v, mask)[::-1],
}


def _self_attention_scaled_by_d_model(x, w_q, w_k, w_v, mask=None):
    return _sdpa_variant(x @ w_q, x @ w_k, x @ w_v, mask, scale=math.sqrt(x.size(-1)))


SELF_ATTENTION_MISTAKES = {
    "scores scaled by sqrt(d_model) (the width of x) instead of sqrt(d_k) (the width of Q and K)": _self_attention_scaled_by_d_model,
    "Q, K and V projected with the wrong weight matrices (check which of w_q, w_k, w_v each uses)": lambda x, w_q, w_k, w_v, mask=None: ref.scaled_dot_product_attention(x @ w_k, x @ w_q, x @ w_v, mask),
    "one weight matrix used twice (K = x @ w_q): check which of w_q, w_k, w_v each projection uses": lambda x, w_q, w_k, w_v, mask=None: ref.scaled_dot_product_attention(x @ w_q, x @ w_q, x @ w_v, mask),
    "the mask is not used: pass it on, scaled_dot_product_attention(q, k, v, mask)": lambda x, w_q, w_k, w_v, mask=None: ref.scaled_dot_product_attention(x @ w_q, x @ w_k, x @ w_v),
    **{
        m: (lambda f: lambda x, w_q, w_k, w_v, mask=None: f(x @ w_q, x @ w_k, x @ w_v, mask))(f)
        for m, f in SDPA_MISTAKES.items() if not m.startswith("the mask is not used")
    },
}

# Hints for errors, per function: the same error message means different things in different functions.
SOFTMAX_ERROR_HINTS = {
    "must match the size": "the maximum and the sum must keep the reduced dimension (keepdim=True), so they broadcast against x.",
    "values to unpack": "code written for one number of dimensions (e.g. n, m = x.shape works only for matrices): stable_softmax must work along any dim of a tensor of any shape (vectors, matrices, batches).",
    "Expected a proper Tensor but got": "a tensor created on another device; create tensors with device=x.device.",
}
SDPA_ERROR_HINTS = {
    "to have the same dtype": "tensors of two dtypes met (float32 and float64): keep the inputs' dtype throughout (no .float()); your stable_softmax must return x's dtype too.",
    "cannot be multiplied": "K is not transposed: the scores are Q Kᵀ, so transpose the last two dimensions of k (k.transpose(-2, -1)).",
    "must match the size": "a shape mismatch: the scores (..., n, m) come from q (..., n, d_k) and k (..., m, d_k); the mask must broadcast to them.",
    "Expected `value` to be on same device": "the fill value is a tensor on another device: use a Python number, float('-inf').",
    "Expected a proper Tensor but got": "a tensor created on another device; create tensors with device=q.device.",
}
SELF_ATTENTION_ERROR_HINTS = {
    "to have the same dtype": "tensors of two dtypes met (float32 and float64): keep the inputs' dtype throughout (no .float()), in the projections and in the functions self_attention calls.",
    "cannot be multiplied": "project with x @ w_q, x @ w_k, x @ w_v: w_q is a (d_model, d_k) matrix used as it is (no .T; these are not nn.Linear weights).",
    "must match the size": "a shape mismatch: Q = x @ w_q has shape (..., n, d_k); the mask must broadcast to (..., n, n).",
}
VARIANCE_ERROR_HINTS = {
    "got an unexpected keyword argument 'generator'": "pass the generator to torch.randn(..., generator=generator).",
}
ERROR_HINTS = {**SOFTMAX_ERROR_HINTS, **SDPA_ERROR_HINTS}  # (kept for older notebooks' visible cells)

# --- Hidden checks --------------------------------------------------------------------------------

FORBIDDEN = builtins.forbidden("softmax", "attention", "multi_head_attention")


def _softmax_cases(seed):
    g = generator(seed, 1)
    return [
        Case("a vector of 5", (torch.randn(5, generator=g),)),
        Case("a (2, 3, 4) tensor along dim=1", (torch.randn(2, 3, 4, generator=g),), {"dim": 1}),
        Case("a (4, 6) tensor along dim=0", (torch.randn(4, 6, generator=g),), {"dim": 0}),
        Case("large scores (|x| up to 1000)", (1000 * torch.randn(3, 8, generator=g),)),
        Case("large scores along dim=0 of a (6, 3) tensor", (1000 * torch.randn(6, 3, generator=g),), {"dim": 0}),
        # Rows a thousand apart: one maximum for the whole tensor underflows the lower rows.
        Case("rows of very different sizes: a (4, 5) tensor with row offsets 0, 1000, -1000, 500",
             (torch.randn(4, 5, generator=g) + torch.tensor([[0.0], [1000.0], [-1000.0], [500.0]]),)),
    ]


def _attention_cases(seed):
    g = generator(seed, 2)
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
        # A query whose keys are all masked (row 1): its weights and output may be NaN (0/0) or zeros, nothing else.
        Case(
            "a query that may attend to no key: q (4, 8), k (5, 8), v (5, 3), mask (4, 5) whose row 1 is all False",
            (torch.randn(4, 8, generator=g), torch.randn(5, 8, generator=g), torch.randn(5, 3, generator=g),
             torch.tensor([[True, True, False, True, False], [False] * 5, [True] * 5, [False, False, False, False, True]])),
        ),
        # Scores in the thousands: exp overflows in float32 unless the softmax subtracts the row maximum.
        Case(
            "large scores: q, k of shape (2, 6, 8) with entries up to about 100 (scores up to a few thousand), causal mask",
            (100 * torch.randn(2, 6, 8, generator=g), 100 * torch.randn(2, 6, 8, generator=g), torch.randn(2, 6, 5, generator=g),
             torch.ones(6, 6, dtype=torch.bool).tril()),
        ),
    ]


def _self_attention_cases(seed):
    g = generator(seed, 3)
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    return [
        Case("x (4, 8), d_k = d_v = 4", (torch.randn(4, 8, generator=g), *(torch.randn(8, 4, generator=g) for _ in range(3)))),
        # d_model = 12, d_k = 4: sqrt(d_model) is not d_k, so "scaled by sqrt(d_model)" and "divided by d_k" differ.
        Case(
            "x (2, 6, 12), d_k = 4, d_v = 8, causal mask",
            (torch.randn(2, 6, 12, generator=g), torch.randn(12, 4, generator=g), torch.randn(12, 4, generator=g), torch.randn(12, 8, generator=g), causal),
        ),
        Case("x (3, 2, 5, 12), d_k = d_v = 6", (torch.randn(3, 2, 5, 12, generator=g), *(torch.randn(12, 6, generator=g) for _ in range(3)))),
        # A query that may attend to no key (row 2): NaN or zeros there, as in scaled_dot_product_attention.
        Case(
            "a query that may attend to no key: x (2, 4, 8), d_k = d_v = 4, mask (4, 4) whose row 2 is all False",
            (torch.randn(2, 4, 8, generator=g), *(torch.randn(8, 4, generator=g) for _ in range(3)),
             torch.tensor([[True, False, False, False], [True, True, False, False], [False] * 4, [True, True, False, True]])),
        ),
        Case(
            "large scores: x (2, 5, 8) with entries up to about 30, d_k = d_v = 4",
            (30 * torch.randn(2, 5, 8, generator=g), *(torch.randn(8, 4, generator=g) for _ in range(3))),
        ),
    ]


VARIANCE_SAMPLES, VARIANCE_REL = 40_000, 0.08  # 8% is more than 5 standard errors at 40 000 samples


def _variance_plan(seed, device):
    """Each d_k twice with the same generator seed: the results must agree (the draws use the generator)."""
    calls = []
    for d_k in (16, 256):
        s = generator(seed, 4).initial_seed() + d_k
        label = f"d_k = {d_k}, n_samples = {VARIANCE_SAMPLES}"
        calls += [Call(label, (d_k, VARIANCE_SAMPLES, Seeded(s)), {}, "cpu") for _ in range(2)]
    return calls


def _variance_judge(calls, records, function="dot_product_variance"):
    """Statistical check: the sample variances must be near d_k and 1."""
    rel = VARIANCE_REL
    for first in range(0, len(calls), 2):
        call = calls[first]
        d_k = call.args[0]
        results = [outcome(r, function, call.label, VARIANCE_ERROR_HINTS, FORBIDDEN) for r in records[first:first + 2]]
        result = results[0]
        if not (len(result) == 2 and all(isinstance(r, float) for r in result)):
            kinds = ", ".join("a tensor" if isinstance(r, Returned) else type(r).__name__ for r in result)
            tensors = " (use .item() to turn a one-number tensor into a float)" if any(isinstance(r, Returned) for r in result) else ""
            raise AssertionError(f"{function} should return a tuple of two Python floats, got {len(result)} value(s): {kinds}{tensors}.")
        if results[1] != result:
            raise AssertionError(f"{function} gave different results for the same generator seed: draw the samples with generator=generator.")
        raw, scaled = result
        if abs(raw - d_k) > rel * d_k:
            hint = " (that is about 1: did you return the scaled variance first?)" if abs(raw - 1) < rel else ""
            raise AssertionError(f"{function}({d_k}, {VARIANCE_SAMPLES}): variance of q·k is {raw:.4g}, expected about d_k = {d_k}{hint}.")
        if abs(scaled - 1) > rel:
            hint = " (that is about 1/d_k: divide by sqrt(d_k), not d_k)" if abs(scaled * d_k - 1) < rel else ""
            raise AssertionError(f"{function}({d_k}, {VARIANCE_SAMPLES}): variance of q·k/sqrt(d_k) is {scaled:.4g}, expected about 1{hint}.")


CHECKS = {
    "stable_softmax_hidden": function_check(
        ref.stable_softmax, _softmax_cases, ("softmax",), ALL_SOFTMAX_MISTAKES, SOFTMAX_ERROR_HINTS, FORBIDDEN,
        categories=("values", "shape", "dtype", "device", "large"),
    ),
    "scaled_dot_product_attention_hidden": function_check(
        ref.scaled_dot_product_attention, _attention_cases, ("output", "weights"), SDPA_MISTAKES, SDPA_ERROR_HINTS, FORBIDDEN,
        callees=("stable_softmax",), categories=("values", "shape", "dtype", "device", "large"), shape_mistakes=SDPA_SHAPE_MISTAKES,
    ),
    "self_attention_hidden": function_check(
        ref.self_attention, _self_attention_cases, ("output", "weights"), SELF_ATTENTION_MISTAKES, SELF_ATTENTION_ERROR_HINTS, FORBIDDEN,
        callees=("scaled_dot_product_attention",), categories=("values", "shape", "dtype", "device", "large"),
    ),
    "dot_product_variance_hidden": Check("dot_product_variance", _variance_plan, _variance_judge, FORBIDDEN, categories=("values", "generator")),
}


# Names whose appearance in a solution cell's code earns no points (read by autograder.grading.shortcuts, never run).
SHORTCUT_NAMES = builtins.shortcut_names("softmax", "attention", "multi_head_attention")
