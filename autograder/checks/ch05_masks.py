"""Checks for chapter 05-masks.

- *_MISTAKES: the typical wrong implementations, used to name a learner's mistake. The builder evaluates
  them on the visible-check inputs (so a notebook can say "this is what triu instead of tril gives"), and
  the hidden checks evaluate them on grading-time inputs.
- FORBIDDEN: the built-ins a function must not call (torch function names and ATen op names, as the
  grader's observers see them); SHORTCUT_NAMES: names the static reading of a solution cell refuses.
- CHECKS: the hidden check of each graded cell, by grade id; check_*: the same, run in this process.
- WRONG_ANSWERS: typical mistakes as edits of the reference source (end-to-end and learner-trial tests).

Masks are boolean, True = may attend; a mask is compared exactly (dtype bool, shape, device, every entry).
Functions that create a mask from plain numbers (causal_mask, causal_mask_bottom_right) are called with
the grading device as their `device` argument and once with device='meta': a mask made on the CPU
whatever the caller asked for fails there.
"""

import functools
import math

import torch

from autograder.checks import Case, Dev, Edit, Fn, Returned, ValidAnswer, WrongAnswer, callee_faults, function_check, generator, run_local
from solutions import ch05_masks as ref

# --- Known mistakes -----------------------------------------------------------------------------

INVERTED = "inverted convention (True = masked, as nn.MultiheadAttention reads it): in this course True means 'may attend'"

CAUSAL_MISTAKES = {
    "triu instead of tril: that allows the future (keys j >= i), not the past": lambda n, device=None: torch.ones(n, n, dtype=torch.bool, device=device).triu(),
    "the diagonal is excluded (tril(diagonal=-1)): a token may attend itself, so keep j == i": lambda n, device=None: torch.ones(n, n, dtype=torch.bool, device=device).tril(diagonal=-1),
    INVERTED: lambda n, device=None: ~ref.causal_mask(n, device),
    "an extra leading dimension, (1, n, n): return the (n, n) mask; broadcasting adds the batch and head dimensions": lambda n, device=None: ref.causal_mask(n, device)[None],
}

BOTTOM_RIGHT_MISTAKES = {
    "top-left alignment (tril() with no offset, which is what is_causal=True builds): the queries are the LAST q_len positions, "
    "so the triangle must end in the bottom-right corner, tril(diagonal=k_len - q_len)": lambda q_len, k_len, device=None: torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril(),
    "off by one: diagonal=k_len - q_len - 1 hides each query's own key": lambda q_len, k_len, device=None: torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril(diagonal=k_len - q_len - 1),
    "off by one: diagonal=k_len - q_len + 1 shows each query one future key": lambda q_len, k_len, device=None: torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril(diagonal=k_len - q_len + 1),
    "the offset has the wrong sign: diagonal=q_len - k_len instead of k_len - q_len": lambda q_len, k_len, device=None: torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril(diagonal=q_len - k_len),
    "triu instead of tril: that allows the future, not the past": lambda q_len, k_len, device=None: torch.ones(q_len, k_len, dtype=torch.bool, device=device).triu(diagonal=k_len - q_len),
    INVERTED: lambda q_len, k_len, device=None: ~ref.causal_mask_bottom_right(q_len, k_len, device),
    "the shape is (k_len, q_len): rows are queries and columns keys, (q_len, k_len)": lambda q_len, k_len, device=None: torch.ones(k_len, q_len, dtype=torch.bool, device=device).tril(diagonal=k_len - q_len),
}


def _positions_vs_lengths(lengths, max_len):
    lengths = torch.as_tensor(lengths)
    return torch.arange(max_len, device=lengths.device)[None, :], lengths[:, None]  # (1, max_len), (B, 1)


PADDING_MISTAKES = {
    "the mask has shape (B, max_len): add the two broadcasting dimensions, mask[:, None, None, :] -> (B, 1, 1, max_len), "
    "or it lines up the batch with the QUERY dimension of the (B, heads, q_len, k_len) scores": lambda lengths, max_len: ref.padding_mask(lengths, max_len)[:, 0, 0, :],
    "the mask has shape (B, 1, max_len, 1): that hides padding QUERIES (rows); the padding mask hides KEYS, the last dimension, "
    "(B, 1, 1, max_len)": lambda lengths, max_len: ref.padding_mask(lengths, max_len).transpose(-2, -1),
    "the mask has shape (B, 1, max_len): with 4-D scores (B, heads, q_len, k_len) it needs one more dimension, (B, 1, 1, max_len)": lambda lengths, max_len: ref.padding_mask(lengths, max_len)[:, 0],
    "off by one: position <= length lets each sequence see one padding key; positions 0..length-1 are the real tokens": lambda lengths, max_len: (lambda p, l: (p <= l)[:, None, None, :])(*_positions_vs_lengths(lengths, max_len)),
    INVERTED + " (True = padding is the convention of nn.MultiheadAttention's key_padding_mask)": lambda lengths, max_len: ~ref.padding_mask(lengths, max_len),
}


def _reduce(op, masks):
    masks = [m for m in masks if m is not None]
    return functools.reduce(op, masks) if masks else None


COMBINE_MISTAKES = {
    "combined with OR (|) instead of AND (&): a key may be attended only if EVERY mask allows it": lambda *masks: _reduce(lambda a, b: a | b, masks),
    "only the first mask is used: combine all of them (skip only the None entries)": lambda *masks: next((m for m in masks if m is not None), None),
    "only the last mask is used: combine all of them (skip only the None entries)": lambda *masks: next((m for m in reversed(masks) if m is not None), None),
}


def _attention(q, k, v, mask=None, fill_value=float("-inf"), *, fill=None, invert=False, after=False, scale=None, softmax_dim=-1, naive=False):
    """The reference's masked attention with one thing changed (for the mistake catalogue)."""
    scale = math.sqrt(q.size(-1)) if scale is None else scale
    scores = q @ k.transpose(-2, -1) / scale
    keep = None if mask is None else (~mask if invert else mask)
    if keep is not None and not after:
        scores = scores.masked_fill(~keep, fill_value if fill is None else fill)
    if naive:
        e = scores.exp()
        weights = e / e.sum(dim=softmax_dim, keepdim=True)
    else:
        weights = torch.softmax(scores, dim=softmax_dim)
    if keep is not None and after:
        weights = weights.masked_fill(~keep, 0.0)
    return weights @ v, weights


ZERO_FILL = "masked scores set to 0 instead of -inf (masked_fill(~mask, 0) or scores * mask): e^0 = 1, so masked keys keep a weight; fill with fill_value (-inf by default)"


def _as_float32(value):
    """A fill value as a float32 number holds it: finfo(float64).min overflows to -inf."""
    return float(torch.tensor(value, dtype=torch.float32))


