"""Checks for chapter 03-worked-examples: attention by hand, then step by step in code.

- Exercises 1-2 (typed answers): the learner computes the page's "your turn" example by hand and types the
  four steps (scores, scaled, weights, output) into four answer cells. Each is graded entry by entry within
  YOUR_TURN_TOLERANCE of the exact value; a step that follows correctly from the learner's own (wrong)
  previous step is accepted too, so one slip costs the points of one step. TYPED_MISTAKES name the typical
  slips of a hand calculation.
- Exercises 3-4 (functions): `attention_steps` and `multi_head_steps` return a dict of every step; each
  step is compared with the reference. `multi_head_steps` calls `attention_steps` (callees): it is also right
  when it equals the reference composed with what the learner's attention_steps returned, and a call pattern
  other than the reference's (a per-head loop) or an error over a callee proven wrong costs it nothing (the
  library's rule), so a wrong attention_steps costs points in its own exercise only; except inside a torch.func
  transform, where the callee's values cannot be recorded (the notebook says so).
- MISTAKES catalogues name a learner's mistake; FORBIDDEN and SHORTCUT_NAMES are the built-ins these exercises
  ask the learner not to call. The test data (WRONG_ANSWERS, VALID_ANSWERS) is in
  autograder/source/03-worked-examples/answers.py.
"""

import inspect
import math

import torch

from autograder.checks import builtins
from autograder.checks import (
    Call, Case, Check, Returned, Unreadable, decode_value, function_check, generator, typed_answer_check,
)
from solutions import ch03_worked_examples as ref
from solutions.ch02_qkv_attention import stable_softmax

STEPS = ("scores", "scaled", "weights", "output")  # the keys of attention_steps' dict
MULTI_HEAD_STEPS = ("q", "k", "v", "q_heads", "k_heads", "v_heads", "scores", "scaled", "weights", "heads", "concat", "output")

# --- Exercises 1-2: the "your turn" example by hand --------------------------------------------------

TOLERANCE = ref.YOUR_TURN_TOLERANCE
_Q, _K, _V = ref.your_turn_qkv()
EXACT = ref.your_turn_answers()  # the exact steps, float64
D_K = _Q.size(-1)

# Each step from the previous one (what a correct next step does with the learner's own numbers).
PREVIOUS = {"scaled": "scores", "weights": "scaled", "output": "weights"}
NEXT_STEP = {
    "scaled": lambda scores: scores / math.sqrt(D_K),
    "weights": lambda scaled: stable_softmax(scaled, dim=-1),
    "output": lambda weights: weights @ _V,
}

# A step computed from the learner's own previous step inherits that step's rounding (two decimals, so up to
# 0.005 an entry): the output, a sum of weights times values, by up to 0.005 * (sum of a column of |V|).
FOLLOW_TOLERANCE = {
    "scaled": TOLERANCE,
    "weights": TOLERANCE,
    "output": TOLERANCE + 0.005 * _V.abs().sum(dim=0).max().item(),
}

