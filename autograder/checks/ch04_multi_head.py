"""Checks for chapter 04-multi-head.

- *_MISTAKES: the typical wrong implementations, used to name a learner's mistake (functions for split_heads,
  merge_heads and mha_parameter_count; for the two modules, wrong nn.Module classes with the same parameter
  names, so that the grader's weights load into them). The builder evaluates them on the visible-check
  inputs, the hidden checks on grading-time inputs.
- FORBIDDEN: the built-ins these exercises ask the learner not to call (torch function names and the ATen
  ops they reach); SHORTCUT_NAMES: the same, as the static reading of a solution cell sees them.
- CHECKS: the hidden check of each graded cell, by grade id; check_*: the same, run in this process.
- WRONG_ANSWERS: typical mistakes as edits of the reference source (end-to-end and learner-trial tests).
- demo_weights / large_score_inputs: shared by the visible checks (copied into the notebook) and the hidden
  cases, so that both exercise the same categories on different values.
"""

import ast
import inspect
import math

import torch
import torch.nn.functional as F

from autograder.checks import (
    Call, Case, ModuleCase, Returned, function_check, generator, grader_weights, module_check, run_local,
)
from autograder.checks.visible import CheckFailed
from solutions import ch04_multi_head as ref
from solutions.ch02_qkv_attention import stable_softmax

# --- Helpers shared with the notebook's visible checks ------------------------------------------------


def demo_weights(module, shapes, salt=0):
    """Check that `module` has exactly the parameters `shapes` ({name: shape}), then load fixed, readable
    weights into it: entry i of the p-th parameter is sin(1.3 i + 0.3 i² + 0.7 p + salt) / sqrt(its last size)."""
    found = {name: tuple(p.shape) for name, p in module.named_parameters()}
    if found != shapes:
        missing = [f"{n} {s}" for n, s in shapes.items() if found.get(n) != s]
        extra = [f"{n} {s}" for n, s in found.items() if shapes.get(n) != s]
        raise CheckFailed(
            f"{type(module).__name__} must have exactly the parameters the exercise names (the grader loads its "
            f"weights by name): missing or of another shape: {', '.join(missing) or 'none'}; not expected: "
            f"{', '.join(extra) or 'none'}."
        )
    state = {}
    for p, (name, shape) in enumerate(shapes.items()):
        n = math.prod(shape)
        i = torch.arange(n, dtype=torch.float64)
        state[name] = (torch.sin(1.3 * i + 0.3 * i * i + 0.7 * p + salt) / math.sqrt(shape[-1])).reshape(shape)
    module.load_state_dict(state)
    return module


DEMO_WEIGHTS_SOURCE = inspect.getsource(demo_weights).rstrip()


def _solve(a, b):
    """x with a @ x = b (a square, float64), by Gauss-Jordan elimination with partial pivoting in plain tensor
    ops. Not torch.linalg: LAPACK may start OpenMP threads, which hang in a grading worker forked from a
    process that already used them."""
    n = a.shape[0]
    m = torch.cat([a, b], dim=1).clone()
    for col in range(n):
        pivot = col + int(m[col:, col].abs().argmax())
        m[[col, pivot]] = m[[pivot, col]]
        m[col] = m[col] / m[col, col]
        others = torch.arange(n) != col
        m[others] -= m[others, col:col + 1] * m[col]
    return m[:, n:]


def large_score_inputs(state, q_name, k_name, n_heads, batch, seq, g, low=200.0, high=2000.0):
    """Inputs (query_in, key_in) of shape (batch, seq, D) for which the module with these weights has scores
    of a few hundred to a few thousand: in every head, query t scores c_t (drawn in [low, high]) for one key
    and exactly 0 for the others (orthogonal keys: signed unit vectors), so exp overflows unless the softmax
    subtracts the row maximum, rows have different maxima, and the weights are one-hot whatever the rounding
    (no near ties). seq <= d_k."""
    w_q, w_k = state[f"{q_name}.weight"].double(), state[f"{k_name}.weight"].double()
    b_q, b_k = state.get(f"{q_name}.bias"), state.get(f"{k_name}.bias")
    d = w_q.shape[0]
    d_k = d // n_heads
    q = torch.zeros(batch, seq, d, dtype=torch.float64)  # the projected queries and keys we want
    k = torch.zeros(batch, seq, d, dtype=torch.float64)
    for b in range(batch):
        for h in range(n_heads):
            signs = torch.randint(0, 2, (d_k,), generator=g).double() * 2 - 1
            basis = torch.eye(d_k, dtype=torch.float64)[torch.randperm(d_k, generator=g)] * signs[:, None]  # orthonormal rows
            cols = slice(h * d_k, (h + 1) * d_k)
            k[b, :, cols] = math.sqrt(d_k) * basis[:seq]  # key j = sqrt(d_k) e_j: q.k / sqrt(d_k) = q's e_j part
            target = torch.randint(0, seq, (seq,), generator=g)  # the key each query picks
            c = low + (high - low) * torch.rand(seq, generator=g, dtype=torch.float64)
            q[b, :, cols] = c[:, None] * basis[target]

    def inputs_for(y, w, bias):  # y = x w^T + bias  ->  x
        y = y - (bias.double() if bias is not None else 0)
        return _solve(w, y.reshape(-1, d).T).T.reshape(y.shape)

    return inputs_for(q, w_q, b_q), inputs_for(k, w_k, b_k)