ATTENTION_MISTAKES = {
    ZERO_FILL: lambda q, k, v, mask=None, fill_value=float("-inf"): _attention(q, k, v, mask, fill_value, fill=0.0),
    INVERTED: lambda q, k, v, mask=None, fill_value=float("-inf"): _attention(q, k, v, mask, fill_value, invert=True),
    "the mask is not applied at all: masked_fill returns a NEW tensor and leaves scores unchanged, so assign its result "
    "(scores = scores.masked_fill(~mask, fill_value)); the weights here are those of attention without a mask":
        lambda q, k, v, mask=None, fill_value=float("-inf"): _attention(q, k, v, None, fill_value),
    "mask applied after the softmax: the weights of the masked keys were set to 0 after it, so each row no longer sums to 1; "
    "fill the SCORES with fill_value before the softmax": lambda q, k, v, mask=None, fill_value=float("-inf"): _attention(q, k, v, mask, fill_value, after=True),
    "the fill became -inf although fill_value is finite, so a row with no allowed key comes out NaN instead of uniform: a fill_value "
    "such as torch.finfo(torch.float64).min converted to float32 (torch.tensor(fill_value), or torch.full(...) without dtype=) "
    "overflows to -inf (or fill_value is not used at all); make the fill in the scores' dtype (scores.masked_fill(~mask, fill_value), "
    "or torch.full_like(scores, fill_value))":
        lambda q, k, v, mask=None, fill_value=float("-inf"): _attention(q, k, v, mask, fill_value, fill=_as_float32(fill_value)),
    "fill_value is ignored (masked scores are always -inf): use the fill_value argument": lambda q, k, v, mask=None, fill_value=float("-inf"): _attention(q, k, v, mask, fill_value, fill=float("-inf")),
    "a hard-coded fill such as -1e9 instead of fill_value: a row with no allowed key then gets uniform weights over its masked keys, "
    "but with the default fill -inf that row has no defined softmax (0/0): it must come out NaN (or all 0)": lambda q, k, v, mask=None, fill_value=float("-inf"): _attention(q, k, v, mask, fill_value, fill=-1e9),
    "output and weights swapped: return (output, weights), in this order": lambda q, k, v, mask=None, fill_value=float("-inf"): _attention(q, k, v, mask, fill_value)[::-1],
    "missing scale: the scores are not divided by sqrt(d_k)": lambda q, k, v, mask=None, fill_value=float("-inf"): _attention(q, k, v, mask, fill_value, scale=1.0),
    "d_k read from the wrong dimension (q.size(1) or q.shape[1]): d_k is the LAST dimension of q, q.size(-1), whatever the batch and head "
    "dimensions before it": lambda q, k, v, mask=None, fill_value=float("-inf"): _attention(q, k, v, mask, fill_value, scale=math.sqrt(q.size(1))),
    "softmax over the wrong dimension (dim=-2, the queries, instead of dim=-1, the keys)": lambda q, k, v, mask=None, fill_value=float("-inf"): _attention(q, k, v, mask, fill_value, softmax_dim=-2),
    "no max subtracted in your softmax, so exp overflows for large scores (use torch.softmax, or subtract each row's maximum)": lambda q, k, v, mask=None, fill_value=float("-inf"): _attention(q, k, v, mask, fill_value, naive=True),
}


def _transposed(fn, x):
    return ref.dependency_matrix(fn, x).T


def _jacobian(fn, x):
    with torch.enable_grad():
        return torch.autograd.functional.jacobian(fn, x.detach())  # (T, d_out, T, d_in)


def _summed_outputs(fn, x):
    """D[i, j] = || d(sum_c y_ic) / d x_j ||: the output features summed before differentiating."""
    return _jacobian(fn, x).sum(dim=1).pow(2).sum(dim=-1).sqrt()


def _accumulated(fn, x):
    """The backward loop without resetting x.grad: every row adds up all the earlier gradients."""
    jac = _jacobian(fn, x)  # (T, d_out, T, d_in)
    T, d_out = jac.shape[:2]
    running = jac.reshape(T * d_out, *jac.shape[2:]).cumsum(0).reshape(jac.shape)  # x.grad after each backward
    return running.pow(2).sum(dim=(1, 3)).sqrt()


DEPENDENCY_MISTAKES = {
    "transposed: D[i, j] is how much OUTPUT i depends on INPUT j (rows are outputs); the Jacobian is (T, d_out, T, d_in)": _transposed,
    "sum of absolute values instead of the Frobenius norm: D[i, j] = sqrt(sum of squares) of the (d_out, d_in) block": lambda fn, x: _jacobian(fn, x).abs().sum(dim=(1, 3)),
    "the output features are summed before differentiating (y[i].sum().backward()): that is || sum_c dy_ic/dx_j ||, not the "
    "norm of the whole block; differentiate each output entry y[i, c] (or use torch.autograd.functional.jacobian)": _summed_outputs,
    "x.grad is never reset between backward passes, so the gradients add up: set x.grad = None before each backward()": _accumulated,
    "the norm is taken over d_in only (the result is (T, d_out, T)): sum the squares over both d_out and d_in": lambda fn, x: _jacobian(fn, x).pow(2).sum(dim=3).sqrt(),
}

# --- Hints for errors, per function -------------------------------------------------------------

DEVICE_HINTS = {
    "is not on the expected device": "a tensor created on the CPU next to one on another device: pass device=... when you create it.",
    "Expected all tensors to be on the same device": "a tensor created on the CPU next to one on another device: pass device=... when you create it.",
}