# Typical slips of a hand calculation, each as a function of the previous step (the exact one, and, when the
# learner's previous step is wrong, the learner's) and of the exact steps `s`. A slip is named when the typed
# numbers match what it gives within the tolerance.
TYPED_MISTAKES = {
    "scores": {
        "rows and columns swapped (that is K Qᵀ): one row per query, one column per key": lambda prev, s: s["scores"].T,
        "these are the scaled scores: `scores` is Q Kᵀ before the division by sqrt(d_k)": lambda prev, s: s["scaled"],
    },
    "scaled": {
        "the scale is missing: divide every score by sqrt(d_k)": lambda scores, s: scores,
        "divided by d_k instead of sqrt(d_k)": lambda scores, s: scores / D_K,
        f"divided by sqrt({_K.size(0)}), the number of keys, instead of sqrt(d_k), the width of the queries and keys": lambda scores, s: scores / math.sqrt(_K.size(0)),
        f"divided by sqrt({_V.size(-1)}), the width of the values, instead of sqrt(d_k), the width of the queries and keys": lambda scores, s: scores / math.sqrt(_V.size(-1)),
        "multiplied by sqrt(d_k) instead of divided": lambda scores, s: scores * math.sqrt(D_K),
        "rows and columns swapped: one row per query, one column per key": lambda scores, s: (scores / math.sqrt(D_K)).T,
    },
    "weights": {
        "softmax over the columns (each column sums to 1): take it along each row, over the keys": lambda scaled, s: stable_softmax(scaled, dim=0),
        "normalised without the exponential: the softmax divides e^x by the row's sum of e^x": lambda scaled, s: scaled / scaled.sum(-1, keepdim=True),
        "the exponentials are not normalised: divide each e^x by the sum of its row": lambda scaled, s: scaled.exp(),
        "softmax of the unscaled scores: the scale is missing": lambda scaled, s: stable_softmax(s["scores"], dim=-1),
        "softmax of the scores divided by d_k instead of sqrt(d_k)": lambda scaled, s: stable_softmax(s["scores"] / D_K, dim=-1),
        "rows and columns swapped: one row per query, one column per key": lambda scaled, s: stable_softmax(scaled, dim=-1).T,
    },
    "output": {
        "the scaled scores used as weights (the softmax is skipped)": lambda weights, s: s["scaled"] @ _V,
        "the raw scores used as weights (scale and softmax skipped)": lambda weights, s: s["scores"] @ _V,
        "the weights multiply K instead of V": lambda weights, s: weights @ _K,
        "rows and columns swapped: one row per query, one column per value feature": lambda weights, s: (weights @ _V).T,
    },
}


def _typed_values(record):
    """The learner's typed table as float64 values, or None when it is missing or unreadable."""
    if not isinstance(record, dict) or not record.get("ok"):
        return None
    try:
        got = decode_value(record.get("outputs"))
    except (Unreadable, ValueError, TypeError):
        return None
    return got.values.to(torch.float64) if isinstance(got, Returned) and got.values is not None else None


def _within(values, target):
    return values is not None and values.shape == target.shape and bool(((values - target).abs() <= TOLERANCE).all())


def _named_slip(name, mine, prev):
    """The first typical slip whose result the learner's numbers match (from the exact previous step, or
    from the learner's own), or None."""
    chains = [EXACT.get(PREVIOUS.get(name))]
    if prev is not None:
        chains.append(prev)
    for description, slip in TYPED_MISTAKES[name].items():
        for before in chains:
            try:
                wrong = slip(before, EXACT)
            except Exception:
                continue
            if _within(mine, wrong) and not _within(mine, EXACT[name]):
                return description
    return None


def typed_step_check(name):
    """The hidden check of one answer cell: the library's typed-answer check (entry by entry, within the
    tolerance, naming the entries that are off), plus
    - follow-through: the step is accepted when it follows from the learner's own previous step, where that
      step is wrong (its points are lost in its own cell, not twice);
    - a named slip, also when the shape is wrong (e.g. the table typed transposed)."""
    base = typed_answer_check({name: EXACT[name]}, tolerance=TOLERANCE)
    previous = PREVIOUS.get(name)

    def plan(seed, device):
        calls = base.plan(seed, device)
        if previous:
            calls.append(Call(previous, (), {}, "cpu", torch.float64, variable=previous))
        return calls

    def judge(calls, records, function=name):
        mine = _typed_values(records[0])
        prev = _typed_values(records[1]) if previous else None
        if previous and prev is not None and prev.shape == EXACT[previous].shape and not _within(prev, EXACT[previous]):
            follow = NEXT_STEP[name](prev)
            if mine is not None and mine.shape == follow.shape and bool(((mine - follow).abs() <= FOLLOW_TOLERANCE[name]).all()):
                return  # right from the learner's own previous step
        try:
            base.judge(calls[:1], records[:1], function=function)
        except AssertionError as failure:
            message = str(failure)  # its first line names the table and the entries that are off
            if "Likely mistake" not in message:
                slip = _named_slip(name, mine, prev if previous and prev is not None and prev.shape == EXACT[previous].shape else None)
                if slip:
                    message += f"\nLikely mistake: {slip}."
                elif previous and prev is not None and mine is not None and mine.shape == EXACT[name].shape:
                    message += f"\n(It does not follow from your `{previous}` either.)"
            raise AssertionError(message) from None

    return Check(None, plan, judge, {}, (), ("typed",))


