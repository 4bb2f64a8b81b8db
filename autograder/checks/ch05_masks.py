"""Checks for chapter 05-masks.

- *_MISTAKES: the typical wrong implementations, used to name a learner's mistake. The builder evaluates
  them on the visible-check inputs (so a notebook can say "this is what triu instead of tril gives"), and
  the hidden checks evaluate them on grading-time inputs.
- FORBIDDEN: the built-ins a function must not call (torch function names and ATen op names, as the
  grader's observers see them); SHORTCUT_NAMES: names the static reading of a solution cell refuses.
- CHECKS: the hidden check of each graded cell, by grade id (run in this process by checks.run_check).

Masks are boolean, True = may attend; a mask is compared exactly (dtype bool, shape, device, every entry).
Functions that create a mask from plain numbers (causal_mask, causal_mask_bottom_right) are called with
the grading device as their `device` argument and once with device='meta': a mask made on the CPU
whatever the caller asked for fails there.
"""

import functools
import math

import torch

from autograder.checks import builtins
from autograder.checks import Case, Dev, Fn, Returned, callee_faults, function_check, generator
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

# torch's causal mask helpers too: the guard switches off the private helper behind
# nn.Transformer.generate_square_subsequent_mask (the static reading refuses every helper by name, SHORTCUT_NAMES);
# the causal mask builders' checks carry this set (the guard arms the union of a notebook's sets anyway).
FORBIDDEN = builtins.forbidden("attention", "multi_head_attention", "causal_masks")


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


def _mask_check(reference, cases_fn, mistakes, error_hints, callees=(), forbidden=None):
    """A hidden check of a mask builder: each case once on the grading device (no float dtype to vary; `Dev()`
    arguments become that device), then once on 'meta'; a mask that is not boolean gets its own message."""
    return function_check(reference, cases_fn, ("mask",), mistakes, error_hints, forbidden, callees=callees, dtypes=None,
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
    "causal_mask_hidden": _mask_check(ref.causal_mask, _causal_cases, CAUSAL_MISTAKES, ERROR_HINTS["causal_mask"],
                                      forbidden=FORBIDDEN),
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
                                                   ERROR_HINTS["causal_mask_bottom_right"], callees=("causal_mask",),
                                                   forbidden=FORBIDDEN),
}

# look_ahead and causal_self_attention come from the notebook (its read-only cell); run in-process without them, from solutions/.
CHECKS["dependency_matrix_hidden"].given = {"look_ahead": ref.look_ahead, "causal_self_attention": ref.causal_self_attention}


# Names whose appearance in a solution cell's code earns no points (read by autograder.grading.shortcuts, never run).
SHORTCUT_NAMES = builtins.shortcut_names("attention", "multi_head_attention", "causal_masks")


# --- Helpers for the visible checks (evaluated when the notebook is built) --------------------------


def reference_gradients(q, k, v, mask, r_out, r_weights):
    """d(sum(output * r_out) + sum(weights * r_weights)) / d(q, k, v) for the reference masked_attention."""
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    out, weights = ref.masked_attention(q, k, v, mask)
    ((out * r_out).sum() + (weights * r_weights).sum()).backward()
    return q.grad, k.grad, v.grad