ERROR_HINTS = {
    "causal_mask": {
        "must be Tensor, not int": "torch.tril takes a tensor: build torch.ones(n, n, dtype=torch.bool, device=device) first, then .tril().",
        **DEVICE_HINTS,
    },
    "causal_mask_bottom_right": {
        "must be Tensor, not int": "torch.tril takes a tensor: build torch.ones(q_len, k_len, dtype=torch.bool, device=device) first.",
        **DEVICE_HINTS,
    },
    "padding_mask": {
        "The size of tensor a": "compare a (1, max_len) row of positions with a (B, 1) column of lengths: positions[None, :] < lengths[:, None] gives (B, max_len).",
        **DEVICE_HINTS,
    },
    "combine_masks": {
        "NoneType": "a None entry was combined: skip the None masks (`if m is None: continue`), and return None when none is left.",
        "reduce() of empty": "every mask was None: return None when no mask is left (reduce needs at least one).",
        "not implemented for 'Float'": "the masks are bool: combine them with & (logical AND), not with float arithmetic.",
        "The size of tensor a": "the masks must broadcast together, e.g. (T, T) & (B, 1, 1, T) -> (B, 1, T, T); do not reshape them.",
        **DEVICE_HINTS,
    },
    "masked_attention": {
        "cannot be multiplied": "K is not transposed: the scores are Q Kᵀ (k.transpose(-2, -1)), not Q K.",
        "The size of tensor a": "the mask must broadcast against the scores (..., q_len, k_len): apply it to the scores, not to q, k or v.",
        "does not match the shape of the indexed tensor": "boolean indexing (scores[~mask] = ...) needs a mask of the scores' full shape; "
                                                          "scores.masked_fill(~mask, fill_value) broadcasts the mask for you.",
        "masked_fill_ only supports boolean masks": "masked_fill needs a bool mask: use ~mask (the keys that may NOT be attended), not 1 - mask.",
        "bitwise_not": "~ works on a bool mask; the masks here are bool (True = may attend).",
        "without overflow": "a tensor created with the default dtype (float32) cannot hold this fill_value: create it like the scores, "
                            "e.g. torch.full_like(scores, fill_value), which also puts it on the scores' device.",
        **DEVICE_HINTS,
    },
    "dependency_matrix": {
        "does not require grad": "x must require gradients: x = x.detach().requires_grad_(True) before calling fn (or use torch.autograd.functional.jacobian).",
        "backward through the graph a second time": "call fn(x) again before each backward() (or use torch.autograd.functional.jacobian).",
        "can be implicitly created only for scalar outputs": "backward() needs a scalar: back-propagate one output entry y[i, c] at a time, or use torch.autograd.functional.jacobian.",
        "'NoneType' object has no attribute": "x.grad is None: x must be a leaf that requires grad (x = x.detach().requires_grad_(True)), and fn(x) must be computed from that x.",
        **DEVICE_HINTS,
    },
}

# --- Hidden checks --------------------------------------------------------------------------------

FORBIDDEN = {
    "scaled_dot_product_attention": "F.scaled_dot_product_attention",
    "_scaled_dot_product_attention_math": "F.scaled_dot_product_attention",
    "_scaled_dot_product_flash_attention": "F.scaled_dot_product_attention",
    "_scaled_dot_product_flash_attention_for_cpu": "F.scaled_dot_product_attention",
    "_scaled_dot_product_efficient_attention": "F.scaled_dot_product_attention",
    "_scaled_dot_product_cudnn_attention": "F.scaled_dot_product_attention",
    "multi_head_attention_forward": "nn.MultiheadAttention",
}


def _mask_words(expected_dtype, got_dtype):
    return (f"its dtype is {got_dtype}, but masks in this course are boolean (dtype torch.bool, True = may attend): "
            "create it with dtype=torch.bool (or compare, e.g. j <= i). PyTorch ADDS a float mask of 1s and 0s to the scores, "
            "so it masks nothing.")


def _bool_outputs(function, callees=()):
    """extra(): a mask that is not boolean gets its own message (before the generic dtype comparison), unless it
    comes from a callee proven wrong (e.g. a float causal_mask): then the judge grades the caller on its own."""

    def extra(call, record, got, expected):
        if callees and callee_faults(record, callees, ref.__name__, call.dtype):
            return
        for g, e in zip(got, expected):
            if isinstance(e, torch.Tensor) and e.dtype == torch.bool and isinstance(g, Returned) and g.dtype != "bool":
                raise AssertionError(f"{function} on {call.label}: {_mask_words(e.dtype, g.dtype)}")

    return extra


def _mask_check(reference, cases_fn, mistakes, error_hints, callees=()):
    """A hidden check of a mask builder: each case once on the grading device (no float dtype to vary; `Dev()`
    arguments become that device), then once on 'meta'; a mask that is not boolean gets its own message."""
    return function_check(reference, cases_fn, ("mask",), mistakes, error_hints, callees=callees, dtypes=None,
                          extra=_bool_outputs(reference.__name__, callees))


def _causal_cases(seed):
    g = generator(seed, 1)
    ns = [int(torch.randint(4, 7, (), generator=g)), int(torch.randint(7, 11, (), generator=g)), 1]  # n = 1 last: it tells fewer mistakes apart
    return [Case(f"causal_mask({n}, device=<the device>)", (n,), {"device": Dev()}) for n in ns]


def _padding_cases(seed):
    g = generator(seed, 2)
    t = int(torch.randint(5, 9, (), generator=g))
    lengths = torch.randint(1, t + 1, (4,), generator=g)
    lengths[int(torch.randint(0, 4, (), generator=g))] = t  # one sequence without padding
    with_empty = torch.tensor([0, t - 1, 2])  # a sequence of padding only: its row allows no key
    return [
        Case(f"lengths {lengths.tolist()}, max_len {t}", (lengths, t)),
        Case(f"lengths {with_empty.tolist()} (one sequence of padding only), max_len {t}", (with_empty, t)),
        Case("lengths [3], max_len 3 (one sequence, no padding)", (torch.tensor([3]), 3)),
    ]


def _combine_cases(seed):
    g = generator(seed, 3)
    b, t = 3, int(torch.randint(4, 7, (), generator=g))
    causal = ref.causal_mask(t)  # (t, t)
    padding = ref.padding_mask(torch.randint(1, t + 1, (b,), generator=g), t)  # (b, 1, 1, t)
    extra = torch.rand(b, 1, t, t, generator=g) < 0.7  # (b, 1, t, t) a third, random mask
    return [
        Case(f"causal ({t}, {t}) and padding ({b}, 1, 1, {t})", (causal, padding)),
        Case(f"causal ({t}, {t}), padding ({b}, 1, 1, {t}) and a random mask ({b}, 1, {t}, {t})", (causal, padding, extra)),
        Case(f"None, padding ({b}, 1, 1, {t}), None", (None, padding, None)),
        Case(f"a single mask ({t}, {t})", (causal,)),
        Case("None, None (no mask at all: None)", (None, None)),
    ]


def _bottom_right_cases(seed):
    g = generator(seed, 5)
    k_len = int(torch.randint(6, 10, (), generator=g))
    q_chunk = int(torch.randint(2, k_len - 2, (), generator=g))
    pairs = [(q_chunk, k_len), (1, k_len), (k_len, k_len), (1, 1)]  # a chunk first: it tells the most mistakes apart
    many, few = k_len - 1, q_chunk  # more queries than keys: invalid
    return [Case(f"causal_mask_bottom_right({q}, {k}, device=<the device>)", (q, k), {"device": Dev()}) for q, k in pairs] + [
        Case(f"causal_mask_bottom_right({many}, {few}) (more queries than keys)", (many, few), raises=ValueError,
             why=f"{many} queries cannot be the last {many} of {few} key positions (tril with a negative diagonal silently "
                 "leaves rows with no allowed key, which attention turns into NaN)"),
    ]