# --- Exercise 3: attention_steps -------------------------------------------------------------------------


def _steps_variant(q, k, v, mask=None, softmax_dim=-1, scale=None, invert_mask=False, mask_after=False,
                   fill=float("-inf"), mask_scores=False, naive=False, transpose_k=True, return_unmasked=False,
                   times_inf=False, softmax_of_scores=False):
    """attention_steps with one typical mistake switched on."""
    scale = math.sqrt(q.size(-1)) if scale is None else scale
    scores = q @ (k.transpose(-2, -1) if transpose_k else k)
    keep = None if mask is None else (~mask if invert_mask else mask)
    if keep is not None and mask_scores:
        scores = scores.masked_fill(~keep, float("-inf"))
    scaled = scores / scale
    unmasked = scaled
    if keep is not None and times_inf:
        scaled = scaled + (~keep).to(scaled.dtype) * float("-inf")  # 0 * -inf is NaN where the mask is True
    elif keep is not None and not mask_after:
        scaled = scaled.masked_fill(~keep, fill)
    source = scores if softmax_of_scores else scaled
    if naive:
        e = source.exp()
        weights = e / e.sum(softmax_dim, keepdim=True)
    else:
        weights = stable_softmax(source, dim=softmax_dim)
    if keep is not None and mask_after:
        weights = weights.masked_fill(~keep, 0.0)
    return {"scores": scores, "scaled": unmasked if return_unmasked else scaled, "weights": weights, "output": weights @ v}


def _float32_sqrt(d):
    """sqrt(d) as torch.sqrt(torch.tensor(d)) gives it: computed in float32 (a learner's tensor without dtype=)."""
    return torch.sqrt(torch.tensor(d)).item()


ATTENTION_STEPS_MISTAKES = {
    # Listed first: a mask applied after the softmax also returns `scaled` unmasked, and on `scaled` alone the
    # visible check names the first entry that gives it; this description is true of both.
    "`scaled` returned without the mask: where the mask is False, `scaled` itself must hold -inf (mask the scaled scores, then take the softmax of them and return them)": lambda q, k, v, mask=None: _steps_variant(q, k, v, mask, return_unmasked=True),
    # before "missing scale": the same weights, but `scaled` right (which the visible check compares first)
    "the softmax takes `scores`, not `scaled`: the weights are the softmax of the scaled (and masked) scores": lambda q, k, v, mask=None: _steps_variant(q, k, v, mask, softmax_of_scores=True),
    "softmax over the wrong dimension (dim=-2, the queries, instead of dim=-1, the keys)": lambda q, k, v, mask=None: _steps_variant(q, k, v, mask, softmax_dim=-2),
    "missing scale: `scaled` is the scores divided by sqrt(d_k)": lambda q, k, v, mask=None: _steps_variant(q, k, v, mask, scale=1.0),
    "scores divided by d_k instead of sqrt(d_k)": lambda q, k, v, mask=None: _steps_variant(q, k, v, mask, scale=q.size(-1)),
    "scores divided by sqrt(d_v), the width of v, instead of sqrt(d_k), the width of q and k": lambda q, k, v, mask=None: _steps_variant(q, k, v, mask, scale=math.sqrt(v.size(-1))),
    "inverted mask: in this course True means 'may attend', so fill where the mask is False": lambda q, k, v, mask=None: _steps_variant(q, k, v, mask, invert_mask=True),
    "mask applied after the softmax: masked scaled scores must become -inf before it, so each row still sums to 1": lambda q, k, v, mask=None: _steps_variant(q, k, v, mask, mask_after=True),
    "masked entries filled with 0 instead of -inf: a score of 0 still gets weight": lambda q, k, v, mask=None: _steps_variant(q, k, v, mask, fill=0.0),
    "masked entries filled with a large finite number instead of -inf (the weights are right, but `scaled` must hold -inf there)": lambda q, k, v, mask=None: _steps_variant(q, k, v, mask, fill=-1e9),
    "masked entries filled with the dtype's lowest number instead of -inf (the weights are right, but `scaled` must hold -inf there)": lambda q, k, v, mask=None: _steps_variant(q, k, v, mask, fill=torch.finfo(q.dtype).min),
    "the mask applied to `scores` (step 1): `scores` stays Q Kᵀ, unmasked; the mask acts on `scaled` (step 2)": lambda q, k, v, mask=None: _steps_variant(q, k, v, mask, mask_scores=True),
    "no max subtracted in the softmax, so exp overflows for large scores (use stable_softmax)": lambda q, k, v, mask=None: _steps_variant(q, k, v, mask, naive=True),
    "K is not transposed: the scores are Q Kᵀ (k.transpose(-2, -1)), not Q K": lambda q, k, v, mask=None: _steps_variant(q, k, v, mask, transpose_k=False),
    "d_k read from the wrong dimension: d_k is the width of q and k, q.size(-1) (q.shape[1] is a batch or head dim when q has more than 2 dims)": lambda q, k, v, mask=None: _steps_variant(q, k, v, mask, scale=math.sqrt(q.shape[1])),
    "sqrt(d_k) computed in float32 (torch.tensor(d_k) is a float32 tensor), which loses precision in float64: use math.sqrt(d_k)": lambda q, k, v, mask=None: _steps_variant(q, k, v, mask, scale=_float32_sqrt(q.size(-1))),
    "mask added as (~mask) * -inf: 0 * -inf is NaN, so every allowed score becomes NaN (fill the masked entries with -inf instead, e.g. with masked_fill)": lambda q, k, v, mask=None: _steps_variant(q, k, v, mask, times_inf=True),
}

