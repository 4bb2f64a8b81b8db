"""Test data of chapter 07-ffn-layernorm: typical wrong answers (WRONG_ANSWERS) and correct answers written unlike
the reference (VALID_ANSWERS), as edits of the reference source in solutions/ch07_ffn_layernorm.py.

Used by the chapter contract (tests/test_chapter_contract.py), the demo and scripts/grading_corpus.py, through
`autograder.registry.answers("07-ffn-layernorm")`; never loaded by a grading host.
"""

from autograder.authoring.answers import Edit, ValidAnswer, WrongAnswer

_LN_VAR = "    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)  # (..., 1) biased variance; x.var() would divide by d - 1"
_LN_NORM = "    y = (x - mean) / torch.sqrt(var + eps)  # (..., d) eps inside the root: a constant row gives 0, not NaN"
_FF_ACT = '        h = F.relu(h) if self.activation == "relu" else F.gelu(h)  # F.gelu: the exact (erf) GELU, as PyTorch\'s layers'
_ENC_PRE = "        if self.norm_first:  # Pre-LN: normalise the branch input; the residual stream is never normalised"
_ENC_ATTN = "        out, _ = self.self_attn(x, x, x, mask)  # (B, T, D); weights discarded"
_NOAM = "    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)"
_LS_Q = "    q = (1.0 - eps) * one_hot + eps / n_classes  # (N, K) smoothed targets (label_smoothed_targets), rows sum to 1"
_LS_MEAN = "    return (loss * keep).sum() / keep.sum()  # mean over the real tokens only"
_DROP = "    keep = (torch.rand(x.shape, generator=generator, device=device) >= p).to(x.device)  # True with probability 1 - p"
_DROP_RETURN = "    return x * keep / (1.0 - p)"
_LS_ONE_HOT = "    one_hot = F.one_hot(safe, n_classes).to(logits.dtype)  # (N, K)"

# The encoder layer is built on the learner's own FeedForward, graded as its callee ("FeedForward.forward": the
# layer is judged against the reference composed with the learner's FeedForward results), so a wrong FeedForward
# costs exercise 2 only. Its parameter names are the layer's too: FeedForward weights named otherwise cannot be
# loaded into the layer either, and cost both.
_FF_AND_LAYER = frozenset({"FeedForward_hidden", "EncoderLayer_hidden"})