def _attention_cases(seed):
    g = generator(seed, 4)

    def r(*shape, scale=1.0):
        return scale * torch.randn(*shape, generator=g)

    causal5, causal6, causal4 = ref.causal_mask(5), ref.causal_mask(6), ref.causal_mask(4)
    padding7 = ref.padding_mask(torch.tensor([7, 3]), 7)[:, 0]  # (2, 1, 7)
    combined = ref.combine_masks(causal6, ref.padding_mask(torch.tensor([6, 4]), 6))  # (2, 1, 6, 6)
    empty_row = causal4.clone()
    empty_row[2] = False  # query 2 may attend no key
    f32_min, f64_min = torch.finfo(torch.float32).min, torch.finfo(torch.float64).min
    return [
        Case("q, k, v (4, 8), no mask", (r(4, 8), r(4, 8), r(4, 8)), grad_wrt=(0, 1, 2)),
        Case("batch 2, 3 heads: q, k, v (2, 3, 5, 8), causal mask (5, 5)", (r(2, 3, 5, 8), r(2, 3, 5, 8), r(2, 3, 5, 8), causal5), grad_wrt=(0, 1, 2)),
        Case("cross-attention: q (2, 4, 6), k (2, 7, 6), v (2, 7, 5), padding mask (2, 1, 7), lengths [7, 3]",
             (r(2, 4, 6), r(2, 7, 6), r(2, 7, 5), padding7), grad_wrt=(0, 1, 2)),
        Case("batch 2, 2 heads: q, k, v (2, 2, 6, 8), causal & padding mask (2, 1, 6, 6), lengths [6, 4]",
             (r(2, 2, 6, 8), r(2, 2, 6, 8), r(2, 2, 6, 8), combined), grad_wrt=(0, 1, 2)),
        # Scores in the hundreds to thousands, in every batch entry and row: exp overflows without the row maximum.
        Case("large scores: q, k (2, 6, 16) with entries about 30 (scores up to a few thousand), causal mask (6, 6)",
             (r(2, 6, 16, scale=30.0), r(2, 6, 16, scale=30.0), r(2, 6, 5), causal6)),
        Case("q, k, v (3, 4, 8), mask (4, 4) whose row 2 allows no key, default fill -inf (row 2 is NaN)",
             (r(3, 4, 8), r(3, 4, 8), r(3, 4, 8), empty_row)),
        # A finite fill: row 2 is uniform. Large scores in the other rows tell a softmax without the max subtracted
        # (NaN there too) from an ignored fill_value (NaN in row 2 only).
        Case(f"q, k (3, 4, 16) with entries about 30, v (3, 4, 8), mask (4, 4) whose row 2 allows no key, fill_value={f32_min:.6g} "
             "(row 2 is uniform)", (r(3, 4, 16, scale=30.0), r(3, 4, 16, scale=30.0), r(3, 4, 8), empty_row), {"fill_value": f32_min}),
        # The visible check's fill: finfo(float64).min, which only float64 scores can hold (in float32 it overflows).
        Case(f"q, k (2, 4, 16) with entries about 30, v (2, 4, 8), mask (4, 4) whose row 2 allows no key, "
             f"fill_value=torch.finfo(torch.float64).min {FLOAT64_ONLY} (row 2 is uniform)",
             (r(2, 4, 16, scale=30.0), r(2, 4, 16, scale=30.0), r(2, 4, 8), empty_row), {"fill_value": f64_min}),
    ]


FLOAT64_ONLY = "(float64 only)"


def _without_float32_of_float64_only_cases(plan):
    """A plan without the float32 (and meta, which runs in float32) calls of the cases labelled FLOAT64_ONLY:
    their fill_value, torch.finfo(torch.float64).min, cannot be held by float32 scores (masked_fill raises)."""

    def filtered(seed, device):
        return [c for c in plan(seed, device) if FLOAT64_ONLY not in c.label or c.dtype == torch.float64]

    return filtered


def _dependency_cases(seed):
    g = generator(seed, 6)
    return [
        Case("fn = look_ahead, x (5, 3)", (Fn("look_ahead"), torch.randn(5, 3, generator=g))),
        Case("fn = causal_self_attention, x (6, 4)", (Fn("causal_self_attention"), torch.randn(6, 4, generator=g))),
        Case("fn = look_ahead, x (1, 2) (a single position)", (Fn("look_ahead"), torch.randn(1, 2, generator=g))),
        Case("fn = causal_self_attention, x (4, 8)", (Fn("causal_self_attention"), torch.randn(4, 8, generator=g))),
    ]


_attention_check = function_check(
    ref.masked_attention, _attention_cases, ("output", "weights"), ATTENTION_MISTAKES, ERROR_HINTS["masked_attention"], FORBIDDEN,
    categories=("values", "shape", "dtype", "device", "large", "gradient"),
)
_attention_check.plan = _without_float32_of_float64_only_cases(_attention_check.plan)

CHECKS = {
    "causal_mask_hidden": _mask_check(ref.causal_mask, _causal_cases, CAUSAL_MISTAKES, ERROR_HINTS["causal_mask"]),
    "padding_mask_hidden": _mask_check(ref.padding_mask, _padding_cases, PADDING_MISTAKES, ERROR_HINTS["padding_mask"]),
    "combine_masks_hidden": _mask_check(ref.combine_masks, _combine_cases, COMBINE_MISTAKES, ERROR_HINTS["combine_masks"]),
    "masked_attention_hidden": _attention_check,
    "dependency_matrix_hidden": function_check(
        ref.dependency_matrix, _dependency_cases, ("D",), DEPENDENCY_MISTAKES, ERROR_HINTS["dependency_matrix"],
        categories=("values", "shape", "dtype", "device"),
    ),
    # Built from the learner's own causal_mask (e.g. causal_mask(k_len, device)[k_len - q_len:]), a correct
    # causal_mask_bottom_right keeps its points when causal_mask is wrong: that mistake costs points in exercise 1 only.
    "causal_mask_bottom_right_hidden": _mask_check(ref.causal_mask_bottom_right, _bottom_right_cases, BOTTOM_RIGHT_MISTAKES,
                                                   ERROR_HINTS["causal_mask_bottom_right"], callees=("causal_mask",)),
}


def check_causal_mask(fn):
    run_local(CHECKS["causal_mask_hidden"], fn)


def check_padding_mask(fn):
    run_local(CHECKS["padding_mask_hidden"], fn)


def check_combine_masks(fn):
    run_local(CHECKS["combine_masks_hidden"], fn)


def check_masked_attention(fn):
    run_local(CHECKS["masked_attention_hidden"], fn)


def check_dependency_matrix(fn):
    # look_ahead and causal_self_attention come from the notebook (its read-only cell); elsewhere, from solutions/.
    run_local(CHECKS["dependency_matrix_hidden"], fn, namespace={**vars(ref), **getattr(fn, "__globals__", {})})


def check_causal_mask_bottom_right(fn):
    run_local(CHECKS["causal_mask_bottom_right_hidden"], fn)


