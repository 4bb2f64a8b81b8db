"""Test data of chapter 02-qkv-attention: typical wrong answers (WRONG_ANSWERS) and correct answers written unlike the
reference (VALID_ANSWERS), as edits of the reference source in solutions/ch02_qkv_attention.py.

Used by the chapter contract (tests/test_chapter_contract.py), the learner trials, the demo and
scripts/grading_corpus.py, through `autograder.registry.answers("02-qkv-attention")`; never loaded by a grading host.
"""


from autograder.authoring.answers import Edit, ValidAnswer, WrongAnswer


# --- Typical wrong answers, as edits of the reference source (end-to-end and learner-trial tests) ------

WRONG_ANSWERS = {
    "softmax_wrong_dim": WrongAnswer(
        "scaled_dot_product_attention", "stable_softmax(scores, dim=-1)", "stable_softmax(scores, dim=-2)",
        "softmax over the wrong dimension",
    ),
    "missing_scale": WrongAnswer(
        "scaled_dot_product_attention", "q @ k.transpose(-2, -1) / math.sqrt(d_k)", "q @ k.transpose(-2, -1)",
        "missing scale",
    ),
    "sqrt_d_model": WrongAnswer(
        "self_attention",
        "    return scaled_dot_product_attention(q, k, v, mask)",
        "    scores = q @ k.transpose(-2, -1) / math.sqrt(x.size(-1))\n"
        "    if mask is not None:\n"
        "        scores = scores.masked_fill(~mask, float('-inf'))\n"
        "    weights = stable_softmax(scores, dim=-1)\n"
        "    return weights @ v, weights",
        "sqrt(d_model)",
    ),
    "inverted_mask": WrongAnswer(
        "scaled_dot_product_attention", "scores.masked_fill(~mask,", "scores.masked_fill(mask,", "inverted mask",
    ),
    "mask_after_softmax": WrongAnswer(
        "scaled_dot_product_attention",
        '        scores = scores.masked_fill(~mask, float("-inf"))  # masked keys get zero weight\n'
        "    weights = stable_softmax(scores, dim=-1)  # (..., n, m), each row sums to 1",
        "        pass\n"
        "    weights = stable_softmax(scores, dim=-1)\n"
        "    if mask is not None:\n"
        "        weights = weights.masked_fill(~mask, 0.0)",
        "mask applied after the softmax",
    ),
    "k_not_transposed": WrongAnswer(
        "scaled_dot_product_attention", "q @ k.transpose(-2, -1) / math.sqrt(d_k)", "q @ k / math.sqrt(d_k)",
        "K is not transposed", category="shape",
        # The callee raises inside a correct self_attention: the grader proves the callee wrong on the recorded
        # call, so self_attention keeps its points (a callee's mistake costs points only in its own exercise).
    ),
    "mask_with_zero": WrongAnswer(
        "scaled_dot_product_attention", 'scores.masked_fill(~mask, float("-inf"))', "scores.masked_fill(~mask, 0.0)",
        "set to 0 instead of -inf",
    ),
    "sdpa_default_mask_on_cpu": WrongAnswer(
        "scaled_dot_product_attention",
        "    if mask is not None:\n        scores",
        "    if mask is None:\n        mask = torch.ones(scores.shape[-2:], dtype=torch.bool)  # no device=\n    if True:\n        scores",
        "device", category="device",
    ),
    "sdpa_scores_in_float32": WrongAnswer(
        "scaled_dot_product_attention", "scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)", "scores = (q @ k.transpose(-2, -1)).float() / math.sqrt(d_k)",
        "dtype", category="dtype",  # self_attention, which calls it, keeps its points
    ),
    "sdpa_naive_softmax": WrongAnswer(
        "scaled_dot_product_attention", "weights = stable_softmax(scores, dim=-1)",
        "weights = torch.exp(scores) / torch.exp(scores).sum(dim=-1, keepdim=True)",
        "overflows", category="large",
    ),
    "softmax_dim_ignored": WrongAnswer(
        "stable_softmax", "return e / e.sum(dim=dim, keepdim=True)", "return e / e.sum(dim=-1, keepdim=True)", "wrong values",
    ),
    "softmax_no_max": WrongAnswer(
        "stable_softmax", "x_max = x.amax(dim=dim, keepdim=True)", "x_max = 0", "no max subtracted", category="large",
    ),
    "softmax_whole_tensor_max": WrongAnswer(
        "stable_softmax", "x_max = x.amax(dim=dim, keepdim=True)", "x_max = x.max()", "the maximum is taken over the whole tensor", category="large",
    ),
    "softmax_in_float32": WrongAnswer(
        "stable_softmax", "e = torch.exp(x - x_max)", "e = torch.exp((x - x_max).float())", "dtype", category="dtype",
        # float32 weights @ float64 values raise in the (correct) callers: they keep their points, the softmax is proven wrong.
    ),
    "softmax_max_to_cpu": WrongAnswer(
        "stable_softmax", "x_max = x.amax(dim=dim, keepdim=True)", "x_max = x.amax(dim=dim, keepdim=True).cpu()", "device", category="device",
    ),
    "self_attention_wrong_weights": WrongAnswer(
        "self_attention", "k = x @ w_k", "k = x @ w_q", "one weight matrix used twice",
    ),
    "self_attention_in_float32": WrongAnswer(
        "self_attention", "    q = x @ w_q", "    x, w_q, w_k, w_v = x.float(), w_q.float(), w_k.float(), w_v.float()\n    q = x @ w_q", "dtype", category="dtype",
    ),
    "self_attention_default_mask_on_cpu": WrongAnswer(
        "self_attention",
        "    return scaled_dot_product_attention(q, k, v, mask)",
        "    if mask is None:\n        mask = torch.ones(x.size(-2), x.size(-2), dtype=torch.bool)  # no device=\n"
        "    return scaled_dot_product_attention(q, k, v, mask)",
        "device", category="device",
    ),
    "self_attention_naive_softmax": WrongAnswer(
        "self_attention",
        "    return scaled_dot_product_attention(q, k, v, mask)",
        "    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))\n"
        "    if mask is not None:\n"
        "        scores = scores.masked_fill(~mask, float('-inf'))\n"
        "    weights = torch.exp(scores) / torch.exp(scores).sum(dim=-1, keepdim=True)\n"
        "    return weights @ v, weights",
        "overflows", category="large",
    ),
    "variance_ignores_generator": WrongAnswer(
        "dot_product_variance", "k = torch.randn(n_samples, d_k, generator=generator)", "k = torch.randn(n_samples, d_k)",
        "different results for the same generator seed", category="generator",
    ),
    "variance_divided_by_d_k": WrongAnswer(
        "dot_product_variance", "(scores / math.sqrt(d_k)).var()", "(scores / d_k).var()", "divide by sqrt(d_k), not d_k",
    ),
}