ATTENTION_STEPS_HINTS = {
    "cannot be multiplied": "K is not transposed: the scores are Q Kᵀ (k.transpose(-2, -1)), not Q K.",
    "must match the size": "a shape mismatch between batch dimensions: transpose only the last two dims of k, "
                           "k.transpose(-2, -1) (k.T and k.t() reverse every dimension of a batched tensor).",
    "Expected size for first two dimensions of batch2": "a shape mismatch between batch dimensions: transpose only the last two dims of k, "
                                                        "k.transpose(-2, -1) (k.T and k.t() reverse every dimension of a batched tensor).",
    "same dtype": "a tensor created without dtype= (torch.zeros(...) is float32) meets float64 inputs: create it with "
                  "dtype=q.dtype, device=q.device, or compute the step directly (scores = q @ k.transpose(-2, -1)).",
    "expected scalar type": "a tensor created without dtype= (torch.zeros(...) is float32) meets float64 inputs: create it with "
                            "dtype=q.dtype, device=q.device, or compute the step directly (scores = q @ k.transpose(-2, -1)).",
    "Expected a proper Tensor but got": "a tensor created on another device; create tensors with device=q.device.",
    "has no attribute 'items'": "attention_steps returns a dict {'scores': ..., 'scaled': ..., 'weights': ..., 'output': ...}.",
}


def _signed_permutation(d, g):
    """A (d, d) matrix with one entry ±1 in each row and column (exact in any dtype)."""
    signs = torch.randint(0, 2, (d,), generator=g).to(torch.float64) * 2 - 1
    return torch.eye(d, dtype=torch.float64)[torch.randperm(d, generator=g)] * signs


def _peaked(lead, n, m, d, g):
    """q (*lead, n, d), k (*lead, m, d) with m <= d: each key is a signed basis vector of length 50-70, and each
    query points along one key, with length 50-70. Every score is exactly 0 or at least 2500 (in any dtype and
    any order of operations: no cancellation), so each row of weights is one-hot, and a softmax that does not
    subtract the maximum overflows even in float64 (exp(2500 / sqrt(8)) is inf)."""
    basis = torch.stack([_signed_permutation(d, g)[:m] for _ in range(math.prod(lead))]).reshape(*lead, m, d)
    k = basis * (50 + 20 * torch.rand(*lead, m, 1, generator=g, dtype=torch.float64))
    pick = torch.randint(0, m, (*lead, n), generator=g)
    q = torch.gather(basis, -2, pick[..., None].expand(*lead, n, d)) * (50 + 20 * torch.rand(*lead, n, 1, generator=g, dtype=torch.float64))
    return q, k