# Names whose appearance in a solution cell's code earns no points (read by autograder.shortcuts, never run).
SHORTCUT_NAMES = (
    "scaled_dot_product_attention", "MultiheadAttention", "multi_head_attention_forward",
    "causal_lower_right", "causal_upper_left", "CausalBias", "generate_square_subsequent_mask",
)


# --- Helpers for the visible checks (evaluated when the notebook is built) --------------------------


def reference_gradients(q, k, v, mask, r_out, r_weights):
    """d(sum(output * r_out) + sum(weights * r_weights)) / d(q, k, v) for the reference masked_attention."""
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    out, weights = ref.masked_attention(q, k, v, mask)
    ((out * r_out).sum() + (weights * r_weights).sum()).backward()
    return q.grad, k.grad, v.grad


# --- Typical wrong answers, as edits of the reference source (end-to-end and learner-trial tests) ------

_RAISE_IF_TOO_MANY = (
    "    if q_len > k_len:\n"
    "        raise ValueError(f\"q_len={q_len} > k_len={k_len}: the queries must be among the keys' positions\")\n"
)
_JACOBIAN_BODY = (
    "    x = x.detach()\n"
    "    jac = torch.autograd.functional.jacobian(fn, x)  # (T, d_out, T, d_in)\n"
    "    return jac.pow(2).sum(dim=(1, 3)).sqrt()  # (T, T)\n"
)


def _backward_loop(allocate="torch.zeros(T, T, dtype=x.dtype, device=x.device)", reset="            x.grad = None\n"):
    """dependency_matrix as a loop of backward passes, one per output entry (a valid alternative when
    `allocate` keeps x's dtype and device and `reset` clears x.grad)."""
    return (
        "    x = x.detach().requires_grad_(True)\n"
        "    T = x.size(0)\n"
        f"    D = {allocate}  # (T, T) sums of squares\n"
        "    for i in range(T):\n"
        "        y = fn(x)  # (T, d_out)\n"
        "        for c in range(y.size(-1)):\n"
        f"{reset}"
        "            y[i, c].backward(retain_graph=True)\n"
        "            D[i] += x.grad.pow(2).sum(dim=-1)  # (T,)\n"
        "    return D.sqrt()\n"
    )