# --- Issue 15: what a learner met, as cases (mistakes, pairs of a wrong callee with a correct caller) --------

_SOFTMAX_FOR_MATRICES_ONLY = '''def stable_softmax(x: Tensor, dim: int = -1) -> Tensor:
    n, m = x.shape  # written for a matrix of scores: raises for vectors and batches
    if dim in (0, -2):
        return stable_softmax(x.T, dim=-1).T
    x_max = x.amax(dim=1, keepdim=True)
    e = torch.exp(x - x_max)
    return e / e.sum(dim=1, keepdim=True)
'''

_SDPA_PER_BATCH_LOOP = '''def scaled_dot_product_attention(q, k, v, mask=None):
    if mask is not None and mask.dtype != torch.bool:
        raise TypeError("mask must be a bool tensor")
    *batch, n, d_k = q.shape
    m, d_v = k.shape[-2], v.shape[-1]
    qs, ks, vs = q.reshape(-1, n, d_k), k.reshape(-1, m, d_k), v.reshape(-1, m, d_v)
    masks = None if mask is None else mask.expand(*batch, n, m).reshape(-1, n, m)
    outputs, weights = [], []
    for i in range(qs.shape[0]):  # one (n, m) matrix of scores at a time
        scores = qs[i] @ ks[i].T / math.sqrt(d_k)
        if masks is not None:
            scores = scores.masked_fill(~masks[i], float("-inf"))
        w = stable_softmax(scores, dim=-1)
        outputs.append(w @ vs[i])
        weights.append(w)
    return torch.stack(outputs).reshape(*batch, n, d_v), torch.stack(weights).reshape(*batch, n, m)
'''

