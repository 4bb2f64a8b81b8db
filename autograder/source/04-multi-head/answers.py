"""Test data of chapter 04-multi-head: typical wrong answers (WRONG_ANSWERS) and correct answers written unlike the
reference (VALID_ANSWERS), as edits of the reference source in solutions/ch04_multi_head.py.

Used by the chapter contract (tests/test_chapter_contract.py), the learner trials, the demo and
scripts/grading_corpus.py, through `autograder.registry.answers("04-multi-head")`; never loaded by a grading host.
"""


from autograder.authoring.answers import Edit, ValidAnswer, WrongAnswer


# --- Typical wrong answers, as edits of the reference source (end-to-end and learner-trial tests) ------

_SPLIT_RETURN = "    return x.view(batch, seq, n_heads, d_k).transpose(1, 2)  # (batch, heads, seq, d_k)"
_MERGE_RETURN = "    return x.transpose(1, 2).reshape(batch, seq, heads * d_k)  # (batch, seq, heads * d_k)"
_MHA_ATTEND = "        heads, weights = scaled_dot_product_attention(q, k, v, mask)  # (B, H, Tq, d_k), (B, H, Tq, Tk)"
_MHA_SPLITS = (
    "        q = split_heads(self.w_q(query), self.n_heads)  # (B, H, Tq, d_k)\n"
    "        k = split_heads(self.w_k(key), self.n_heads)  # (B, H, Tk, d_k)\n"
    "        v = split_heads(self.w_v(value), self.n_heads)  # (B, H, Tk, d_k)"
)


def _own_attention(scale="self.d_k", dim="-1", softmax="stable_softmax(scores, dim={dim})"):
    """The MultiHeadAttention forward's attention line, written out by hand (for the wrong answers)."""
    return (
        f"        scores = q @ k.transpose(-2, -1) / math.sqrt({scale})\n"
        "        if mask is not None:\n"
        "            scores = scores.masked_fill(~mask, float('-inf'))\n"
        f"        weights = {softmax.format(dim=dim)}\n"
        "        heads = weights @ v"
    )


# A callee that raises, or returns another shape or dtype, stops a correct MultiHeadAttention that calls it from
# running; the judge then finds the callee's recorded call proven wrong (the reference callee, run in the grading
# process on the same inputs, gives something else) and charges nothing to the caller: the callee's own check
# takes the points, as the notebook promises. (These entries once listed MultiHeadAttention_hidden too.)
_CALLER_TOO = {fn: frozenset({f"{fn}_hidden"}) for fn in ("split_heads", "merge_heads")}

