"""Checks for chapter 04-multi-head.

- *_MISTAKES: the typical wrong implementations, used to name a learner's mistake (functions for split_heads,
  merge_heads and mha_parameter_count; for the two modules, wrong nn.Module classes with the same parameter
  names, so that the grader's weights load into them). The builder evaluates them on the visible-check
  inputs, the hidden checks on grading-time inputs.
- FORBIDDEN: the built-ins these exercises ask the learner not to call (torch function names and the ATen
  ops they reach); SHORTCUT_NAMES: the same, as the static reading of a solution cell sees them.
- CHECKS: the hidden check of each graded cell, by grade id (run in this process by checks.run_check).
- count_mistake_values: the build-time table of wrong counts for the visible check of mha_parameter_count.
The visible checks of the two modules are built with the authoring kit (autograder/authoring/kit.py: demo
weights, demo_large_inputs); the hidden large-score cases use autograder.checks.cases.large_score_inputs, the
same construction for the grader's weights, so that both exercise the same categories on different values.
"""

import math

import torch
import torch.nn.functional as F

from autograder.checks import builtins
from autograder.checks import (
    Call, Case, ModuleCase, Returned, function_check, generator, grader_weights, large_score_inputs, module_check,
)
from solutions import ch04_multi_head as ref
from solutions.ch02_qkv_attention import stable_softmax

# --- Build-time helper of the notebook's visible checks (the generic ones: autograder/authoring/kit.py) ---


def count_mistake_values(d_model, bias):
    """{wrong count: mistake} for the visible check of mha_parameter_count (the right count left out)."""
    right = ref.mha_parameter_count(d_model, bias)
    values = {}
    for description, fn in COUNT_MISTAKES.items():
        values.setdefault(fn(d_model, bias), description)
    values.pop(right, None)
    return values


# --- Known mistakes: split_heads and merge_heads ----------------------------------------------------