_SELF_ATTENTION_VMAP = '''def self_attention(x, w_q, w_k, w_v, mask=None):
    if x.dim() > 2:  # one sequence at a time, with torch.func.vmap over the leading dimension
        if mask is None:
            return torch.func.vmap(lambda xi: self_attention(xi, w_q, w_k, w_v))(x)
        mask = mask.expand(*x.shape[:-1], x.shape[-2])
        return torch.func.vmap(lambda xi, mi: self_attention(xi, w_q, w_k, w_v, mi))(x, mask)
    return scaled_dot_product_attention(x @ w_q, x @ w_k, x @ w_v, mask)
'''

WRONG_ANSWERS.update({
    "sdpa_d_k_from_dim_1": WrongAnswer(
        "scaled_dot_product_attention", "d_k = q.size(-1)", "d_k = q.shape[1]", "d_k read from the wrong dimension", category="values",
    ),
    "self_attention_drops_mask": WrongAnswer(
        "self_attention", "return scaled_dot_product_attention(q, k, v, mask)", "return scaled_dot_product_attention(q, k, v)",
        "the mask is not used",
    ),
    "softmax_float32_cast_back": WrongAnswer(
        "stable_softmax", "    x_max = x.amax(dim=dim, keepdim=True)  # (..., 1, ...) the largest entry along dim\n"
        "    e = torch.exp(x - x_max)  # every exponent <= 0\n    return e / e.sum(dim=dim, keepdim=True)",
        "    x32 = x.float()  # computed in float32, cast back to the input's dtype at the end\n"
        "    e = torch.exp(x32 - x32.amax(dim=dim, keepdim=True))\n    return (e / e.sum(dim=dim, keepdim=True)).to(x.dtype)",
        "cast back", category="dtype",
    ),
    "sdpa_fill_minus_1e9": WrongAnswer(
        "scaled_dot_product_attention", 'scores.masked_fill(~mask, float("-inf"))', "scores.masked_fill(~mask, -1e9)",
        "a large negative number (e.g. -1e9) instead of -inf",
    ),
    "sdpa_masked_fill_not_assigned": WrongAnswer(
        "scaled_dot_product_attention", 'scores = scores.masked_fill(~mask, float("-inf"))', 'scores.masked_fill(~mask, float("-inf"))',
        "the mask is not used",
    ),
    "self_attention_weights_transposed": WrongAnswer(
        "self_attention", "q = x @ w_q", "q = x @ w_q.T", "no .T", category="shape",
    ),
    "sdpa_returns_weights_first": WrongAnswer(
        "scaled_dot_product_attention", "return weights @ v, weights", "return weights, weights @ v",
        "output and weights returned in the wrong order", category="shape",
    ),
    "variance_returns_tensors": WrongAnswer(
        "dot_product_variance", "return scores.var().item(), (scores / math.sqrt(d_k)).var().item()",
        "return scores.var(), (scores / math.sqrt(d_k)).var()", "tuple of two Python floats",
    ),
    # Pairs: a wrong callee with a correct caller (the reference, or written in another call pattern). The
    # callers must keep their points: a callee's mistake costs points only in the callee's own exercise.
    "softmax_for_matrices_only": WrongAnswer(
        "stable_softmax", "", _SOFTMAX_FOR_MATRICES_ONLY, "not enough values to unpack", category="shape",
    ),
    "softmax_guard_on_cpu": WrongAnswer(
        "stable_softmax", "    e = torch.exp(x - x_max)",
        "    x_max = torch.where(x_max.isfinite(), x_max, torch.zeros(x_max.shape))  # rows of -inf: no device=\n    e = torch.exp(x - x_max)",
        "device", category="device",
    ),
    "softmax_edits_its_input": WrongAnswer(
        "stable_softmax", "e = torch.exp(x - x_max)", "e = torch.exp(x.sub_(x_max))  # in place: changes the caller's tensor",
        "changed its input tensors in place",
    ),
    "softmax_only_last_dim": WrongAnswer(
        "stable_softmax", "    x_max = x.amax(dim=dim, keepdim=True)",
        '    if dim not in (-1, x.dim() - 1):\n        raise ValueError("only dim=-1 is supported")\n    x_max = x.amax(dim=dim, keepdim=True)',
        "only dim=-1 is supported",
    ),
    "softmax_no_max_with_sdpa_loop": WrongAnswer(
        "stable_softmax", "x_max = x.amax(dim=dim, keepdim=True)", "x_max = 0", "no max subtracted", category="large",
        also=(Edit("scaled_dot_product_attention", "", _SDPA_PER_BATCH_LOOP),),
    ),
    "softmax_whole_tensor_max_with_sdpa_einsum": WrongAnswer(
        "stable_softmax", "x_max = x.amax(dim=dim, keepdim=True)", "x_max = x.max()", "the maximum is taken over the whole tensor",
        category="large",
        also=(Edit("scaled_dot_product_attention", "q @ k.transpose(-2, -1) / math.sqrt(d_k)", 'torch.einsum("...nd,...md->...nm", q, k) / math.sqrt(d_k)'),
              Edit("scaled_dot_product_attention", "return weights @ v, weights", 'return torch.einsum("...nm,...md->...nd", weights, v), weights')),
    ),
    # Called inside torch.func.vmap, the callee's results cannot be recorded or answered (see the guide): the
    # caller is judged on its outputs, so this pair costs both exercises, as the exercise text says.
    "sdpa_inverted_mask_with_self_attention_vmap": WrongAnswer(
        "scaled_dot_product_attention", "scores.masked_fill(~mask,", "scores.masked_fill(mask,", "inverted mask",
        also=(Edit("self_attention", "", _SELF_ATTENTION_VMAP),),
        fails=frozenset({"scaled_dot_product_attention_hidden", "self_attention_hidden"}),
    ),
    "sdpa_missing_scale_with_self_attention_keywords": WrongAnswer(
        "scaled_dot_product_attention", "q @ k.transpose(-2, -1) / math.sqrt(d_k)", "q @ k.transpose(-2, -1)", "missing scale",
        also=(Edit("self_attention", "return scaled_dot_product_attention(q, k, v, mask)", "return scaled_dot_product_attention(q=q, k=k, v=v, mask=mask)"),),
    ),
})