WRONG_ANSWERS = {
    # layer_norm
    "ln_unbiased_variance": WrongAnswer("layer_norm", _LN_VAR, "    var = x.var(dim=-1, keepdim=True)", "unbiased variance"),
    "ln_eps_outside_sqrt": WrongAnswer("layer_norm", _LN_NORM, "    y = (x - mean) / (torch.sqrt(var) + eps)", "eps added outside the square root"),
    "ln_to_float32": WrongAnswer("layer_norm", "    return y", "    return y.float()", "dtype", category="dtype"),
    "ln_default_weight_on_cpu": WrongAnswer(
        "layer_norm", "    if weight is not None:\n        y = y * weight",
        "    if weight is None:\n        weight = torch.ones(x.shape[-1], dtype=x.dtype)\n    y = y * weight",
        "device", category="device",
    ),
    "ln_weight_and_bias_both_or_none": WrongAnswer(
        "layer_norm", "    if weight is not None:\n        y = y * weight\n    if bias is not None:\n        y = y + bias",
        "    if weight is not None and bias is not None:\n        y = y * weight + bias", "only when both weight and bias are given",
    ),
    # issue 30's learner trial: train-mode dropout, callee/caller pairs, dtypes, optional arguments
    "ff_dropout_on_output": WrongAnswer("FeedForward", "        return self.linear2(self.dropout(h))  # (B, T, d_model)",
                                        "        return self.dropout(self.linear2(h))", "applied to the output (after linear2)"),
    "ff_relu_whatever_activation": WrongAnswer("FeedForward", _FF_ACT, "        h = F.relu(h)", "argument is ignored (always ReLU)"),
    "enc_ff_branch_not_dropped": WrongAnswer("EncoderLayer", "        return self.dropout2(self.ff(x))  # (B, T, D)",
                                             "        return self.ff(x)", "the FFN branch is not dropped"),
    "enc_attention_branch_dropped_twice": WrongAnswer("EncoderLayer", "        return self.dropout1(out)",
                                                      "        return self.dropout1(self.dropout1(out))", "the attention branch is dropped twice"),
    "ff_wrong_but_layer_right": WrongAnswer("FeedForward", _FF_ACT, "        h = F.relu(h) if self.activation == 'gelu' else F.gelu(h)",
                                            "the activations are swapped"),
    "ls_mean_over_all_positions": WrongAnswer("label_smoothed_cross_entropy", _LS_MEAN, "    return (loss * keep).mean()", "padding counted in the mean"),
    "noam_max_not_min": WrongAnswer("noam_lr", _NOAM, "    return d_model**-0.5 * max(step**-0.5, step * warmup**-1.5)", "max instead of min"),
    "drop_rescaled_by_p": WrongAnswer("inverted_dropout", _DROP_RETURN, "    return x * keep / p", "divided by p instead of (1 - p)"),
    # FeedForward
    "ff_no_activation": WrongAnswer("FeedForward", _FF_ACT, "        pass", "no activation between the two linear layers"),
    "ff_layer_names": WrongAnswer(
        "FeedForward", "        self.linear1 = nn.Linear(d_model, d_ff)", "        self.fc1 = nn.Linear(d_model, d_ff)\n        self.linear1 = self.fc1",
        "names", _FF_AND_LAYER, category="weights",
    ),
    # EncoderLayer
    "enc_pre_post_swapped": WrongAnswer("EncoderLayer", _ENC_PRE, "        if not self.norm_first:", "Pre-LN and Post-LN swapped"),
    "enc_mask_inverted": WrongAnswer(
        "EncoderLayer", _ENC_ATTN, "        out, _ = self.self_attn(x, x, x, None if mask is None else ~mask)", "inverted mask",
    ),
    "enc_norm_names": WrongAnswer(
        "EncoderLayer", "        self.norm2 = LayerNorm(d_model)", "        self.ln2 = LayerNorm(d_model)\n        self.norm2 = self.ln2",
        "names", category="weights",
    ),
    # noam_lr
    "noam_warmup_exponent": WrongAnswer("noam_lr", _NOAM, "    return d_model**-0.5 * min(step**-0.5, step * warmup**-0.5)", "warmup ** -0.5"),
    # label_smoothed_cross_entropy
    "ls_k_minus_1": WrongAnswer(
        "label_smoothed_cross_entropy", _LS_Q,
        "    q = (1.0 - eps) * one_hot + eps / (n_classes - 1) * (1 - one_hot)", "K - 1",
    ),
    "ls_padding_in_mean": WrongAnswer("label_smoothed_cross_entropy", _LS_MEAN, "    return (loss * keep).mean()", "padding counted in the mean"),
    "ls_no_reduction": WrongAnswer("label_smoothed_cross_entropy", _LS_MEAN, "    return loss * keep", "one loss per position", category="shape"),
    "ls_one_hot_on_cpu": WrongAnswer(
        "label_smoothed_cross_entropy", _LS_ONE_HOT,
        "    one_hot = torch.zeros(len(target), n_classes, dtype=logits.dtype)\n"
        "    one_hot[torch.arange(len(target)), safe.cpu()] = 1.0",
        "device", category="device",
    ),
    # inverted_dropout
    "drop_not_scaled": WrongAnswer("inverted_dropout", _DROP_RETURN, "    return x * keep", "not scaled"),
    "drop_ignores_generator": WrongAnswer(
        "inverted_dropout", _DROP, "    keep = torch.rand(x.shape, device=x.device) >= p", "generators seeded alike", category="generator",
    ),
    "drop_to_float32": WrongAnswer("inverted_dropout", _DROP_RETURN, "    return (x * keep / (1.0 - p)).float()", "dtype", category="dtype"),
    "drop_mask_on_cpu": WrongAnswer(
        "inverted_dropout", _DROP, "    keep = torch.rand(x.shape, generator=generator) >= p", "device", category="device",
    ),
}