WRONG_ANSWERS = {
    # causal_mask
    "causal_triu": WrongAnswer("causal_mask", ".tril()  # (n, n)", ".triu()  # (n, n)", "triu instead of tril"),
    "causal_no_diagonal": WrongAnswer("causal_mask", ".tril()  # (n, n)", ".tril(diagonal=-1)  # (n, n)", "the diagonal is excluded"),
    "causal_inverted": WrongAnswer("causal_mask", "return torch.ones(n, n, dtype=torch.bool, device=device).tril()",
                                   "return ~torch.ones(n, n, dtype=torch.bool, device=device).tril()", "inverted convention"),
    "causal_float_mask": WrongAnswer("causal_mask", "torch.ones(n, n, dtype=torch.bool, device=device)", "torch.ones(n, n, device=device)",
                                     "masks in this course are boolean", category="dtype"),
    "causal_extra_dim": WrongAnswer("causal_mask", ".tril()  # (n, n)", ".tril()[None]  # (1, n, n) for the batch", "an extra leading dimension", category="shape"),
    "causal_no_device": WrongAnswer("causal_mask", "torch.ones(n, n, dtype=torch.bool, device=device)", "torch.ones(n, n, dtype=torch.bool)",
                                    "device", category="device"),
    # padding_mask
    "padding_shape_b_t": WrongAnswer("padding_mask", "return mask[:, None, None, :]  # (B, 1, 1, max_len)", "return mask  # (B, max_len)",
                                     "the mask has shape (B, max_len)", category="shape"),
    "padding_masks_queries": WrongAnswer("padding_mask", "return mask[:, None, None, :]  # (B, 1, 1, max_len)", "return mask[:, None, :, None]",
                                         "hides padding QUERIES", category="shape"),
    "padding_off_by_one": WrongAnswer("padding_mask", "positions.unsqueeze(0) < lengths.unsqueeze(1)", "positions.unsqueeze(0) <= lengths.unsqueeze(1)", "off by one"),
    "padding_inverted": WrongAnswer("padding_mask", "positions.unsqueeze(0) < lengths.unsqueeze(1)", "positions.unsqueeze(0) >= lengths.unsqueeze(1)", "inverted convention"),
    "padding_float": WrongAnswer("padding_mask", "mask = positions.unsqueeze(0) < lengths.unsqueeze(1)", "mask = (positions.unsqueeze(0) < lengths.unsqueeze(1)).float()",
                                 "masks in this course are boolean", category="dtype"),
    "padding_no_device": WrongAnswer("padding_mask", "torch.arange(max_len, device=lengths.device)", "torch.arange(max_len)", "device", category="device"),
    # combine_masks
    "combine_or": WrongAnswer("combine_masks", "result & m", "result | m", "OR (|) instead of AND"),
    "combine_none_not_skipped": WrongAnswer("combine_masks", "        if m is None:\n            continue\n", "", "skip the None masks"),
    "combine_squeezed": WrongAnswer("combine_masks", "result = m if result is None else result & m", "result = m.squeeze() if result is None else result & m.squeeze()",
                                    "do not reshape them", category="shape"),
    "combine_float": WrongAnswer("combine_masks", "result = m if result is None else result & m", "result = m.float() if result is None else result * m",
                                 "masks in this course are boolean", category="dtype"),
    "combine_cpu_start": WrongAnswer("combine_masks", "result = m if result is None else result & m",
                                     "result = (torch.ones(m.shape, dtype=torch.bool) & m) if result is None else result & m", "device", category="device"),
    # masked_attention
    "attention_zero_fill": WrongAnswer("masked_attention", "scores.masked_fill(~mask, fill_value)", "scores.masked_fill(~mask, 0)", "masked scores set to 0 instead of -inf"),
    "attention_times_mask": WrongAnswer("masked_attention", "scores = scores.masked_fill(~mask, fill_value)", "scores = scores * mask", "masked scores set to 0 instead of -inf"),
    "attention_inverted": WrongAnswer("masked_attention", "scores.masked_fill(~mask, fill_value)", "scores.masked_fill(mask, fill_value)", "inverted convention"),
    "attention_hardcoded_fill": WrongAnswer("masked_attention", "scores.masked_fill(~mask, fill_value)", "scores.masked_fill(~mask, -1e9)", "hard-coded fill"),
    "attention_ignores_fill_value": WrongAnswer("masked_attention", "scores.masked_fill(~mask, fill_value)", 'scores.masked_fill(~mask, float("-inf"))', "fill_value is ignored"),
    "attention_mask_after_softmax": WrongAnswer(
        "masked_attention",
        "    if mask is not None:\n        scores = scores.masked_fill(~mask, fill_value)\n    weights = torch.softmax(scores, dim=-1)  # (..., q_len, k_len)\n",
        "    weights = torch.softmax(scores, dim=-1)  # (..., q_len, k_len)\n    if mask is not None:\n        weights = weights.masked_fill(~mask, 0.0)\n",
        "mask applied after the softmax",
    ),
    "attention_missing_scale": WrongAnswer("masked_attention", "q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))", "q @ k.transpose(-2, -1)", "missing scale"),
    "attention_k_not_transposed": WrongAnswer("masked_attention", "q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))", "q @ k / math.sqrt(q.size(-1))", "K is not transposed"),
    "attention_swapped_returns": WrongAnswer("masked_attention", "    return weights @ v, weights", "    return weights, weights @ v", "output and weights swapped", category="shape"),
    "attention_naive_softmax": WrongAnswer("masked_attention", "weights = torch.softmax(scores, dim=-1)", "weights = scores.exp() / scores.exp().sum(dim=-1, keepdim=True)",
                                           "no max subtracted", category="large"),
    "attention_float32": WrongAnswer("masked_attention", "    return weights @ v, weights", "    weights = weights.float()  # float32 'for stability'\n    return weights @ v.float(), weights",
                                     "dtype float32, expected torch.float64", category="dtype"),
    "attention_cpu_fill": WrongAnswer("masked_attention", "scores = scores.masked_fill(~mask, fill_value)",
                                      "scores = torch.where(mask, scores, torch.full(scores.shape, fill_value))", "device", category="device"),
    "attention_detached_weights": WrongAnswer("masked_attention", "weights = torch.softmax(scores, dim=-1)", "weights = torch.softmax(scores, dim=-1).detach()",
                                              "through autograd", category="gradient"),
    # dependency_matrix
    "dependency_transposed": WrongAnswer("dependency_matrix", ".sqrt()  # (T, T)", ".sqrt().T  # (T, T)", "transposed"),
    "dependency_l1": WrongAnswer("dependency_matrix", "jac.pow(2).sum(dim=(1, 3)).sqrt()", "jac.abs().sum(dim=(1, 3))", "sum of absolute values"),
    "dependency_d_in_only": WrongAnswer("dependency_matrix", "jac.pow(2).sum(dim=(1, 3)).sqrt()", "jac.pow(2).sum(dim=3).sqrt()", "the norm is taken over d_in only", category="shape"),
    "dependency_summed_outputs": WrongAnswer(
        "dependency_matrix", _JACOBIAN_BODY,
        "    x = x.detach().requires_grad_(True)\n"
        "    rows = []\n"
        "    for i in range(x.size(0)):\n"
        "        x.grad = None\n"
        "        fn(x)[i].sum().backward()\n"
        "        rows.append(x.grad.norm(dim=-1))  # (T,)\n"
        "    return torch.stack(rows)  # (T, T)\n",
        "summed before differentiating",
    ),
    "dependency_grad_not_reset": WrongAnswer("dependency_matrix", _JACOBIAN_BODY, _backward_loop(reset=""), "never reset"),
    "dependency_float32": WrongAnswer("dependency_matrix", _JACOBIAN_BODY, _backward_loop(allocate="torch.zeros(T, T, device=x.device)"),
                                      "dtype float32, expected torch.float64", category="dtype"),
    "dependency_no_device": WrongAnswer("dependency_matrix", _JACOBIAN_BODY, _backward_loop(allocate="torch.zeros(T, T, dtype=x.dtype)"),
                                        "device", category="device"),
    # causal_mask_bottom_right
    "bottom_right_top_left": WrongAnswer("causal_mask_bottom_right", "ones.tril(diagonal=k_len - q_len)", "ones.tril()", "top-left alignment"),
    "bottom_right_off_by_one": WrongAnswer("causal_mask_bottom_right", "ones.tril(diagonal=k_len - q_len)", "ones.tril(diagonal=k_len - q_len - 1)", "hides each query's own key"),
    "bottom_right_wrong_sign": WrongAnswer("causal_mask_bottom_right", "ones.tril(diagonal=k_len - q_len)", "ones.tril(diagonal=q_len - k_len)", "wrong sign"),
    "bottom_right_transposed_shape": WrongAnswer("causal_mask_bottom_right", "torch.ones(q_len, k_len, dtype=torch.bool, device=device)",
                                                 "torch.ones(k_len, q_len, dtype=torch.bool, device=device)", "the shape is (k_len, q_len)", category="shape"),
    "bottom_right_no_error": WrongAnswer("causal_mask_bottom_right", _RAISE_IF_TOO_MANY, "", "should raise ValueError"),
    "bottom_right_float_mask": WrongAnswer("causal_mask_bottom_right", "torch.ones(q_len, k_len, dtype=torch.bool, device=device)", "torch.ones(q_len, k_len, device=device)",
                                           "masks in this course are boolean", category="dtype"),
    "bottom_right_no_device": WrongAnswer("causal_mask_bottom_right", "torch.ones(q_len, k_len, dtype=torch.bool, device=device)", "torch.ones(q_len, k_len, dtype=torch.bool)",
                                          "device", category="device"),
}