def _split_no_transpose(x, n_heads):
    b, n, d = x.shape
    return x.reshape(b, n_heads, n, d // n_heads)


def _split_round_robin(x, n_heads):
    b, n, d = x.shape
    return x.reshape(b, n, d // n_heads, n_heads).permute(0, 3, 1, 2)


def _split_missing_transpose(x, n_heads):
    b, n, d = x.shape
    return x.reshape(b, n, n_heads, d // n_heads)


def _split_last_two_swapped(x, n_heads):
    b, n, d = x.shape
    return x.reshape(b, n, n_heads, d // n_heads).transpose(-2, -1)


SPLIT_MISTAKES = {
    "a reshape straight to (batch, heads, seq, d_k) without the transpose: the shape is right, but each row of a "
    "head is a piece of memory holding features of other positions. View as (batch, seq, heads, d_k) first, "
    "then .transpose(1, 2)": _split_no_transpose,
    "the features are dealt to the heads in turn (a view as (batch, seq, d_k, heads)): head h must get the "
    "consecutive features h*d_k ... (h+1)*d_k - 1": _split_round_robin,
    "the transpose is missing: the result is (batch, seq, heads, d_k); move the head axis in front of the "
    "positions with .transpose(1, 2)": _split_missing_transpose,
    "the wrong axes are transposed (the last two): the result should be (batch, heads, seq, d_k), so swap "
    "axes 1 and 2": _split_last_two_swapped,
}


def _merge_no_transpose(x):
    b, h, n, d_k = x.shape
    return x.reshape(b, n, h * d_k)


def _merge_interleaved(x):
    b, h, n, d_k = x.shape
    return x.permute(0, 2, 3, 1).reshape(b, n, h * d_k)


def _merge_reversed(x):
    b, h, n, d_k = x.shape
    return x.flip(1).transpose(1, 2).reshape(b, n, h * d_k)


MERGE_MISTAKES = {
    "a reshape straight to (batch, seq, heads * d_k) without transposing back: position t then gets the "
    "outputs of other positions. Transpose to (batch, seq, heads, d_k) first": _merge_no_transpose,
    "the heads are interleaved feature by feature (head 0's feature 0, head 1's feature 0, ...) instead of "
    "concatenated head after head": _merge_interleaved,
    "the heads are concatenated in reverse order: head 0 comes first": _merge_reversed,
    "the last two axes are not flattened: the result should be (batch, seq, heads * d_k)": lambda x: x.transpose(1, 2),
    "the heads are summed instead of concatenated": lambda x: x.sum(1),
    "the heads are averaged instead of concatenated": lambda x: x.mean(1),
}

SPLIT_MERGE_HINTS = {
    "view size is not compatible": "after a transpose the tensor is no longer contiguous in memory, and .view "
    "refuses; use .reshape(...) or .contiguous().view(...).",
    "is invalid for input of size": "the new shape must hold the same number of elements: (batch, seq, "
    "n_heads, d_k) with d_k = D // n_heads.",
    "values to unpack": "split_heads gets (batch, seq, D), three dimensions; merge_heads gets "
    "(batch, heads, seq, d_k), four.",
}

# --- Known mistakes: mha_parameter_count ----------------------------------------------------------------

COUNT_MISTAKES = {
    "W_O is not counted: there are four d_model x d_model matrices (W_Q, W_K, W_V and W_O)":
        lambda d_model, bias=True: 3 * d_model * d_model + (3 * d_model if bias else 0),
    "the biases are counted even when bias=False": lambda d_model, bias=True: 4 * d_model * d_model + 4 * d_model,
    "the biases are not counted when bias=True (four vectors of length d_model)": lambda d_model, bias=True: 4 * d_model * d_model,
    "one number per bias instead of a vector of length d_model": lambda d_model, bias=True: 4 * d_model * d_model + (4 if bias else 0),
    "W_O counted without its bias": lambda d_model, bias=True: 4 * d_model * d_model + (3 * d_model if bias else 0),
}

COUNT_HINTS = {
    "unexpected keyword argument 'bias'": "keep the signature mha_parameter_count(d_model, bias=True).",
}

# --- Known mistakes: MultiHeadAttention (wrong classes with the reference's parameter names) ------------


class _MHA(ref.MultiHeadAttention):
    """The reference's parameters, with a forward that can make each typical mistake (class attributes)."""

    split_fn = staticmethod(ref.split_heads)
    merge_fn = staticmethod(ref.merge_heads)
    softmax = staticmethod(stable_softmax)
    softmax_dim = -1
    scale = "sqrt(d_k)"  # sqrt(d_k) | sqrt(d_model) | d_k | none: what the scores are divided by
    use_w_o = True
    invert_mask = False
    mask_mode = "fill -inf"  # fill -inf | fill 0 | after softmax | ignored
    kv_from_query = False
    swap_kv = False
    dropout_on = "weights"  # weights | output | none | always
    return_undropped = False
    average_heads = False

    def forward(self, query, key, value, mask=None):
        if self.kv_from_query:
            key = value = query
        if self.swap_kv:
            key, value = value, key
        q = self.split_fn(self.w_q(query), self.n_heads)  # (B, H, Tq, d_k)
        k = self.split_fn(self.w_k(key), self.n_heads)  # (B, H, Tk, d_k)
        v = self.split_fn(self.w_v(value), self.n_heads)  # (B, H, Tk, d_k)
        divisor = {"sqrt(d_k)": math.sqrt(self.d_k), "sqrt(d_model)": math.sqrt(self.d_model), "d_k": self.d_k, "none": 1.0}[self.scale]
        scores = q @ k.transpose(-2, -1) / divisor
        if mask is not None and self.mask_mode in ("fill -inf", "fill 0"):
            fill = float("-inf") if self.mask_mode == "fill -inf" else 0.0
            scores = scores.masked_fill(mask if self.invert_mask else ~mask, fill)
        weights = self.softmax(scores, dim=self.softmax_dim)
        if mask is not None and self.mask_mode == "after softmax":
            weights = weights * mask
        dropped = weights
        if self.dropout_on == "weights":
            dropped = self.dropout(weights)
        elif self.dropout_on == "always":
            dropped = F.dropout(weights, self.dropout.p, training=True)
        out = self.merge_fn(dropped @ v)  # (B, Tq, D)
        if self.use_w_o:
            out = self.w_o(out)
        if self.dropout_on == "output":
            out = self.dropout(out)
        returned = weights if self.return_undropped else dropped
        return out, returned.mean(1) if self.average_heads else returned


def _mha(**mistake):
    return type("WrongMultiHeadAttention", (_MHA,), mistake)


def _naive_softmax(x, dim=-1):
    e = torch.exp(x)
    return e / e.sum(dim=dim, keepdim=True)


MHA_MISTAKES = {
    "split into heads with a reshape straight to (B, H, T, d_k), without the transpose": _mha(split_fn=staticmethod(_split_no_transpose)),
    "heads merged with a reshape straight to (B, T, D), without transposing back": _mha(merge_fn=staticmethod(_merge_no_transpose)),
    "heads concatenated in the wrong order (interleaved feature by feature)": _mha(merge_fn=staticmethod(_merge_interleaved)),
    "softmax over the wrong dimension (the queries, dim=-2, instead of the keys, dim=-1)": _mha(softmax_dim=-2),
    "scores divided by sqrt(d_model) instead of sqrt(d_k), the width of one head": _mha(scale="sqrt(d_model)"),
    "scores divided by d_k instead of sqrt(d_k) (e.g. scaled twice: q or the scores divided by sqrt(d_k) before "
    "calling scaled_dot_product_attention, which divides by sqrt(d_k) again)": _mha(scale="d_k"),
    "scores not divided by sqrt(d_k) at all": _mha(scale="none"),
    "masked scores set to 0 instead of -inf: a score of 0 still gets weight after the softmax": _mha(mask_mode="fill 0"),
    "mask applied after the softmax: the weights of a masked row no longer sum to 1 (fill the scores with -inf "
    "before the softmax)": _mha(mask_mode="after softmax"),
    "the mask is not used: pass it to scaled_dot_product_attention": _mha(mask_mode="ignored"),
    "the output projection w_o is missing: the concatenated heads must go through self.w_o": _mha(use_w_o=False),
    "inverted mask: in this course True means 'may attend'": _mha(invert_mask=True),
    "keys and values projected from the query input: in cross-attention they come from `key` and `value`": _mha(kv_from_query=True),
    "key and value swapped: K = w_k(key), V = w_v(value)": _mha(swap_kv=True),
    "a softmax without the row maximum subtracted overflows for large scores (use the course's "
    "scaled_dot_product_attention)": _mha(softmax=staticmethod(_naive_softmax)),
    # before "dropout is not applied": both return the undropped weights, and only this one keeps the output right
    "the returned weights are the ones before dropout: return the weights that multiplied V": _mha(return_undropped=True),
    "dropout is not applied in training mode: apply self.dropout to the attention weights": _mha(dropout_on="none"),
    "dropout is applied in eval mode too: use self.dropout (nn.Dropout), which is off after .eval()": _mha(dropout_on="always"),
    "dropout applied to the output instead of the attention weights": _mha(dropout_on="output"),
    "the weights are averaged over the heads (nn.MultiheadAttention's default): return them per head, (B, H, Tq, Tk)": _mha(average_heads=True),
}

MHA_HINTS = {
    "parameter names differ": "the exercise fixes the parameters: w_q, w_k, w_v and w_o, each an "
    "nn.Linear(d_model, d_model, bias=bias) (no bias vectors when bias=False, no fused qkv layer, no other layer "
    "with parameters).",
    "size mismatch": "w_q, w_k, w_v and w_o must each be nn.Linear(d_model, d_model, bias=bias).",
    "unexpected keyword argument": "keep the signature MultiHeadAttention(d_model, n_heads, bias=True, dropout=0.0).",
    "required positional argument: 'mask'": "the mask is optional: forward(self, query, key, value, mask=None).",
    "view size is not compatible": "after a transpose the tensor is not contiguous; use .reshape(...) or "
    ".contiguous().view(...).",
    "Expected a proper Tensor but got": "a tensor created on another device; create tensors with device=x.device.",
    "values to unpack": "forward returns two values: (output, weights). If the error comes from merge_heads, it got "
    "heads that are not 4-D (B, H, Tq, d_k): often a mask given a head axis it already has (mask.unsqueeze(1) on a "
    "(B, 1, 1, Tk) padding mask makes the scores 5-D); use the mask as given, it broadcasts to (B, H, Tq, Tk).",
    "must match the size of tensor": "two tensors do not broadcast: do the keys and values come from `key` and "
    "`value` (not from `query`), and does the mask broadcast to (B, n_heads, Tq, Tk)?",
}

# --- Known mistakes: SelfAttention, the fixed class of note 003 ----------------------------------------


class _SA(ref.SelfAttention):
    """The fixed class's parameters, with a forward that can keep each bug or make a new mistake."""

    project = True
    scale_by_embed = False
    scale_by_head_dim = False  # head_dim instead of sqrt(head_dim)
    invert_mask = False
    softmax_dim = 3
    softmax = staticmethod(stable_softmax)
    query_first = False
    use_fc_out = True

    def forward(self, values, keys, query, mask):
        if self.query_first:  # the learner "fixed" the argument order to (query, keys, values)
            values, query = query, values
        N = query.shape[0]
        value_len, key_len, query_len = values.shape[1], keys.shape[1], query.shape[1]
        if self.project:
            values, keys, query = self.values(values), self.keys(keys), self.queries(query)
        values = values.reshape(N, value_len, self.heads, self.head_dim)
        keys = keys.reshape(N, key_len, self.heads, self.head_dim)
        queries = query.reshape(N, query_len, self.heads, self.head_dim)
        energy = torch.einsum("nqhd,nkhd->nhqk", queries, keys)
        if mask is not None:
            energy = energy.masked_fill((mask != 0) if self.invert_mask else (mask == 0), -1e20)
        scale = (self.embed_size if self.scale_by_embed else self.head_dim) ** (1.0 if self.scale_by_head_dim else 0.5)
        attention = self.softmax(energy / scale, dim=self.softmax_dim)
        out = torch.einsum("nhqk,nkhd->nqhd", attention, values).reshape(N, query_len, self.embed_size)
        return self.fc_out(out) if self.use_fc_out else out


def _sa(**mistake):
    return type("WrongSelfAttention", (_SA,), mistake)


SA_MISTAKES = {
    "neither bug is fixed: the queries, keys and values layers are still never applied, and the scores are "
    "still divided by sqrt(embed_size)": _sa(project=False, scale_by_embed=True),
    "bug 1 is not fixed: the queries, keys and values layers are never applied; project each input with "
    "them before the reshape into heads": _sa(project=False),
    "bug 2 is not fixed: the scores are divided by sqrt(embed_size), but each head's dot products have "
    "head_dim terms: divide by sqrt(head_dim)": _sa(scale_by_embed=True),
    "bug 2 fixed with head_dim instead of sqrt(head_dim): divide the scores by head_dim ** 0.5": _sa(scale_by_head_dim=True),
    "the argument order was changed: the class is called as forward(values, keys, query, mask), as in the "
    "notes (that order is unusual, but it is not one of the bugs)": _sa(query_first=True),
    "inverted mask: the positions where mask == 0 (False) are the ones that may not be attended": _sa(invert_mask=True),
    "softmax over the queries (dim=2) instead of the keys (dim=3)": _sa(softmax_dim=2),
    "fc_out is no longer applied": _sa(use_fc_out=False),
    "a softmax without the row maximum subtracted overflows for large scores (use stable_softmax)": _sa(softmax=staticmethod(_naive_softmax)),
}

SA_HINTS = {
    "size mismatch": "the grader loads embed_size x embed_size weights into queries, keys and values: create "
    "them as nn.Linear(embed_size, embed_size, bias=False). The notes' head_dim x head_dim layers are part of bug 1.",
    "parameter names differ": "keep the notes' layer names: queries, keys, values (each nn.Linear(embed_size, "
    "embed_size, bias=False)) and fc_out (nn.Linear(embed_size, embed_size)).",
    "cannot be multiplied": "apply self.queries, self.keys and self.values to the whole (N, len, embed_size) "
    "inputs, before the reshape into heads.",
    "unexpected keyword argument": "keep the constructor's signature: SelfAttention(embed_size, heads).",
    "einsum()": "an einsum subscript does not match its tensor: queries and keys are (N, len, heads, head_dim), "
    "'nqhd' and 'nkhd'; the attention is (N, heads, Tq, Tk), 'nhqk'.",
    "Expected a proper Tensor but got": "a tensor created on another device; create tensors with device=x.device.",
    "must match the size of tensor": "two tensors do not broadcast: check which input each projection gets "
    "(forward(values, keys, query, mask), in this order) and that the mask broadcasts to (N, heads, Tq, Tk).",
}

# --- Hidden checks ----------------------------------------------------------------------------------------

FORBIDDEN = builtins.forbidden("softmax", "attention", "multi_head_attention")

MHA_SALT = 40  # module_check's salt for the grader's weights of MultiHeadAttention (case i: MHA_SALT + i)
SA_SALT = 60


def _split_cases(seed):
    g = generator(seed, 1)
    return [
        Case("x (2, 5, 12), 3 heads", (torch.randn(2, 5, 12, generator=g), 3)),
        Case("batch 1: x (1, 7, 8), 4 heads", (torch.randn(1, 7, 8, generator=g), 4)),
        Case("x (3, 4, 16), 8 heads (d_k = 2)", (torch.randn(3, 4, 16, generator=g), 8)),
        Case("one head: x (2, 3, 6), 1 head", (torch.randn(2, 3, 6, generator=g), 1)),
    ]


def _merge_cases(seed):
    g = generator(seed, 2)
    x = torch.randn(2, 6, 16, generator=g)
    return [
        Case("x (2, 3, 5, 4): batch 2, 3 heads, 5 positions, d_k = 4", (torch.randn(2, 3, 5, 4, generator=g),)),
        Case("round trip: the heads of a (2, 6, 16) tensor split into 4 heads (must give it back exactly)",
             (ref.split_heads(x, 4).contiguous(),)),
        Case("batch 1, 8 heads, 3 positions, d_k = 2", (torch.randn(1, 8, 3, 2, generator=g),)),
        Case("one head: x (3, 1, 4, 5)", (torch.randn(3, 1, 4, 5, generator=g),)),
    ]


def _count_plan(seed, device):
    g = generator(seed, 3)
    d = 8 * int(torch.randint(3, 100, (1,), generator=g))
    cases = [((512,), {}), ((d,), {}), ((d,), {"bias": False}), ((64, False), {}), ((1,), {"bias": True})]
    return [Call("mha_parameter_count(" + ", ".join([*map(repr, a), *(f"{k}={v!r}" for k, v in kw.items())]) + ")", a, kw, "cpu")
            for a, kw in cases]


def _grader_state(cls, init, seed, salt):
    """The weights module_check will draw for a case (it draws case i with generator(seed, salt + i))."""
    return grader_weights(cls(**init), generator(seed, salt))


MHA_LARGE_INDEX = 4  # position of the large-score case in _mha_cases (its inputs are made for its weights)


def _mha_cases(seed):
    g = generator(seed, 4)

    def r(*shape):
        return torch.randn(*shape, generator=g)

    # No case has d_model = d_k ** 2 (e.g. 16 with 4 heads): there sqrt(d_model) = d_k, and dividing the scores by
    # sqrt(d_model), by d_k, or by sqrt(d_k) twice would give the same values, so the mistake could not be named.
    x, x6 = r(2, 5, 24), r(2, 6, 32)
    causal = torch.ones(6, 6, dtype=torch.bool).tril()  # True = may attend
    keep = (torch.arange(7)[None, :] < torch.tensor([7, 4, 2])[:, None])[:, None, None, :]  # (3, 1, 1, 7)
    large_init = {"d_model": 16, "n_heads": 2}
    state = _grader_state(ref.MultiHeadAttention, large_init, seed, MHA_SALT + MHA_LARGE_INDEX)
    q_in, k_in = large_score_inputs(state, "w_q", "w_k", 2, 2, 6, g)
    cases = [
        ModuleCase("self-attention, d_model = 24, 4 heads, x (2, 5, 24)", {"d_model": 24, "n_heads": 4}, (x, x, x)),
        ModuleCase("one head, d_model = 8: query (1, 3, 8), key (1, 5, 8), value (1, 5, 8), all different",
                   {"d_model": 8, "n_heads": 1}, (r(1, 3, 8), r(1, 5, 8), r(1, 5, 8))),
        ModuleCase("cross-attention, d_model = 24, 3 heads, query (3, 4, 24), key = value (3, 7, 24), padding mask (3, 1, 1, 7)",
                   {"d_model": 24, "n_heads": 3}, (r(3, 4, 24), *(2 * [r(3, 7, 24)])), {"mask": keep}),
        ModuleCase("causal self-attention, d_model = 32, 8 heads, bias=False, x (2, 6, 32), mask (6, 6)",
                   {"d_model": 32, "n_heads": 8, "bias": False}, (x6, x6, x6), {"mask": causal}),
        ModuleCase("large scores (a few hundred to a few thousand): d_model = 16, 2 heads, query, key, value (2, 6, 16)",
                   large_init, (q_in.float(), k_in.float(), r(2, 6, 16))),
        ModuleCase("eval() with dropout = 1.0 (no dropout at inference), d_model = 24, 2 heads",
                   {"d_model": 24, "n_heads": 2, "dropout": 1.0}, (x, x, x)),
        ModuleCase("train() with dropout = 1.0 (every attention weight dropped), d_model = 24, 4 heads",
                   {"d_model": 24, "n_heads": 4, "dropout": 1.0}, (x, x, x), train=True),
        ModuleCase("train() with dropout = 0.0, d_model = 24, 4 heads, causal mask",
                   {"d_model": 24, "n_heads": 4, "dropout": 0.0}, (x6[:, :, :24], x6[:, :, :24], x6[:, :, :24]), {"mask": causal}, train=True),
    ]
    assert cases[MHA_LARGE_INDEX].init is large_init
    return cases


SA_LARGE_INDEX = 4


def _sa_cases(seed):
    g = generator(seed, 5)

    def r(*shape):
        return torch.randn(*shape, generator=g)

    x, x6 = r(2, 5, 24), r(2, 6, 32)  # no embed_size = head_dim ** 2 (sqrt(embed_size) = head_dim): see _mha_cases
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    keep = (torch.arange(7)[None, :] < torch.tensor([7, 5, 3])[:, None])[:, None, None, :]  # (3, 1, 1, 7)
    large_init = {"embed_size": 16, "heads": 2}
    state = _grader_state(ref.SelfAttention, large_init, seed, SA_SALT + SA_LARGE_INDEX)
    q_in, k_in = large_score_inputs(state, "queries", "keys", 2, 2, 5, g)
    cases = [
        ModuleCase("self-attention, embed_size = 24, 4 heads, x (2, 5, 24), mask None", {"embed_size": 24, "heads": 4}, (x, x, x, None)),
        ModuleCase("values, keys and query all different, (2, 5, 12) each, 3 heads, mask None",
                   {"embed_size": 12, "heads": 3}, (r(2, 5, 12), r(2, 5, 12), r(2, 5, 12), None)),
        ModuleCase("values (3, 7, 24), keys (3, 7, 24), query (3, 4, 24), 3 heads, padding mask (3, 1, 1, 7)",
                   {"embed_size": 24, "heads": 3}, (r(3, 7, 24), r(3, 7, 24), r(3, 4, 24), keep)),
        ModuleCase("causal mask (6, 6), embed_size = 32, 8 heads, x (2, 6, 32)", {"embed_size": 32, "heads": 8}, (x6, x6, x6, causal)),
        ModuleCase("large scores (a few hundred to a few thousand): embed_size = 16, 2 heads, values, keys, query (2, 5, 16)",
                   large_init, (r(2, 5, 16), k_in.float(), q_in.float(), None)),
        ModuleCase("one head, embed_size = 8: values, keys (1, 5, 8), query (1, 3, 8)",
                   {"embed_size": 8, "heads": 1}, (r(1, 5, 8), r(1, 5, 8), r(1, 3, 8), None)),
    ]
    assert cases[SA_LARGE_INDEX].init is large_init
    return cases


_SPLIT = function_check(ref.split_heads, _split_cases, ("heads",), SPLIT_MISTAKES, SPLIT_MERGE_HINTS, FORBIDDEN)
def _count_is_int(call, record, got, expected):
    """The count is a Python int, as the exercise asks (12.0, or a tensor holding 12, is not): the same rule
    as every integer answer of the course."""
    value = got[0] if got else None
    if isinstance(value, int) and not isinstance(value, bool):
        return
    kind = "a tensor" if isinstance(value, Returned) else f"a {type(value).__name__}"
    shown = "" if isinstance(value, Returned) else f" ({value!r})"
    raise AssertionError(
        f"count of mha_parameter_count on {call.label}: {kind}{shown}, expected a Python int. A count of "
        "parameters is a whole number: return an int (e.g. no / division, no float(...), no torch.tensor(...); "
        "int(...) of an exact count is fine)."
    )


_COUNT = function_check(ref.mha_parameter_count, lambda seed: [], ("count",), COUNT_MISTAKES, COUNT_HINTS, FORBIDDEN, meta=False,
                        extra=_count_is_int, builds=("MultiHeadAttention",))  # a count of the learner's own module: graded on its own
_COUNT.plan = _count_plan

CHECKS = {
    "split_heads_hidden": _SPLIT,
    "merge_heads_hidden": function_check(ref.merge_heads, _merge_cases, ("merged",), MERGE_MISTAKES, SPLIT_MERGE_HINTS, FORBIDDEN),
    "MultiHeadAttention_hidden": module_check(
        ref.MultiHeadAttention, _mha_cases, ("output", "weights"), MHA_MISTAKES, MHA_HINTS, FORBIDDEN,
        callees=("split_heads", "merge_heads"), salt=MHA_SALT,
        categories=("values", "shape", "dtype", "device", "weights", "large"),
    ),
    "mha_parameter_count_hidden": _COUNT,
    "SelfAttention_hidden": module_check(
        ref.SelfAttention, _sa_cases, ("output",), SA_MISTAKES, SA_HINTS, FORBIDDEN, salt=SA_SALT,
        categories=("values", "shape", "dtype", "device", "weights", "large"),
    ),
}


# Names whose appearance in a solution cell's code earns no points (read by autograder.grading.shortcuts, never run).
# A plain call of the notebook's own scaled_dot_product_attention (a name, not an attribute) is allowed.
SHORTCUT_NAMES = builtins.shortcut_names("softmax", "attention", "multi_head_attention")