def _attention_steps_cases(seed):
    g = generator(seed, 31)
    lengths = torch.tensor([6, 3])
    padding = (torch.arange(6)[None, :] < lengths[:, None])[:, None, None, :]  # (2, 1, 1, 6): True = may attend
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    no_key = torch.rand(4, 5, generator=g) < 0.6
    no_key[:3, 0] = True  # every other query may attend to some key
    no_key[3] = False  # the last query may attend to none: its weights and output are NaN (0/0) or zeros, both right
    q_big, k_big = _peaked((2, 3), 4, 5, 8, g)  # scores 0 or 2500 ... 4900
    return [
        Case("q (3, 4), k (5, 4), v (5, 2)", (torch.randn(3, 4, generator=g), torch.randn(5, 4, generator=g), torch.randn(5, 2, generator=g))),
        Case(
            "batch 2, 3 heads: q (2, 3, 4, 8), k (2, 3, 6, 8), v (2, 3, 6, 5), padding mask (2, 1, 1, 6)",
            (torch.randn(2, 3, 4, 8, generator=g), torch.randn(2, 3, 6, 8, generator=g), torch.randn(2, 3, 6, 5, generator=g), padding),
        ),
        Case("q, k, v (2, 5, 16), causal mask (5, 5)", tuple(torch.randn(2, 5, 16, generator=g) for _ in range(3)) + (causal,)),
        Case(
            "q (2, 4, 6), k (2, 5, 6), v (2, 5, 3), a mask (4, 5) whose last query has no allowed key",
            (torch.randn(2, 4, 6, generator=g), torch.randn(2, 5, 6, generator=g), torch.randn(2, 5, 3, generator=g), no_key),
        ),
        Case(
            "large scores (in the thousands): q (2, 3, 4, 8), k (2, 3, 5, 8), v (2, 3, 5, 3)",
            (q_big, k_big, torch.randn(2, 3, 5, 3, generator=g, dtype=torch.float64)),
        ),
    ]


# --- Exercise 4: multi_head_steps -------------------------------------------------------------------------


def _split(t, h):
    return t.unflatten(-1, (h, -1)).transpose(-3, -2)