WRONG_ANSWERS = {
    # split_heads
    "split_without_transpose": WrongAnswer("split_heads", _SPLIT_RETURN, "    return x.reshape(batch, n_heads, seq, d_k)", "without the transpose"),
    "split_transpose_missing": WrongAnswer("split_heads", _SPLIT_RETURN, "    return x.view(batch, seq, n_heads, d_k)", "the transpose is missing",
                                           _CALLER_TOO["split_heads"], category="shape"),
    "split_round_robin": WrongAnswer("split_heads", _SPLIT_RETURN, "    return x.view(batch, seq, d_k, n_heads).permute(0, 3, 1, 2)",
                                     "dealt to the heads in turn"),
    "split_to_float32": WrongAnswer("split_heads", _SPLIT_RETURN, "    return x.view(batch, seq, n_heads, d_k).transpose(1, 2).float()", "dtype",
                                    _CALLER_TOO["split_heads"], category="dtype"),
    "split_into_cpu_tensor": WrongAnswer(
        "split_heads", _SPLIT_RETURN,
        "    out = torch.zeros(batch, n_heads, seq, d_k, dtype=x.dtype)\n"
        "    for h in range(n_heads):\n"
        "        out[:, h] = x[:, :, h * d_k:(h + 1) * d_k]\n"
        "    return out",
        "device", category="device",
    ),
    # merge_heads
    "merge_without_transpose": WrongAnswer("merge_heads", _MERGE_RETURN, "    return x.reshape(batch, seq, heads * d_k)", "without transposing back"),
    "merge_interleaved": WrongAnswer("merge_heads", _MERGE_RETURN, "    return x.permute(0, 2, 3, 1).reshape(batch, seq, heads * d_k)",
                                     "interleaved feature by feature"),
    "merge_view_after_transpose": WrongAnswer("merge_heads", _MERGE_RETURN, "    return x.transpose(1, 2).view(batch, seq, heads * d_k)",
                                              "no longer contiguous", _CALLER_TOO["merge_heads"]),
    "merge_not_flattened": WrongAnswer("merge_heads", _MERGE_RETURN, "    return x.transpose(1, 2)", "not flattened",
                                       _CALLER_TOO["merge_heads"], category="shape"),
    "merge_to_float32": WrongAnswer("merge_heads", _MERGE_RETURN, "    return x.transpose(1, 2).reshape(batch, seq, heads * d_k).float()", "dtype",
                                    _CALLER_TOO["merge_heads"], category="dtype"),
    "merge_into_cpu_tensor": WrongAnswer(
        "merge_heads", _MERGE_RETURN,
        "    out = torch.empty(batch, seq, heads * d_k, dtype=x.dtype)\n"
        "    for h in range(heads):\n"
        "        out[:, :, h * d_k:(h + 1) * d_k] = x[:, h]\n"
        "    return out",
        "device", category="device",
    ),
    # MultiHeadAttention
    "mha_without_w_o": WrongAnswer("MultiHeadAttention", "return self.w_o(merge_heads(heads)), weights", "return merge_heads(heads), weights",
                                   "output projection w_o is missing"),
    "mha_scaled_by_d_model": WrongAnswer("MultiHeadAttention", _MHA_ATTEND, _own_attention(scale="self.d_model"), "sqrt(d_model)"),
    "mha_softmax_over_queries": WrongAnswer("MultiHeadAttention", _MHA_ATTEND, _own_attention(dim="-2"), "softmax over the wrong dimension"),
    "mha_naive_softmax": WrongAnswer(
        "MultiHeadAttention", _MHA_ATTEND, _own_attention(softmax="torch.exp(scores) / torch.exp(scores).sum(dim=-1, keepdim=True)"),
        "overflows for large scores", category="large",
    ),
    "mha_inverted_mask": WrongAnswer(
        "MultiHeadAttention", _MHA_ATTEND,
        "        heads, weights = scaled_dot_product_attention(q, k, v, None if mask is None else ~mask)", "inverted mask",
    ),
    "mha_split_without_transpose": WrongAnswer(
        "MultiHeadAttention", _MHA_SPLITS,
        "        B, Tq, Tk = query.shape[0], query.shape[1], key.shape[1]\n"
        "        q = self.w_q(query).reshape(B, self.n_heads, Tq, self.d_k)\n"
        "        k = self.w_k(key).reshape(B, self.n_heads, Tk, self.d_k)\n"
        "        v = self.w_v(value).reshape(B, self.n_heads, Tk, self.d_k)",
        "without the transpose",
    ),
    "mha_keys_values_from_query": WrongAnswer(
        "MultiHeadAttention", _MHA_SPLITS,
        "        q = split_heads(self.w_q(query), self.n_heads)\n"
        "        k = split_heads(self.w_k(query), self.n_heads)\n"
        "        v = split_heads(self.w_v(query), self.n_heads)",
        "keys and values projected from the query input",
    ),
    "mha_no_dropout_in_training": WrongAnswer("MultiHeadAttention", "if self.training and self.dropout.p > 0:", "if False:",
                                              "dropout is not applied in training mode"),
    "mha_dropout_in_eval": WrongAnswer(
        "MultiHeadAttention",
        "        if self.training and self.dropout.p > 0:  # dropout on the weights, then mix the values again\n"
        "            weights = self.dropout(weights)",
        "        if self.dropout.p > 0:\n"
        "            weights = nn.functional.dropout(weights, self.dropout.p, training=True)",
        "dropout is applied in eval mode too",
    ),
    "mha_bias_always": WrongAnswer("MultiHeadAttention", "self.w_q = nn.Linear(d_model, d_model, bias=bias)", "self.w_q = nn.Linear(d_model, d_model)",
                                   "names", category="weights"),
    "mha_weights_averaged_over_heads": WrongAnswer("MultiHeadAttention", "return self.w_o(merge_heads(heads)), weights",
                                                   "return self.w_o(merge_heads(heads)), weights.mean(dim=1)", "averaged over the heads",
                                                   category="shape"),
    "mha_output_to_float32": WrongAnswer("MultiHeadAttention", "return self.w_o(merge_heads(heads)), weights",
                                         "return self.w_o(merge_heads(heads)).float(), weights", "dtype", category="dtype"),
    "mha_mask_made_on_cpu": WrongAnswer(
        "MultiHeadAttention", _MHA_ATTEND,
        "        if mask is None:\n"
        "            mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool)\n"
        "        heads, weights = scaled_dot_product_attention(q, k, v, mask)",
        "device", category="device",
    ),
    # mha_parameter_count
    "count_without_w_o": WrongAnswer(
        "mha_parameter_count",
        "    matrices = 4 * d_model * d_model  # W_Q, W_K, W_V, W_O; h per-head d_model x d_k blocks = one d_model x d_model\n"
        "    biases = 4 * d_model if bias else 0",
        "    matrices = 3 * d_model * d_model\n    biases = 3 * d_model if bias else 0",
        "W_O is not counted",
    ),
    "count_bias_always": WrongAnswer("mha_parameter_count", "biases = 4 * d_model if bias else 0", "biases = 4 * d_model",
                                     "counted even when bias=False"),
    # SelfAttention (edits of the reference fix: a bug left in, or a new one)
    "sa_bug_2_left": WrongAnswer("SelfAttention", "energy / self.head_dim**0.5", "energy / self.embed_size**0.5", "bug 2 is not fixed"),
    "sa_bug_1_left": WrongAnswer(
        "SelfAttention",
        "        values = self.values(values).reshape(N, value_len, self.heads, self.head_dim)  # (N, Tk, h, d)\n"
        "        keys = self.keys(keys).reshape(N, key_len, self.heads, self.head_dim)  # (N, Tk, h, d)\n"
        "        queries = self.queries(query).reshape(N, query_len, self.heads, self.head_dim)  # (N, Tq, h, d)",
        "        values = values.reshape(N, value_len, self.heads, self.head_dim)\n"
        "        keys = keys.reshape(N, key_len, self.heads, self.head_dim)\n"
        "        queries = query.reshape(N, query_len, self.heads, self.head_dim)",
        "bug 1 is not fixed",
    ),
    "sa_head_dim_layers": WrongAnswer(
        "SelfAttention", "self.values = nn.Linear(embed_size, embed_size, bias=False)",
        "self.values = nn.Linear(self.head_dim, self.head_dim, bias=False)", "embed_size x embed_size", category="weights",
    ),
    "sa_argument_order_changed": WrongAnswer(
        "SelfAttention", "def forward(self, values: Tensor, keys: Tensor, query: Tensor, mask: Tensor | None) -> Tensor:",
        "def forward(self, query: Tensor, keys: Tensor, values: Tensor, mask: Tensor | None) -> Tensor:", "argument order",
    ),
    "sa_inverted_mask": WrongAnswer("SelfAttention", "energy.masked_fill(mask == 0, -1e20)", "energy.masked_fill(mask != 0, -1e20)", "inverted mask"),
    "sa_naive_softmax": WrongAnswer(
        "SelfAttention", "attention = stable_softmax(energy / self.head_dim**0.5, dim=3)",
        "attention = torch.exp(energy / self.head_dim**0.5)\n        attention = attention / attention.sum(dim=3, keepdim=True)",
        "overflows for large scores", category="large",
    ),
    "sa_returns_weights_too": WrongAnswer("SelfAttention", "return self.fc_out(out.reshape(N, query_len, self.embed_size))",
                                          "return self.fc_out(out.reshape(N, query_len, self.embed_size)), attention", "return 1 value",
                                          category="shape"),
    "sa_output_to_float32": WrongAnswer("SelfAttention", "return self.fc_out(out.reshape(N, query_len, self.embed_size))",
                                        "return self.fc_out(out.reshape(N, query_len, self.embed_size)).float()", "dtype", category="dtype"),
    "sa_mask_made_on_cpu": WrongAnswer(
        "SelfAttention",
        "        if mask is not None:\n            energy = energy.masked_fill(mask == 0, -1e20)",
        "        if mask is None:\n            mask = torch.ones(query_len, key_len, dtype=torch.bool)\n"
        "        energy = energy.masked_fill(mask == 0, -1e20)",
        "device", category="device",
    ),
}