VALID_ANSWERS = {
    # issue 30's learner trial
    "ff_activation_by_name": ValidAnswer((Edit("FeedForward", _FF_ACT, "        h = getattr(F, self.activation)(h)"),),
                                         "the activation looked up by name in torch.nn.functional (a computed access hint, no refusal)"),
    "ff_sequential_forward": ValidAnswer((Edit("FeedForward", "        return self.linear2(self.dropout(h))  # (B, T, d_model)",
                                               "        return nn.Sequential(self.dropout, self.linear2)(h)"),),
                                         "the last two steps run through an nn.Sequential of the same modules"),
    "ln_var_mean_builtin": ValidAnswer((Edit("layer_norm", "", """def layer_norm(x, weight, bias, eps=1e-5):
    var, mean = torch.var_mean(x, dim=-1, unbiased=False, keepdim=True)  # (..., 1) each
    y = (x - mean) * torch.rsqrt(var + eps)
    if weight is not None:
        y = weight * y
    return y if bias is None else y + bias
"""),), "torch.var_mean and rsqrt, the optional arguments handled one by one"),
    "enc_getattr_norms": ValidAnswer((Edit("EncoderLayer", "", """class EncoderLayer(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, norm_first=False, activation="relu"):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = FeedForward(d_model, d_ff, dropout, activation)
        for i in (1, 2):
            setattr(self, f"norm{i}", LayerNorm(d_model))
            setattr(self, f"dropout{i}", nn.Dropout(dropout))
        self.norm_first = norm_first

    def forward(self, x, mask=None):
        branches = [lambda y: self.self_attn(y, y, y, mask)[0], self.ff]
        for i, branch in enumerate(branches, start=1):
            norm, drop = getattr(self, f"norm{i}"), getattr(self, f"dropout{i}")
            x = x + drop(branch(norm(x))) if self.norm_first else norm(x + drop(branch(x)))
        return x
"""),), "norms and dropouts made and read with setattr / getattr(self, f'norm{i}') in loops"),
    "enc_norms_also_in_a_module_list": ValidAnswer((Edit("EncoderLayer", "        self.norm2 = LayerNorm(d_model)\n",
        "        self.norm2 = LayerNorm(d_model)\n        self.norms = nn.ModuleList([self.norm1, self.norm2])  # the same modules, twice registered\n"),),
        "the named norms also kept in a ModuleList"),
    "ls_log_softmax_gather": ValidAnswer((Edit("label_smoothed_cross_entropy", "", """def label_smoothed_cross_entropy(logits, target, eps, ignore_index=-100):
    logp = torch.log_softmax(logits, dim=-1)  # (N, K)
    keep = target != ignore_index
    nll = -logp.gather(-1, target.clamp(min=0).masked_fill(~keep, 0)[:, None])[:, 0]  # (N,)
    smooth = -logp.mean(dim=-1)  # (N,) the uniform part
    loss = (1.0 - eps) * nll + eps * smooth
    return loss[keep].sum() / keep.sum()
"""),), "gather of the true class plus the uniform mean, boolean indexing of the kept rows"),
    "drop_float_mask_from_generator": ValidAnswer((Edit("inverted_dropout", _DROP_RETURN,
        "    return torch.where(keep, x / (1.0 - p), torch.zeros((), dtype=x.dtype, device=x.device))"),),
        "torch.where with a zero scalar on x's device"),
    "ln_var_unbiased_false_and_rsqrt": ValidAnswer(
        (Edit("layer_norm", "", '''def layer_norm(x, weight, bias, eps=1e-5):
    var, mean = torch.var_mean(x, dim=-1, keepdim=True, unbiased=False)
    y = (x - mean) * torch.rsqrt(var + eps)
    if weight is not None:
        y = weight * y
    return y if bias is None else y + bias'''),),
    ),
    "drop_bernoulli_where": ValidAnswer(
        (Edit("inverted_dropout", "", '''def inverted_dropout(x, p, generator=None, training=True):
    if p < 0 or p > 1:
        raise ValueError("p must be in [0, 1]")
    if not training or p == 0:
        return x
    if p == 1:
        return x.new_zeros(x.shape)
    where = x.device if generator is None else generator.device
    keep = torch.bernoulli(torch.full(x.shape, 1 - p, device=where), generator=generator).to(x.device)
    return torch.where(keep == 1, x / (1 - p), torch.zeros_like(x))'''),),
    ),
    "ff_einsum": ValidAnswer(
        (Edit("FeedForward", "        h = self.linear1(x)  # (B, T, d_ff)",
              '        h = torch.einsum("btd,fd->btf", x, self.linear1.weight) + self.linear1.bias'),),
    ),
    "ls_gather_loop": ValidAnswer(
        (Edit("label_smoothed_cross_entropy", "", '''def label_smoothed_cross_entropy(logits, target, eps, ignore_index=-100):
    log_p = torch.log_softmax(logits, dim=-1)  # (N, K)
    keep = target != ignore_index
    safe = torch.where(keep, target, torch.zeros_like(target))
    nll = -log_p.gather(-1, safe.unsqueeze(-1)).squeeze(-1)  # (N,) -log p of the true class
    uniform = torch.zeros_like(nll)
    for k in range(logits.shape[-1]):  # -mean_k log p_k, class by class
        uniform = uniform - log_p[:, k] / logits.shape[-1]
    loss = (1 - eps) * nll + eps * uniform
    return torch.where(keep, loss, torch.zeros_like(loss)).sum() / keep.sum()'''),),
    ),
    "noam_if_else": ValidAnswer(
        (Edit("noam_lr", _NOAM, '''    if step <= warmup:
        return step * warmup ** -1.5 / math.sqrt(d_model)
    return 1.0 / math.sqrt(d_model * step)'''),),
    ),
}