def demo_module(cls, init, salt=0, dtype=torch.float64, train=False):
    """cls(**init) with demo_weights, in dtype and train()/eval() (the visible checks' module, at build time).

    The weights are what the notebook's module holds: demo_weights' float64 values rounded to float32 (the
    learner's module is built in float32, loads them, then .double()). The module is built in float64 and the
    weights are cast, never computed, in float32, so no float32 arithmetic reaches a value written into the
    notebook (the builder refuses those)."""
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        module = cls(**init)
    finally:
        torch.set_default_dtype(default)
    demo_weights(module, {name: tuple(p.shape) for name, p in module.named_parameters()}, salt)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(p.float().double())  # rounded to float32 by casts, no arithmetic
    return (module if dtype == torch.float64 else module.to(dtype)).train(train)


def demo_run(cls, init, salt=0, train=False):
    """A function running cls(**init) with demo weights on its inputs (for the builder's mistakes())."""

    def run(*args, **kwargs):
        with torch.no_grad():
            return demo_module(cls, init, salt, args[0].dtype, train)(*args, **kwargs)

    return run


def demo_variants(catalogue, init, salt=0, train=False):
    """{mistake: demo_run of its wrong class}, for the builder's mistakes()."""
    return {description: demo_run(cls, init, salt, train) for description, cls in catalogue.items()}


def demo_large_inputs(cls, init, q_name, k_name, n_heads, batch, seq, seed=0, salt=0):
    """large_score_inputs for the module with demo weights (the visible large-score check)."""
    state = {name: p.detach() for name, p in demo_module(cls, init, salt).named_parameters()}
    return large_score_inputs(state, q_name, k_name, n_heads, batch, seq, torch.Generator().manual_seed(seed))


def parameter_shapes(cls, init):
    return {name: tuple(p.shape) for name, p in cls(**init).named_parameters()}


def self_naming(a, b, c):
    """A float64 (a, b, c) tensor whose entry (i, j, k) is 100 i + 10 j + k: each number says where it came from."""
    return (100 * torch.arange(a)[:, None, None] + 10 * torch.arange(b)[None, :, None] + torch.arange(c)).double()


def visible_randn(*shape, seed):
    """Build-time inputs of the visible checks (written into the notebook as literals)."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def view(fn, index=None, shape=None, dtype=None):
    """fn's output (its [index] for a tuple), reshaped to `shape`, with float inputs first cast to `dtype`
    ('float32': what a float32 module computes): a builder-side helper for mistakes() and literal()."""

    def run(*args, **kwargs):
        if dtype:
            args = tuple(a.to(getattr(torch, dtype)) if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args)
        out = fn(*args, **kwargs)
        out = out[index] if index is not None else out
        out = out.reshape(shape) if shape else out  # fails (and the mistake is left out) if the sizes differ
        return out.double() if dtype else out  # compared with float64 expectations in the notebook

    return run


def view_all(catalogue, index=None, shape=None, dtype=None):
    return {description: view(fn, index, shape, dtype) for description, fn in catalogue.items()}


def count_mistake_values(d_model, bias):
    """{wrong count: mistake} for the visible check of mha_parameter_count (the right count left out)."""
    right = ref.mha_parameter_count(d_model, bias)
    values = {}
    for description, fn in COUNT_MISTAKES.items():
        values.setdefault(fn(d_model, bias), description)
    values.pop(right, None)
    return values


def class_solution(cls):
    """The source of class `cls` with the body of each method between nbgrader's solution markers (after the
    docstring, and after a leading super().__init__()): learners get the class and its method signatures,
    and a blank class still builds, so that a visible check can say "not implemented yet"."""
    source = inspect.getsource(cls)
    lines = source.splitlines()
    regions = []
    for node in ast.parse(source).body[0].body:
        if not isinstance(node, ast.FunctionDef):
            continue
        body = node.body
        if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            body = body[1:]
        if body and ast.unparse(body[0]) == "super().__init__()":
            body = body[1:]
        regions.append((body[0].lineno - 1, body[-1].end_lineno))
    for first, last in reversed(regions):
        indent = lines[first][: len(lines[first]) - len(lines[first].lstrip())]
        lines[first:last] = [f"{indent}### BEGIN SOLUTION", *lines[first:last], f"{indent}### END SOLUTION"]
    return "\n".join(lines)


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

FORBIDDEN = {
    "softmax": "torch.softmax / F.softmax / Tensor.softmax",
    "_softmax": "torch._softmax",
    "_safe_softmax": "torch._safe_softmax",
    "special_softmax": "torch.special.softmax",
    "log_softmax": "log_softmax",
    "_log_softmax": "log_softmax",
    "scaled_dot_product_attention": "F.scaled_dot_product_attention",
    "_scaled_dot_product_attention_math": "F.scaled_dot_product_attention",
    "_scaled_dot_product_flash_attention": "F.scaled_dot_product_attention",
    "_scaled_dot_product_flash_attention_for_cpu": "F.scaled_dot_product_attention",
    "_scaled_dot_product_efficient_attention": "F.scaled_dot_product_attention",
    "_scaled_dot_product_cudnn_attention": "F.scaled_dot_product_attention",
    "multi_head_attention_forward": "nn.MultiheadAttention",
    "_native_multi_head_attention": "nn.MultiheadAttention",
}

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
                        extra=_count_is_int)
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
SHORTCUT_NAMES = ("softmax", "log_softmax", "_softmax", "_safe_softmax", "scaled_dot_product_attention", "MultiheadAttention",
                  "multi_head_attention_forward", "_native_multi_head_attention")