# --- Issue 15: more mistakes a learner makes, and pairs of a wrong callee with a correct caller -----------
# A pair is a wrong split_heads/merge_heads plus a correct MultiHeadAttention written in another call pattern
# (`also`): a callee whose values are wrong costs points only in its own exercise, however the caller calls it.

_MHA_FORWARD = (
    "        q = split_heads(self.w_q(query), self.n_heads)  # (B, H, Tq, d_k)\n"
    "        k = split_heads(self.w_k(key), self.n_heads)  # (B, H, Tk, d_k)\n"
    "        v = split_heads(self.w_v(value), self.n_heads)  # (B, H, Tk, d_k)\n"
    + _MHA_ATTEND + "\n"
)
_COUNT_RETURN = "    return matrices + biases"


def _attention_by_hand(divide=" / math.sqrt(self.d_k)", fill="float('-inf')", after=""):
    """The attention line written out by hand, with the scale, the fill of masked scores and what follows the
    softmax as given (for the wrong answers)."""
    masking = f"        if mask is not None:\n            scores = scores.masked_fill(~mask, {fill})\n" if fill else ""
    return (
        f"        scores = q @ k.transpose(-2, -1){divide}\n"
        + masking
        + "        weights = stable_softmax(scores, dim=-1)\n"
        + after
        + "        heads = weights @ v"
    )