# Correct alternatives a learner may write (edits of the reference source): each must pass every check.
VALID_ALTERNATIVES = {
    "causal_arange_comparison": ("causal_mask", "return torch.ones(n, n, dtype=torch.bool, device=device).tril()  # (n, n)",
                                 "i = torch.arange(n, device=device)\n    return i[None, :] <= i[:, None]  # (n, n): key j <= query i"),
    "causal_torch_tril_function": ("causal_mask", "return torch.ones(n, n, dtype=torch.bool, device=device).tril()",
                                   "return torch.tril(torch.ones(n, n, device=device)).bool()"),
    "causal_not_triu": ("causal_mask", "return torch.ones(n, n, dtype=torch.bool, device=device).tril()",
                        "return ~torch.ones(n, n, dtype=torch.bool, device=device).triu(diagonal=1)"),
    "padding_view": ("padding_mask", "return mask[:, None, None, :]  # (B, 1, 1, max_len)", "return mask.view(mask.size(0), 1, 1, max_len)"),
    "padding_lengths_greater": ("padding_mask", "positions.unsqueeze(0) < lengths.unsqueeze(1)", "lengths[:, None] > positions[None, :]"),
    "combine_logical_and": ("combine_masks", "result & m", "torch.logical_and(result, m)"),
    "combine_filtered_reduce": (
        "combine_masks",
        "    result = None\n    for m in masks:\n        if m is None:\n            continue\n",
        "    present = [m for m in masks if m is not None]\n    if not present:\n        return None\n    result = None\n    for m in present:\n",
    ),
    "combine_reduce_logical_and": (
        "combine_masks",
        "    result = None\n    for m in masks:\n        if m is None:\n            continue\n",
        "    import functools\n    present = [m for m in masks if m is not None]\n    return functools.reduce(torch.logical_and, present) if present else None\n"
        "    result = None\n    for m in masks:\n        if m is None:\n            continue\n",
    ),
    "attention_where": ("masked_attention", "scores = scores.masked_fill(~mask, fill_value)",
                        "scores = torch.where(mask, scores, torch.full_like(scores, fill_value))"),
    "attention_own_stable_softmax": ("masked_attention", "weights = torch.softmax(scores, dim=-1)",
                                     "e = (scores - scores.amax(dim=-1, keepdim=True)).exp()\n    weights = e / e.sum(dim=-1, keepdim=True)"),
    "attention_additive_mask": ("masked_attention", "scores = scores.masked_fill(~mask, fill_value)",
                                "scores = scores + torch.zeros_like(scores).masked_fill(~mask, fill_value)"),
    "dependency_backward_loop": ("dependency_matrix", _JACOBIAN_BODY, _backward_loop()),
    "dependency_matrix_norm": ("dependency_matrix", "jac.pow(2).sum(dim=(1, 3)).sqrt()", "torch.linalg.matrix_norm(jac.permute(0, 2, 1, 3))"),
    "dependency_jacrev": ("dependency_matrix", "torch.autograd.functional.jacobian(fn, x)", "torch.func.jacrev(fn)(x)"),
    "bottom_right_arange": ("causal_mask_bottom_right", "    ones = torch.ones(q_len, k_len, dtype=torch.bool, device=device)\n    return ones.tril(diagonal=k_len - q_len)  # (q_len, k_len)",
                            "    i = torch.arange(q_len, device=device)[:, None] + (k_len - q_len)  # absolute positions of the queries\n"
                            "    j = torch.arange(k_len, device=device)[None, :]\n    return j <= i  # (q_len, k_len)"),
    "bottom_right_slice_of_causal": ("causal_mask_bottom_right", "    ones = torch.ones(q_len, k_len, dtype=torch.bool, device=device)\n    return ones.tril(diagonal=k_len - q_len)  # (q_len, k_len)",
                                     "    return torch.ones(k_len, k_len, dtype=torch.bool, device=device).tril()[k_len - q_len:]"),
}


# --- Learner trials of issue 15: correct answers written unlike the reference, and mistakes ------------

_PADDING_LOOP_TOLIST = '''def padding_mask(lengths: Tensor | Sequence[int], max_len: int) -> Tensor:
    lengths = torch.as_tensor(lengths)
    mask = torch.zeros(len(lengths), max_len, dtype=torch.bool, device=lengths.device)  # (B, max_len)
    for b, n in enumerate(lengths.tolist()):  # reads the lengths' values
        mask[b, :n] = True
    return mask[:, None, None, :]  # (B, 1, 1, max_len)
'''

_PADDING_STACK_ROWS = '''def padding_mask(lengths: Tensor | Sequence[int], max_len: int) -> Tensor:
    lengths = torch.as_tensor(lengths)
    positions = torch.arange(max_len, device=lengths.device)
    rows = [positions < n for n in lengths]  # one (max_len,) row per sequence
    return torch.stack(rows).view(len(rows), 1, 1, max_len)
'''

_CAUSAL_LOOP = '''def causal_mask(n: int, device: torch.device | str | None = None) -> Tensor:
    mask = torch.zeros(n, n, dtype=torch.bool, device=device)
    for i in range(n):
        mask[i, : i + 1] = True  # query i sees keys 0..i
    return mask
'''

_BOTTOM_RIGHT_FROM_CAUSAL = '''def causal_mask_bottom_right(q_len: int, k_len: int, device: torch.device | str | None = None) -> Tensor:
    if q_len > k_len:
        raise ValueError("more queries than keys")
    return causal_mask(k_len, device=device)[k_len - q_len:]  # the last q_len rows of the full causal mask
'''

_BOTTOM_RIGHT_FROM_CAUSAL_NEGATIVE = '''def causal_mask_bottom_right(q_len: int, k_len: int, device: torch.device | str | None = None) -> Tensor:
    if q_len > k_len:
        raise ValueError(f"q_len={q_len} > k_len={k_len}")
    full = causal_mask(k_len, device)  # (k_len, k_len)
    return full[-q_len:, :]
'''

_BOTTOM_RIGHT_LOOP = '''def causal_mask_bottom_right(q_len: int, k_len: int, device: torch.device | str | None = None) -> Tensor:
    if q_len > k_len:
        raise ValueError("q_len > k_len")
    mask = torch.zeros(q_len, k_len, dtype=torch.bool, device=device)
    for i in range(q_len):
        mask[i, : k_len - q_len + i + 1] = True  # query i is at absolute position k_len - q_len + i
    return mask
'''

_COMBINE_BROADCAST_ALL = '''def combine_masks(*masks: Tensor | None) -> Tensor | None:
    present = [m for m in masks if m is not None]
    if not present:
        return None
    if len(present) == 1:
        return present[0]
    return torch.stack(torch.broadcast_tensors(*present)).all(dim=0)
'''

_DEPENDENCY_VMAP_VJP = '''def dependency_matrix(fn: Callable[[Tensor], Tensor], x: Tensor) -> Tensor:
    x = x.detach()
    y, pullback = torch.func.vjp(fn, x)  # y (T, d_out)
    basis = torch.eye(y.numel(), dtype=x.dtype, device=x.device).reshape(-1, *y.shape)  # one-hot cotangents
    (rows,) = torch.func.vmap(pullback)(basis)  # (T * d_out, T, d_in)
    jac = rows.reshape(*y.shape, *x.shape)  # (T, d_out, T, d_in)
    return jac.pow(2).sum(dim=(1, 3)).sqrt()
'''

_DEPENDENCY_AUTOGRAD_GRAD = '''def dependency_matrix(fn: Callable[[Tensor], Tensor], x: Tensor) -> Tensor:
    x = x.detach().requires_grad_(True)
    with torch.enable_grad():
        y = fn(x)  # (T, d_out)
        rows = []
        for i in range(y.size(0)):
            blocks = [torch.autograd.grad(y[i, c], x, retain_graph=True)[0] for c in range(y.size(1))]  # d_out x (T, d_in)
            rows.append(torch.stack(blocks).pow(2).sum(dim=(0, 2)))  # (T,)
    return torch.stack(rows).sqrt().detach()
'''

_ATTENTION_EINSUM = '''def masked_attention(q, k, v, mask=None, fill_value=float("-inf")):
    scores = torch.einsum("...qd,...kd->...qk", q, k) / q.shape[-1] ** 0.5
    if mask is not None:
        scores = scores.masked_fill(mask.logical_not(), fill_value)
    weights = scores.softmax(dim=-1)
    return torch.einsum("...qk,...kd->...qd", weights, v), weights
'''