# --- Correct answers written unlike the reference: full marks, visibly and hidden, on every seed ----------

VALID_ANSWERS = {
    "softmax_logsumexp": ValidAnswer(
        (Edit("stable_softmax", "    x_max = x.amax(dim=dim, keepdim=True)  # (..., 1, ...) the largest entry along dim\n"
              "    e = torch.exp(x - x_max)  # every exponent <= 0\n    return e / e.sum(dim=dim, keepdim=True)",
              "    return torch.exp(x - torch.logsumexp(x, dim=dim, keepdim=True))"),),
        why="exp(x - logsumexp(x)): stable, no max written out",
    ),
    "softmax_moved_to_last_dim": ValidAnswer(
        (Edit("stable_softmax", "", '''def stable_softmax(x: Tensor, dim: int = -1) -> Tensor:
    y = x.movedim(dim, -1)  # work along the last dimension, then move it back
    y_max, _ = y.max(dim=-1, keepdim=True)
    e = (y - y_max).exp()
    return (e / e.sum(-1, keepdim=True)).movedim(-1, dim)
'''),),
        why="movedim to the last dimension and back, max(...).values",
    ),
    "sdpa_einsum_where": ValidAnswer(
        (Edit("scaled_dot_product_attention", "q @ k.transpose(-2, -1) / math.sqrt(d_k)", 'torch.einsum("...nd,...md->...nm", q, k) / math.sqrt(d_k)'),
         Edit("scaled_dot_product_attention", 'scores = scores.masked_fill(~mask, float("-inf"))', 'scores = torch.where(mask, scores, float("-inf"))'),
         Edit("scaled_dot_product_attention", "return weights @ v, weights", 'return torch.einsum("...nm,...md->...nd", weights, v), weights')),
        why="einsum for both products, torch.where for the mask",
    ),
    "sdpa_prescaled_q_mT": ValidAnswer(
        (Edit("scaled_dot_product_attention", "q @ k.transpose(-2, -1) / math.sqrt(d_k)", "(q / d_k ** 0.5) @ k.mT"),
         Edit("scaled_dot_product_attention", "scores.masked_fill(~mask,", "scores.masked_fill(mask == 0,")),
        why="q scaled before the product, k.mT, mask == 0",
    ),
    "sdpa_per_batch_loop": ValidAnswer((Edit("scaled_dot_product_attention", "", _SDPA_PER_BATCH_LOOP),),
                                       why="a loop over the flattened batch, the learner's stable_softmax on each matrix"),
    "sdpa_vmap": ValidAnswer(
        (Edit("scaled_dot_product_attention", "    d_k = q.size(-1)", '''    if q.dim() > 2:  # torch.func.vmap over the leading dimension, down to matrices
        if mask is None:
            return torch.func.vmap(scaled_dot_product_attention)(q, k, v)
        mask = mask.expand(*q.shape[:-1], k.shape[-2])
        return torch.func.vmap(scaled_dot_product_attention)(q, k, v, mask)
    d_k = q.size(-1)'''),),
        why="torch.func.vmap over the batch, recursively",
    ),
    "sdpa_zeros_for_fully_masked_rows": ValidAnswer(
        (Edit("scaled_dot_product_attention", "    return weights @ v, weights",
              "    weights = torch.nan_to_num(weights, nan=0.0)  # a query with no allowed key: zeros, as F.scaled_dot_product_attention\n"
              "    return weights @ v, weights"),),
        why="zeros instead of NaN for a query whose keys are all masked",
    ),
    "self_attention_einsum_keywords": ValidAnswer(
        (Edit("self_attention", "    q = x @ w_q  # (..., n, d_k)\n    k = x @ w_k  # (..., n, d_k)\n    v = x @ w_v  # (..., n, d_v)\n"
              "    return scaled_dot_product_attention(q, k, v, mask)",
              '    q, k, v = (torch.einsum("...nd,de->...ne", x, w) for w in (w_q, w_k, w_v))\n'
              "    return scaled_dot_product_attention(q=q, k=k, v=v, mask=mask)"),),
        why="einsum projections, the learner's attention called with keywords",
    ),
    "self_attention_per_batch_loop": ValidAnswer(
        (Edit("self_attention", "", '''def self_attention(x, w_q, w_k, w_v, mask=None):
    if x.dim() > 2:  # one sequence at a time
        if mask is not None:
            mask = mask.expand(*x.shape[:-1], x.shape[-2])
        pairs = [self_attention(x[i], w_q, w_k, w_v, None if mask is None else mask[i]) for i in range(x.shape[0])]
        return torch.stack([out for out, _ in pairs]), torch.stack([w for _, w in pairs])
    return scaled_dot_product_attention(x @ w_q, x @ w_k, x @ w_v, mask)
'''),),
        why="a loop over the batch calling the learner's attention per sequence",
    ),
    "self_attention_vmap": ValidAnswer((Edit("self_attention", "", _SELF_ATTENTION_VMAP),), why="torch.func.vmap over the batch"),
    "variance_one_draw_einsum": ValidAnswer(
        (Edit("dot_product_variance", "", '''def dot_product_variance(d_k, n_samples, generator=None):
    q, k = torch.randn(2, n_samples, d_k, generator=generator, dtype=torch.float64)
    scores = torch.einsum("nd,nd->n", q, k)
    return float(scores.var()), float((scores / d_k ** 0.5).var())
'''),),
        why="one draw for q and k, einsum, float64, float(...)",
    ),
}