WRONG_ANSWERS.update({
    "mha_divided_by_d_k": WrongAnswer("MultiHeadAttention", _MHA_ATTEND, _attention_by_hand(divide=" / self.d_k"), "divided by d_k instead of sqrt(d_k)"),
    "mha_scaled_twice": WrongAnswer(
        "MultiHeadAttention", _MHA_ATTEND,
        "        q = q / math.sqrt(self.d_k)  # the course's attention divides by sqrt(d_k) again\n"
        "        heads, weights = scaled_dot_product_attention(q, k, v, mask)",
        "scaled twice",
    ),
    "mha_not_scaled": WrongAnswer("MultiHeadAttention", _MHA_ATTEND, _attention_by_hand(divide=""), "not divided by sqrt(d_k) at all"),
    "mha_mask_filled_with_zero": WrongAnswer("MultiHeadAttention", _MHA_ATTEND, _attention_by_hand(fill="0.0"), "masked scores set to 0"),
    "mha_mask_after_softmax": WrongAnswer(
        "MultiHeadAttention", _MHA_ATTEND,
        _attention_by_hand(fill="", after="        if mask is not None:\n            weights = weights * mask\n"),
        "mask applied after the softmax",
    ),
    "mha_mask_ignored": WrongAnswer("MultiHeadAttention", _MHA_ATTEND,
                                    "        heads, weights = scaled_dot_product_attention(q, k, v)", "the mask is not used"),
    "mha_mask_head_axis_added_again": WrongAnswer(
        "MultiHeadAttention", _MHA_ATTEND,
        "        if mask is not None:\n"
        "            mask = mask.unsqueeze(1)  # (B, Tq, Tk) -> (B, 1, Tq, Tk): wrong for a mask that has its head axis already\n"
        "        heads, weights = scaled_dot_product_attention(q, k, v, mask)",
        "a head axis it already has", category="shape",
    ),
    "mha_weights_before_dropout": WrongAnswer(
        "MultiHeadAttention",
        "            weights = self.dropout(weights)\n            heads = weights @ v  # (B, H, Tq, d_k)",
        "            heads = self.dropout(weights) @ v",
        "the returned weights are the ones before dropout",
    ),
    "count_float": WrongAnswer("mha_parameter_count", _COUNT_RETURN, "    return float(matrices + biases)", "expected a Python int", category="dtype"),
    "count_as_tensor": WrongAnswer("mha_parameter_count", _COUNT_RETURN, "    return torch.tensor(matrices + biases)", "a tensor, expected a Python int",
                                   category="dtype"),
    "count_true_division": WrongAnswer(
        "mha_parameter_count", _COUNT_RETURN,
        "    per_head = 4 * d_model * (d_model / 8)  # per head, times the heads\n    return per_head * 8 + biases",
        "expected a Python int", category="dtype",
    ),
    "sa_divided_by_head_dim": WrongAnswer("SelfAttention", "energy / self.head_dim**0.5", "energy / self.head_dim", "head_dim instead of sqrt(head_dim)"),
    # pairs: a wrong callee, a correct MultiHeadAttention written in another call pattern (no double penalty)
    "split_round_robin_mha_keyword_calls": WrongAnswer(
        "split_heads", _SPLIT_RETURN, "    return x.view(batch, seq, d_k, n_heads).permute(0, 3, 1, 2)", "dealt to the heads in turn",
        also=(Edit("MultiHeadAttention", _MHA_SPLITS,
                   "        q, k, v = (split_heads(x=layer(t), n_heads=self.n_heads)\n"
                   "                   for layer, t in ((self.w_q, query), (self.w_k, key), (self.w_v, value)))"),),
    ),
    "split_without_transpose_mha_per_batch_element": WrongAnswer(
        "split_heads", _SPLIT_RETURN, "    return x.reshape(batch, n_heads, seq, d_k)", "without the transpose",
        also=(Edit("MultiHeadAttention", _MHA_SPLITS,
                   "        def split_each(t):  # one sentence at a time\n"
                   "            return torch.cat([split_heads(t[b:b + 1], self.n_heads) for b in range(t.shape[0])])\n"
                   "        q, k, v = split_each(self.w_q(query)), split_each(self.w_k(key)), split_each(self.w_v(value))"),),
    ),
    "merge_interleaved_mha_dropout_always_remixed": WrongAnswer(
        "merge_heads", _MERGE_RETURN, "    return x.permute(0, 2, 3, 1).reshape(batch, seq, heads * d_k)", "interleaved feature by feature",
        also=(Edit("MultiHeadAttention",
                   "        heads, weights = scaled_dot_product_attention(q, k, v, mask)  # (B, H, Tq, d_k), (B, H, Tq, Tk)\n"
                   "        if self.training and self.dropout.p > 0:  # dropout on the weights, then mix the values again\n"
                   "            weights = self.dropout(weights)\n"
                   "            heads = weights @ v  # (B, H, Tq, d_k)\n"
                   "        return self.w_o(merge_heads(heads)), weights  # (B, Tq, D), (B, H, Tq, Tk)",
                   "        _, weights = scaled_dot_product_attention(q, k, v, mask)\n"
                   "        weights = self.dropout(weights)  # nothing dropped in eval()\n"
                   "        return self.w_o(merge_heads(x=weights @ v)), weights"),),
    ),
})