def _multi_head_variant(x_q, x_k, x_v, w_q, w_k, w_v, w_o, n_heads, mask=None, split="right", merge="right",
                        scale=None, w_o_t=False, swap=False, ignore_mask=False, naive=False, keys_from_q=False, pre_scale=False):
    """multi_head_steps with one typical mistake switched on."""
    if swap:
        w_q, w_k = w_k, w_q
    q, k, v = x_q @ w_q, (x_q if keys_from_q else x_k) @ w_k, x_v @ w_v
    if pre_scale:
        q = q / math.sqrt(w_q.size(-1) // n_heads)

    def cut(t):
        if split == "no_transpose":  # (..., T, h*d) -> (..., h, T, d) by reshape alone: the transpose trap
            return t.reshape(*t.shape[:-2], n_heads, t.size(-2), t.size(-1) // n_heads)
        if split == "interleaved":  # head i gets columns i, i + h, i + 2h, ...
            return t.unflatten(-1, (-1, n_heads)).permute(*range(t.dim() - 2), -1, -3, -2)
        if split == "no_move":  # (..., T, h, d): the head dim is left after the sequence dim
            return t.unflatten(-1, (n_heads, -1))
        return _split(t, n_heads)

    q_heads, k_heads, v_heads = cut(q), cut(k), cut(v)
    s = _steps_variant(q_heads, k_heads, v_heads, None if ignore_mask else mask, scale=scale, naive=naive)
    heads = s["output"]
    if split == "no_move":
        concat = heads.flatten(-2)
    elif merge == "no_transpose":
        concat = heads.reshape(*heads.shape[:-3], heads.size(-2), -1)
    elif merge == "interleaved":  # (..., h, n, d_v) -> (..., n, d_v, h): column j*h + i is column j of head i
        concat = heads.movedim(-3, -1).flatten(-2)
    else:
        concat = heads.transpose(-3, -2).flatten(-2)
    output = concat if w_o is None else concat @ (w_o.transpose(-2, -1) if w_o_t else w_o)
    return {"q": q, "k": k, "v": v, "q_heads": q_heads, "k_heads": k_heads, "v_heads": v_heads,
            "scores": s["scores"], "scaled": s["scaled"], "weights": s["weights"], "heads": heads, "concat": concat, "output": output}


def _mh(**kw):
    return lambda x_q, x_k, x_v, w_q, w_k, w_v, w_o, n_heads, mask=None: _multi_head_variant(x_q, x_k, x_v, w_q, w_k, w_v, w_o, n_heads, mask, **kw)


MULTI_HEAD_MISTAKES = {
    "heads split by a reshape alone, without the transpose: reshape (..., T, h*d) to (..., T, h, d), then transpose to (..., h, T, d)": _mh(split="no_transpose"),
    "heads split the wrong way: head i takes the column block i*d ... (i+1)*d - 1, not every h-th column": _mh(split="interleaved"),
    "heads put side by side by a reshape alone: transpose (..., h, n, d_v) to (..., n, h, d_v) before flattening the last two dims": _mh(merge="no_transpose"),
    "W_O used transposed: the output is concat @ w_o, with w_o of shape (h*d_v, d_out)": _mh(w_o_t=True),
    "w_q and w_k swapped: queries are x_q @ w_q, keys x_k @ w_k": _mh(swap=True),
    "the mask is not passed on to the heads": _mh(ignore_mask=True),
    "the head dim is not moved before the sequence dim: q_heads must be (..., h, n, d_k), so transpose after splitting": _mh(split="no_move"),
    "no max subtracted in a head's softmax, so exp overflows for large scores (call attention_steps, or use stable_softmax)": _mh(naive=True),
    "heads put side by side with their columns interleaved: concat must hold head 0's d_v columns first, then head 1's, ... (transpose (..., h, n, d_v) to (..., n, h, d_v), then flatten)": _mh(merge="interleaved"),
    "keys projected from x_q: the keys are projected from x_k, k = x_k @ w_k (in cross-attention x_k is another sequence than x_q)": _mh(keys_from_q=True),
    "the queries scaled twice: q scaled by 1/sqrt(d_k) before attention_steps, which scales the scores again (`q` is x_q @ w_q, unscaled)": _mh(pre_scale=True),
}


def _sqrt_d_model_variant(x_q, x_k, x_v, w_q, w_k, w_v, w_o, n_heads, mask=None):
    return _multi_head_variant(x_q, x_k, x_v, w_q, w_k, w_v, w_o, n_heads, mask, scale=math.sqrt(w_q.size(-1)))


MULTI_HEAD_MISTAKES["each head scaled by sqrt of the full width h*d_k instead of sqrt(d_k) of one head"] = _sqrt_d_model_variant

MULTI_HEAD_HINTS = {
    "cannot be multiplied": "a matrix product with the wrong shapes: the projections are x @ w (w of shape (d_in, h*d)), and the output is concat @ w_o (w_o of shape (h*d_v, d_out)).",
    "is invalid for input of size": "a reshape with the wrong sizes: split the last dim into (n_heads, width // n_heads), keeping every other dim.",
    "don't multiply up to the size": "the split sizes: the last dim has n_heads * d columns; split it into (n_heads, -1).",
    "Expected a proper Tensor but got": "a tensor created on another device; create tensors with device=x_q.device.",
    "same dtype": "a tensor created without dtype= (torch.eye(n), torch.ones(n) are float32) meets float64 inputs: "
                  "create it with dtype=x_q.dtype and device=x_q.device (with w_o=None, skip the product instead).",
    "expected scalar type": "a tensor created without dtype= (torch.eye(n), torch.ones(n) are float32) meets float64 inputs: "
                            "create it with dtype=x_q.dtype and device=x_q.device (with w_o=None, skip the product instead).",
    "Cannot copy out of meta tensor": "a tensor created without device= (e.g. concat = torch.zeros(...)) is filled with results "
                                      "computed on another device: create it with device=x_q.device, or build concat without filling in.",
    "has no attribute 'items'": "multi_head_steps returns a dict with the keys the docstring lists.",
    "and 'NoneType'": "w_o is None here: then there is no output projection, and `output` is `concat` itself.",
    "one value per key": "attention_steps was given keys and values of different lengths: the keys are projected from x_k and the "
                         "values from x_v (k = x_k @ w_k, v = x_v @ w_v; in cross-attention x_q has another length).",
}


def _one_hot_blocks(lead, n, h, d, g):
    """x (*lead, n, h*d) whose rows, within each head's column block, are distinct signed basis vectors (n <= d)."""
    blocks = [torch.stack([_signed_permutation(d, g)[:n] for _ in range(math.prod(lead))]).reshape(*lead, n, d) for _ in range(h)]
    return torch.cat(blocks, dim=-1)


def _block_permutation(h, d, g, size):
    """size * blockdiag(P_1, ..., P_h), P_i signed permutations: every head's dot products times size², exactly."""
    w = torch.zeros(h * d, h * d, dtype=torch.float64)
    for i in range(h):
        w[i * d:(i + 1) * d, i * d:(i + 1) * d] = _signed_permutation(d, g)
    return size * w


def _multi_head_cases(seed):
    g = generator(seed, 41)
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    padding = (torch.arange(7)[None, :] < torch.tensor([7, 4])[:, None])[:, None, None, :]  # (2, 1, 1, 7)
    x = torch.randn(2, 6, 16, generator=g)
    x_big = _one_hot_blocks((2,), 4, 2, 4, g)  # (2, 4, 8)
    w_big = _block_permutation(2, 4, g, 45.0)  # scores exactly 0 or 45² = 2025 in every head: one-hot weights
    return [
        Case("x (3, 4), W_Q, W_K, W_V, W_O (4, 4), 2 heads", (*(torch.randn(3, 4, generator=g) for _ in range(3)), *(torch.randn(4, 4, generator=g) for _ in range(4)), 2)),
        Case(
            "batch 2, x_q (2, 5, 12), x_k = x_v (2, 7, 12), 3 heads with d_k = 4, d_v = 2, W_O (6, 12), padding mask (2, 1, 1, 7)",
            (torch.randn(2, 5, 12, generator=g), *(2 * [torch.randn(2, 7, 12, generator=g)]), torch.randn(12, 12, generator=g),
             torch.randn(12, 12, generator=g), torch.randn(12, 6, generator=g), torch.randn(6, 12, generator=g), 3, padding),
        ),
        Case("self-attention x (2, 6, 16), 4 heads, no W_O (w_o=None), causal mask (6, 6)",
             (x, x, x, *(torch.randn(16, 16, generator=g) for _ in range(3)), None, 4, causal)),
        Case("large scores (in the thousands): self-attention x (2, 4, 8), 2 heads",
             (x_big, x_big, x_big, w_big, w_big, torch.randn(8, 8, generator=g, dtype=torch.float64), torch.randn(8, 8, generator=g, dtype=torch.float64), 2)),
    ]


# --- Hidden checks -------------------------------------------------------------------------------------

FORBIDDEN = builtins.forbidden("softmax", "attention", "multi_head_attention")

def steps_check(reference, cases_fn, names, mistakes, error_hints, callees=()):
    """The hidden check of a function that returns its steps as a dict keyed by `names`."""
    return function_check(reference, cases_fn, names, mistakes, error_hints, FORBIDDEN, callees=callees, keyed=True,
                          categories=("values", "shape", "dtype", "device", "large"))


CHECKS = {
    **{f"{name}_hidden": typed_step_check(name) for name in STEPS},
    "attention_steps_hidden": steps_check(ref.attention_steps, _attention_steps_cases, STEPS, ATTENTION_STEPS_MISTAKES, ATTENTION_STEPS_HINTS),
    "multi_head_steps_hidden": steps_check(ref.multi_head_steps, _multi_head_cases, MULTI_HEAD_STEPS, MULTI_HEAD_MISTAKES, MULTI_HEAD_HINTS,
                                           callees=("attention_steps",)),
}


# Names whose appearance in a solution cell's code earns no points (read by autograder.grading.shortcuts, never run).
SHORTCUT_NAMES = builtins.shortcut_names("softmax", "attention", "multi_head_attention")