_TRIU = Edit("causal_mask", ".tril()  # (n, n)", ".triu()  # (n, n)")

VALID_ANSWERS = {
    **{name: ValidAnswer((Edit(function, old, new),), why="an alternative of the chapter's first catalogue")
       for name, (function, old, new) in VALID_ALTERNATIVES.items()},
    "padding_loop_tolist": ValidAnswer((Edit("padding_mask", "", _PADDING_LOOP_TOLIST),),
                                       why="a loop over lengths.tolist(), the mask created on lengths.device: it reads values, so the meta pass cannot run it"),
    "padding_stack_rows": ValidAnswer((Edit("padding_mask", "", _PADDING_STACK_ROWS),), why="one row per sequence (iterating the lengths tensor), stacked, .view"),
    "causal_loop": ValidAnswer((Edit("causal_mask", "", _CAUSAL_LOOP),), why="zeros on the device, then a loop filling each row"),
    "bottom_right_from_own_causal": ValidAnswer((Edit("causal_mask_bottom_right", "", _BOTTOM_RIGHT_FROM_CAUSAL),),
                                                why="the last q_len rows of the learner's own causal_mask(k_len, device=device)"),
    "bottom_right_loop": ValidAnswer((Edit("causal_mask_bottom_right", "", _BOTTOM_RIGHT_LOOP),), why="a loop over the queries"),
    "combine_broadcast_all": ValidAnswer((Edit("combine_masks", "", _COMBINE_BROADCAST_ALL),), why="torch.broadcast_tensors, stacked, .all(dim=0)"),
    "attention_einsum": ValidAnswer((Edit("masked_attention", "", _ATTENTION_EINSUM),), why="einsum for both products, logical_not, Tensor.softmax, ** 0.5"),
    "attention_nan_rows_to_zero": ValidAnswer(
        (Edit("masked_attention", "weights = torch.softmax(scores, dim=-1)", "weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)"),),
        why="a row with no allowed key returned as zeros (what F.scaled_dot_product_attention gives) instead of NaN"),
    "attention_zero_rows_where": ValidAnswer(
        (Edit("masked_attention", "    weights = torch.softmax(scores, dim=-1)  # (..., q_len, k_len)\n",
              "    weights = torch.softmax(scores, dim=-1)  # (..., q_len, k_len)\n"
              "    if mask is not None and fill_value == float('-inf'):  # rows with no allowed key: zeros, as F.scaled_dot_product_attention\n"
              "        weights = torch.where(mask.any(dim=-1, keepdim=True), weights, torch.zeros((), dtype=weights.dtype, device=weights.device))\n"),),
        why="with the default fill -inf, rows with no allowed key set to zeros with torch.where instead of NaN (a finite fill keeps them uniform)"),
    "dependency_vmap_vjp": ValidAnswer((Edit("dependency_matrix", "", _DEPENDENCY_VMAP_VJP),), why="torch.func.vmap over torch.func.vjp's pullback"),
    "dependency_autograd_grad": ValidAnswer((Edit("dependency_matrix", "", _DEPENDENCY_AUTOGRAD_GRAD),), why="torch.autograd.grad per output entry"),
    "dependency_jacfwd": ValidAnswer((Edit("dependency_matrix", "torch.autograd.functional.jacobian(fn, x)", "torch.func.jacfwd(fn)(x)"),), why="forward-mode torch.func.jacfwd"),
}

WRONG_ANSWERS.update({
    # masked_attention
    "attention_mask_not_assigned": WrongAnswer("masked_attention", "scores = scores.masked_fill(~mask, fill_value)", "scores.masked_fill(~mask, fill_value)",
                                               "the mask is not applied at all"),
    "attention_fill_as_float32_tensor": WrongAnswer("masked_attention", "scores = scores.masked_fill(~mask, fill_value)",
                                                    "scores = torch.where(mask, scores, torch.tensor(fill_value))", "converted to float32 "),
    "attention_mask_eq_zero_fill": WrongAnswer("masked_attention", "scores.masked_fill(~mask, fill_value)", "scores.masked_fill(mask == 0, -1e9)", "hard-coded fill"),
    "attention_dk_from_dim1": WrongAnswer("masked_attention", "math.sqrt(q.size(-1))", "math.sqrt(q.size(1))", "d_k read from the wrong dimension"),
    # causal_mask_bottom_right
    "bottom_right_first_rows_of_causal": WrongAnswer("causal_mask_bottom_right", "", _BOTTOM_RIGHT_FROM_CAUSAL.replace("[k_len - q_len:]", "[:q_len]"), "top-left alignment"),
    # a wrong causal_mask, and a correct causal_mask_bottom_right built from it: only causal_mask loses points
    "causal_triu_with_bottom_right_from_it": WrongAnswer(_TRIU.function, _TRIU.old, _TRIU.new, "triu instead of tril",
                                                         also=(Edit("causal_mask_bottom_right", "", _BOTTOM_RIGHT_FROM_CAUSAL),)),
    "causal_no_diagonal_with_bottom_right_from_it": WrongAnswer("causal_mask", ".tril()  # (n, n)", ".tril(diagonal=-1)  # (n, n)", "the diagonal is excluded",
                                                                also=(Edit("causal_mask_bottom_right", "", _BOTTOM_RIGHT_FROM_CAUSAL_NEGATIVE),)),
    "causal_float_with_bottom_right_from_it": WrongAnswer("causal_mask", "torch.ones(n, n, dtype=torch.bool, device=device)", "torch.ones(n, n, device=device)",
                                                          "masks in this course are boolean", category="dtype",
                                                          also=(Edit("causal_mask_bottom_right", "", _BOTTOM_RIGHT_FROM_CAUSAL),)),
    # a wrong masked_attention (used by the leakage proof) next to a correct dependency_matrix in another pattern
    "attention_zero_fill_with_dependency_jacrev": WrongAnswer("masked_attention", "scores.masked_fill(~mask, fill_value)", "scores.masked_fill(~mask, 0)",
                                                              "masked scores set to 0 instead of -inf",
                                                              also=(Edit("dependency_matrix", "", _DEPENDENCY_VMAP_VJP),)),
    "attention_inverted_with_dependency_loop": WrongAnswer("masked_attention", "scores.masked_fill(~mask, fill_value)", "scores.masked_fill(mask, fill_value)",
                                                           "inverted convention", also=(Edit("dependency_matrix", _JACOBIAN_BODY, _backward_loop()),)),
    "causal_extra_dim_with_dependency_autograd_grad": WrongAnswer("causal_mask", ".tril()  # (n, n)", ".tril()[None]  # (1, n, n) for the batch",
                                                                  "an extra leading dimension", category="shape",
                                                                  also=(Edit("dependency_matrix", "", _DEPENDENCY_AUTOGRAD_GRAD),)),
})