_MHA_CLASS_HEAD = '''class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads, bias=True, dropout=0.0):
        super().__init__()
        self.d_model, self.n_heads, self.d_k = d_model, n_heads, d_model // n_heads
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, d_model, bias=bias)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)
'''

VALID_ANSWERS = {
    "split_unflatten_movedim": ValidAnswer((Edit("split_heads", _SPLIT_RETURN, "    return x.unflatten(-1, (n_heads, d_k)).movedim(2, 1)"),),
                                           "unflatten and movedim instead of view and transpose"),
    "split_loop_over_heads": ValidAnswer((Edit("split_heads", _SPLIT_RETURN,
                                               "    return torch.stack([x[:, :, h * d_k:(h + 1) * d_k] for h in range(n_heads)], dim=1)"),),
                                         "a loop over the heads, stacked"),
    "merge_loop_cat": ValidAnswer((Edit("merge_heads", _MERGE_RETURN, "    return torch.cat([x[:, h] for h in range(heads)], dim=-1)"),),
                                  "the heads concatenated in a loop"),
    "merge_permute_flatten": ValidAnswer((Edit("merge_heads", _MERGE_RETURN, "    return x.permute(0, 2, 1, 3).flatten(2)"),),
                                         "permute and flatten"),
    "mha_einsum_own_softmax": ValidAnswer((Edit("MultiHeadAttention", "", _MHA_CLASS_HEAD + '''
    def forward(self, query, key, value, mask=None):
        b, tq, tk = query.shape[0], query.shape[1], key.shape[1]
        q = self.w_q(query).view(b, tq, self.n_heads, self.d_k)
        k = self.w_k(key).view(b, tk, self.n_heads, self.d_k)
        v = self.w_v(value).view(b, tk, self.n_heads, self.d_k)
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(self.d_k)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        e = (scores - scores.amax(dim=-1, keepdim=True)).exp()
        weights = self.dropout(e / e.sum(dim=-1, keepdim=True))
        out = torch.einsum("bhqk,bkhd->bqhd", weights, v).reshape(b, tq, self.d_model)
        return self.w_o(out), weights
'''),), "einsum over (B, T, H, d_k), its own softmax, no split_heads/merge_heads"),
    "mha_loop_over_heads": ValidAnswer((Edit("MultiHeadAttention", "", _MHA_CLASS_HEAD + '''
    def forward(self, query, key, value, mask=None):
        if mask is not None and mask.dim() < 4:
            mask = mask[None, None] if mask.dim() == 2 else mask[:, None]  # (B, 1, Tq, Tk)
        outs, weights = [], []
        for i in range(self.n_heads):
            rows = slice(i * self.d_k, (i + 1) * self.d_k)

            def project(layer, x):
                return nn.functional.linear(x, layer.weight[rows], None if layer.bias is None else layer.bias[rows])

            m = None if mask is None else mask[:, min(i, mask.shape[1] - 1)]
            _, w = scaled_dot_product_attention(project(self.w_q, query), project(self.w_k, key), project(self.w_v, value), m)
            w = self.dropout(w)
            outs.append(w @ project(self.w_v, value))
            weights.append(w)
        return self.w_o(torch.cat(outs, dim=-1)), torch.stack(weights, dim=1)
'''),), "a Python loop over the heads, each with its rows of the projections"),
    "mha_explicit_matmuls_keyword_callees": ValidAnswer((Edit("MultiHeadAttention", "", _MHA_CLASS_HEAD + '''
    def forward(self, query, key, value, mask=None):
        def project(layer, x):
            y = x @ layer.weight.T
            return y if layer.bias is None else y + layer.bias

        q = split_heads(x=project(self.w_q, query), n_heads=self.n_heads)
        k = split_heads(x=project(self.w_k, key), n_heads=self.n_heads)
        v = split_heads(x=project(self.w_v, value), n_heads=self.n_heads)
        _, weights = scaled_dot_product_attention(q, k, v, mask=mask)
        weights = self.dropout(weights)
        return project(self.w_o, merge_heads(x=weights @ v)), weights
'''),), "explicit weight matmuls instead of calling the nn.Linear layers; callees called by keyword"),
    "mha_vmap_over_batch": ValidAnswer((Edit("MultiHeadAttention", _MHA_ATTEND, (
        "        if mask is not None:\n"
        "            mask = mask.expand(q.shape[0], q.shape[1], q.shape[2], k.shape[2])\n"
        "        attend = torch.func.vmap(scaled_dot_product_attention, in_dims=(0, 0, 0, None if mask is None else 0))\n"
        "        heads, weights = attend(q, k, v, mask)  # one sentence at a time")),), "torch.func.vmap over the batch"),
    "mha_split_per_batch_element": ValidAnswer((Edit("MultiHeadAttention", _MHA_SPLITS, (
        "        def split_each(t):  # one sentence at a time\n"
        "            return torch.cat([split_heads(t[b:b + 1], self.n_heads) for b in range(t.shape[0])])\n"
        "        q, k, v = split_each(self.w_q(query)), split_each(self.w_k(key)), split_each(self.w_v(value))")),),
        "split_heads called once per batch element"),
    "count_from_own_module": ValidAnswer((Edit("mha_parameter_count", "", '''def mha_parameter_count(d_model, bias=True):
    return sum(p.numel() for p in MultiHeadAttention(d_model, 1, bias=bias).parameters())
'''),), "counted on the learner's own (correct) module"),
    "count_factored_formula": ValidAnswer((Edit("mha_parameter_count", "", '''def mha_parameter_count(d_model, bias=True):
    return 4 * d_model * (d_model + int(bias))
'''),), "one factored formula"),
    "sa_with_split_merge_helpers": ValidAnswer((Edit("SelfAttention", "", '''class SelfAttention(nn.Module):
    def __init__(self, embed_size, heads):
        super().__init__()
        self.embed_size, self.heads, self.head_dim = embed_size, heads, embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def forward(self, values, keys, query, mask):
        q = split_heads(self.queries(query), self.heads)
        k = split_heads(self.keys(keys), self.heads)
        v = split_heads(self.values(values), self.heads)
        out, _ = scaled_dot_product_attention(q, k, v, None if mask is None else mask.bool())
        return self.fc_out(merge_heads(out))
'''),), "the fix written with the learner's split_heads/merge_heads and the course's attention"),
    "sa_scale_on_queries": ValidAnswer((Edit(
        "SelfAttention", "attention = stable_softmax(energy / self.head_dim**0.5, dim=3)",
        "attention = stable_softmax(energy, dim=3)  # queries scaled before the einsum"),
        Edit("SelfAttention", "queries = self.queries(query).reshape(N, query_len, self.heads, self.head_dim)",
             "queries = self.queries(query).reshape(N, query_len, self.heads, self.head_dim) / math.sqrt(self.head_dim)")),
        "the scale applied to the queries before the einsum"),
}
